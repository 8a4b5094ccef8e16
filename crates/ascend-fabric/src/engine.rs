//! The engine: its start and shutdown, the control server and its handler, registrations,
//! and what it tells about its peers and pools (connecting is `connect.rs`, transfers
//! `submit.rs`).

use ascend_mem::prelude::*;
use ascend_mem::CloseError;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ascend_mem::{Addr, Device, DeviceBuffer, HostBuffer, MappingSlice};
use parking_lot::{Mutex, RwLock};

use crate::channel::{self, Channel, ChannelMap};
use crate::control::{self, ControlHandler, ControlServer, ServerConfig};
use crate::error::{Error, LostReason, Result};
use crate::heartbeat::{spawn_heartbeats, Monitor};
use crate::metrics::{EngineInfo, ServerMetrics};
use crate::options::{EngineAddr, EngineOptions};
use crate::pool::VaPool;
use crate::progress::Progress;
use crate::registry::{Registrable, Registration, Registry};
use crate::slots::SlotPool;
use crate::stats::PeerStats;
use crate::summary;
use crate::wire::{SegmentName, ShareHandleEntry};

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

/// The `channel_id` of an engine at `addr` (see [`Engine::channel_id`]).
fn channel_id(addr: &EngineAddr) -> String {
    if addr.listens() && !addr.ip.is_unspecified() {
        addr.as_str().to_owned()
    } else {
        format!("{}#{:016x}", addr.as_str(), control::unique_suffix())
    }
}

pub(crate) struct EngineInner {
    pub(crate) addr: EngineAddr,
    /// This engine's identity on the control wire (see [`Engine::channel_id`]).
    pub(crate) channel_id: String,
    pub(crate) opts: EngineOptions,
    pub(crate) dev: Device,
    pub(crate) pool: Arc<VaPool>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) channels: Arc<ChannelMap>,
    pub(crate) slots: Arc<SlotPool>,
    pub(crate) server: Mutex<Option<Arc<ControlServer>>>,
    pub(crate) connect_lock: Mutex<()>,
    monitor: Arc<Monitor>,
    /// The heartbeat thread and, with a summary interval, the summary's.
    monitor_threads: Mutex<Vec<JoinHandle<()>>>,
    /// Observes awaited and queued requests (a thread started on first use).
    pub(crate) progress: Arc<Progress>,
    /// `ascend_fabric_engine_info`: 1 while the engine lives.
    _info: EngineInfo,
    /// `ascend_fabric_connect_failures_total`.
    pub(crate) connect_failures: metrics::Counter,
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
        // The one check of every value: the builder's (the fields are public).
        opts.validate()?;
        dev.bind()?;
        let pool = VaPool::new(dev, opts.pool_capacity, opts.pool_start)?;
        // Also the `engine` label of its metrics: unique even for engines that do not listen.
        let id = channel_id(&addr);
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
                ControlServer::start_with(sa, handler, config, ServerMetrics::new(&id))
                    .map_err(|source| Error::Listen { addr: sa, source })?,
            );
            // Memory no registration covers any more is revoked: the peers that imported it
            // let go of it (or are cut off) before the deregistration returns.
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
            slots: SlotPool::new(
                dev,
                opts.task_stream_num as usize,
                crate::metrics::slot_wait(&id),
            ),
            channel_id: id.clone(),
            addr,
            dev: dev.clone(),
            pool,
            registry,
            channels: Arc::new(RwLock::new(HashMap::new())),
            server: Mutex::new(server),
            connect_lock: Mutex::new(()),
            monitor: Arc::default(),
            monitor_threads: Mutex::new(Vec::new()),
            progress: Progress::new(),
            _info: EngineInfo::new(&id, &dev.runtime().backend().to_string(), dev.id()),
            connect_failures: crate::metrics::connect_failures(&id),
            opts,
        });
        let no_thread = |source| Error::Listen {
            addr: inner.addr.socket_addr(),
            source,
        };
        let chans = Arc::downgrade(&inner.channels);
        let t = spawn_heartbeats(
            chans.clone(),
            inner.monitor.clone(),
            inner.opts.heartbeat_interval,
        )
        .map_err(no_thread)?;
        inner.monitor_threads.lock().push(t);
        if let Some(every) = inner.opts.summary_interval {
            let t = summary::spawn(id, chans, inner.monitor.clone(), every).map_err(no_thread)?;
            inner.monitor_threads.lock().push(t);
        }
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
    pub fn register_raw(&self, addr: Addr, len: usize) -> Result<Registration> {
        self.inner.registry.register_raw(addr.get(), len as u64)
    }

    /// Deregisters now.
    ///
    /// Revocation: connected peers imported every block this engine offered them (at the
    /// connect, or when they refreshed). A block that no registration covers any more is
    /// revoked, and this call returns once each peer that was offered it has let go of it, or
    /// after 3 s:
    /// * a peer running this crate is told on its keepalive socket: it fails its in-flight
    ///   transfers into the block with [`Error::Revoked`] (their streams aborted and waited
    ///   for), drops its import of it, and answers; its channel stays for the rest, so no
    ///   copy of it can land in the memory once it has answered;
    /// * any other peer (a C++ HIXL engine, which knows no such message) has its session
    ///   closed (its keepalive socket shut), and the wait is for it to close its side. A C++
    ///   HIXL engine does not react to the closed socket and keeps its import (the runtime
    ///   offers no way to take an import back); the wait running out is logged.
    ///
    /// Dropping the last clone of a registration does the same.
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

    /// The segments `remote` offered: `(va_addr, len)` in the order they became known, which
    /// never changes: those offered at the connect in address order, then those each refresh
    /// added ([`Engine::refresh_segments`]), in address order, after them; a segment the peer
    /// revoked leaves the list. An entry's index here is what
    /// [`SegmentRef::Index`](crate::SegmentRef::Index) names.
    pub fn remote_segments(&self, remote: &str) -> Option<Vec<(Addr, usize)>> {
        let ch = self.inner.channels.read().get(remote)?.clone();
        ch.with_remote(|r| {
            r.live_spans()
                .map(|(a, l)| (Addr::new(a), l as usize))
                .collect()
        })
    }

    /// Where `remote_addr` (an address `remote` offered) is mapped in this process, for
    /// diagnostics and benchmarks (e.g. a `memcpy` between the very buffers a transfer uses).
    /// The address stays valid while the channel is connected. `None` when not connected or
    /// the address lies in no offered segment.
    pub fn peer_mapped_addr(&self, remote: &str, remote_addr: Addr) -> Option<Addr> {
        let ch = self.inner.channels.read().get(remote)?.clone();
        let remote_addr = remote_addr.get();
        ch.with_remote(|r| {
            let seg = &r.map.segments()[r.map.find(remote_addr)?];
            let off = usize::try_from(remote_addr - seg.start).ok()?;
            seg.value.map.mapping().addr().checked_add(off)
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
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        let _span = tracing::info_span!("engine_shutdown", addr = %self.addr).entered();
        self.monitor.stop();
        for t in std::mem::take(&mut *self.monitor_threads.lock()) {
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
