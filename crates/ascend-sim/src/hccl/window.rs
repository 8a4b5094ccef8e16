//! Symmetric windows: collective registration and deregistration, the process's window
//! registry and lookups. Each rank maps every rank's physical memfds (its own too) at
//! `base + r·stride + woff` of the communicator's symmetric heap (`heap.rs`).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use hccl_sys::*;
use parking_lot::RwLock;

use super::comm::{take_fd, Comm, CH_HOST};
use super::error::{herr, HErr, HRes};
use super::heap::{HeapState, Window, GB};
use crate::config::{config, Soc};
use crate::counters::{dec, inc, Ctr};
use crate::handles::{self, Kind};
use crate::vmm::memfd::HDR;
use crate::vmm::state::{Class, PhysObj};

/// Most VMM mappings one window may span.
const MAX_PIECES: usize = 16;

/// Host-channel descriptor words.
mod w {
    pub const KIND: usize = 0;
    pub const STATUS: usize = 1;
    pub const REQ: usize = 2;
    pub const WSIZE: usize = 3;
    pub const NPIECES: usize = 4;
    pub const PID: usize = 5;
    /// `fd, ino, size` triples from here.
    pub const PIECES: usize = 8;
    pub const STATUS2: usize = 100;
    pub const SEQ: usize = 101;
}

const K_REGISTER: u64 = 2;
const K_DEREGISTER: u64 = 3;

fn kind_name(k: u64) -> &'static str {
    match k {
        K_REGISTER => "HcclCommSymWinRegister",
        K_DEREGISTER => "HcclCommSymWinDeregister",
        _ => "another collective call",
    }
}

/// A registered window and its communicator.
struct Registered {
    comm: Weak<Comm>,
    win: Arc<Window>,
}

/// Every registered window of the process, by handle id.
static WINDOWS: RwLock<BTreeMap<u64, Registered>> = RwLock::new(BTreeMap::new());

/// The window of `comm` holding `[ptr, ptr + len)`, with the offset.
pub(crate) fn find(comm: &Comm, ptr: usize, len: usize) -> Option<(Arc<Window>, usize)> {
    comm.wins
        .read()
        .values()
        .find_map(|w| w.offset_of(ptr, len).map(|o| (w.clone(), o)))
}

fn map_fixed(addr: usize, len: usize, fd: i32) -> HRes {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: `addr..addr+len` is a slot range inside our own heap reservation; the memfd holds
    // at least HDR + len bytes (checked by the caller).
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
            len,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            HDR as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(herr(
            HCCL_E_MEMORY,
            format!(
                "mapping a window into the symmetric heap failed: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    Ok(())
}

/// A window's start in the user's VA, its size rounded to whole physical allocations, and
/// those allocations.
type Pieces = (usize, usize, Vec<Arc<PhysObj>>);

/// Local checks of a registration: the window's start, rounded size and pieces.
fn local_pieces(comm: &Comm, addr: usize, size: u64) -> HRes<Pieces> {
    let para = |m: String| herr(HCCL_E_PARA, m);
    let pieces = crate::vmm::state::vmm_pieces(addr, size as usize)
        .map_err(|m| para(format!("addr: {m}")))?;
    if pieces.len() > MAX_PIECES {
        return Err(herr(
            HCCL_E_NOT_SUPPORT,
            format!(
                "the window spans {} mappings; the emulator supports at most {MAX_PIECES}",
                pieces.len()
            ),
        ));
    }
    for (a, o) in &pieces {
        if !matches!(o.class, Class::Dev(_)) {
            return Err(para(format!(
                "the mapping at {a:#x} is not device physical memory (aclrtMallocPhysical with a DEVICE location)"
            )));
        }
    }
    let start = pieces[0].0;
    let size_r: usize = pieces.iter().map(|(_, o)| o.size).sum();
    let stride = comm.cfg.symwin_gb as usize * GB;
    if size_r > stride {
        return Err(para(format!(
            "the window rounded to whole physical allocations ({size_r} bytes) exceeds \
             hcclSymWinMaxMemSizePerRank ({} GB)",
            comm.cfg.symwin_gb
        )));
    }
    Ok((start, size_r, pieces.into_iter().map(|(_, o)| o).collect()))
}

/// The argument checks of a registration that need no peer.
fn check_register_args(comm: &Comm, size: u64, flag: u32) -> HRes {
    if flag != HCCL_WIN_COLL_SYMMETRIC {
        return Err(herr(
            HCCL_E_PARA,
            format!(
                "flag {flag} is not supported (only HCCL_WIN_COLL_SYMMETRIC, 1{})",
                if flag == 0 {
                    "; HCCL_WIN_DEFAULT 0 is not supported yet"
                } else {
                    ""
                }
            ),
        ));
    }
    if size == 0 {
        return Err(herr(HCCL_E_PARA, "size is 0"));
    }
    if config().soc == Soc::A2 {
        return Err(herr(
            HCCL_E_NOT_SUPPORT,
            "symmetric windows need an Atlas A3 or 950 (ASCEND_SIM_SOC is A2)",
        ));
    }
    let mode = comm.cfg.op_expansion;
    if mode != 0 && mode != 2 {
        return Err(herr(
            HCCL_E_NOT_SUPPORT,
            format!(
                "symmetric windows need AI CPU op expansion (hcclOpExpansionMode 0 or 2), not {mode}"
            ),
        ));
    }
    let max = comm.cfg.symwin_gb.saturating_mul(GB as u64);
    if size > max {
        return Err(herr(
            HCCL_E_PARA,
            format!(
                "size {size} exceeds hcclSymWinMaxMemSizePerRank ({} GB)",
                comm.cfg.symwin_gb
            ),
        ));
    }
    Ok(())
}

/// What this rank publishes for the exchange step: the request, its status and its pieces.
fn register_words(size: u64, local: &HRes<Pieces>) -> Vec<(usize, u64)> {
    let mut words = vec![
        (w::KIND, K_REGISTER),
        (w::REQ, size),
        (w::PID, crate::rt::getpid() as u64),
        (w::STATUS2, 0),
    ];
    match local {
        Ok((_, wsize, objs)) => {
            words.push((w::STATUS, 0));
            words.push((w::WSIZE, *wsize as u64));
            words.push((w::NPIECES, objs.len() as u64));
            for (i, o) in objs.iter().enumerate() {
                words.push((w::PIECES + 3 * i, o.fd.as_raw_fd() as u64));
                words.push((w::PIECES + 3 * i + 1, o.ino));
                words.push((w::PIECES + 3 * i + 2, o.size as u64));
            }
        }
        Err(e) => {
            words.push((w::STATUS, u64::from(e.code)));
            words.push((w::WSIZE, 0));
            words.push((w::NPIECES, 0));
        }
    }
    words
}

/// After the exchange: every rank registers, succeeded locally and asks for the same size.
fn check_exchange(comm: &Comm, slot: usize, size: u64, local: HRes<Pieces>) -> HRes<Pieces> {
    let n = comm.n as usize;
    let me = comm.rank as usize;
    for p in 0..n {
        let k = comm.desc(p, CH_HOST, slot, w::KIND);
        if k != K_REGISTER {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "rank {p} called {} while this rank registers a window",
                    kind_name(k)
                ),
            ));
        }
    }
    let local = local?;
    let wsize = local.1;
    for p in 0..n {
        let st = comm.desc(p, CH_HOST, slot, w::STATUS);
        if st != 0 {
            return Err(herr(
                HCCL_E_PARA,
                format!("rank {p} could not register its window (its code {st})"),
            ));
        }
    }
    for p in 0..n {
        let req = comm.desc(p, CH_HOST, slot, w::REQ);
        let ws = comm.desc(p, CH_HOST, slot, w::WSIZE);
        if req != size || ws != wsize as u64 {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "window sizes differ across ranks: rank {p} registers {req} bytes (window {ws}), \
                     rank {me} registers {size} bytes (window {wsize}); every rank must register the same size"
                ),
            ));
        }
    }
    Ok(local)
}

/// Maps rank `p`'s pieces (as published in `slot`) at `slot_addr`.
fn map_rank(comm: &Comm, slot: usize, p: usize, slot_addr: usize, objs: &[Arc<PhysObj>]) -> HRes {
    let np = comm.desc(p, CH_HOST, slot, w::NPIECES) as usize;
    let pid = comm.desc(p, CH_HOST, slot, w::PID) as i32;
    let mut off = 0usize;
    #[allow(clippy::needless_range_loop)] // `i` indexes the descriptor too
    for i in 0..np {
        let fd = comm.desc(p, CH_HOST, slot, w::PIECES + 3 * i) as i32;
        let ino = comm.desc(p, CH_HOST, slot, w::PIECES + 3 * i + 1);
        let len = comm.desc(p, CH_HOST, slot, w::PIECES + 3 * i + 2) as usize;
        if p == comm.rank as usize {
            map_fixed(slot_addr + off, len, objs[i].fd.as_raw_fd())?;
        } else {
            let f = take_fd(
                pid,
                fd,
                ino,
                &format!("taking the window memory of rank {p}"),
            )?;
            map_fixed(slot_addr + off, len, f.as_raw_fd())?;
        }
        off += len;
    }
    Ok(())
}

/// Places a window of `wsize` bytes in the heap and maps every rank's memory into its slot;
/// returns the window's offset in the slots (nothing stays allocated on failure).
fn map_all(
    comm: &Comm,
    heap: &mut HeapState,
    slot: usize,
    wsize: usize,
    objs: &[Arc<PhysObj>],
) -> HRes<usize> {
    heap.ensure(comm.n, comm.cfg.symwin_gb)?;
    let woff = heap.alloc(wsize)?;
    let (base, stride) = (heap.base, heap.stride);
    for p in 0..comm.n as usize {
        if let Err(e) = map_rank(comm, slot, p, base + p * stride + woff, objs) {
            heap.used.remove(&woff);
            return Err(e);
        }
    }
    Ok(woff)
}

/// The first failure of the map step: the step itself, this rank's mapping, a peer's mapping.
fn map_failure(comm: &Comm, slot: usize, stepped: HRes, mapped: &HRes<usize>) -> Option<HErr> {
    if let Err(e) = stepped {
        return Some(e);
    }
    if let Err(e) = mapped {
        return Some(e.clone());
    }
    (0..comm.n as usize).find_map(|p| {
        let st = comm.desc(p, CH_HOST, slot, w::STATUS2);
        (st != 0).then(|| {
            herr(
                HCCL_E_REMOTE,
                format!("rank {p} could not map the windows (its code {st})"),
            )
        })
    })
}

/// `HcclCommSymWinRegister` after the pointer checks: two collective steps on the host
/// channel (exchange the pieces, then report the mapping), then the window is registered.
pub(crate) fn register(comm: &Arc<Comm>, addr: usize, size: u64, flag: u32) -> HRes<Arc<Window>> {
    check_register_args(comm, size, flag)?;
    let (mut g, slot) = comm.begin(CH_HOST)?;
    let local = local_pieces(comm, addr, size);
    comm.publish(CH_HOST, slot, &register_words(size, &local));
    comm.step(
        CH_HOST,
        &mut g,
        &|| false,
        "HcclCommSymWinRegister (exchange)",
    )?;
    let (start, wsize, objs) = check_exchange(comm, slot, size, local)?;
    let mut heap = comm.heap.lock();
    let mapped = map_all(comm, &mut heap, slot, wsize, &objs);
    comm.publish(
        CH_HOST,
        slot,
        &[(
            w::STATUS2,
            mapped.as_ref().map_or_else(|e| u64::from(e.code), |_| 0),
        )],
    );
    let stepped = comm.step(CH_HOST, &mut g, &|| false, "HcclCommSymWinRegister (map)");
    let failed = map_failure(comm, slot, stepped, &mapped);
    let seq = heap.next_seq;
    heap.next_seq += 1;
    let win = Arc::new(Window {
        handle: handles::new_id(Kind::Window),
        seq,
        start,
        size: wsize,
        heap_base: heap.base,
        stride: heap.stride,
        woff: *mapped.as_ref().unwrap_or(&0),
        n: comm.n,
        dev: comm.device,
        _objs: objs,
    });
    if mapped.is_ok() {
        win.publish_slots();
    }
    if let Some(e) = failed {
        if let Ok(woff) = mapped {
            win.unmap_slots();
            heap.used.remove(&woff);
        }
        return Err(e);
    }
    drop(heap);
    comm.wins.write().insert(seq, win.clone());
    let reg = Registered {
        comm: Arc::downgrade(comm),
        win: win.clone(),
    };
    WINDOWS.write().insert(win.handle, reg);
    inc(Ctr::Windows);
    Ok(win)
}

/// Removes a window locally: out of the registries, waits (bounded) until no collective uses
/// it, unmaps its slots and frees its heap range.
pub(crate) fn forget(comm: &Comm, win: &Arc<Window>) {
    comm.wins.write().remove(&win.seq);
    if WINDOWS.write().remove(&win.handle).is_some() {
        dec(Ctr::Windows);
    }
    let deadline = Instant::now() + comm.cfg.timeout;
    while Arc::strong_count(win) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    win.unmap_slots();
    comm.heap.lock().used.remove(&win.woff);
}

/// `HcclCommSymWinDeregister`: collective; on a step failure (timeout, dead peer) the window
/// is still removed locally and the error returned; when the ranks name different windows the
/// window stays registered and `HCCL_E_PARA` is returned.
pub(crate) fn deregister(h: HcclCommSymWindow) -> HRes {
    if h.is_null() {
        return Err(herr(HCCL_E_PTR, "winHandle is NULL"));
    }
    let unknown = || {
        herr(
            HCCL_E_PARA,
            format!("winHandle {h:p} is not a registered window (deregistered already?)"),
        )
    };
    let id = handles::decode(h, Kind::Window, "winHandle").map_err(|_| unknown())?;
    let (comm, win) = WINDOWS
        .read()
        .get(&id)
        .map(|r| (r.comm.clone(), r.win.clone()))
        .ok_or_else(unknown)?;
    let Some(comm) = comm.upgrade() else {
        WINDOWS.write().remove(&id);
        return Err(unknown());
    };
    let (mut g, slot) = match comm.begin(CH_HOST) {
        Ok(x) => x,
        Err(e) => {
            forget(&comm, &win);
            return Err(e);
        }
    };
    comm.publish(CH_HOST, slot, &[(w::KIND, K_DEREGISTER), (w::SEQ, win.seq)]);
    if let Err(e) = comm.step(CH_HOST, &mut g, &|| false, "HcclCommSymWinDeregister") {
        drop(g);
        forget(&comm, &win);
        return Err(e);
    }
    for p in 0..comm.n as usize {
        let k = comm.desc(p, CH_HOST, slot, w::KIND);
        let s = comm.desc(p, CH_HOST, slot, w::SEQ);
        if k != K_DEREGISTER || s != win.seq {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "rank {p} called {} (window #{s}) while this rank deregisters window #{}",
                    kind_name(k),
                    win.seq
                ),
            ));
        }
    }
    drop(g);
    forget(&comm, &win);
    Ok(())
}

/// Forgets every window of `comm` (its destroy: locally, no collective step).
pub(crate) fn forget_all(comm: &Comm) {
    let wins: Vec<Arc<Window>> = std::mem::take(&mut *comm.wins.write())
        .into_values()
        .collect();
    for w in wins {
        forget(comm, &w);
    }
}

/// `HcclSymWinGetPeerPointer`: the address in this process of byte `offset` of rank `peer`'s
/// part of the window `h` (its slot in the symmetric heap, mapped read-write).
pub(crate) fn peer_pointer(h: HcclCommSymWindow, offset: usize, peer: u32) -> HRes<usize> {
    if h.is_null() {
        return Err(herr(HCCL_E_PTR, "winHandle is NULL"));
    }
    let unknown = || {
        herr(
            HCCL_E_PARA,
            format!("winHandle {h:p} is not a registered window (deregistered already?)"),
        )
    };
    let id = handles::decode(h, Kind::Window, "winHandle").map_err(|_| unknown())?;
    let win = WINDOWS
        .read()
        .get(&id)
        .filter(|r| r.comm.strong_count() > 0)
        .map(|r| r.win.clone())
        .ok_or_else(unknown)?;
    if peer >= win.n {
        return Err(herr(
            HCCL_E_PARA,
            format!(
                "peerRank {peer} is not a rank of the window's communicator (rank size {})",
                win.n
            ),
        ));
    }
    if offset >= win.size {
        return Err(herr(
            HCCL_E_PARA,
            format!("offset {offset} is past the window ({} bytes)", win.size),
        ));
    }
    Ok(win.peer_addr(peer, offset))
}

/// The window handle value.
pub(crate) fn handle_ptr(w: &Window) -> HcclCommSymWindow {
    handles::to_ptr(w.handle)
}
