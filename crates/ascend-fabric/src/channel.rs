//! A connection to one peer: its imported segments, the keepalive socket, in-flight requests
//! and counters.

use std::collections::HashMap;
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use ascend_mem::MappingTable;
use parking_lot::{Mutex, RwLock};

use crate::error::{Error, LostReason};
use crate::pool::SlotMapping;
use crate::ranges::RangeMap;
use crate::transfer::ReqInner;

/// A peer segment imported and mapped into this engine's VA pool.
pub(crate) struct Import {
    /// Shared with the channel's copy table, which holds it until the table is gone.
    pub(crate) map: Arc<SlotMapping>,
}

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

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) writes: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) descriptors: AtomicU64,
    pub(crate) errors: AtomicU64,
}

/// The segments of a range map as dense `(start, end)` pairs, with a summary of every
/// [`SegIndex::BLOCK`]-th start: finding the segment that holds a range touches the (hot)
/// summary and one block, a few cache lines, where a binary search over the segments
/// themselves misses on most of its steps once a peer offers thousands of segments.
#[derive(Default)]
pub(crate) struct SegIndex {
    spans: Vec<(u64, u64)>,
    top: Vec<u64>,
}

impl SegIndex {
    const BLOCK: usize = 8;

    pub(crate) fn new<V>(map: &RangeMap<V>) -> SegIndex {
        let spans: Vec<(u64, u64)> = map.segments().iter().map(|s| (s.start, s.end())).collect();
        let top = spans.iter().step_by(Self::BLOCK).map(|s| s.0).collect();
        SegIndex { spans, top }
    }

    /// Index and start of the segment holding all of `[addr, addr + len)`, if one does.
    #[inline]
    pub(crate) fn holding(&self, addr: u64, len: u64) -> Option<(usize, u64)> {
        let b = self.top.partition_point(|&k| k <= addr).checked_sub(1)?;
        let lo = b * Self::BLOCK;
        let hi = (lo + Self::BLOCK).min(self.spans.len());
        // A counting scan: independent loads, about one cache miss for a cold block.
        let i = lo + self.spans[lo..hi].iter().filter(|s| s.0 <= addr).count() - 1;
        let (start, end) = self.spans[i];
        (addr.checked_add(len)? <= end).then_some((i, start))
    }
}

pub(crate) type ChannelMap = RwLock<HashMap<String, Arc<Channel>>>;

pub(crate) struct Channel {
    pub(crate) peer: String,
    pub(crate) addr: SocketAddr,
    /// `remote`'s imports as a copy table (entry i = segment i). It holds the imports'
    /// `SlotMapping`s as well, so whichever goes last, table or channel, unmaps an import
    /// before its VA goes back to the pool (even if a stream that failed to be destroyed
    /// leaked the table).
    pub(crate) remote_table: MappingTable,
    /// Remote va → imported mapping, held inline (one pointer less to chase per
    /// descriptor than an `Arc` each). Immutable after connect.
    pub(crate) remote: RangeMap<Import>,
    /// Search index over `remote`'s segment starts.
    pub(crate) remote_index: SegIndex,
    /// The submit gate: `Some` once the channel is lost. Submissions hold it shared from the
    /// check until their request is in `inflight`; losing the channel takes it exclusively.
    pub(crate) gate: RwLock<Option<LostReason>>,
    pub(crate) inflight: Mutex<HashMap<u64, Weak<ReqInner>>>,
    pub(crate) keepalive: Mutex<TcpStream>,
    pub(crate) counters: Counters,
}

impl Channel {
    pub(crate) fn stats(&self) -> PeerStats {
        let c = &self.counters;
        PeerStats {
            writes: c.writes.load(Ordering::Relaxed),
            reads: c.reads.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            bytes_read: c.bytes_read.load(Ordering::Relaxed),
            descriptors: c.descriptors.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            in_flight: self.inflight.lock().len() as u64,
            segments: self.remote.len() as u64,
        }
    }

    pub(crate) fn lost_error(&self, reason: LostReason) -> Error {
        Error::PeerLost {
            peer: self.peer.clone(),
            reason,
        }
    }

    /// Marks the channel lost (new submissions fail), then fails and aborts every in-flight
    /// request, and shuts the keepalive socket. Returns false if it was lost already.
    pub(crate) fn lose(&self, reason: LostReason) -> bool {
        {
            let mut g = self.gate.write();
            if g.is_some() {
                return false;
            }
            *g = Some(reason);
        }
        let reqs: Vec<Arc<ReqInner>> = self
            .inflight
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let n = reqs.len();
        for r in reqs {
            r.fail(self.lost_error(reason));
        }
        let _ = self.keepalive.lock().shutdown(Shutdown::Both);
        match reason {
            LostReason::Disconnected | LostReason::EngineShutdown => {
                tracing::debug!(peer = %self.peer, %reason, aborted = n, "channel closed")
            }
            _ => tracing::warn!(peer = %self.peer, %reason, aborted = n, "peer lost"),
        }
        true
    }
}

/// Loses `ch` and removes it from `map` (if it is still the entry for its peer).
/// The requests fail first, so a caller that sees the peer gone sees them failed too.
pub(crate) fn lose(map: &ChannelMap, ch: &Arc<Channel>, reason: LostReason) {
    ch.lose(reason);
    let mut m = map.write();
    if m.get(&ch.peer).is_some_and(|c| Arc::ptr_eq(c, ch)) {
        m.remove(&ch.peer);
    }
}

/// The keepalive reader: the server never writes on this socket, so EOF or an error means the
/// peer closed it or died (its kernel closes its sockets).
pub(crate) fn spawn_reader(
    mut sock: TcpStream,
    ch: Weak<Channel>,
    map: Weak<ChannelMap>,
) -> std::io::Result<()> {
    let name = format!(
        "fabric-ka-{}",
        ch.upgrade().map(|c| c.addr.port()).unwrap_or(0)
    );
    std::thread::Builder::new().name(name).spawn(move || {
        let mut buf = [0u8; 256];
        loop {
            match sock.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue, // HIXL servers send nothing here; ignore
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if let (Some(ch), Some(map)) = (ch.upgrade(), map.upgrade()) {
            lose(&map, &ch, LostReason::KeepaliveClosed);
        }
    })?;
    Ok(())
}
