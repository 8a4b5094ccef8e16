//! The engine: registrations, the control server, channels to peers and transfers.

use ascend_mem::CloseError;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ascend_mem::{Device, DeviceBuffer, HostBuffer, MappingSlice};
use parking_lot::{Mutex, RwLock};

use crate::channel::{self, Channel, ChannelMap};
use crate::control::{self, ControlHandler, ControlServer, ServerConfig};
use crate::error::{Error, LostReason, Result};
use crate::heartbeat::{spawn_heartbeats, Monitor};
use crate::options::{EngineAddr, EngineOptions, OptionError};
use crate::pool::VaPool;
use crate::progress::Progress;
use crate::registry::{Registrable, Registration, Registry};
use crate::remote::Remote;
use crate::request::{AutoDisconnect, Observer};
use crate::slots::{SlotFrom, SlotPool};
use crate::stats::PeerStats;
use crate::transfer::{TransferDesc, TransferOp, TransferOptions};
use crate::transfer_request::TransferRequest;
use crate::wire::{NotifyMsg, SegmentName, ShareHandleEntry};

struct Handler {
    registry: Arc<Registry>,
    local: String,
}

impl ControlHandler for Handler {
    fn share_handles(&self) -> Vec<ShareHandleEntry> {
        self.registry.share_list()
    }
    fn segment_names(&self) -> Vec<SegmentName> {
        self.registry.names.offered()
    }
    fn session_opened(&self, channel_id: &str) {
        tracing::info!(engine = %self.local, peer = channel_id, "peer connected");
    }
    fn session_closed(&self, channel_id: &str) {
        tracing::info!(engine = %self.local, peer = channel_id, "peer session ended");
    }
}

/// A control exchange's error: [`Error::Timeout`] naming `what` when its time ran out (the
/// server could not be reached in time, or did not answer), [`Error::Control`] otherwise.
fn timed_out(e: control::ClientError, what: &'static str, after: Duration) -> Error {
    if e.is_timeout() {
        tracing::debug!(error = %e, "{what} timed out");
        Error::Timeout { what, after }
    } else {
        e.into()
    }
}

/// The `channel_id` of an engine at `addr` (see [`Engine::channel_id`]).
fn channel_id(addr: &EngineAddr) -> String {
    if addr.listens() && !addr.ip.is_unspecified() {
        addr.as_str().to_owned()
    } else {
        format!("{}#{:016x}", addr.as_str(), control::unique_suffix())
    }
}

pub(crate) struct EngineInner {
    addr: EngineAddr,
    /// This engine's identity on the control wire (see [`Engine::channel_id`]).
    channel_id: String,
    opts: EngineOptions,
    pub(crate) dev: Device,
    pool: Arc<VaPool>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) channels: Arc<ChannelMap>,
    pub(crate) slots: Arc<SlotPool>,
    server: Mutex<Option<Arc<ControlServer>>>,
    connect_lock: Mutex<()>,
    monitor: Arc<Monitor>,
    monitor_thread: Mutex<Option<JoinHandle<()>>>,
    /// Observes awaited and queued requests (a thread started on first use).
    pub(crate) progress: Arc<Progress>,
}

/// A Fabric Mem transfer engine (HIXL's FabricMem mode, host copy path).
///
/// `Send + Sync` and cheap to clone (an `Arc`); every method may be called from any thread,
/// and many threads may transfer at once. Dropping the last clone closes every channel
/// (in-flight requests fail with [`Error::PeerLost`], reason
/// [`LostReason::EngineShutdown`]), stops the control server and the monitor, and releases
/// the VA pool once the last registration is gone.
///
/// The VA pool is per engine (HIXL's is per process): one reservation of
/// [`EngineOptions::pool_capacity`] bytes made at creation (at
/// [`EngineOptions::pool_start`] without the unified-cache path where the product has that
/// and the range is free, as HIXL's on an A3; anywhere otherwise), sub-allocated in 1 GiB slots for
/// imported peer segments and for device aliases of foreign memory. Reserving VA costs no
/// memory (the emulator reserves with `PROT_NONE | MAP_NORESERVE`).
#[derive(Clone)]
#[must_use = "dropping the last Engine clone closes every channel and stops its server"]
pub struct Engine {
    pub(crate) inner: Arc<EngineInner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("addr", &self.inner.addr.as_str())
            .field("device", &self.inner.dev.id())
            .field("peers", &self.peers())
            .finish()
    }
}

/// How long a deregistration waits for the peers that imported the memory to let go of it
/// (to close their keepalive sockets, which engines of this crate do once their channel is
/// torn down). A peer that has not by then keeps its half-closed session, and its import,
/// until it closes or is reaped; the wait running out is logged.
pub(crate) const REVOKE_WAIT: Duration = Duration::from_secs(3);

/// Timeout of a connect made on demand (`AutoConnect`), as HIXL's.
pub(crate) const AUTO_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl EngineInner {
    /// `AutoConnect`'s disconnect after a failed transfer on `ch` (bounded by the connect
    /// timeout; a channel made since is left alone).
    pub(crate) fn auto_disconnect(&self, ch: &Arc<Channel>) {
        tracing::info!(peer = %ch.peer, "AutoConnect: disconnecting after a failed transfer");
        if let Err(e) = self.disconnect(&ch.peer, Some(ch), self.opts.connect_timeout) {
            tracing::debug!(peer = %ch.peer, error = %e, "AutoConnect: already disconnected");
        }
    }

    /// [`Engine::disconnect`]; with `only`, only if the channel to `remote` is that one (a
    /// channel made since, by a reconnect, stays).
    pub(crate) fn disconnect(
        &self,
        remote: &str,
        only: Option<&Arc<Channel>>,
        timeout: Duration,
    ) -> Result<()> {
        let _span = tracing::info_span!("disconnect", engine = %self.addr, peer = remote).entered();
        // Serialised with connects, request to the peer included: a connect to the same peer
        // made after this disconnect reaches the peer after the disconnect request, so the
        // request cannot close the new session (it names the channel, not the session).
        let _serial = self.connect_lock.lock();
        let ch = match self.channels.read().get(remote) {
            Some(c) if only.map_or(true, |o| Arc::ptr_eq(o, c)) => c.clone(),
            _ => {
                return Err(Error::NotConnected {
                    peer: remote.to_owned(),
                })
            }
        };
        // In-flight transfers fail, imports are unmapped, then the channel leaves the map.
        if channel::lose(&self.channels, &ch, LostReason::Disconnected) {
            if let Err(e) = control::disconnect(
                ch.addr,
                &self.channel_id,
                timeout,
                self.opts.shared_secret.as_deref(),
            ) {
                tracing::debug!(peer = remote, error = %e, "disconnect request not delivered");
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Starts an engine on `dev` at `local` (`ip`, `ip:port` or `[ipv6]:port`; a port makes it
    /// listen for peers there).
    ///
    /// # Errors
    /// [`Error::Option`] for a bad address or options; [`Error::Mem`] if the VA pool cannot be
    /// reserved; [`Error::Listen`] if the port is taken.
    pub fn new(dev: &Device, local: &str, opts: EngineOptions) -> Result<Engine> {
        Self::with_addr(dev, EngineAddr::parse(local)?, opts)
    }

    /// Starts an engine from HIXL's option map (see [`EngineOptions::from_hixl`]).
    ///
    /// # Errors
    /// As [`Engine::new`] and [`EngineOptions::from_hixl`].
    pub fn from_hixl(
        dev: &Device,
        local: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<Engine> {
        Self::new(dev, local, EngineOptions::from_hixl(options)?)
    }

    /// Starts an engine at a parsed address.
    ///
    /// # Errors
    /// As [`Engine::new`].
    pub fn with_addr(dev: &Device, addr: EngineAddr, opts: EngineOptions) -> Result<Engine> {
        let _span = tracing::info_span!("engine_init", addr = %addr).entered();
        if !(1..=8).contains(&opts.task_stream_num) {
            return Err(OptionError::Invalid {
                key: "task_stream_num".into(),
                value: opts.task_stream_num.to_string(),
                reason: "must be in 1..=8".into(),
            }
            .into());
        }
        if opts.heartbeat_interval.is_zero() {
            return Err(OptionError::Invalid {
                key: "heartbeat_interval".into(),
                value: "0".into(),
                reason: "must be positive".into(),
            }
            .into());
        }
        dev.bind()?;
        let pool = VaPool::new(dev, opts.pool_capacity, opts.pool_start)?;
        let registry = Registry::new(dev, pool.clone());
        let server = if addr.listens() {
            let handler = Arc::new(Handler {
                registry: registry.clone(),
                local: addr.as_str().to_owned(),
            });
            let config = ServerConfig {
                shared_secret: opts.shared_secret.clone(),
                allowed_peers: opts.allowed_peers.clone(),
                session_heartbeat_timeout: opts.session_heartbeat_timeout,
                ..ServerConfig::default()
            };
            let sa = addr.socket_addr();
            let server = Arc::new(
                ControlServer::start(sa, handler, config)
                    .map_err(|source| Error::Listen { addr: sa, source })?,
            );
            // Memory no registration covers any more is revoked: the peers that imported it
            // are cut off (their channels torn down) before the deregistration returns.
            let weak = Arc::downgrade(&server);
            registry.on_revoke(Box::new(move |bases: &[u64]| {
                if let Some(s) = weak.upgrade() {
                    let n = s.revoke(bases, REVOKE_WAIT);
                    if n > 0 {
                        tracing::info!(
                            sessions = n,
                            blocks = bases.len(),
                            "revoked peers' imports"
                        );
                    }
                }
            }));
            Some(server)
        } else {
            None
        };
        let inner = Arc::new(EngineInner {
            slots: SlotPool::new(dev, opts.task_stream_num as usize),
            channel_id: channel_id(&addr),
            addr,
            dev: dev.clone(),
            pool,
            registry,
            channels: Arc::new(RwLock::new(HashMap::new())),
            server: Mutex::new(server),
            connect_lock: Mutex::new(()),
            monitor: Arc::default(),
            monitor_thread: Mutex::new(None),
            progress: Progress::new(),
            opts,
        });
        let t = spawn_heartbeats(
            Arc::downgrade(&inner.channels),
            inner.monitor.clone(),
            inner.opts.heartbeat_interval,
        )
        .map_err(|source| Error::Listen {
            addr: inner.addr.socket_addr(),
            source,
        })?;
        *inner.monitor_thread.lock() = Some(t);
        tracing::info!(addr = %inner.addr, device = dev.id(), streams = inner.opts.task_stream_num, "engine ready");
        Ok(Engine { inner })
    }

    /// This engine's address (its identity on the wire).
    pub fn local_addr(&self) -> &EngineAddr {
        &self.inner.addr
    }

    /// The `channel_id` this engine sends when it connects, by which a server knows its
    /// session: the engine string as given (`ip:port`) for an engine that listens, as a C++
    /// HIXL engine sends it; `<addr>#<16 hex digits>`, unique to this engine instance, for
    /// one without a port, whose plain `ip` would be the same for every such engine of the
    /// host, and for one listening on an unspecified address (`0.0.0.0:port`, `[::]:port`),
    /// which names no host. A loopback engine string (`127.0.0.1:port`, `localhost:port`) is
    /// sent as given, as HIXL does, so engines on two hosts listening on the same loopback
    /// port have the same id at a server they both reach: give engines that connect to other
    /// hosts a routable address.
    ///
    /// What a server does with an id that already has a session:
    /// * a C++ HIXL server with auto-cleanup replaces the old session (closes it) and serves
    ///   the new connect, so an engine restarted at the same address takes its place at once;
    ///   without auto-cleanup (its engine's default) it refuses the duplicate (HIXL's server
    ///   writes its answer first and then closes the connection, so here the connect succeeds
    ///   and the channel is lost at once, [`LostReason::KeepaliveClosed`](crate::LostReason));
    /// * our server first reads the old session's socket: a session whose process has gone
    ///   (its socket closed) ends there and the new connect is served; a session still open
    ///   (the old engine alive, or its host gone without closing the connection) makes the
    ///   duplicate [`Error::AlreadyConnected`](crate::Error) until it ends, by a disconnect or
    ///   by [`EngineOptions::session_heartbeat_timeout`];
    /// * an instance-unique id is always a new session, on either server; its old session
    ///   stays until the server notices the old engine has gone.
    pub fn channel_id(&self) -> &str {
        &self.inner.channel_id
    }

    /// The control server's bound address, if this engine listens.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.inner.server.lock().as_ref().map(|s| s.local_addr())
    }

    /// The options in force.
    pub fn options(&self) -> &EngineOptions {
        &self.inner.opts
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Allocates device HBM that can be registered (HIXL's `MallocMem` for `MEM_DEVICE`),
    /// rounded up to whole granules.
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`].
    pub fn alloc_device(&self, size: usize) -> Result<DeviceBuffer> {
        Ok(DeviceBuffer::new(&self.inner.dev, size)?)
    }

    /// Allocates host DRAM the device can reach and peers can import (HIXL's `MallocMem` for
    /// `MEM_HOST`), rounded up to whole granules.
    ///
    /// # Errors
    /// As [`HostBuffer::new`].
    pub fn alloc_host(&self, size: usize) -> Result<HostBuffer> {
        Ok(HostBuffer::new(&self.inner.dev, size)?)
    }

    /// Registers memory for transfers: peers that connect afterwards may read and write it,
    /// and local descriptors may use it. The allocation is exported once (FABRIC, no pid
    /// validation) and stays mapped while registered, even if the buffer is dropped. The same
    /// range twice gives the same registration; a range overlapping another registration is an
    /// error. Several mappings (or views) lying back to back in one reservation register as
    /// one range, e.g. a KV cache mapped piece by piece: `engine.register(&[m0, m1, m2])`;
    /// each mapping is exported once, however many registrations share it.
    ///
    /// # Errors
    /// [`Error::BadSpan`] for parts that are not one contiguous range of one reservation and
    /// one memory kind; [`Error::Mem`] with [`ascend_mem::Error::WrongDevice`] for memory of
    /// another device or runtime; [`Error::RegistrationOverlap`]; [`Error::Mem`] for an export failure
    /// ([`ascend_mem::Error::AlreadyExported`] when the memory was exported with
    /// `PhysicalMem::export` instead of through the engine).
    pub fn register<R: Registrable + ?Sized>(&self, mem: &R) -> Result<Registration> {
        self.inner.registry.register_slices(&mem.regions())
    }

    /// Registers a view (see [`Engine::register`]).
    ///
    /// # Errors
    /// As [`Engine::register`].
    pub fn register_slice(&self, s: &MappingSlice<'_>) -> Result<Registration> {
        self.inner.registry.register_slices(&[*s])
    }

    /// Registers memory this crate did not map (foreign VMM memory of this runtime), by
    /// address: each block is retained (`aclrtMemRetainAllocationHandle`), exported and mapped
    /// again in the engine's VA pool, so the registration stays valid even if its owner unmaps
    /// it. Whole blocks are offered to peers.
    ///
    /// # Errors
    /// [`Error::NotShareable`] for plain host memory, `aclrtMalloc` memory or unmapped VA
    /// (allocate with [`Engine::alloc_device`] / [`Engine::alloc_host`] instead);
    /// [`Error::Range`] for a zero length or an overflow; as [`Engine::register`].
    pub fn register_raw(&self, addr: u64, len: u64) -> Result<Registration> {
        self.inner.registry.register_raw(addr, len)
    }

    /// Deregisters now.
    ///
    /// Revocation: connected peers imported every block this engine offered when they
    /// connected. A block that no registration covers any more is revoked: each peer session
    /// that was offered it is closed (its keepalive socket shut), and this call returns once
    /// those peers have closed their side, or after 3 s. A peer running this crate closes its
    /// side only after its channel is torn down (its in-flight transfers failed with
    /// [`Error::PeerLost`], its imports unmapped), so once it has, no copy of it can still land
    /// in the memory. A peer that does not close in time (a C++ HIXL engine does not react to
    /// the closed socket) keeps its import: the runtime offers no way to take an import back,
    /// and the wait running out is logged. Peers may connect again; they are then offered only
    /// what is still registered. Dropping the last clone of a registration does the same.
    ///
    /// # Errors
    /// [`Error::Busy`] (with the registration back) while transfers that use it are in
    /// flight: wait for them, then retry (or drop the registration: the release is then
    /// deferred until they finish).
    pub fn deregister(
        &self,
        reg: Registration,
    ) -> std::result::Result<(), CloseError<Registration, Error>> {
        self.inner.registry.deregister(reg)
    }

    /// Live registrations.
    pub fn registrations(&self) -> usize {
        self.inner.registry.count()
    }

    /// Connects to the engine at `remote` (`ip:port`, the peer's own address string), imports
    /// every segment it offers into this engine's VA pool, and keeps a keepalive channel.
    ///
    /// A channel to `remote` that is going is not in the way: one whose teardown is under way
    /// is waited for, and one whose peer has closed the keepalive socket (its process died,
    /// and its reader has not noticed yet) is torn down first, so a reconnect right after a
    /// peer died needs no retry loop once the peer's close has reached this host (a peer
    /// whose host vanished sends none: its channel ends when a heartbeat fails).
    ///
    /// # Errors
    /// [`Error::AlreadyConnected`] for a channel that is open; [`Error::Option`] for an address
    /// without a port; [`Error::Timeout`] when the peer could not be reached, or did not
    /// answer, within `timeout`;
    /// [`Error::Control`] (unreachable, refused, malformed reply); [`Error::BadEntry`] or
    /// [`Error::Mem`] for an entry that cannot be imported or mapped (everything imported so
    /// far is undone); [`Error::ResourceExhausted`] when the VA pool is full.
    pub fn connect(&self, remote: &str, timeout: Duration) -> Result<()> {
        self.connect_by(remote, timeout, None)
    }

    /// [`Engine::connect`]; with `until`, the whole call (waiting for another connect or
    /// disconnect of this engine included) ends by then.
    pub(crate) fn connect_by(
        &self,
        remote: &str,
        timeout: Duration,
        until: Option<Instant>,
    ) -> Result<()> {
        let _span =
            tracing::info_span!("connect", engine = %self.inner.addr, peer = remote).entered();
        let addr = EngineAddr::parse(remote)?;
        if !addr.listens() {
            return Err(OptionError::BadAddress {
                value: remote.to_owned(),
                reason: "a peer address needs a port",
            }
            .into());
        }
        let inner = &self.inner;
        let (_serial, timeout) = match until {
            None => (inner.connect_lock.lock(), timeout),
            Some(d) => {
                let g = inner.connect_lock.try_lock_until(d).ok_or(Error::Timeout {
                    what: "connect on demand (waiting for another connect to finish)",
                    after: timeout,
                })?;
                let left = timeout.min(d.saturating_duration_since(Instant::now()));
                if left.is_zero() {
                    return Err(Error::Timeout {
                        what: "connect on demand (no time left after another connect)",
                        after: timeout,
                    });
                }
                (g, left)
            }
        };
        let existing = inner.channels.read().get(remote).cloned();
        if let Some(ch) = existing {
            // A channel whose peer has gone is torn down first (or its teardown, already
            // under way, waited for), so a reconnect right after a peer died connects.
            if ch.peer_closed() {
                channel::lose(&inner.channels, &ch, LostReason::KeepaliveClosed);
            } else if ch.is_open() {
                return Err(Error::AlreadyConnected {
                    peer: remote.to_owned(),
                });
            }
        }
        let sa = addr.socket_addr();
        let c = control::connect(
            sa,
            &inner.channel_id,
            timeout,
            inner.opts.shared_secret.as_deref(),
        )
        .map_err(|e| timed_out(e, "connect: the control exchange with the peer", timeout))?;
        let keepalive = c.keepalive;
        let made = Remote::import_entries(&inner.dev, &inner.pool, remote, &c.entries, &c.names)
            .and_then(|rem| {
                let io = |source| Error::Listen { addr: sa, source };
                let reader = keepalive.try_clone().map_err(io)?;
                Ok((
                    Channel::new(remote, sa, rem, keepalive).map_err(io)?,
                    reader,
                ))
            });
        let (ch, reader_sock) = match made {
            Ok(x) => x,
            Err(e) => {
                // The peer has opened a session for us: end it (its socket is closed already)
                // and wait for its answer, so a retry is not refused as a duplicate.
                let secret = inner.opts.shared_secret.as_deref();
                if let Err(d) = control::disconnect(sa, &inner.channel_id, timeout, secret) {
                    tracing::debug!(peer = remote, error = %d, "disconnect after a failed connect");
                }
                return Err(e);
            }
        };
        // In the map before the reader starts, so a peer that closes at once is taken out
        // of it again by the reader (not left there, lost, after it).
        inner.channels.write().insert(remote.to_owned(), ch.clone());
        if let Err(source) = channel::start(reader_sock, &ch, Arc::downgrade(&inner.channels)) {
            channel::lose(&inner.channels, &ch, LostReason::Disconnected);
            return Err(Error::Listen { addr: sa, source });
        }
        tracing::info!(peer = remote, segments = ch.stats().segments, "connected");
        Ok(())
    }

    /// Disconnects from `remote`: in-flight transfers to it fail with [`Error::PeerLost`]
    /// (reason [`LostReason::Disconnected`]) after their streams are aborted, a disconnect
    /// request goes to the peer on a new connection (its result is ignored, as in HIXL), and
    /// every import is unmapped and freed with its VA returned to the pool.
    ///
    /// # Errors
    /// [`Error::NotConnected`].
    pub fn disconnect(&self, remote: &str, timeout: Duration) -> Result<()> {
        self.inner.disconnect(remote, None, timeout)
    }

    /// Ends the channel to `remote` for `reason`, as a closed keepalive socket does: its
    /// in-flight transfers fail with [`Error::PeerLost`] carrying `reason` after their streams
    /// are aborted, and its imports are unmapped, all before it leaves [`Engine::peers`]; the
    /// peer sees the keepalive socket close. No disconnect request is sent (for a peer known
    /// to be gone, e.g. one that left the engine directory). Returns whether a channel was
    /// ended here (false: none, or it was being lost already).
    pub fn lose_peer(&self, remote: &str, reason: LostReason) -> bool {
        let ch = self.inner.channels.read().get(remote).cloned();
        ch.is_some_and(|ch| channel::lose(&self.inner.channels, &ch, reason))
    }

    /// Whether a live channel to `remote` exists.
    pub fn is_connected(&self, remote: &str) -> bool {
        self.inner.channels.read().contains_key(remote)
    }

    /// Peers this engine is connected to.
    pub fn peers(&self) -> Vec<String> {
        self.inner.channels.read().keys().cloned().collect()
    }

    /// Counters of the channel to `remote`.
    pub fn peer_stats(&self, remote: &str) -> Option<PeerStats> {
        self.inner.channels.read().get(remote).map(|c| c.stats())
    }

    /// The segments `remote` offered: `(va_addr, len)` in address order.
    pub fn remote_segments(&self, remote: &str) -> Option<Vec<(u64, u64)>> {
        let ch = self.inner.channels.read().get(remote)?.clone();
        ch.with_remote(|r| r.map.segments().iter().map(|s| (s.start, s.len)).collect())
    }

    /// Where `remote_addr` (an address `remote` offered) is mapped in this process, for
    /// diagnostics and benchmarks (e.g. a `memcpy` between the very buffers a transfer uses).
    /// The address stays valid while the channel is connected. `None` when not connected or
    /// the address lies in no offered segment.
    pub fn peer_mapped_addr(&self, remote: &str, remote_addr: u64) -> Option<u64> {
        let ch = self.inner.channels.read().get(remote)?.clone();
        ch.with_remote(|r| {
            let seg = &r.map.segments()[r.map.find(remote_addr)?];
            Some(seg.value.map.mapping().as_raw() as u64 + (remote_addr - seg.start))
        })
        .flatten()
    }

    /// Channel ids of peers connected to this engine's control server.
    pub fn sessions(&self) -> Vec<String> {
        self.inner
            .server
            .lock()
            .as_ref()
            .map(|s| s.sessions())
            .unwrap_or_default()
    }

    /// Control connections this engine's server closed because their request was malformed
    /// or refused.
    pub fn rejected_connections(&self) -> u64 {
        self.inner
            .server
            .lock()
            .as_ref()
            .map_or(0, |s| s.rejected())
    }

    /// Sends a notify to `remote` (HIXL's `SendNotify`, on a new connection, no reply: a
    /// notify the peer's server drops, for example over its connection cap, is not reported).
    ///
    /// # Errors
    /// [`Error::Control`] (unreachable peer, name or message over
    /// [`wire::MAX_NOTIFY_FIELD`](crate::wire::MAX_NOTIFY_FIELD) bytes, HIXL's limit);
    /// [`Error::Timeout`] when the peer could not be reached within `timeout`.
    pub fn send_notify(
        &self,
        remote: &str,
        name: &str,
        msg: &str,
        timeout: Duration,
    ) -> Result<()> {
        let addr = EngineAddr::parse(remote)?;
        control::send_notify(
            addr.socket_addr(),
            &NotifyMsg {
                name: name.to_owned(),
                notify_msg: msg.to_owned(),
            },
            timeout,
            self.inner.opts.shared_secret.as_deref(),
        )
        .map_err(|e| {
            timed_out(
                e,
                "send_notify: the control exchange with the peer",
                timeout,
            )
        })?;
        Ok(())
    }

    /// Drains the notifies received (`GetNotifies`).
    pub fn take_notifies(&self) -> Vec<(String, String)> {
        self.inner
            .server
            .lock()
            .as_ref()
            .map(|s| {
                s.take_notifies()
                    .into_iter()
                    .map(|n| (n.name, n.notify_msg))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stream slots created (each `task_stream_num` streams), for diagnostics.
    pub fn stream_slots(&self) -> usize {
        self.inner.slots.created()
    }

    /// 1 GiB VA pool slots in use and in total. Quarantined slots count as in use.
    pub fn pool_usage(&self) -> (usize, usize) {
        (
            self.inner.pool.used_slots(),
            self.inner.pool.capacity_slots(),
        )
    }

    /// 1 GiB VA pool slots out of service for good because unmapping an import (or an alias)
    /// in them failed: such a slot is never handed out again, since the range may still be
    /// mapped. The engine goes on using the other slots.
    pub fn pool_quarantined(&self) -> usize {
        self.inner.pool.quarantined()
    }

    /// Copies `descs` to or from `remote` and waits up to `timeout` (`TransferSync`).
    ///
    /// Every descriptor is checked against local registrations and the peer's segments
    /// before any copy; pieces are split at segment boundaries and spread over the slot's
    /// streams. On timeout the transfer is aborted.
    ///
    /// # Errors
    /// [`Error::EmptyBatch`], [`Error::ZeroLength`], [`Error::Overflow`],
    /// [`Error::NotRegistered`] (naming the descriptor and address); [`Error::NotConnected`]
    /// (with [`EngineOptions::auto_connect`], the connect's own errors instead);
    /// [`Error::PeerLost`]; [`Error::Timeout`] (no free slot, or the copies took too long);
    /// [`Error::Mem`] for a failed copy; [`Error::CopyRefused`] naming the descriptor of a
    /// copy the runtime refused when it was queued. With `auto_connect`, a failed copy or a timeout also
    /// disconnects the peer.
    pub fn transfer_sync(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Self::sync_deadline(timeout);
        let req = self.submit(
            remote,
            op,
            descs,
            SlotFrom::Acquire(Some(deadline)),
            &TransferOptions::default(),
            Observer::Caller,
        )?;
        Self::wait_sync(&req, deadline, timeout)
    }

    /// Starts copying `descs` to or from `remote` and returns at once (`TransferAsync`); with
    /// [`EngineOptions::auto_connect`] and no channel to `remote`, after connecting (at most
    /// 3 s).
    ///
    /// # Errors
    /// As [`Engine::transfer_sync`] for the checks; [`Error::ResourceExhausted`] when every
    /// stream slot is busy (HIXL fails at once too).
    pub fn transfer_async(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
    ) -> Result<TransferRequest> {
        self.transfer_async_with(remote, op, descs, &TransferOptions::default())
    }

    /// [`Engine::transfer_async`] with per-request options (a stall deadline).
    ///
    /// # Errors
    /// As [`Engine::transfer_async`].
    pub fn transfer_async_with(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
        opts: &TransferOptions,
    ) -> Result<TransferRequest> {
        let slot = SlotFrom::Acquire(None);
        let inner = self.submit(remote, op, descs, slot, opts, Observer::Progress)?;
        Ok(self.request(inner, remote))
    }

    /// The channel to `remote`; with `AutoConnect` and none, connects first (HIXL's connect on
    /// demand, within 3 s and `deadline`).
    pub(crate) fn channel_for(
        &self,
        remote: &str,
        deadline: Option<Instant>,
    ) -> Result<Arc<Channel>> {
        let inner = &self.inner;
        let lookup = || inner.channels.read().get(remote).cloned();
        let not_connected = || Error::NotConnected {
            peer: remote.to_owned(),
        };
        match lookup() {
            Some(c) => Ok(c),
            None if inner.opts.auto_connect => {
                // HIXL's AutoConnect: connect on demand, within 3 s and the caller's deadline.
                // Another thread may connect first, or disconnect again before the lookup
                // after the connect: then try again while time is left.
                let now = Instant::now();
                let until = deadline.map_or(now + AUTO_CONNECT_TIMEOUT, |d| {
                    d.min(now + AUTO_CONNECT_TIMEOUT)
                });
                loop {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(not_connected());
                    }
                    match self.connect_by(remote, left, Some(until)) {
                        Ok(()) | Err(Error::AlreadyConnected { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    if let Some(c) = lookup() {
                        break Ok(c);
                    }
                }
            }
            None => Err(not_connected()),
        }
    }

    /// With `AutoConnect`: what a request on `ch` does after a failed copy (disconnect `ch`,
    /// if this engine and the channel are still there).
    pub(crate) fn auto_disconnect(&self, ch: &Arc<Channel>) -> Option<AutoDisconnect> {
        if !self.inner.opts.auto_connect {
            return None;
        }
        let (eng, ch) = (Arc::downgrade(&self.inner), Arc::downgrade(ch));
        Some(Box::new(move || {
            if let (Some(eng), Some(ch)) = (eng.upgrade(), ch.upgrade()) {
                eng.auto_disconnect(&ch);
            }
        }))
    }
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        let _span = tracing::info_span!("engine_shutdown", addr = %self.addr).entered();
        self.monitor.stop();
        if let Some(t) = self.monitor_thread.lock().take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        // As HIXL's Finalize: no disconnect request; peers see the keepalive socket close.
        let chans: Vec<Arc<Channel>> = self.channels.read().values().cloned().collect();
        for ch in chans {
            channel::lose(&self.channels, &ch, LostReason::EngineShutdown);
        }
        drop(self.server.lock().take());
        self.progress.stop();
    }
}
