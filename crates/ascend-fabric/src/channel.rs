//! A connection to one peer: its imported segments, the keepalive socket, in-flight requests
//! and counters.

use std::collections::HashMap;
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use ascend_mem::{Device, MappingTable};
use parking_lot::{Mutex, RwLock};

use crate::error::{Error, LostReason};
use crate::pool::SlotMapping;
use crate::ranges::RangeMap;
use crate::transfer::{fail_all, ReqInner};

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

/// What a live channel imported from its peer. Dropping it unmaps every import and returns
/// its VA to the pool (once no stream holds the table any more).
pub(crate) struct Remote {
    /// `map`'s imports as a copy table (entry i = segment i). It holds the imports'
    /// `SlotMapping`s as well, so whichever goes last, table or map, unmaps an import
    /// before its VA goes back to the pool (even if a stream that failed to be destroyed
    /// leaked the table).
    pub(crate) table: MappingTable,
    /// Remote va → imported mapping, held inline (one pointer less to chase per
    /// descriptor than an `Arc` each). Immutable after connect.
    pub(crate) map: RangeMap<Import>,
    /// Search index over `map`'s segment starts.
    pub(crate) index: SegIndex,
}

impl Remote {
    /// The imports of `map`, with their copy table and search index.
    pub(crate) fn new(dev: &Device, map: RangeMap<Import>) -> ascend_mem::Result<Remote> {
        let table = MappingTable::with_keepalive(
            dev,
            map.segments()
                .iter()
                .map(|s| s.value.map.mapping().as_slice()),
            map.segments()
                .iter()
                .map(|s| s.value.map.clone())
                .collect::<Vec<_>>(),
        )?;
        Ok(Remote {
            index: SegIndex::new(&map),
            table,
            map,
        })
    }
}

/// A channel's submit gate and what it guards: the imports while the channel is open, the
/// reason once it is lost. Submissions hold it shared from the check until their request is
/// in `inflight`; losing the channel holds it exclusively for the whole teardown.
pub(crate) enum Gate {
    Open(Remote),
    Lost(LostReason),
}

pub(crate) struct Channel {
    pub(crate) peer: String,
    pub(crate) addr: SocketAddr,
    /// Segments the peer offered (fixed at connect).
    segments: usize,
    pub(crate) gate: RwLock<Gate>,
    pub(crate) inflight: Mutex<HashMap<u64, Weak<ReqInner>>>,
    /// The keepalive socket, for heartbeats (a send may block up to 3 s under this lock).
    pub(crate) keepalive: Mutex<TcpStream>,
    /// The same socket, to shut it down without waiting for a heartbeat in progress.
    closer: TcpStream,
    /// The keepalive reader thread, joined by whoever loses the channel (unless it is the
    /// reader itself, which then ends right after).
    reader: Mutex<Option<JoinHandle<()>>>,
    pub(crate) counters: Counters,
}

impl Channel {
    /// An open channel to `peer` over `remote`'s imports; its keepalive reader starts
    /// with [`start`].
    ///
    /// # Errors
    /// Duplicating the socket failed (out of descriptors).
    pub(crate) fn new(
        peer: &str,
        addr: SocketAddr,
        remote: Remote,
        keepalive: TcpStream,
    ) -> std::io::Result<Arc<Channel>> {
        let closer = keepalive.try_clone()?;
        Ok(Arc::new(Channel {
            peer: peer.to_owned(),
            addr,
            segments: remote.map.len(),
            gate: RwLock::new(Gate::Open(remote)),
            inflight: Mutex::new(HashMap::new()),
            keepalive: Mutex::new(keepalive),
            closer,
            reader: Mutex::new(None),
            counters: Counters::default(),
        }))
    }

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
            segments: self.segments as u64,
        }
    }

    pub(crate) fn lost_error(&self, reason: LostReason) -> Error {
        Error::PeerLost {
            peer: self.peer.clone(),
            reason,
        }
    }

    /// Runs `f` on the imports while the channel is open.
    pub(crate) fn with_remote<R>(&self, f: impl FnOnce(&Remote) -> R) -> Option<R> {
        match &*self.gate.read() {
            Gate::Open(r) => Some(f(r)),
            Gate::Lost(_) => None,
        }
    }
}

/// Loses `ch`, in this order, all under its gate held exclusively: new submissions fail;
/// every in-flight request's streams are aborted and its slot destroyed; the imports are
/// unmapped and freed with their VA back in the pool; the channel leaves `map` (if it is
/// still the entry for its peer), so `is_connected` turns false; the keepalive socket is
/// shut (the peer's server sees EOF only now); only then do the requests' waiters see
/// `PeerLost`. The keepalive reader is joined afterwards (unless this is the reader).
///
/// Returns false if the channel was lost already: then only after that loss has finished.
pub(crate) fn lose(map: &ChannelMap, ch: &Arc<Channel>, reason: LostReason) -> bool {
    let mut gate = ch.gate.write();
    let remote = match std::mem::replace(&mut *gate, Gate::Lost(reason)) {
        Gate::Open(r) => r,
        lost @ Gate::Lost(_) => {
            *gate = lost;
            return false;
        }
    };
    let reqs: Vec<Arc<ReqInner>> = ch
        .inflight
        .lock()
        .values()
        .filter_map(Weak::upgrade)
        .collect();
    let n = reqs.len();
    fail_all(
        &reqs,
        || ch.lost_error(reason),
        || {
            // No stream has work on the table any more: the imports unmap here.
            drop(remote);
            let mut m = map.write();
            if m.get(&ch.peer).is_some_and(|c| Arc::ptr_eq(c, ch)) {
                m.remove(&ch.peer);
            }
            drop(m);
            let _ = ch.closer.shutdown(Shutdown::Both);
        },
    );
    drop(gate);
    match reason {
        LostReason::Disconnected | LostReason::EngineShutdown => {
            tracing::debug!(peer = %ch.peer, %reason, aborted = n, "channel closed")
        }
        _ => tracing::warn!(peer = %ch.peer, %reason, aborted = n, "peer lost"),
    }
    let reader = ch.reader.lock().take();
    if let Some(t) = reader {
        if t.thread().id() != std::thread::current().id() {
            let _ = t.join();
        }
    }
    true
}

/// Starts the keepalive reader of `ch`: the server never writes on this socket, so EOF or
/// an error means the peer closed it or died (its kernel closes its sockets).
pub(crate) fn start(
    mut sock: TcpStream,
    ch: &Arc<Channel>,
    map: Weak<ChannelMap>,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(ch);
    // Held across the spawn: whoever loses the channel takes this lock (after its teardown),
    // so it finds the handle to join even when the loss comes before the spawn returns.
    let mut slot = ch.reader.lock();
    let t = std::thread::Builder::new()
        .name(format!("fabric-ka-{}", ch.addr.port()))
        .spawn(move || {
            let mut buf = [0u8; 256];
            loop {
                match sock.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue, // HIXL servers send nothing here; ignore
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            if let (Some(ch), Some(map)) = (weak.upgrade(), map.upgrade()) {
                lose(&map, &ch, LostReason::KeepaliveClosed);
            }
        })?;
    *slot = Some(t);
    Ok(())
}
