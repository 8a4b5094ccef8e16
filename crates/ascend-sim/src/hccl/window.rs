//! Symmetric windows and the symmetric heap.
//!
//! The heap of a communicator is one `PROT_NONE|MAP_NORESERVE` reservation of
//! `rank_size × hcclSymWinMaxMemSizePerRank` GB, made at the first registration. Rank `r`'s
//! slot starts at `base + r·stride`. A window gets the same offset `woff` in every slot (first
//! fit; registrations are collective and equal-sized, so every rank computes the same layout);
//! each rank maps every rank's physical memfds (its own too) at `base + r·stride + woff`, so a
//! peer's byte `off` of the window is a plain load from `base + peer·stride + woff + off`.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use hccl_sys::*;
use parking_lot::RwLock;

use super::comm::{take_fd, Comm, CH_HOST};
use super::error::{herr, HRes};
use crate::config::{config, Soc};
use crate::counters::{dec, inc, Ctr};
use crate::handles::{self, Kind};
use crate::vmm::{Class, PhysObj, HDR};

const GB: usize = 1 << 30;
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

/// The symmetric heap and its allocation state (per communicator).
#[derive(Debug, Default)]
pub(crate) struct HeapState {
    base: usize,
    len: usize,
    stride: usize,
    /// Allocated window ranges inside a slot: offset → length.
    used: BTreeMap<usize, usize>,
    next_seq: u64,
}

impl Drop for HeapState {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the reservation this value made; window slots inside it go with it.
            unsafe { libc::munmap(self.base as *mut c_void, self.len) };
        }
    }
}

impl HeapState {
    fn ensure(&mut self, n: u32, gb: u64) -> HRes {
        if self.len > 0 {
            return Ok(());
        }
        let stride = gb as usize * GB;
        let len = stride * n as usize;
        // SAFETY: a fresh anonymous PROT_NONE reservation at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(herr(
                HCCL_E_MEMORY,
                format!(
                    "reserving the symmetric heap ({n} ranks x {gb} GB) failed: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        self.base = p as usize;
        self.len = len;
        self.stride = stride;
        Ok(())
    }

    /// First fit of `len` bytes in a slot.
    fn alloc(&mut self, len: usize) -> HRes<usize> {
        let mut cur = 0usize;
        for (o, l) in &self.used {
            if o - cur >= len {
                break;
            }
            cur = o + l;
        }
        if cur + len > self.stride {
            return Err(herr(
                HCCL_E_MEMORY,
                format!(
                    "the symmetric heap slot ({} bytes) has no room for a window of {len} bytes",
                    self.stride
                ),
            ));
        }
        self.used.insert(cur, len);
        Ok(cur)
    }
}

/// A registered window.
#[derive(Debug)]
pub(crate) struct Window {
    pub handle: u64,
    pub comm: Weak<Comm>,
    /// Per-communicator number, equal on every rank.
    pub seq: u64,
    /// Window start in the user's VA (start of the first physical allocation).
    pub start: usize,
    /// Rounded size (whole physical allocations).
    pub size: usize,
    heap_base: usize,
    stride: usize,
    woff: usize,
    n: u32,
    _objs: Vec<Arc<PhysObj>>,
}

impl Window {
    /// Where rank `p`'s byte `off` of this window is in our address space.
    pub(crate) fn peer_addr(&self, p: u32, off: usize) -> usize {
        self.heap_base + p as usize * self.stride + self.woff + off
    }

    /// The offset of `[ptr, ptr + len)` when it lies inside the window.
    pub(crate) fn offset_of(&self, ptr: usize, len: usize) -> Option<usize> {
        let end = ptr.checked_add(len)?;
        (ptr >= self.start && end <= self.start + self.size).then(|| ptr - self.start)
    }

    fn unmap_slots(&self) {
        for r in 0..self.n {
            let a = self.peer_addr(r, 0);
            // SAFETY: `a..a+size` lies inside the communicator's heap reservation (still
            // mapped: the heap outlives its windows); overlaying PROT_NONE drops the slot.
            unsafe {
                libc::mmap(
                    a as *mut c_void,
                    self.size,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
        }
    }
}

static WINDOWS: RwLock<BTreeMap<u64, Arc<Window>>> = RwLock::new(BTreeMap::new());

/// The window of `comm` holding `[ptr, ptr + len)`, with the offset.
pub(crate) fn find(comm: &Comm, ptr: usize, len: usize) -> Option<(Arc<Window>, usize)> {
    comm.wins
        .read()
        .values()
        .find_map(|w| w.offset_of(ptr, len).map(|o| (w.clone(), o)))
}

fn map_fixed(addr: usize, len: usize, fd: i32, write: bool) -> HRes {
    let prot = if write {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
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

/// Local checks of a registration: the window's start, rounded size and pieces.
fn local_pieces(comm: &Comm, addr: usize, size: u64) -> HRes<(usize, usize, Vec<Arc<PhysObj>>)> {
    let para = |m: String| herr(HCCL_E_PARA, m);
    let pieces =
        crate::vmm::vmm_pieces(addr, size as usize).map_err(|m| para(format!("addr: {m}")))?;
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

/// `HcclCommSymWinRegister` after the pointer checks.
pub(crate) fn register(comm: &Arc<Comm>, addr: usize, size: u64, flag: u32) -> HRes<Arc<Window>> {
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
    let n = comm.n as usize;
    let (mut g, slot) = comm.begin(CH_HOST)?;
    let local = local_pieces(comm, addr, size);
    let mut words = vec![
        (w::KIND, K_REGISTER),
        (w::REQ, size),
        (w::PID, crate::rt::getpid() as u64),
        (w::STATUS2, 0),
    ];
    match &local {
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
    comm.publish(CH_HOST, slot, &words);
    comm.step(
        CH_HOST,
        &mut g,
        &|| false,
        "HcclCommSymWinRegister (exchange)",
    )?;
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
    let (start, wsize, objs) = local?;
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
    // Map every rank's memory into its slot.
    let mut heap = comm.heap.lock();
    let mapped = (|| -> HRes<usize> {
        heap.ensure(comm.n, comm.cfg.symwin_gb)?;
        let woff = heap.alloc(wsize)?;
        let base = heap.base;
        let stride = heap.stride;
        let res = (|| -> HRes {
            for p in 0..n {
                let slot_addr = base + p * stride + woff;
                let np = comm.desc(p, CH_HOST, slot, w::NPIECES) as usize;
                let pid = comm.desc(p, CH_HOST, slot, w::PID) as i32;
                let mut off = 0usize;
                #[allow(clippy::needless_range_loop)] // `i` indexes the descriptor too
                for i in 0..np {
                    let fd = comm.desc(p, CH_HOST, slot, w::PIECES + 3 * i) as i32;
                    let ino = comm.desc(p, CH_HOST, slot, w::PIECES + 3 * i + 1);
                    let len = comm.desc(p, CH_HOST, slot, w::PIECES + 3 * i + 2) as usize;
                    if p == me {
                        map_fixed(slot_addr + off, len, objs[i].fd.as_raw_fd(), true)?;
                    } else {
                        let f = take_fd(
                            pid,
                            fd,
                            ino,
                            &format!("taking the window memory of rank {p}"),
                        )?;
                        map_fixed(slot_addr + off, len, f.as_raw_fd(), false)?;
                    }
                    off += len;
                }
            }
            Ok(())
        })();
        if let Err(e) = res {
            heap.used.remove(&woff);
            return Err(e);
        }
        Ok(woff)
    })();
    comm.publish(
        CH_HOST,
        slot,
        &[(
            w::STATUS2,
            mapped.as_ref().map_or_else(|e| u64::from(e.code), |_| 0),
        )],
    );
    let stepped = comm.step(CH_HOST, &mut g, &|| false, "HcclCommSymWinRegister (map)");
    let mut failed = stepped.err();
    if failed.is_none() {
        if let Err(e) = &mapped {
            failed = Some(e.clone());
        }
    }
    if failed.is_none() {
        for p in 0..n {
            let st = comm.desc(p, CH_HOST, slot, w::STATUS2);
            if st != 0 {
                failed = Some(herr(
                    HCCL_E_REMOTE,
                    format!("rank {p} could not map the windows (its code {st})"),
                ));
                break;
            }
        }
    }
    let seq = heap.next_seq;
    heap.next_seq += 1;
    let win = Arc::new(Window {
        handle: handles::new_id(Kind::Window),
        comm: Arc::downgrade(comm),
        seq,
        start,
        size: wsize,
        heap_base: heap.base,
        stride: heap.stride,
        woff: *mapped.as_ref().unwrap_or(&0),
        n: comm.n,
        _objs: objs,
    });
    if let Some(e) = failed {
        if let Ok(woff) = mapped {
            win.unmap_slots();
            heap.used.remove(&woff);
        }
        return Err(e);
    }
    drop(heap);
    comm.wins.write().insert(seq, win.clone());
    WINDOWS.write().insert(win.handle, win.clone());
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
    let win = WINDOWS.read().get(&id).cloned().ok_or_else(unknown)?;
    let Some(comm) = win.comm.upgrade() else {
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

/// The window handle value.
pub(crate) fn handle_ptr(w: &Window) -> HcclCommSymWindow {
    handles::to_ptr(w.handle)
}
