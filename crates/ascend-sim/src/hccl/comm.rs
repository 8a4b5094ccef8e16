//! Communicators: the per-rank segment (control page + HCCL buffers), peers' segments mapped
//! through shared memfds, and the barrier every collective step is built from.
//!
//! Each rank owns one memfd, its *segment*: [`CTRL_BYTES`] of control block, then the
//! HCCL "in" buffer and the "out" buffer (`hcclBufferSize` bytes each, as the real library
//! allocates CCL_IN and CCL_OUT). Every rank maps the control block and the "in" buffer of
//! every peer (`pidfd_getfd` across processes, `dup` within one), so a peer's progress is a load
//! from shared memory. A step of a collective is `arrive(k)` (store our sequence number) and
//! `wait_all(k)` (spin, then yield, then sleep until every peer's sequence is `>= k`), which
//! also watches the peer's state word, its process (pidfd readable = dead), the timeout and
//! stream abort.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hccl_sys::*;
use parking_lot::{Mutex, RwLock};

use super::config::CommCfg;
use super::error::{herr, HErr, HRes};
use super::heap::{HeapState, Window};
use super::rendezvous::{self, Member, Root};
use crate::counters::{dec, inc, Ctr};
use crate::handles::{self, Kind};
use crate::rt;

/// Bytes of the control block at the start of a segment.
pub(crate) const CTRL_BYTES: usize = 8192;
/// 64-bit words of one operation descriptor.
pub(crate) const DESC_WORDS: usize = 240;
const CTRL_MAGIC: u64 = 0x4C52_5443_4D49_5341; // "ASIMCTRL"

/// Channel of stream-ordered collectives.
pub(crate) const CH_STREAM: usize = 0;
/// Channel of host-side collective calls (init, window register/deregister).
pub(crate) const CH_HOST: usize = 1;

/// `Ctrl::state` values.
const ALIVE: u32 = 0;
const DESTROYED: u32 = 1;
const BROKEN: u32 = 2;

/// The shared control block of one rank. Descriptors are double-buffered by operation parity:
/// a peer can be at most one operation ahead, so a descriptor stays readable until the next
/// operation's first step.
#[repr(C)]
pub(crate) struct Ctrl {
    magic: AtomicU64,
    state: AtomicU32,
    err: AtomicU32,
    seq: [AtomicU64; 2],
    desc: [[[AtomicU64; DESC_WORDS]; 2]; 2],
}

const _: () = assert!(std::mem::size_of::<Ctrl>() <= CTRL_BYTES);

/// A shared mapping that this module owns (unmapped on drop).
#[derive(Debug)]
pub(crate) struct ShMap {
    pub addr: usize,
    pub len: usize,
}

impl ShMap {
    /// Maps `len` bytes of `fd` from offset 0, shared.
    pub(crate) fn new(fd: i32, len: usize, write: bool) -> HRes<ShMap> {
        let prot = if write {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of a memfd at a kernel-chosen address.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(herr(
                HCCL_E_MEMORY,
                format!(
                    "mmap of a communicator segment ({len} bytes) failed: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        Ok(ShMap {
            addr: p as usize,
            len,
        })
    }
}

impl Drop for ShMap {
    fn drop(&mut self) {
        // SAFETY: a mapping this value created and nobody else unmaps.
        unsafe { libc::munmap(self.addr as *mut c_void, self.len) };
    }
}

/// One rank as seen from this rank.
#[derive(Debug)]
pub(crate) struct Peer {
    pub rank: u32,
    pub pid: i32,
    #[allow(dead_code)] // shown by Debug
    pub device: u32,
    pub buf_bytes: usize,
    /// Start of the peer's control block in our address space (its "in" buffer follows).
    addr: usize,
    _map: Option<ShMap>,
    pidfd: Option<OwnedFd>,
}

impl Peer {
    fn ctrl(&self) -> &Ctrl {
        // SAFETY: `addr` is the start of a live mapping of at least CTRL_BYTES holding a Ctrl
        // (atomics only, any bit pattern valid), alive as long as `self`.
        unsafe { &*(self.addr as *const Ctrl) }
    }

    /// The peer's "in" buffer.
    pub(crate) fn buf_in(&self) -> *const u8 {
        (self.addr + CTRL_BYTES) as *const u8
    }

    fn dead(&self) -> bool {
        let Some(fd) = &self.pidfd else {
            return false;
        };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }
}

/// Sequence state of one channel; its mutex serialises the channel's operations.
#[derive(Debug, Default)]
pub(crate) struct Chan {
    seq: u64,
    ops: u64,
}

/// A communicator.
pub(crate) struct Comm {
    pub handle: u64,
    pub rank: u32,
    pub n: u32,
    pub name: String,
    pub cfg: CommCfg,
    #[allow(dead_code)] // shown by Debug
    pub device: u32,
    _seg_fd: OwnedFd,
    seg: ShMap,
    pub peers: Vec<Peer>,
    chans: [Mutex<Chan>; 2],
    /// Registered windows by their per-communicator sequence number.
    pub wins: RwLock<BTreeMap<u64, Arc<Window>>>,
    pub heap: Mutex<HeapState>,
    pub inflight: AtomicU64,
    async_err: AtomicU32,
    async_msg: Mutex<String>,
    broken: AtomicBool,
    destroyed: AtomicBool,
    init_timeout: Duration,
    initialised: AtomicBool,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Comm({}, rank {} of {}, device {})",
            self.name, self.rank, self.n, self.device
        )
    }
}

static COMMS: RwLock<BTreeMap<u64, Arc<Comm>>> = RwLock::new(BTreeMap::new());

/// Resolves a communicator handle (`HCCL_E_PTR` for NULL, `HCCL_E_PARA` for others).
pub(crate) fn lookup(p: HcclComm, what: &str) -> HRes<Arc<Comm>> {
    if p.is_null() {
        return Err(herr(HCCL_E_PTR, format!("{what} is NULL")));
    }
    let id = handles::decode(p, Kind::Comm, what).map_err(|e| herr(HCCL_E_PARA, e.msg))?;
    COMMS.read().get(&id).cloned().ok_or_else(|| {
        herr(
            HCCL_E_PARA,
            format!("{what} {p:p} is not a live communicator (destroyed?)"),
        )
    })
}

/// A communicator by name (the first one in this process).
pub(crate) fn by_name(name: &str) -> Option<Arc<Comm>> {
    COMMS.read().values().find(|c| c.name == name).cloned()
}

fn new_memfd(len: usize) -> HRes<OwnedFd> {
    // SAFETY: valid C string; plain flags.
    let fd = unsafe { libc::memfd_create(c"ascend-sim-hccl-seg".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(herr(
            HCCL_E_MEMORY,
            format!("memfd_create failed: {}", std::io::Error::last_os_error()),
        ));
    }
    // SAFETY: a descriptor we just created.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscall on our descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(herr(
            HCCL_E_MEMORY,
            format!(
                "sizing the segment to {len} bytes failed: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    Ok(fd)
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: raw syscall with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    // SAFETY: a descriptor we just opened.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Takes descriptor `fd` of process `pid` (dup within this process) and checks its inode.
pub(crate) fn take_fd(pid: i32, fd: i32, ino: u64, what: &str) -> HRes<OwnedFd> {
    let f = crate::share::obtain_fd_raw(pid, fd).map_err(|e| {
        let code = if e.code == acl_sys::ACL_ERROR_RT_NO_PERMISSION {
            HCCL_E_SYSCALL
        } else {
            HCCL_E_REMOTE
        };
        herr(code, format!("{what}: {}", e.msg))
    })?;
    let st = crate::vmm::memfd::fstat(f.as_raw_fd()).map_err(|e| herr(HCCL_E_SYSCALL, e.msg))?;
    if st.st_ino != ino {
        return Err(herr(
            HCCL_E_REMOTE,
            format!("{what}: fd {fd} of process {pid} is not the expected memory any more"),
        ));
    }
    Ok(f)
}

impl Comm {
    fn ctrl(&self) -> &Ctrl {
        // SAFETY: the segment mapping starts with our Ctrl and lives as long as `self`.
        unsafe { &*(self.seg.addr as *const Ctrl) }
    }

    /// The timeout of a step (the rendezvous timeout until init completes).
    pub(crate) fn timeout(&self) -> Duration {
        if self.initialised.load(Ordering::Acquire) {
            self.cfg.timeout
        } else {
            self.init_timeout
        }
    }

    /// Our "in" buffer.
    pub(crate) fn buf_in(&self) -> *mut u8 {
        (self.seg.addr + CTRL_BYTES) as *mut u8
    }

    /// Our "out" buffer.
    pub(crate) fn buf_out(&self) -> *mut u8 {
        (self.seg.addr + CTRL_BYTES + self.cfg.buffer_bytes) as *mut u8
    }

    /// The smallest HCCL buffer of all ranks.
    pub(crate) fn min_buf(&self) -> usize {
        self.peers.iter().map(|p| p.buf_bytes).min().unwrap_or(0)
    }

    /// Locks a channel and starts an operation on it: returns the guard and the descriptor
    /// slot of this operation. Fails at once if the communicator is broken or destroyed.
    pub(crate) fn begin(&self, ch: usize) -> HRes<(parking_lot::MutexGuard<'_, Chan>, usize)> {
        let mut g = self.chans[ch].lock();
        self.check_usable()?;
        g.ops += 1;
        let slot = (g.ops % 2) as usize;
        Ok((g, slot))
    }

    pub(crate) fn check_usable(&self) -> HRes {
        if self.destroyed.load(Ordering::Acquire) {
            return Err(herr(HCCL_E_PARA, "the communicator was destroyed"));
        }
        if self.broken.load(Ordering::Acquire) {
            let code = self.async_err.load(Ordering::Acquire);
            return Err(herr(
                if code == 0 { HCCL_E_INTERNAL } else { code },
                format!(
                    "the communicator is broken by an earlier failure ({}); destroy it",
                    self.async_msg.lock()
                ),
            ));
        }
        Ok(())
    }

    /// Writes words of our descriptor `slot` on channel `ch`.
    pub(crate) fn publish(&self, ch: usize, slot: usize, words: &[(usize, u64)]) {
        let d = &self.ctrl().desc[ch][slot];
        for (i, v) in words {
            d[*i].store(*v, Ordering::Relaxed);
        }
    }

    /// Reads word `w` of rank `p`'s descriptor (after a step that follows its publication).
    pub(crate) fn desc(&self, p: usize, ch: usize, slot: usize, w: usize) -> u64 {
        self.peers[p].ctrl().desc[ch][slot][w].load(Ordering::Relaxed)
    }

    /// One step: arrive, then wait for every peer. A failure breaks the communicator.
    pub(crate) fn step(
        &self,
        ch: usize,
        g: &mut Chan,
        cancel: &dyn Fn() -> bool,
        what: &str,
    ) -> HRes {
        g.seq += 1;
        let k = g.seq;
        self.ctrl().seq[ch].store(k, Ordering::Release);
        let r = self.wait_all(ch, k, cancel, what);
        if let Err(e) = &r {
            self.break_with(e);
        }
        r
    }

    fn wait_all(&self, ch: usize, k: u64, cancel: &dyn Fn() -> bool, what: &str) -> HRes {
        let timeout = self.timeout();
        let deadline = Instant::now() + timeout;
        for p in &self.peers {
            if p.rank == self.rank {
                continue;
            }
            let c = p.ctrl();
            let mut i: u32 = 0;
            loop {
                if c.seq[ch].load(Ordering::Acquire) >= k {
                    break;
                }
                i = i.saturating_add(1);
                if i < 4096 {
                    std::hint::spin_loop();
                    if i % 512 != 0 {
                        continue;
                    }
                } else if i < 4096 + 256 {
                    std::thread::yield_now();
                } else {
                    let us = 20u64 << ((i - 4096 - 256) / 64).min(5);
                    std::thread::sleep(Duration::from_micros(us));
                }
                let st = c.state.load(Ordering::Acquire);
                // The peer may have arrived, finished and left between our two loads.
                if st != ALIVE && c.seq[ch].load(Ordering::Acquire) >= k {
                    break;
                }
                if st != ALIVE {
                    let how = if st == DESTROYED {
                        "destroyed its communicator"
                    } else {
                        "failed (its communicator is broken)"
                    };
                    return Err(herr(
                        HCCL_E_REMOTE,
                        format!("rank {}: {what}: rank {} {how}", self.rank, p.rank),
                    ));
                }
                if i >= 4096 && p.dead() && c.seq[ch].load(Ordering::Acquire) < k {
                    return Err(herr(
                        HCCL_E_REMOTE,
                        format!(
                            "rank {}: {what}: rank {} (process {}) exited",
                            self.rank, p.rank, p.pid
                        ),
                    ));
                }
                if cancel() {
                    return Err(herr(
                        HCCL_E_INTERNAL,
                        format!("rank {}: {what}: the stream was aborted", self.rank),
                    ));
                }
                if Instant::now() >= deadline {
                    return Err(herr(
                        HCCL_E_TIMEOUT,
                        format!(
                            "rank {}: {what}: rank {} did not arrive within the {:.3} s timeout",
                            self.rank,
                            p.rank,
                            timeout.as_secs_f64()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Records an asynchronous error (the first one is kept).
    pub(crate) fn record_async(&self, e: &HErr) {
        if self
            .async_err
            .compare_exchange(0, e.code, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            *self.async_msg.lock() = e.msg.clone();
        }
    }

    /// The first asynchronous error (0 when none), after a liveness probe of the peers (the
    /// emulator's stand-in for HCCL's heartbeat): a peer whose communicator broke, or whose
    /// process exited without destroying it, is recorded as `HCCL_E_REMOTE`. A peer that
    /// destroyed its communicator is not a failure.
    pub(crate) fn async_error(&self) -> HcclResult {
        if self.async_err.load(Ordering::Acquire) == 0 {
            self.probe_peers();
        }
        self.async_err.load(Ordering::Acquire)
    }

    fn probe_peers(&self) {
        for p in self.peers.iter().filter(|p| p.rank != self.rank) {
            let st = p.ctrl().state.load(Ordering::Acquire);
            let how = if st == BROKEN {
                "failed (its communicator is broken)"
            } else if st == ALIVE && p.dead() {
                "exited without destroying its communicator"
            } else {
                continue;
            };
            let msg = format!(
                "rank {}: rank {} (process {}) {how}",
                self.rank, p.rank, p.pid
            );
            self.record_async(&herr(HCCL_E_REMOTE, msg));
            return;
        }
    }

    /// Marks the communicator broken: peers waiting on us fail at once with `HCCL_E_REMOTE`.
    pub(crate) fn break_with(&self, e: &HErr) {
        self.record_async(e);
        self.broken.store(true, Ordering::Release);
        let _ =
            self.ctrl()
                .state
                .compare_exchange(ALIVE, BROKEN, Ordering::AcqRel, Ordering::Acquire);
        self.ctrl().err.store(e.code, Ordering::Release);
    }
}

/// Maps the segment of peer `m` (another rank, of this process or another).
fn map_peer(m: &Member, mypid: i32) -> HRes<Peer> {
    let what = format!("mapping the segment of rank {}", m.rank);
    let f = take_fd(m.pid, m.seg_fd, m.seg_ino, &what)?;
    let len = CTRL_BYTES + m.buf_bytes as usize;
    let map = ShMap::new(f.as_raw_fd(), len, false)?;
    // SAFETY: the mapping holds at least CTRL_BYTES; atomics of any value are valid.
    let c = unsafe { &*(map.addr as *const Ctrl) };
    if c.magic.load(Ordering::Acquire) != CTRL_MAGIC {
        return Err(herr(
            HCCL_E_INTERNAL,
            format!("{what}: the segment has no control block"),
        ));
    }
    let pidfd = if m.pid != mypid {
        pidfd_open(m.pid)
    } else {
        None
    };
    Ok(Peer {
        rank: m.rank,
        pid: m.pid,
        device: m.device,
        buf_bytes: m.buf_bytes as usize,
        addr: map.addr,
        _map: Some(map),
        pidfd,
    })
}

/// Every rank's peer entry, in rank order: this rank's own segment (`addr`), the others mapped.
fn map_peers(table: &[Member], rank: u32, device: u32, buf: usize, addr: usize) -> HRes<Vec<Peer>> {
    let mypid = rt::getpid();
    let mut peers = Vec::with_capacity(table.len());
    for m in table {
        if m.rank == rank {
            peers.push(Peer {
                rank,
                pid: mypid,
                device,
                buf_bytes: buf,
                addr,
                _map: None,
                pidfd: None,
            });
        } else {
            peers.push(map_peer(m, mypid)?);
        }
    }
    Ok(peers)
}

/// `HcclCommInitRootInfo[Config]` for one rank.
pub(crate) fn init(n: u32, root: &Root, rank: u32, cfg: CommCfg) -> HRes<Arc<Comm>> {
    let device = crate::device::current()
        .ok_or_else(|| {
            herr(
                HCCL_E_RUNTIME,
                "no current device on this thread (call aclrtSetDevice first)",
            )
        })?
        .device;
    crate::share::allow_importers();
    let buf = cfg.buffer_bytes;
    let seg_len = CTRL_BYTES + 2 * buf;
    let seg_fd = new_memfd(seg_len)?;
    let seg = ShMap::new(seg_fd.as_raw_fd(), seg_len, true)?;
    // SAFETY: the fresh mapping starts with room for a Ctrl (zero-filled: all atomics 0).
    let ctrl = unsafe { &*(seg.addr as *const Ctrl) };
    ctrl.magic.store(CTRL_MAGIC, Ordering::Release);
    let ino = crate::vmm::memfd::fstat(seg_fd.as_raw_fd())
        .map_err(|e| herr(HCCL_E_SYSCALL, e.msg))?
        .st_ino;
    let me = Member {
        rank,
        pid: rt::getpid(),
        device,
        seg_fd: seg_fd.as_raw_fd(),
        seg_ino: ino,
        buf_bytes: buf as u64,
    };
    // The rendezvous and the first step use the config's exec timeout when it has one, else
    // the connect timeout; collectives use the exec timeout.
    let timeout = if cfg.timeout_from_config || super::config::timeout_override().is_some() {
        cfg.timeout
    } else {
        super::config::default_connect_timeout()
    };
    let table = rendezvous::join(root, n, &me, timeout)?;
    let peers = map_peers(&table, rank, device, buf, seg.addr)?;
    let name = if cfg.name.is_empty() {
        format!("sim-hccl-{:032x}", root.id)
    } else {
        cfg.name.clone()
    };
    let id = handles::new_id(Kind::Comm);
    let comm = Arc::new(Comm {
        handle: id,
        rank,
        n,
        name,
        cfg,
        init_timeout: timeout,
        initialised: AtomicBool::new(false),
        device,
        _seg_fd: seg_fd,
        seg,
        peers,
        chans: [Mutex::new(Chan::default()), Mutex::new(Chan::default())],
        wins: RwLock::new(BTreeMap::new()),
        heap: Mutex::new(HeapState::default()),
        inflight: AtomicU64::new(0),
        async_err: AtomicU32::new(0),
        async_msg: Mutex::new(String::new()),
        broken: AtomicBool::new(false),
        destroyed: AtomicBool::new(false),
    });
    // Every rank has mapped every segment before anyone goes on.
    {
        let (mut g, _) = comm.begin(CH_HOST)?;
        comm.step(CH_HOST, &mut g, &|| false, "communicator init")?;
    }
    comm.initialised.store(true, Ordering::Release);
    COMMS.write().insert(id, comm.clone());
    inc(Ctr::Comms);
    Ok(comm)
}

/// `HcclCommDestroy`: waits (up to the timeout) for queued collectives of this communicator and
/// tells peers; returns the communicator, whose windows the caller then forgets
/// (`window::forget_all`) before dropping it, which frees everything.
pub(crate) fn destroy(p: HcclComm) -> HRes<Arc<Comm>> {
    let comm = lookup(p, "comm")?;
    if COMMS.write().remove(&comm.handle).is_none() {
        return Err(herr(
            HCCL_E_PARA,
            "comm is being destroyed by another thread",
        ));
    }
    dec(Ctr::Comms);
    let deadline = Instant::now() + comm.cfg.timeout;
    while comm.inflight.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    comm.destroyed.store(true, Ordering::Release);
    // Take both channel locks so no operation is mid-step, then tell peers.
    {
        let _a = comm.chans[CH_STREAM].lock();
        let _b = comm.chans[CH_HOST].lock();
        let _ = comm.ctrl().state.compare_exchange(
            ALIVE,
            DESTROYED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    Ok(comm)
}
