//! A connection to one peer: its imports behind the submit gate, the keepalive socket and its
//! reader, in-flight requests and counters, and the ordered teardown [`lose`].

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

use ascend_mem::Addr;

use crate::error::{Error, LostReason};
use crate::metrics::PeerMetrics;
use crate::remote::Remote;
use crate::request::{fail_all, InFlight, ReqInner};
use crate::stats::{PeerStats, Window};
use crate::wire::{self, WireError};

pub(crate) type ChannelMap = RwLock<HashMap<String, Arc<Channel>>>;

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
    /// Segments imported from the peer (at connect, then grown by [`Channel::grow`]).
    segments: AtomicUsize,
    /// The peer answered a segments request as a C++ HIXL server does (it knows none): its
    /// segments are those of the connect.
    fixed: AtomicBool,
    /// Held by the one growth of the imports at a time.
    growing: Mutex<()>,
    pub(crate) gate: RwLock<Gate>,
    /// Requests in flight and counters, shared with the pending requests.
    pub(crate) book: Arc<InFlight>,
    /// The keepalive socket, for heartbeats (a send may block up to 3 s under this lock).
    pub(crate) keepalive: Mutex<TcpStream>,
    /// The same socket, to shut it down without waiting for a heartbeat in progress.
    closer: TcpStream,
    /// The keepalive reader thread, joined by whoever loses the channel (unless it is the
    /// reader itself, which then ends right after).
    reader: Mutex<Option<JoinHandle<()>>>,
    /// What a heartbeat that failed on the socket found (written with `keepalive` held): the
    /// socket's error goes to whichever call takes it first, so the reader may be left an EOF
    /// by a heartbeat that took the timeout ([`Channel::heartbeat_failed`]).
    heartbeat_found: Mutex<Option<LostReason>>,
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
        (metrics, summary): (PeerMetrics, Window),
    ) -> std::io::Result<Arc<Channel>> {
        let closer = keepalive.try_clone()?;
        Ok(Arc::new(Channel {
            peer: peer.to_owned(),
            addr,
            segments: AtomicUsize::new(remote.map.len()),
            fixed: AtomicBool::new(false),
            growing: Mutex::new(()),
            gate: RwLock::new(Gate::Open(remote)),
            book: Arc::new(InFlight::new(metrics, summary)),
            keepalive: Mutex::new(keepalive),
            closer,
            reader: Mutex::new(None),
            heartbeat_found: Mutex::new(None),
        }))
    }

    /// Records that a heartbeat sent on `keepalive` (the guard of [`Channel::keepalive`],
    /// still held) failed with `e`, for the reader to report: the socket is dead, so its
    /// reader wakes and loses the channel ([`start`]).
    pub(crate) fn heartbeat_failed(&self, _keepalive: &mut TcpStream, e: &std::io::Error) {
        self.heartbeat_found.lock().get_or_insert(socket_loss(e));
    }

    /// Why the reader's socket ended, given what the reader itself found: a timeout it took
    /// stands; otherwise what a heartbeat found first, if one failed (waiting for a heartbeat
    /// in progress, which holds the socket's lock until it has recorded its finding).
    fn reader_reason(&self, own: LostReason) -> LostReason {
        if own == LostReason::PeerUnresponsive {
            return own;
        }
        let _in_progress = self.keepalive.lock();
        self.heartbeat_found.lock().unwrap_or(own)
    }

    pub(crate) fn stats(&self) -> PeerStats {
        self.book.counters.snapshot(
            self.book.len() as u64,
            self.segments.load(Ordering::Relaxed) as u64,
        )
    }

    pub(crate) fn lost_error(&self, reason: LostReason) -> Error {
        Error::PeerLost {
            peer: self.peer.clone(),
            reason,
        }
    }

    /// Whether the peer has closed or reset the keepalive socket, asked of the socket now (a
    /// peek that does not wait): its reader may not have seen it yet.
    pub(crate) fn peer_closed(&self) -> bool {
        let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        let flags = libc::MSG_PEEK | libc::MSG_DONTWAIT;
        match socket2::SockRef::from(&self.closer).recv_with_flags(&mut b, flags) {
            Ok(0) => true,
            // Bytes before a close (servers send nothing here in this protocol) hide it until
            // the reader has taken them; the reader then finds the close itself.
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ),
        }
    }

    /// Whether the channel is open; a teardown in progress is waited for (it holds the
    /// gate until the channel has left the map).
    pub(crate) fn is_open(&self) -> bool {
        matches!(*self.gate.read(), Gate::Open(_))
    }

    /// Grows the imports by what `grow` makes of them (segments the peer registered since,
    /// imported under the gate held shared, so submissions go on meanwhile), then swaps them
    /// in under the gate held exclusively for a moment. Requests in flight are untouched:
    /// their streams hold the old copy table, whose imports the new one shares. One growth at
    /// a time. Returns how many segments were added; `None` if the channel is lost.
    pub(crate) fn grow(
        &self,
        grow: impl FnOnce(&Remote) -> crate::error::Result<Option<Remote>>,
    ) -> Option<crate::error::Result<usize>> {
        let _one = self.growing.lock();
        let new = match &*self.gate.read() {
            Gate::Open(old) => grow(old),
            Gate::Lost(_) => return None,
        };
        let new = match new {
            Ok(Some(new)) => new,
            Ok(None) => return Some(Ok(0)),
            Err(e) => return Some(Err(e)),
        };
        let mut gate = self.gate.write();
        // Lost meanwhile: the new imports go with `new` (no stream used them).
        let Gate::Open(old) = &mut *gate else {
            return None;
        };
        let added = new.map.len() - old.map.len();
        self.segments.store(new.map.len(), Ordering::Relaxed);
        *old = new;
        Some(Ok(added))
    }

    /// Tells the peer's server this channel takes revocations of single segments on its
    /// keepalive socket ([`wire::KEEPALIVE_SUBSCRIBE`]; a C++ HIXL server skips the frame).
    pub(crate) fn subscribe(&self) {
        let frame = wire::keepalive_bytes(wire::KEEPALIVE_SUBSCRIBE, b"{}");
        if let Err(e) = self.keepalive.lock().write_all(&frame) {
            tracing::debug!(peer = %self.peer, error = %e, "subscribe not sent");
        }
    }

    /// The peer revoked its segments at `va_addrs` (it is deregistering that memory): under
    /// the gate held exclusively (submissions wait), the requests in flight whose copies touch
    /// them fail with [`Error::Revoked`] (their streams aborted and waited for), the drain
    /// list of dropped requests is settled, and the imports leave the channel (unmapped once
    /// nothing holds them). Everything else of the channel stays. Returns how many segments
    /// were revoked (0: none imported, or the channel is lost).
    ///
    /// # Errors
    /// The copy table over what is left cannot be made; the channel must then be lost.
    pub(crate) fn revoke(&self, va_addrs: &[u64]) -> crate::error::Result<usize> {
        let mut gate = self.gate.write();
        let Gate::Open(old) = &*gate else {
            return Ok(0);
        };
        let Some((new, slots)) = old.without(va_addrs)? else {
            return Ok(0);
        };
        let (addr, len) = old.spans[slots[0]];
        let live = new.map.len();
        let reqs: Vec<Arc<ReqInner>> = self
            .book
            .live()
            .into_iter()
            .filter(|r| r.uses_any(&slots))
            .collect();
        let mut wake = Vec::new();
        let err = || Error::Revoked {
            peer: self.peer.clone(),
            addr: Addr::new(addr),
            len: len as usize,
        };
        fail_all(&reqs, err, || {
            wake = self.book.settle_all();
            // The old imports go here (once no stream holds their table).
            *gate = Gate::Open(new);
        });
        self.segments.store(live, Ordering::Relaxed);
        drop(gate);
        for w in wake {
            w.wake();
        }
        tracing::info!(peer = %self.peer, segments = slots.len(), failed = reqs.len(), "peer revoked segments");
        Ok(slots.len())
    }

    /// Carries out a revocation the peer sent ([`wire::KEEPALIVE_REVOKE`]) and answers it
    /// once done; false when it cannot be (malformed, the table cannot be remade, the answer
    /// cannot be sent): the channel must then be lost, which unmaps everything.
    fn take_revocation(&self, body: &[u8]) -> bool {
        let msg: wire::RevokeMsg = match serde_json::from_slice(body) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(peer = %self.peer, error = %e, "malformed revocation");
                return false;
            }
        };
        if let Err(e) = self.revoke(&msg.va_addrs) {
            tracing::warn!(peer = %self.peer, error = %e, "revocation failed; losing the channel");
            return false;
        }
        let ack = wire::keepalive_bytes(wire::KEEPALIVE_REVOKE_ACK, b"{}");
        self.keepalive.lock().write_all(&ack).is_ok()
    }

    /// Whether the peer's segments are those of the connect (it answered as a C++ HIXL
    /// server, which knows no segments request).
    pub(crate) fn is_fixed(&self) -> bool {
        self.fixed.load(Ordering::Relaxed)
    }

    pub(crate) fn set_fixed(&self) {
        self.fixed.store(true, Ordering::Relaxed);
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
/// every in-flight request's streams are aborted and its slot destroyed, and the streams of
/// requests dropped earlier whose aborts are still draining are waited for; the imports are
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
    let reqs: Vec<Arc<ReqInner>> = ch.book.live();
    let n = reqs.len();
    let mut wake = Vec::new();
    fail_all(
        &reqs,
        || ch.lost_error(reason),
        || {
            // Dropped requests' aborted streams are done too (waited for here): no stream
            // has work on the table any more, and the imports unmap.
            wake = ch.book.settle_all();
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
    ch.book.metrics.lost(reason.label());
    // The slot waiters handed the dropped requests' room, with no lock held.
    for w in wake {
        w.wake();
    }
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
            let own = read_keepalive(&mut sock, &weak);
            if let (Some(ch), Some(map)) = (weak.upgrade(), map.upgrade()) {
                let reason = ch.reader_reason(own);
                lose(&map, &ch, reason);
            }
        })?;
    *slot = Some(t);
    Ok(())
}

/// The keepalive reader's loop, until EOF or an error, and why the channel ends: HIXL
/// servers send nothing here, ours only revocations of single segments (carried out and
/// answered; one that cannot be ends the loop, so the channel is lost). Bytes that are not
/// keepalive frames are read and ignored until EOF.
fn read_keepalive(sock: &mut TcpStream, ch: &Weak<Channel>) -> LostReason {
    loop {
        match wire::read_keepalive(sock) {
            Ok((wire::KEEPALIVE_REVOKE, body)) => match ch.upgrade() {
                Some(ch) if ch.take_revocation(&body) => {}
                _ => return LostReason::KeepaliveClosed,
            },
            Ok(_) => {}
            Err(WireError::Io(e)) => return socket_loss(&e),
            Err(WireError::Truncated { .. }) => return LostReason::KeepaliveClosed,
            Err(_) => break,
        }
    }
    let mut buf = [0u8; 256];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return LostReason::KeepaliveClosed,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return socket_loss(&e),
        }
    }
}

/// Why a keepalive socket that failed with `e` ends its channel: TCP gave up on bytes its
/// peer never acknowledged (`ETIMEDOUT`, after [`set_peer_timeout`]'s bound; or the error
/// of an unreachable host or network that Linux reports instead when one arrived meanwhile)
/// means the peer's host is gone or cut off; anything else (a reset, a broken pipe) that the
/// peer closed it.
pub(crate) fn socket_loss(e: &std::io::Error) -> LostReason {
    let gone = [
        libc::ETIMEDOUT,
        libc::EHOSTUNREACH,
        libc::ENETUNREACH,
        libc::EHOSTDOWN,
        libc::ENETDOWN,
    ];
    if e.raw_os_error().is_some_and(|c| gone.contains(&c)) {
        LostReason::PeerUnresponsive
    } else {
        LostReason::KeepaliveClosed
    }
}

/// Bounds how long bytes sent on the keepalive socket `sock` may go unacknowledged before
/// TCP fails it with `ETIMEDOUT` ([`EngineOptions::peer_timeout`](crate::EngineOptions):
/// `TCP_USER_TIMEOUT`; heartbeats are the bytes). `None` leaves the system's limit.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn set_peer_timeout(
    sock: &TcpStream,
    timeout: Option<std::time::Duration>,
) -> std::io::Result<()> {
    match timeout {
        Some(t) => socket2::SockRef::from(sock).set_tcp_user_timeout(Some(t)),
        None => Ok(()),
    }
}

/// Elsewhere there is no `TCP_USER_TIMEOUT`: the system's limit applies.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn set_peer_timeout(
    _sock: &TcpStream,
    _timeout: Option<std::time::Duration>,
) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    #[test]
    fn the_peer_timeout_bounds_unacknowledged_bytes_on_the_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let before = socket2::SockRef::from(&s).tcp_user_timeout().unwrap();
        set_peer_timeout(&s, None).unwrap();
        assert_eq!(
            socket2::SockRef::from(&s).tcp_user_timeout().unwrap(),
            before
        );
        set_peer_timeout(&s, Some(Duration::from_millis(1500))).unwrap();
        assert_eq!(
            socket2::SockRef::from(&s).tcp_user_timeout().unwrap(),
            Some(Duration::from_millis(1500))
        );
        for gone in [
            libc::ETIMEDOUT,
            libc::EHOSTUNREACH,
            libc::ENETUNREACH,
            libc::EHOSTDOWN,
            libc::ENETDOWN,
        ] {
            let e = std::io::Error::from_raw_os_error(gone);
            assert_eq!(socket_loss(&e), LostReason::PeerUnresponsive, "{e}");
        }
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(socket_loss(&reset), LostReason::KeepaliveClosed);
    }
}
