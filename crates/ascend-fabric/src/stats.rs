//! A channel's counters, and what they add up to for callers ([`PeerStats`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Per-peer counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Completed WRITE transfers.
    pub writes: u64,
    /// Completed READ transfers.
    pub reads: u64,
    /// Bytes written to the peer by completed transfers.
    pub bytes_written: u64,
    /// Bytes read from the peer by completed transfers.
    pub bytes_read: u64,
    /// Descriptors of completed transfers.
    pub descriptors: u64,
    /// Transfers that failed, were aborted or timed out.
    pub errors: u64,
    /// Transfers submitted and not yet finished.
    pub in_flight: u64,
    /// Segments the peer offered (and this engine imported).
    pub segments: u64,
}

/// The counters a channel's requests bump as they finish.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) writes: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) descriptors: AtomicU64,
    pub(crate) errors: AtomicU64,
}

impl Counters {
    /// A finished transfer: its direction, bytes and descriptors, or a failure.
    pub(crate) fn finished(&self, outcome: Option<(bool, u64, u64)>) {
        match outcome {
            Some((write, bytes, descs)) => {
                if write {
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    self.bytes_written.fetch_add(bytes, Ordering::Relaxed);
                } else {
                    self.reads.fetch_add(1, Ordering::Relaxed);
                    self.bytes_read.fetch_add(bytes, Ordering::Relaxed);
                }
                self.descriptors.fetch_add(descs, Ordering::Relaxed);
            }
            None => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The counters with the channel's in-flight and segment counts.
    pub(crate) fn snapshot(&self, in_flight: u64, segments: u64) -> PeerStats {
        PeerStats {
            writes: self.writes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            descriptors: self.descriptors.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            in_flight,
            segments,
        }
    }
}
