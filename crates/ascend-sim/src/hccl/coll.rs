//! Stream-ordered collectives: the staged path through the HCCL buffers and the symmetric path
//! through registered windows.
//!
//! Every collective starts with a step that exchanges descriptors (kind, count, type, op, root,
//! and where its buffers lie in registered windows): the ranks check that they run the same
//! collective, and take the symmetric path only when every rank has both buffers in windows.
//!
//! * **Staged** (as the real library's buffer mode; chunked by the smallest `hcclBufferSize`):
//!   copy-in (user → own "in" buffer), step, transfer (every rank's "in" buffer → own "out"
//!   buffer), step, copy-out or reduce ("out" buffer → user). Every element moved is copied
//!   twice after the copy-in.
//! * **Symmetric**: each rank reads its peers' windows through the symmetric heap straight
//!   into its output (one copy), then one closing step.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hccl_sys::*;

use super::comm::{Comm, CH_STREAM};
use super::error::{herr, HRes};
use super::heap::Window;
use super::stats;
use super::types::{reduce_into, DType, ROp};
use super::window;
use crate::rt;
use crate::stream::queue::ExtTask;

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    AllGather = 1,
    ReduceScatter = 2,
    AllReduce = 3,
    Broadcast = 4,
    Barrier = 5,
    AllToAll = 6,
}

impl Kind {
    fn name(k: u64) -> &'static str {
        match k {
            1 => "HcclAllGather",
            2 => "HcclReduceScatter",
            3 => "HcclAllReduce",
            4 => "HcclBroadcast",
            5 => "HcclBarrier",
            6 => "HcclAlltoAll",
            _ => "something else",
        }
    }
}

/// One enqueued collective.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Coll {
    pub kind: Kind,
    pub send: usize,
    pub recv: usize,
    /// Elements: per rank for AllGather/ReduceScatter/AllToAll, total otherwise.
    pub count: usize,
    pub dt: DType,
    pub dt_raw: u32,
    pub op: ROp,
    pub op_raw: u32,
    pub root: u32,
}

impl Coll {
    /// Bytes of the send and receive buffers.
    pub(crate) fn sizes(&self, n: usize) -> (usize, usize) {
        let b = self.count * self.dt.size();
        match self.kind {
            Kind::AllGather => (b, b * n),
            Kind::ReduceScatter => (b * n, b),
            Kind::AllReduce | Kind::Broadcast => (b, b),
            Kind::AllToAll => (b * n, b * n),
            Kind::Barrier => (0, 0),
        }
    }
}

/// Stream-channel descriptor words.
mod w {
    pub const KIND: usize = 0;
    pub const COUNT: usize = 1;
    pub const DTYPE: usize = 2;
    pub const OP: usize = 3;
    pub const ROOT: usize = 4;
    pub const SYM: usize = 5;
    pub const SWIN: usize = 6;
    pub const SOFF: usize = 7;
    pub const RWIN: usize = 8;
    pub const ROFF: usize = 9;
    pub const STATUS: usize = 10;
    pub const SCRATCH: usize = 11;
}

/// Whether this rank's symmetric form of `c` must gather or reduce into scratch first (its
/// output overlaps input that peers read): it then takes two steps, and so must every rank.
fn needs_scratch(c: &Coll, n: usize, me: usize) -> bool {
    let b = c.count * c.dt.size();
    match c.kind {
        Kind::ReduceScatter | Kind::AllReduce => {
            let seg = if c.kind == Kind::ReduceScatter {
                me * b
            } else {
                0
            };
            let (sl, _) = c.sizes(n);
            (overlaps(c.recv, b, c.send, sl) && c.recv != c.send + seg)
                || (c.kind == Kind::AllReduce && overlaps(c.recv, b, c.send, b))
        }
        Kind::AllToAll => overlaps(c.recv, n * b, c.send, n * b),
        Kind::AllGather | Kind::Broadcast | Kind::Barrier => false,
    }
}

/// Whether `ASCEND_SIM_HCCL_PATH=staged` forbids the symmetric path.
fn staged_only() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| {
        std::env::var("ASCEND_SIM_HCCL_PATH").is_ok_and(|v| v.trim().eq_ignore_ascii_case("staged"))
    })
}

/// Validates `[addr, addr + len)` as device-accessible memory (read or write).
pub(crate) fn check_mem(addr: usize, len: usize, write: bool, what: &str) -> HRes {
    if len == 0 {
        return Ok(());
    }
    let mem = crate::vmm::state::MEM.read();
    let c = mem
        .classify(addr, len, write, what)
        .map_err(|e| herr(HCCL_E_PARA, e.msg))?;
    if matches!(c, crate::vmm::state::Class::Host) {
        return Err(herr(
            HCCL_E_PARA,
            format!("{what} {addr:#x} is plain host memory, not device memory"),
        ));
    }
    Ok(())
}

/// Runs `f` under the address table's read lock after checking the user ranges, so a racing
/// unmap cannot pull memory out from under the copy. A failure here is fatal to the
/// communicator (the other ranks are mid-collective).
fn with_user<T>(ranges: &[(usize, usize, bool, &str)], f: impl FnOnce() -> T) -> HRes<T> {
    let mem = crate::vmm::state::MEM.read();
    for (a, l, wr, what) in ranges {
        if *l > 0 {
            mem.classify(*a, *l, *wr, what)
                .map_err(|e| herr(HCCL_E_MEMORY, format!("at execution: {}", e.msg)))?;
        }
    }
    let r = f();
    drop(mem);
    Ok(r)
}

/// memmove of `n` bytes.
///
/// # Safety
/// Both ranges valid for `n` bytes.
unsafe fn mv(dst: usize, src: usize, n: usize) {
    if n > 0 && dst != src {
        // SAFETY: per the contract.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
    }
}

/// The stream task of one collective.
pub(crate) struct CollTask {
    pub comm: Arc<Comm>,
    pub coll: Coll,
}

impl Drop for CollTask {
    fn drop(&mut self) {
        self.comm.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl CollTask {
    pub(crate) fn new(comm: Arc<Comm>, coll: Coll) -> Arc<CollTask> {
        comm.inflight.fetch_add(1, Ordering::AcqRel);
        Arc::new(CollTask { comm, coll })
    }
}

/// HCCL failure → the ACL code the stream's synchronize returns.
fn acl_code(code: HcclResult) -> i32 {
    match code {
        HCCL_E_TIMEOUT => acl_sys::ACL_ERROR_RT_TASK_TIMEOUT,
        HCCL_E_REMOTE => acl_sys::ACL_ERROR_RT_LINK_ERROR,
        _ => acl_sys::ACL_ERROR_RT_INTERNAL_ERROR,
    }
}

impl ExtTask for CollTask {
    fn run(&self, cancelled: &dyn Fn() -> bool) -> rt::Res {
        match run(&self.comm, &self.coll, cancelled) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.comm.record_async(&e);
                super::error::set_recent(&format!(
                    "{} (rank {}): {} ({})",
                    Kind::name(self.coll.kind as u64),
                    self.comm.rank,
                    e.msg,
                    super::error::code_name(e.code)
                ));
                Err(rt::err(
                    acl_code(e.code),
                    format!(
                        "{} failed with {} ({}): {}",
                        Kind::name(self.coll.kind as u64),
                        super::error::code_name(e.code),
                        e.code,
                        e.msg
                    ),
                ))
            }
        }
    }
}

const NONE: u64 = u64::MAX;

/// Checks what every rank published for this collective (same kind, valid buffers, same
/// arguments); returns whether every rank can take the symmetric path and whether one needs
/// two steps (scratch).
fn check_peers(comm: &Comm, c: &Coll, slot: usize) -> HRes<(bool, bool)> {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    let mut sym = true;
    let mut two_steps = false;
    for p in 0..n {
        let d = |i| comm.desc(p, CH_STREAM, slot, i);
        let what = Kind::name(d(w::KIND));
        let mine = Kind::name(c.kind as u64);
        if d(w::KIND) != c.kind as u64 {
            return Err(herr(
                HCCL_E_PARA,
                format!("rank {p} runs {what} while rank {me} runs {mine}"),
            ));
        }
        if d(w::STATUS) != 0 {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "rank {p} has invalid buffers for {mine} (its code {})",
                    d(w::STATUS)
                ),
            ));
        }
        let differs = d(w::COUNT) != c.count as u64
            || d(w::DTYPE) != u64::from(c.dt_raw)
            || (matches!(c.kind, Kind::AllReduce | Kind::ReduceScatter)
                && d(w::OP) != u64::from(c.op_raw))
            || (c.kind == Kind::Broadcast && d(w::ROOT) != u64::from(c.root));
        if differs {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "{mine}: rank {p} passes count {} dataType {} op {} root {}, rank {me} count {} \
                     dataType {} op {} root {}",
                    d(w::COUNT),
                    d(w::DTYPE),
                    d(w::OP),
                    d(w::ROOT),
                    c.count,
                    c.dt_raw,
                    c.op_raw,
                    c.root
                ),
            ));
        }
        sym &= d(w::SYM) == 1;
        two_steps |= d(w::SCRATCH) == 1;
    }
    Ok((sym, two_steps))
}

/// Every rank's windows for this collective, looked up by their per-communicator number.
fn peer_windows(comm: &Comm, slot: usize) -> HRes<Vec<PeerWins>> {
    let n = comm.n as usize;
    let mut peers: Vec<PeerWins> = Vec::with_capacity(n);
    let wins = comm.wins.read();
    for p in 0..n {
        let d = |i| comm.desc(p, CH_STREAM, slot, i);
        let (Some(a), Some(b)) = (wins.get(&d(w::SWIN)), wins.get(&d(w::RWIN))) else {
            return Err(herr(
                HCCL_E_INTERNAL,
                format!("rank {p} names a window this rank does not have"),
            ));
        };
        peers.push((
            a.clone(),
            d(w::SOFF) as usize,
            b.clone(),
            d(w::ROFF) as usize,
        ));
    }
    drop(wins);
    Ok(peers)
}

fn run(comm: &Comm, c: &Coll, cancel: &dyn Fn() -> bool) -> HRes {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    let (sb, rb) = c.sizes(n);
    let (mut g, slot) = comm.begin(CH_STREAM)?;
    // Where our buffers lie in windows (held for the whole operation).
    let (sw, rw) = if c.kind == Kind::Barrier || staged_only() {
        (None, None)
    } else {
        (
            window::find(comm, c.send, sb),
            window::find(comm, c.recv, rb),
        )
    };
    let wish = sw.is_some() && rw.is_some();
    // Our buffers must be valid now; a failure is reported to every rank in the exchange.
    let status = check_mem(c.send, sb, false, "sendBuf")
        .and_then(|_| check_mem(c.recv, rb, true, "recvBuf"))
        .err();
    comm.publish(
        CH_STREAM,
        slot,
        &[
            (w::KIND, c.kind as u64),
            (w::COUNT, c.count as u64),
            (w::DTYPE, u64::from(c.dt_raw)),
            (w::OP, u64::from(c.op_raw)),
            (w::ROOT, u64::from(c.root)),
            (w::SYM, u64::from(wish)),
            (w::SWIN, sw.as_ref().map_or(NONE, |(w, _)| w.seq)),
            (w::SOFF, sw.as_ref().map_or(0, |(_, o)| *o as u64)),
            (w::RWIN, rw.as_ref().map_or(NONE, |(w, _)| w.seq)),
            (w::ROFF, rw.as_ref().map_or(0, |(_, o)| *o as u64)),
            (w::STATUS, status.as_ref().map_or(0, |e| u64::from(e.code))),
            (w::SCRATCH, u64::from(needs_scratch(c, n, me))),
        ],
    );
    comm.step(CH_STREAM, &mut g, cancel, Kind::name(c.kind as u64))?;
    if let Some(e) = status {
        return Err(e);
    }
    let (sym, two_steps) = check_peers(comm, c, slot)?;
    if c.kind == Kind::Barrier {
        return Ok(());
    }
    let r = if sym {
        let peers = peer_windows(comm, slot)?;
        stats::SYM_OPS.fetch_add(1, Ordering::Relaxed);
        symmetric(comm, c, &mut g, cancel, &peers, two_steps)
    } else {
        stats::STAGED_OPS.fetch_add(1, Ordering::Relaxed);
        staged(comm, c, &mut g, cancel)
    };
    if let Err(e) = &r {
        comm.break_with(e);
    }
    r
}

fn add_staged(b: usize) {
    stats::STAGED_BYTES.fetch_add(b as u64, Ordering::Relaxed);
}

fn add_sym(b: usize) {
    stats::SYM_BYTES.fetch_add(b as u64, Ordering::Relaxed);
}

/// Staged path, step 1 of a chunk (bytes `o0..o0 + cb` of each block): copy-in from the user's
/// send buffer into our "in" buffer.
fn stage_in(comm: &Comm, c: &Coll, o0: usize, cb: usize) -> HRes {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    let es = c.dt.size();
    let cnt = c.count;
    let bin = comm.buf_in() as usize;
    match c.kind {
        Kind::AllGather | Kind::AllReduce => {
            // SAFETY: the send range was checked under the lock; our "in" buffer holds
            // at least `cb` bytes.
            with_user(&[(c.send + o0, cb, false, "sendBuf")], || unsafe {
                mv(bin, c.send + o0, cb)
            })?;
            add_staged(cb);
        }
        Kind::ReduceScatter | Kind::AllToAll => {
            let ranges: Vec<(usize, usize, bool, &str)> = (0..n)
                .map(|s| (c.send + s * cnt * es + o0, cb, false, "sendBuf"))
                .collect();
            // SAFETY: as above; `n * cb` fits the "in" buffer by the choice of `per`.
            with_user(&ranges, || unsafe {
                for (s, r) in ranges.iter().enumerate() {
                    mv(bin + s * cb, r.0, cb);
                }
            })?;
            add_staged(n * cb);
        }
        Kind::Broadcast => {
            if me == c.root as usize {
                // SAFETY: as above.
                with_user(&[(c.send + o0, cb, false, "buf")], || unsafe {
                    mv(bin, c.send + o0, cb)
                })?;
                add_staged(cb);
            }
        }
        Kind::Barrier => {}
    }
    Ok(())
}

/// Staged path, step 2 of a chunk: peers' "in" buffers into our "out" buffer.
fn stage_transfer(comm: &Comm, c: &Coll, cb: usize) {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    let bout = comm.buf_out() as usize;
    match c.kind {
        Kind::AllGather | Kind::AllReduce => {
            for p in 0..n {
                // SAFETY: the peer's "in" buffer is mapped for its size (>= cb); our "out"
                // buffer holds n * cb by the choice of `per`.
                unsafe { mv(bout + p * cb, comm.peers[p].buf_in() as usize, cb) };
            }
            add_staged(n * cb);
        }
        Kind::ReduceScatter | Kind::AllToAll => {
            for p in 0..n {
                // SAFETY: as above; the peer's "in" buffer holds n * cb.
                unsafe { mv(bout + p * cb, comm.peers[p].buf_in() as usize + me * cb, cb) };
            }
            add_staged(n * cb);
        }
        Kind::Broadcast => {
            if me != c.root as usize {
                // SAFETY: as above.
                unsafe { mv(bout, comm.peers[c.root as usize].buf_in() as usize, cb) };
                add_staged(cb);
            }
        }
        Kind::Barrier => {}
    }
}

/// Staged path, step 3 of a chunk: copy-out (or reduce) from our "out" buffer into the user's
/// receive buffer.
fn stage_out(comm: &Comm, c: &Coll, o0: usize, cb: usize) -> HRes {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    let es = c.dt.size();
    let cnt = c.count;
    let bout = comm.buf_out() as usize;
    match c.kind {
        Kind::AllGather | Kind::AllToAll => {
            let ranges: Vec<(usize, usize, bool, &str)> = (0..n)
                .map(|p| (c.recv + (p * cnt) * es + o0, cb, true, "recvBuf"))
                .collect();
            // SAFETY: the receive ranges were checked under the lock.
            with_user(&ranges, || unsafe {
                for (p, r) in ranges.iter().enumerate() {
                    mv(r.0, bout + p * cb, cb);
                }
            })?;
            add_staged(n * cb);
        }
        Kind::AllReduce | Kind::ReduceScatter => {
            let srcs: Vec<*const u8> = (0..n).map(|p| (bout + p * cb) as *const u8).collect();
            // SAFETY: the receive range was checked under the lock; the sources are our
            // "out" buffer.
            with_user(&[(c.recv + o0, cb, true, "recvBuf")], || unsafe {
                reduce_into((c.recv + o0) as *mut u8, &srcs, cb, c.dt, c.op)
            })?;
            add_staged(n * cb);
        }
        Kind::Broadcast => {
            if me != c.root as usize {
                // SAFETY: as above.
                with_user(&[(c.recv + o0, cb, true, "buf")], || unsafe {
                    mv(c.recv + o0, bout, cb)
                })?;
                add_staged(cb);
            }
        }
        Kind::Barrier => {}
    }
    Ok(())
}

fn staged(comm: &Comm, c: &Coll, g: &mut super::comm::Chan, cancel: &dyn Fn() -> bool) -> HRes {
    let n = comm.n as usize;
    let es = c.dt.size();
    let cnt = c.count;
    let per = match c.kind {
        Kind::Broadcast => comm.min_buf() / es,
        _ => comm.min_buf() / (n * es),
    }
    .max(1);
    let name = Kind::name(c.kind as u64);
    let mut c0 = 0;
    while c0 < cnt {
        let k = per.min(cnt - c0);
        let cb = k * es;
        let o0 = c0 * es;
        stage_in(comm, c, o0, cb)?;
        comm.step(CH_STREAM, g, cancel, name)?;
        stage_transfer(comm, c, cb);
        comm.step(CH_STREAM, g, cancel, name)?;
        stage_out(comm, c, o0, cb)?;
        c0 += k;
    }
    Ok(())
}

fn overlaps(a: usize, al: usize, b: usize, bl: usize) -> bool {
    al > 0 && bl > 0 && a < b + bl && b < a + al
}

/// Symmetric ReduceScatter and AllReduce: reduce every rank's send buffer (read through the
/// heap via `src(rank, offset)`) into ours, through scratch when in place.
fn sym_reduce(
    comm: &Comm,
    c: &Coll,
    g: &mut super::comm::Chan,
    cancel: &dyn Fn() -> bool,
    src: &dyn Fn(usize, usize) -> usize,
    two_steps: bool,
) -> HRes {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    let b = c.count * c.dt.size();
    let name = Kind::name(c.kind as u64);
    let seg = if c.kind == Kind::ReduceScatter {
        me * b
    } else {
        0
    };
    let srcs: Vec<*const u8> = (0..n).map(|p| src(p, seg) as *const u8).collect();
    // In place (AllReduce, or ReduceScatter into another rank's segment): peers still
    // read our send buffer, so reduce into a scratch buffer first.
    let (sl, _) = c.sizes(n);
    if needs_scratch(c, n, me) {
        let mut tmp = vec![0u8; b];
        // SAFETY: as above; `tmp` is private.
        with_user(&[(c.send, sl, false, "sendBuf")], || unsafe {
            reduce_into(tmp.as_mut_ptr(), &srcs, b, c.dt, c.op)
        })?;
        add_sym(n * b);
        comm.step(CH_STREAM, g, cancel, name)?;
        // SAFETY: as above.
        with_user(&[(c.recv, b, true, "recvBuf")], || unsafe {
            mv(c.recv, tmp.as_ptr() as usize, b)
        })?;
        add_sym(b);
    } else {
        let ranges = [(c.recv, b, true, "recvBuf"), (c.send, sl, false, "sendBuf")];
        // SAFETY: as above.
        with_user(&ranges, || unsafe {
            reduce_into(c.recv as *mut u8, &srcs, b, c.dt, c.op)
        })?;
        add_sym(n * b);
        if two_steps {
            // Another rank goes through scratch: keep in step with it.
            comm.step(CH_STREAM, g, cancel, name)?;
        }
    }
    comm.step(CH_STREAM, g, cancel, name)?;
    Ok(())
}

/// Symmetric AllToAll: our block p is block `me` of rank p's send buffer, through scratch when
/// in place.
fn sym_all_to_all(
    comm: &Comm,
    c: &Coll,
    g: &mut super::comm::Chan,
    cancel: &dyn Fn() -> bool,
    src: &dyn Fn(usize, usize) -> usize,
    two_steps: bool,
) -> HRes {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    let b = c.count * c.dt.size();
    let name = Kind::name(c.kind as u64);
    // Our block p comes from block `me` of rank p's send buffer.
    let ranges = [
        (c.recv, n * b, true, "recvBuf"),
        (c.send, n * b, false, "sendBuf"),
    ];
    if needs_scratch(c, n, me) {
        // In place: peers still read our send buffer, so gather into scratch first.
        let mut tmp = vec![0u8; n * b];
        with_user(&ranges, || {
            for p in 0..n {
                // SAFETY: `tmp` is private; peers' send ranges lie in their windows,
                // mapped in our heap while we hold the window Arcs.
                unsafe { mv(tmp.as_mut_ptr() as usize + p * b, src(p, me * b), b) };
            }
        })?;
        comm.step(CH_STREAM, g, cancel, name)?;
        // SAFETY: the receive range is checked under the lock.
        with_user(&ranges, || unsafe {
            mv(c.recv, tmp.as_ptr() as usize, n * b)
        })?;
        add_sym(2 * n * b);
    } else {
        with_user(&ranges, || {
            for p in 0..n {
                // SAFETY: as above, straight into the checked receive range.
                unsafe { mv(c.recv + p * b, src(p, me * b), b) };
            }
        })?;
        add_sym(n * b);
        if two_steps {
            // Another rank goes through scratch: keep in step with it.
            comm.step(CH_STREAM, g, cancel, name)?;
        }
    }
    comm.step(CH_STREAM, g, cancel, name)?;
    Ok(())
}

/// A rank's send window and offset, and its receive window and offset.
type PeerWins = (Arc<Window>, usize, Arc<Window>, usize);
type Peers = [PeerWins];

fn symmetric(
    comm: &Comm,
    c: &Coll,
    g: &mut super::comm::Chan,
    cancel: &dyn Fn() -> bool,
    peers: &Peers,
    two_steps: bool,
) -> HRes {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    let es = c.dt.size();
    let b = c.count * es;
    let name = Kind::name(c.kind as u64);
    // Rank p's send buffer, read through our heap (our own through our VA).
    let src = |p: usize, off: usize| -> usize {
        if p == me {
            c.send + off
        } else {
            let (win, soff, _, _) = &peers[p];
            win.peer_addr(p as u32, soff + off)
        }
    };
    match c.kind {
        Kind::AllGather => {
            let ranges = [
                (c.recv, n * b, true, "recvBuf"),
                (c.send, b, false, "sendBuf"),
            ];
            with_user(&ranges, || {
                for p in 0..n {
                    // SAFETY: the receive range is checked under the lock; peers' send ranges
                    // lie in their windows, mapped in our heap while we hold the window Arcs.
                    unsafe { mv(c.recv + p * b, src(p, 0), b) };
                }
            })?;
            let self_copy = if c.send == c.recv + me * b { 0 } else { b };
            add_sym((n - 1) * b + self_copy);
            comm.step(CH_STREAM, g, cancel, name)?;
        }
        Kind::ReduceScatter | Kind::AllReduce => {
            sym_reduce(comm, c, g, cancel, &src, two_steps)?;
        }
        Kind::AllToAll => {
            sym_all_to_all(comm, c, g, cancel, &src, two_steps)?;
        }
        Kind::Broadcast => {
            let root = c.root as usize;
            if me != root {
                let s = src(root, 0);
                // SAFETY: as above.
                with_user(&[(c.recv, b, true, "buf")], || unsafe { mv(c.recv, s, b) })?;
                add_sym(b);
            }
            comm.step(CH_STREAM, g, cancel, name)?;
        }
        Kind::Barrier => {}
    }
    Ok(())
}

/// Validates and enqueues a collective on `stream`.
pub(crate) fn enqueue(comm: Arc<Comm>, c: Coll, stream: acl_sys::aclrtStream) -> HRes {
    if stream.is_null() {
        return Err(herr(HCCL_E_PTR, "stream is NULL"));
    }
    let s =
        crate::stream::exports::resolve(stream, "stream").map_err(|e| herr(HCCL_E_PARA, e.msg))?;
    comm.check_usable()?;
    if c.root >= comm.n {
        return Err(herr(
            HCCL_E_PARA,
            format!("root {} is not a rank (rank size {})", c.root, comm.n),
        ));
    }
    let n = comm.n as usize;
    let es = c.dt.size();
    let ok = c
        .count
        .checked_mul(es)
        .and_then(|b| b.checked_mul(n))
        .is_some();
    if !ok {
        return Err(herr(HCCL_E_PARA, format!("count {} overflows", c.count)));
    }
    let (sb, rb) = c.sizes(n);
    check_mem(
        c.send,
        sb,
        false,
        if c.kind == Kind::Broadcast {
            "buf"
        } else {
            "sendBuf"
        },
    )?;
    check_mem(
        c.recv,
        rb,
        true,
        if c.kind == Kind::Broadcast {
            "buf"
        } else {
            "recvBuf"
        },
    )?;
    if c.kind != Kind::Barrier && c.count == 0 {
        return Ok(());
    }
    s.push(crate::stream::queue::Task::Ext(CollTask::new(comm, c)));
    Ok(())
}
