//! A channel's counters, and what they add up to for callers ([`PeerStats`]); its figures for
//! the periodic summary ([`Window`], logged by `summary.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

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

/// One direction's figures since the last summary.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct DirWindow {
    pub(crate) transfers: u64,
    pub(crate) bytes: u64,
    pub(crate) busy: Duration,
    /// Bytes per second of the slowest and fastest single transfer.
    pub(crate) min_rate: f64,
    pub(crate) max_rate: f64,
    pub(crate) longest: Duration,
}

impl DirWindow {
    fn add(&mut self, bytes: u64, took: Duration) {
        let rate = bytes as f64 / took.as_secs_f64().max(1e-9);
        if self.transfers == 0 {
            (self.min_rate, self.max_rate) = (rate, rate);
        } else {
            self.min_rate = self.min_rate.min(rate);
            self.max_rate = self.max_rate.max(rate);
        }
        self.transfers += 1;
        self.bytes += bytes;
        self.busy += took;
        self.longest = self.longest.max(took);
    }

    /// The bytes over the time spent, in bytes per second.
    pub(crate) fn avg_rate(&self) -> f64 {
        self.bytes as f64 / self.busy.as_secs_f64().max(1e-9)
    }
}

/// A channel's figures since the last summary (write, read); recorded only when the engine
/// logs summaries.
pub(crate) struct Window {
    on: bool,
    dirs: Mutex<[DirWindow; 2]>,
}

impl Window {
    pub(crate) fn new(on: bool) -> Window {
        Window {
            on,
            dirs: Mutex::default(),
        }
    }

    /// A transfer completed: its direction, bytes and time since submission.
    pub(crate) fn completed(&self, write: bool, bytes: u64, took: Duration) {
        if self.on {
            self.dirs.lock()[usize::from(!write)].add(bytes, took);
        }
    }

    /// The figures since the last call, and a fresh start.
    pub(crate) fn take(&self) -> [DirWindow; 2] {
        std::mem::take(&mut *self.dirs.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_keeps_the_range_the_average_and_the_longest_then_starts_afresh() {
        let w = Window::new(true);
        w.completed(true, 1000, Duration::from_micros(1));
        w.completed(true, 3000, Duration::from_micros(1));
        w.completed(false, 500, Duration::from_millis(2));
        let [wr, rd] = w.take();
        assert_eq!((wr.transfers, wr.bytes), (2, 4000));
        assert_eq!(wr.busy, Duration::from_micros(2));
        assert!((wr.min_rate - 1e9).abs() < 1.0 && (wr.max_rate - 3e9).abs() < 1.0);
        assert!((wr.avg_rate() - 2e9).abs() < 1.0);
        assert_eq!((rd.transfers, rd.longest), (1, Duration::from_millis(2)));
        assert_eq!(w.take(), [DirWindow::default(); 2]);
    }

    #[test]
    fn a_window_that_is_off_records_nothing() {
        let w = Window::new(false);
        w.completed(true, 1000, Duration::from_micros(1));
        assert_eq!(w.take(), [DirWindow::default(); 2]);
    }
}
