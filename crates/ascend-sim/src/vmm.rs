//! Virtual memory: reservations, physical allocations (memfds), mappings, plain mallocs, the
//! address table used to validate copies, and the copy/memset exports.
//!
//! Everything lives in one table behind one `RwLock`: copies validate and run under the read
//! lock, so an unmap or release (write lock) can never pull memory out from under a copy.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Weak};

use acl_sys::*;
use parking_lot::RwLock;

use crate::config::{config, Soc};
use crate::counters::{dec, inc, Ctr};
use crate::device;
use crate::handles::{self, Kind};
use crate::rt::{self, read_in, AclErr, Out, Pool, Res};
use crate::stream::{self, Task};

/// Minimum and recommended granularity of every non-1G kind.
pub(crate) const GRAN: usize = 2 << 20;
/// Granularity of the HUGE1G kinds.
pub(crate) const GRAN_1G: usize = 1 << 30;
/// Size of the metadata page at the start of every physical memfd.
pub(crate) const HDR: usize = 4096;

const TIB: usize = 1 << 40;

/// What kind of memory an address range is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Device memory of this device.
    Dev(u32),
    /// Host memory the device can reach (VMM-mapped host physical memory, aclrtMallocHost).
    HostDev,
    /// Plain host memory unknown to the runtime.
    Host,
}

impl Class {
    fn device_accessible(self) -> bool {
        !matches!(self, Class::Host)
    }

    fn host_side(self) -> bool {
        !matches!(self, Class::Dev(_))
    }

    fn describe(self) -> String {
        match self {
            Class::Dev(d) => format!("device memory of device {d}"),
            Class::HostDev => "device-accessible host memory".to_string(),
            Class::Host => "plain host memory".to_string(),
        }
    }
}

/// One physical allocation: a sealed memfd whose data starts at offset [`HDR`].
#[derive(Debug)]
pub(crate) struct PhysObj {
    pub fd: OwnedFd,
    pub size: usize,
    pub prop: aclrtPhysicalMemProp,
    pub class: Class,
    pub page: usize,
    pub ino: u64,
    pub charge: Option<(Pool, u64)>,
    pub imported: bool,
    pub exported: AtomicBool,
}

impl Drop for PhysObj {
    fn drop(&mut self) {
        if let Some((p, b)) = self.charge {
            rt::refund(p, b);
        }
        if self.exported.load(Relaxed) {
            dec(Ctr::Exports);
        }
    }
}

pub(crate) struct PhysHandle {
    pub obj: Arc<PhysObj>,
    ctr: Ctr,
}

struct Mapping {
    size: usize,
    /// `obj.class`, kept here so validating a copy does not chase the object.
    class: Class,
    obj: Arc<PhysObj>,
    default_flags: u32,
    /// (location type, id, flags) set by aclrtMemSetAccess.
    explicit: Vec<(u32, u32, u32)>,
}

impl Mapping {
    fn effective(&self) -> u32 {
        self.explicit
            .iter()
            .fold(self.default_flags, |a, (_, _, f)| a | f)
    }
}

/// What an [`AddrMap`] keeps of each value next to its key: its length and a tag (for a
/// mapping, its class and effective access flags), so a lookup reads no value.
pub(crate) trait Spanned {
    /// Bytes covered from the key.
    fn span_len(&self) -> usize;
    /// Anything else lookups need, packed.
    fn tag(&self) -> u64 {
        0
    }
}

/// A key with its value's length and tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ent {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) tag: u64,
}

/// An address-keyed map as sorted vectors: lookups (the predecessor of an address, on every
/// copy's validation, at submission and again at execution) search a small summary of every
/// [`AddrMap::BLOCK`]-th key (hot in cache), then one block of dense entries holding each
/// value's length and tag, so a lookup among 10,000 mappings of one reservation touches a
/// few cache lines and no value (a `BTreeMap` range query walks its nodes twice; a plain
/// binary search misses on most of its 14 steps, then on the value). Inserts and removals
/// shift the vectors and rebuild the summary, which only map, unmap, reserve and free do;
/// a value changed in place is re-read with [`AddrMap::refresh`].
pub(crate) struct AddrMap<V> {
    ents: Vec<Ent>,
    vals: Vec<V>,
    /// `ents[0].start, ents[BLOCK].start, ents[2 * BLOCK].start, ...`
    top: Vec<usize>,
}

impl<V: Spanned> AddrMap<V> {
    const BLOCK: usize = 8;

    const fn new() -> Self {
        AddrMap {
            ents: Vec::new(),
            vals: Vec::new(),
            top: Vec::new(),
        }
    }

    fn rebuild_top(&mut self) {
        self.top.clear();
        self.top
            .extend(self.ents.iter().step_by(Self::BLOCK).map(|e| e.start));
    }

    fn len(&self) -> usize {
        self.ents.len()
    }

    fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    fn index(&self, k: usize) -> Result<usize, usize> {
        self.ents.binary_search_by_key(&k, |e| e.start)
    }

    fn get(&self, k: &usize) -> Option<&V> {
        self.index(*k).ok().map(|i| &self.vals[i])
    }

    fn get_mut(&mut self, k: &usize) -> Option<&mut V> {
        self.index(*k).ok().map(|i| &mut self.vals[i])
    }

    /// Re-reads the length and tag of the value at `k` after a change through `get_mut`.
    fn refresh(&mut self, k: usize) {
        if let Ok(i) = self.index(k) {
            self.ents[i].len = self.vals[i].span_len();
            self.ents[i].tag = self.vals[i].tag();
        }
    }

    fn insert(&mut self, k: usize, v: V) -> Option<V> {
        let e = Ent {
            start: k,
            len: v.span_len(),
            tag: v.tag(),
        };
        match self.index(k) {
            Ok(i) => {
                self.ents[i] = e;
                Some(std::mem::replace(&mut self.vals[i], v))
            }
            Err(i) => {
                self.ents.insert(i, e);
                self.vals.insert(i, v);
                self.rebuild_top();
                None
            }
        }
    }

    fn remove(&mut self, k: &usize) -> Option<V> {
        let i = self.index(*k).ok()?;
        self.ents.remove(i);
        let v = self.vals.remove(i);
        self.rebuild_top();
        Some(v)
    }

    /// Index of the last key `<= addr`.
    #[inline]
    fn pred_index(&self, addr: usize) -> Option<usize> {
        let b = self.top.partition_point(|&k| k <= addr).checked_sub(1)?;
        let lo = b * Self::BLOCK;
        let hi = (lo + Self::BLOCK).min(self.ents.len());
        // ents[lo].start == top[b] <= addr, and ents[hi].start (if any) == top[b + 1] > addr.
        // A counting scan, not a binary search: its loads do not depend on each other, so a
        // cold block costs about one cache miss, not one per step.
        Some(lo + self.ents[lo..hi].iter().filter(|e| e.start <= addr).count() - 1)
    }

    /// The entry (no value) with the last key `<= addr`.
    #[inline]
    fn pred_ent(&self, addr: usize) -> Option<Ent> {
        self.pred_index(addr).map(|i| self.ents[i])
    }

    /// The entry with the last key `<= addr` (`range(..=addr).next_back()`).
    #[inline]
    fn pred(&self, addr: usize) -> Option<(usize, &V)> {
        self.pred_index(addr)
            .map(|i| (self.ents[i].start, &self.vals[i]))
    }

    fn pred_mut(&mut self, addr: usize) -> Option<(usize, &mut V)> {
        self.pred_index(addr)
            .map(move |i| (self.ents[i].start, &mut self.vals[i]))
    }

    /// The entry with the last key `< end` (`range(..end).next_back()`).
    fn pred_lt(&self, end: usize) -> Option<(usize, &V)> {
        let i = self
            .ents
            .partition_point(|e| e.start < end)
            .checked_sub(1)?;
        Some((self.ents[i].start, &self.vals[i]))
    }

    /// The first key in `[lo, hi)` (`range(lo..hi).next()`).
    fn first_in(&self, lo: usize, hi: usize) -> Option<usize> {
        let i = self.ents.partition_point(|e| e.start < lo);
        self.ents.get(i).map(|e| e.start).filter(|&k| k < hi)
    }
}

/// A mapping's class and effective access flags in one word (the [`Ent::tag`]).
fn pack_tag(class: Class, flags: u32) -> u64 {
    let (kind, id) = match class {
        Class::Dev(d) => (0u64, d),
        Class::HostDev => (1, 0),
        Class::Host => (2, 0),
    };
    (u64::from(flags) << 40) | (kind << 32) | u64::from(id)
}

fn unpack_tag(tag: u64) -> (Class, u32) {
    let class = match (tag >> 32) & 0xFF {
        0 => Class::Dev(tag as u32),
        1 => Class::HostDev,
        _ => Class::Host,
    };
    (class, (tag >> 40) as u32)
}

impl Spanned for Mapping {
    fn span_len(&self) -> usize {
        self.size
    }
    fn tag(&self) -> u64 {
        pack_tag(self.class, self.effective())
    }
}

impl Spanned for Region {
    fn span_len(&self) -> usize {
        self.len()
    }
}

struct Reservation {
    size: usize,
    mappings: AddrMap<Mapping>,
}

struct MallocBlock {
    size: usize,
    map_len: usize,
    class: Class,
    charge: Option<(Pool, u64)>,
}

enum Region {
    Res(Reservation),
    Malloc(MallocBlock),
}

impl Region {
    fn len(&self) -> usize {
        match self {
            Region::Res(r) => r.size,
            Region::Malloc(m) => m.map_len,
        }
    }
}

pub(crate) struct MemState {
    regions: AddrMap<Region>,
    pub(crate) phys: BTreeMap<u64, PhysHandle>,
    /// Exported objects by their fd number (for aclrtMemSetPid…).
    pub(crate) exports: BTreeMap<i32, Weak<PhysObj>>,
}

pub(crate) static MEM: RwLock<MemState> = RwLock::new(MemState {
    regions: AddrMap::new(),
    phys: BTreeMap::new(),
    exports: BTreeMap::new(),
});

fn drv_err(what: &str) -> AclErr {
    let e = std::io::Error::last_os_error();
    rt::err(
        ACL_ERROR_RT_DRV_INTERNAL_ERROR,
        format!("{what} failed: {e}"),
    )
}

impl MemState {
    fn region_at(&self, addr: usize) -> Option<(usize, &Region)> {
        self.regions.pred(addr).filter(|(b, r)| addr - *b < r.len())
    }

    fn reservation_at_mut(&mut self, addr: usize) -> Option<(usize, &mut Reservation)> {
        let (b, r) = self.regions.pred_mut(addr)?;
        match r {
            Region::Res(res) if addr - b < res.size => Some((b, res)),
            _ => None,
        }
    }

    pub(crate) fn phys_obj(&self, h: aclrtDrvMemHandle, what: &str) -> Res<Arc<PhysObj>> {
        ensure!(!h.is_null(), ACL_ERROR_INVALID_PARAM, "{what} is NULL");
        let id = handles::decode(h, Kind::Phys, what)?;
        self.phys
            .get(&id)
            .map(|p| p.obj.clone())
            .ok_or_else(|| handles::stale(h, Kind::Phys, what))
    }

    /// Registers a new handle for `obj`.
    pub(crate) fn add_handle(&mut self, obj: Arc<PhysObj>, imported: bool) -> aclrtDrvMemHandle {
        let id = handles::new_id(Kind::Phys);
        let ctr = if imported {
            Ctr::Imports
        } else {
            Ctr::Physical
        };
        self.phys.insert(id, PhysHandle { obj, ctr });
        inc(ctr);
        handles::to_ptr(id)
    }

    /// The class of `[addr, addr + len)`, which must lie entirely in known memory (or entirely
    /// outside it) with the access `write` needs.
    pub(crate) fn classify(&self, addr: usize, len: usize, write: bool, what: &str) -> Res<Class> {
        let Some(end) = addr.checked_add(len) else {
            bail!(
                ACL_ERROR_INVALID_PARAM,
                "{what} {addr:#x} + count {len} overflows"
            );
        };
        match self.region_at(addr) {
            Some((b, Region::Malloc(m))) => {
                ensure!(
                    end <= b + m.size,
                    ACL_ERROR_RT_DEVICE_MEM_ERROR,
                    "{what} range [{addr:#x}, {end:#x}) runs past the end of the allocation at {b:#x} of {} bytes",
                    m.size
                );
                Ok(m.class)
            }
            Some((b, Region::Res(r))) => {
                let mut cur = addr;
                let mut class: Option<Class> = None;
                loop {
                    let m = r.mappings.pred_ent(cur).filter(|e| cur - e.start < e.len);
                    let Some(Ent {
                        start: mb,
                        len: msize,
                        tag,
                    }) = m
                    else {
                        bail!(
                            ACL_ERROR_RT_DEVICE_MEM_ERROR,
                            "{what} address {cur:#x} is reserved (reservation at {b:#x}) but not mapped"
                        );
                    };
                    let (mclass, flags) = unpack_tag(tag);
                    let ok = if write {
                        flags & ACL_RT_MEM_ACCESS_FLAGS_READWRITE
                            == ACL_RT_MEM_ACCESS_FLAGS_READWRITE
                    } else {
                        flags & ACL_RT_MEM_ACCESS_FLAGS_READ != 0
                    };
                    ensure!(
                        ok,
                        ACL_ERROR_RT_DEVICE_MEM_ERROR,
                        "{what} address {cur:#x}: the mapping at {mb:#x} has no {} access \
                         (aclrtMemMapNoAccess without aclrtMemSetAccess?)",
                        if write { "write" } else { "read" }
                    );
                    match class {
                        None => class = Some(mclass),
                        Some(c) => ensure!(
                            c == mclass,
                            ACL_ERROR_RT_PARAM_INVALID,
                            "{what} range [{addr:#x}, {end:#x}) spans {} and {}",
                            c.describe(),
                            mclass.describe()
                        ),
                    }
                    cur = mb + msize;
                    if cur >= end {
                        break;
                    }
                }
                Ok(class.unwrap_or(Class::Host))
            }
            None => {
                if len > 0 {
                    if let Some(b) = self.regions.first_in(addr, end) {
                        bail!(
                            ACL_ERROR_RT_DEVICE_MEM_ERROR,
                            "{what} range [{addr:#x}, {end:#x}) runs into emulated memory at {b:#x}"
                        );
                    }
                }
                Ok(Class::Host)
            }
        }
    }
}

/// The VMM mappings covering `[addr, addr + len)` inside one reservation, contiguous, in
/// order: `(mapping start, physical object)`. An error text when `addr` is not in a VMM
/// mapping or the mapped run from `addr` is shorter than `len`.
pub(crate) fn vmm_pieces(addr: usize, len: usize) -> Result<Vec<(usize, Arc<PhysObj>)>, String> {
    let mem = MEM.read();
    let r = match mem.region_at(addr) {
        Some((_, Region::Res(r))) => r,
        Some((_, Region::Malloc(_))) => {
            return Err(format!(
                "{addr:#x} is aclrtMalloc/aclrtMallocHost memory, not a VMM mapping \
                 (aclrtReserveMemAddress + aclrtMallocPhysical + aclrtMapMem)"
            ))
        }
        None => {
            return Err(format!(
                "{addr:#x} is not inside a reservation (aclrtReserveMemAddress + aclrtMapMem)"
            ))
        }
    };
    let Some((first, _)) = r.mappings.pred(addr).filter(|(mb, m)| addr - *mb < m.size) else {
        return Err(format!("{addr:#x} is reserved but not mapped"));
    };
    let end = addr.saturating_add(len);
    let mut cur = first;
    let mut out = Vec::new();
    while let Some(m) = r.mappings.get(&cur) {
        out.push((cur, m.obj.clone()));
        cur += m.size;
        if cur >= end {
            return Ok(out);
        }
    }
    Err(format!(
        "size {len} exceeds the physical memory mapped from {addr:#x} ({} bytes)",
        cur - addr
    ))
}

fn kind_name(kind: aclrtMemcpyKind) -> &'static str {
    match kind {
        ACL_MEMCPY_HOST_TO_HOST => "ACL_MEMCPY_HOST_TO_HOST",
        ACL_MEMCPY_HOST_TO_DEVICE => "ACL_MEMCPY_HOST_TO_DEVICE",
        ACL_MEMCPY_DEVICE_TO_HOST => "ACL_MEMCPY_DEVICE_TO_HOST",
        ACL_MEMCPY_DEVICE_TO_DEVICE => "ACL_MEMCPY_DEVICE_TO_DEVICE",
        ACL_MEMCPY_DEFAULT => "ACL_MEMCPY_DEFAULT",
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE => "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE",
        ACL_MEMCPY_INNER_DEVICE_TO_DEVICE => "ACL_MEMCPY_INNER_DEVICE_TO_DEVICE",
        ACL_MEMCPY_INTER_DEVICE_TO_DEVICE => "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
        _ => "an unknown kind",
    }
}

fn check_kind(kind: aclrtMemcpyKind, dst: usize, dc: Class, src: usize, sc: Class) -> Res {
    let (src_ok, dst_ok) = match kind {
        ACL_MEMCPY_HOST_TO_HOST => (sc.host_side(), dc.host_side()),
        ACL_MEMCPY_HOST_TO_DEVICE | ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE => {
            (sc.host_side(), dc.device_accessible())
        }
        ACL_MEMCPY_DEVICE_TO_HOST => (sc.device_accessible(), dc.host_side()),
        ACL_MEMCPY_DEVICE_TO_DEVICE
        | ACL_MEMCPY_INNER_DEVICE_TO_DEVICE
        | ACL_MEMCPY_INTER_DEVICE_TO_DEVICE => (sc.device_accessible(), dc.device_accessible()),
        ACL_MEMCPY_DEFAULT => (true, true),
        _ => bail!(
            ACL_ERROR_INVALID_PARAM,
            "kind {kind} is not an aclrtMemcpyKind (0..=7)"
        ),
    };
    ensure!(
        src_ok,
        ACL_ERROR_RT_PARAM_INVALID,
        "kind {} ({kind}) but src {src:#x} is {}",
        kind_name(kind),
        sc.describe()
    );
    ensure!(
        dst_ok,
        ACL_ERROR_RT_PARAM_INVALID,
        "kind {} ({kind}) but dst {dst:#x} is {}",
        kind_name(kind),
        dc.describe()
    );
    Ok(())
}

/// Validates a copy under the read lock and performs it.
pub(crate) fn exec_copy(dst: usize, src: usize, n: usize, kind: aclrtMemcpyKind) -> Res {
    exec_copy_in(&MEM.read(), dst, src, n, kind)
}

/// As [`exec_copy`], under a read guard of [`MEM`] the caller holds (a stream worker runs a
/// run of queued copies under one guard).
pub(crate) fn exec_copy_in(
    mem: &MemState,
    dst: usize,
    src: usize,
    n: usize,
    kind: aclrtMemcpyKind,
) -> Res {
    let dc = mem.classify(dst, n, true, "dst")?;
    let sc = mem.classify(src, n, false, "src")?;
    check_kind(kind, dst, dc, src, sc)?;
    if n > 0 {
        // SAFETY: both ranges were just checked to lie inside live, accessible mappings or
        // allocations (which cannot go away while the caller holds the read lock), or entirely outside
        // emulated memory, i.e. host memory the caller vouches for per the C contract.
        // `copy` tolerates overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
    }
    Ok(())
}

/// Validates a memset under the read lock and performs it.
pub(crate) fn exec_set(dst: usize, value: u8, n: usize) -> Res {
    let mem = MEM.read();
    let dc = mem.classify(dst, n, true, "devPtr")?;
    ensure!(
        dc.device_accessible(),
        ACL_ERROR_RT_PARAM_INVALID,
        "devPtr {dst:#x} is {}",
        dc.describe()
    );
    if n > 0 {
        // SAFETY: the range lies inside a live, writable mapping or allocation, kept alive by
        // the read lock.
        unsafe { std::ptr::write_bytes(dst as *mut u8, value, n) };
    }
    Ok(())
}

fn check_copy_args(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize) -> Res {
    ensure!(!dst.is_null(), ACL_ERROR_INVALID_PARAM, "dst is NULL");
    ensure!(!src.is_null(), ACL_ERROR_INVALID_PARAM, "src is NULL");
    ensure!(
        count <= dest_max,
        ACL_ERROR_INVALID_PARAM,
        "count {count} exceeds destMax {dest_max}"
    );
    Ok(())
}

fn validate_copy(dst: usize, src: usize, n: usize, kind: aclrtMemcpyKind) -> Res {
    let mem = MEM.read();
    let dc = mem.classify(dst, n, true, "dst")?;
    let sc = mem.classify(src, n, false, "src")?;
    check_kind(kind, dst, dc, src, sc)
}

export! { Acl;
    /// Synchronous copy.
    fn aclrtMemcpy(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind) {
        check_copy_args(dst, destMax, src, count)?;
        exec_copy(dst as usize, src as usize, count, kind)
    }
}

export! { Acl;
    /// Stream-ordered copy: checked now, re-checked and run when the stream reaches it.
    fn aclrtMemcpyAsync(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind, stream: aclrtStream) {
        check_copy_args(dst, destMax, src, count)?;
        let s = stream::resolve(stream, "stream")?;
        validate_copy(dst as usize, src as usize, count, kind)?;
        s.push(Task::Copy { dst: dst as usize, src: src as usize, n: count, kind });
        Ok(())
    }
}

fn check_set_args(p: *mut c_void, max: usize, count: usize) -> Res {
    ensure!(!p.is_null(), ACL_ERROR_INVALID_PARAM, "devPtr is NULL");
    ensure!(
        count <= max,
        ACL_ERROR_INVALID_PARAM,
        "count {count} exceeds maxCount {max}"
    );
    Ok(())
}

export! { Acl;
    /// Synchronous memset of device-accessible memory.
    fn aclrtMemset(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize) {
        check_set_args(devPtr, maxCount, count)?;
        exec_set(devPtr as usize, value as u8, count)
    }
}

export! { Acl;
    /// Stream-ordered memset.
    fn aclrtMemsetAsync(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize, stream: aclrtStream) {
        check_set_args(devPtr, maxCount, count)?;
        let s = stream::resolve(stream, "stream")?;
        {
            let mem = MEM.read();
            let dc = mem.classify(devPtr as usize, count, true, "devPtr")?;
            ensure!(dc.device_accessible(), ACL_ERROR_RT_PARAM_INVALID, "devPtr {devPtr:p} is {}", dc.describe());
        }
        s.push(Task::Set { dst: devPtr as usize, value: value as u8, n: count });
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// mmap helpers

fn mmap_anon(addr: usize, len: usize, prot: i32, extra: i32) -> Res<usize> {
    // SAFETY: an anonymous mapping; with MAP_FIXED the caller guarantees `addr..addr+len` is
    // VA it owns (a live reservation), otherwise the kernel picks fresh VA.
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(drv_err("mmap"));
    }
    Ok(p as usize)
}

fn munmap(addr: usize, len: usize) {
    // SAFETY: `addr..addr+len` is a region this module mapped and no longer tracks.
    unsafe { libc::munmap(addr as *mut c_void, len) };
}

/// Reserves `size` bytes aligned to `align` (over-reserve and trim).
fn reserve_aligned(size: usize, align: usize) -> Res<usize> {
    let total = size.checked_add(align).ok_or_else(|| {
        rt::err(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            format!("size {size} too large"),
        )
    })?;
    let base = mmap_anon(0, total, libc::PROT_NONE, 0)
        .map_err(|e| rt::err(ACL_ERROR_RT_MEMORY_ALLOCATION, e.msg))?;
    let start = base.next_multiple_of(align);
    if start > base {
        munmap(base, start - base);
    }
    let end = start + size;
    if base + total > end {
        munmap(end, base + total - end);
    }
    Ok(start)
}

// ---------------------------------------------------------------------------------------------
// Reservations

fn reserve(
    out: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expect: *mut c_void,
    flags: u64,
    no_uc: bool,
) -> Res {
    // SAFETY: out-pointer per the C contract of the calling export.
    let out = unsafe { Out::new(out, "virPtr") }?;
    ensure!(size > 0, ACL_ERROR_INVALID_PARAM, "size is 0");
    ensure!(
        flags <= 1,
        ACL_ERROR_INVALID_PARAM,
        "flags {flags} is neither 0 nor 1"
    );
    let cfg = config();
    let expect = expect as usize;
    if no_uc {
        ensure!(
            cfg.soc == Soc::A3,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "not supported on this product (ASCEND_SIM_SOC is not A3)"
        );
        ensure!(
            expect != 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "expectPtr is NULL (required)"
        );
        ensure!(
            size >= GRAN_1G && size % GRAN_1G == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "size {size} is not a non-zero multiple of 1 GiB"
        );
        ensure!(
            expect % GRAN_1G == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "expectPtr {expect:#x} is not 1 GiB aligned"
        );
    } else {
        ensure!(
            alignment == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "alignment {alignment} is reserved and must be 0"
        );
        ensure!(
            size % GRAN == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "size {size} is not a multiple of the 2 MiB granularity"
        );
        if expect != 0 {
            ensure!(
                cfg.soc != Soc::S950,
                ACL_ERROR_RT_PARAM_INVALID,
                "expectPtr {expect:#x}: the 950 accepts only NULL"
            );
            let align = if size < GRAN_1G {
                size.next_power_of_two()
            } else {
                GRAN_1G
            };
            ensure!(
                (16 * TIB..24 * TIB).contains(&expect)
                    && expect.checked_add(size).is_some_and(|e| e <= 24 * TIB),
                ACL_ERROR_RT_PARAM_INVALID,
                "expectPtr {expect:#x} + size {size} is outside [16 TiB, 24 TiB)"
            );
            ensure!(
                expect % align == 0,
                ACL_ERROR_RT_PARAM_INVALID,
                "expectPtr {expect:#x} is not aligned to {align:#x}"
            );
        }
    }
    let base = if expect != 0 {
        let p =
            mmap_anon(expect, size, libc::PROT_NONE, libc::MAP_FIXED_NOREPLACE).map_err(|e| {
                rt::err(
                    ACL_ERROR_RT_MEMORY_ALLOCATION,
                    format!("expectPtr {expect:#x} size {size} is not free: {}", e.msg),
                )
            })?;
        if p != expect {
            munmap(p, size);
            bail!(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                "expectPtr {expect:#x} is not free"
            );
        }
        p
    } else {
        reserve_aligned(size, GRAN)?
    };
    MEM.write().regions.insert(
        base,
        Region::Res(Reservation {
            size,
            mappings: AddrMap::new(),
        }),
    );
    inc(Ctr::Reservations);
    out.set(base as *mut c_void);
    Ok(())
}

export! { Acl;
    /// Reserves device VA (rules R1-R3).
    fn aclrtReserveMemAddress(virPtr: *mut *mut c_void, size: usize, alignment: usize, expectPtr: *mut c_void, flags: u64) {
        reserve(virPtr, size, alignment, expectPtr, flags, false)
    }
}

export! { Acl;
    /// Reserves VA at a fixed address, 1 GiB granular, A3 only (rule R4).
    fn aclrtReserveMemAddressNoUCMemory(virPtr: *mut *mut c_void, size: usize, alignment: usize, expectPtr: *mut c_void, flags: u64) {
        reserve(virPtr, size, alignment, expectPtr, flags, true)
    }
}

export! { Acl;
    /// Releases a reservation; it must have no live mappings.
    fn aclrtReleaseMemAddress(virPtr: *mut c_void) {
        ensure!(!virPtr.is_null(), ACL_ERROR_INVALID_PARAM, "virPtr is NULL");
        let base = virPtr as usize;
        let mut mem = MEM.write();
        let size = match mem.regions.get(&base) {
            Some(Region::Res(r)) => {
                ensure!(
                    r.mappings.is_empty(),
                    ACL_ERROR_RT_PARAM_INVALID,
                    "virPtr {virPtr:p}: the reservation still has {} mapping(s); unmap them first",
                    r.mappings.len()
                );
                r.size
            }
            _ => bail!(ACL_ERROR_RT_PARAM_INVALID, "virPtr {virPtr:p} is not the start of a reservation"),
        };
        mem.regions.remove(&base);
        munmap(base, size);
        dec(Ctr::Reservations);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Physical memory

fn is_1g(attr: aclrtMemAttr) -> bool {
    matches!(
        attr,
        ACL_HBM_MEM_HUGE1G | ACL_MEM_HUGE1G | ACL_MEM_P2P_HUGE1G
    )
}

/// Checks a property (rules R5-R7): returns the class, the pool and the granularity.
pub(crate) fn check_prop(p: &aclrtPhysicalMemProp) -> Res<(Class, Pool, usize)> {
    ensure!(
        p.handleType == ACL_MEM_HANDLE_TYPE_NONE,
        ACL_ERROR_INVALID_PARAM,
        "prop->handleType {} is not ACL_MEM_HANDLE_TYPE_NONE (0)",
        p.handleType
    );
    ensure!(
        p.allocationType == ACL_MEM_ALLOCATION_TYPE_PINNED,
        ACL_ERROR_INVALID_PARAM,
        "prop->allocationType {} is not ACL_MEM_ALLOCATION_TYPE_PINNED (0)",
        p.allocationType
    );
    let attr = p.memAttr;
    let accepted = matches!(
        attr,
        ACL_HBM_MEM_HUGE
            | ACL_HBM_MEM_NORMAL
            | ACL_HBM_MEM_HUGE1G
            | ACL_DDR_MEM_HUGE
            | ACL_DDR_MEM_NORMAL
            | ACL_DDR_MEM_P2P_HUGE
            | ACL_DDR_MEM_P2P_NORMAL
            | ACL_MEM_NORMAL
            | ACL_MEM_HUGE
            | ACL_MEM_HUGE1G
            | ACL_MEM_P2P_NORMAL
            | ACL_MEM_P2P_HUGE
            | ACL_MEM_P2P_HUGE1G
    );
    ensure!(
        accepted,
        ACL_ERROR_INVALID_PARAM,
        "prop->memAttr {attr} is not accepted by aclrtMallocPhysical"
    );
    let ddr = matches!(
        attr,
        ACL_DDR_MEM_HUGE | ACL_DDR_MEM_NORMAL | ACL_DDR_MEM_P2P_HUGE | ACL_DDR_MEM_P2P_NORMAL
    );
    let loc = p.location;
    let page = if is_1g(attr) { GRAN_1G } else { GRAN };
    match loc.type_ {
        ACL_MEM_LOCATION_TYPE_DEVICE => {
            ensure!(
                !ddr,
                ACL_ERROR_INVALID_PARAM,
                "prop->memAttr {attr} (ACL_DDR_MEM_*) needs a HOST or HOST_NUMA location, not DEVICE"
            );
            let n = config().devices;
            ensure!(
                loc.id < n,
                ACL_ERROR_INVALID_PARAM,
                "prop->location.id {} is not a device id (0..{n})",
                loc.id
            );
            Ok((Class::Dev(loc.id), Pool::Hbm(loc.id), page))
        }
        ACL_MEM_LOCATION_TYPE_HOST => {
            ensure!(
                loc.id == 0,
                ACL_ERROR_INVALID_PARAM,
                "prop->location.id {} must be 0 for ACL_MEM_LOCATION_TYPE_HOST",
                loc.id
            );
            Ok((Class::HostDev, Pool::Host, page))
        }
        ACL_MEM_LOCATION_TYPE_HOST_NUMA => {
            ensure!(
                loc.id < 64,
                ACL_ERROR_INVALID_PARAM,
                "prop->location.id {} is not a NUMA node (0..64)",
                loc.id
            );
            Ok((Class::HostDev, Pool::Host, page))
        }
        t => bail!(
            ACL_ERROR_INVALID_PARAM,
            "prop->location.type {t} is not HOST (0), DEVICE (1) or HOST_NUMA (4)"
        ),
    }
}

/// Creates the sealed memfd of a new allocation and writes its header.
fn new_memfd(size: usize, prop: &aclrtPhysicalMemProp, device: i32) -> Res<(OwnedFd, u64)> {
    // SAFETY: the name is a valid C string; flags are plain values.
    let fd = unsafe {
        libc::memfd_create(
            c"ascend-sim-phys".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(rt::err(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            format!("memfd_create failed: {}", std::io::Error::last_os_error()),
        ));
    }
    // SAFETY: `fd` is a freshly created descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let total = (HDR + size) as libc::off_t;
    // SAFETY: plain syscalls on our own descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), total) } != 0 {
        return Err(drv_err("ftruncate"));
    }
    let seals = libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(drv_err("fcntl(F_ADD_SEALS)"));
    }
    let ino = crate::share::fstat(fd.as_raw_fd())?.st_ino;
    let mut h = crate::share::Header::zeroed();
    h.magic = crate::share::MAGIC;
    h.version = 1;
    h.owner_pid = rt::getpid();
    h.loc_type = prop.location.type_;
    h.loc_id = prop.location.id;
    h.mem_attr = prop.memAttr;
    h.device = device;
    h.size = size as u64;
    h.ino = ino;
    crate::share::write_header(fd.as_raw_fd(), &h)?;
    Ok((fd, ino))
}

export! { Acl;
    /// Allocates physical memory (rules R5-R8), charged against the device's HBM or the host cap.
    fn aclrtMallocPhysical(handle: *mut aclrtDrvMemHandle, size: usize, prop: *const aclrtPhysicalMemProp, flags: u64) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(handle, "handle") }?;
        // SAFETY: in-pointer per the C contract.
        let prop = unsafe { read_in(prop, "prop") }?;
        ensure!(size > 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        ensure!(flags == 0, ACL_ERROR_INVALID_PARAM, "flags {flags:#x} must be 0");
        let (class, pool, page) = check_prop(&prop)?;
        ensure!(
            size % page == 0,
            ACL_ERROR_RT_PARAM_INVALID,
            "size {size} is not a multiple of the granularity {page:#x} of memAttr {}",
            prop.memAttr
        );
        rt::charge(pool, size as u64)?;
        let device = match class { Class::Dev(d) => d as i32, _ => -1 };
        let (fd, ino) = match new_memfd(size, &prop, device) {
            Ok(x) => x,
            Err(e) => {
                rt::refund(pool, size as u64);
                return Err(e);
            }
        };
        let obj = Arc::new(PhysObj {
            fd,
            size,
            prop,
            class,
            page,
            ino,
            charge: Some((pool, size as u64)),
            imported: false,
            exported: AtomicBool::new(false),
        });
        let h = MEM.write().add_handle(obj, false);
        out.set(h);
        Ok(())
    }
}

export! { Acl;
    /// Frees a handle. Memory that is still mapped stays alive until unmapped (returns success).
    fn aclrtFreePhysical(handle: aclrtDrvMemHandle) {
        ensure!(!handle.is_null(), ACL_ERROR_INVALID_PARAM, "handle is NULL");
        let id = handles::decode(handle, Kind::Phys, "handle")?;
        let h = MEM.write().phys.remove(&id).ok_or_else(|| handles::stale(handle, Kind::Phys, "handle"))?;
        dec(h.ctr);
        drop(h);
        Ok(())
    }
}

fn map(
    virptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: aclrtDrvMemHandle,
    flags: u64,
    access: bool,
) -> Res {
    ensure!(!virptr.is_null(), ACL_ERROR_INVALID_PARAM, "virPtr is NULL");
    ensure!(!handle.is_null(), ACL_ERROR_INVALID_PARAM, "handle is NULL");
    ensure!(size > 0, ACL_ERROR_INVALID_PARAM, "size is 0");
    ensure!(
        flags == 0,
        ACL_ERROR_INVALID_PARAM,
        "flags {flags:#x} must be 0"
    );
    let addr = virptr as usize;
    let mut mem = MEM.write();
    let obj = mem.phys_obj(handle, "handle")?;
    ensure!(
        offset == 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "offset {offset} must be 0"
    );
    ensure!(
        size == obj.size,
        ACL_ERROR_RT_PARAM_INVALID,
        "size {size} differs from the physical allocation size {}",
        obj.size
    );
    ensure!(
        addr % GRAN == 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "virPtr {virptr:p} is not aligned to the 2 MiB granularity"
    );
    let end = addr.saturating_add(size);
    let Some((base, res)) = mem.reservation_at_mut(addr) else {
        bail!(
            ACL_ERROR_RT_PARAM_INVALID,
            "virPtr {virptr:p} is not inside a reservation"
        );
    };
    ensure!(
        end <= base + res.size,
        ACL_ERROR_RT_PARAM_INVALID,
        "virPtr {virptr:p} + size {size} runs past the end of the reservation at {base:#x} of {} bytes",
        res.size
    );
    if let Some((mb, m)) = res.mappings.pred_lt(end) {
        ensure!(
            mb + m.size <= addr,
            ACL_ERROR_RT_PARAM_INVALID,
            "virPtr {virptr:p} size {size} overlaps the mapping at {mb:#x} of {} bytes",
            m.size
        );
    }
    let prot = if access {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    // SAFETY: `addr..end` lies inside a live reservation we own and overlaps no mapping, so
    // MAP_FIXED replaces only our own PROT_NONE placeholder; the memfd is at least HDR + size.
    let p = unsafe {
        libc::mmap(
            virptr,
            size,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED,
            obj.fd.as_raw_fd(),
            HDR as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(drv_err("mmap of the physical memory"));
    }
    res.mappings.insert(
        addr,
        Mapping {
            size,
            class: obj.class,
            obj,
            default_flags: if access {
                ACL_RT_MEM_ACCESS_FLAGS_READWRITE
            } else {
                ACL_RT_MEM_ACCESS_FLAGS_NONE
            },
            explicit: Vec::new(),
        },
    );
    inc(Ctr::Mappings);
    Ok(())
}

export! { Acl;
    /// Maps a whole physical allocation into a reservation (rules R9, R10).
    fn aclrtMapMem(virPtr: *mut c_void, size: usize, offset: usize, handle: aclrtDrvMemHandle, flags: u64) {
        map(virPtr, size, offset, handle, flags, true)
    }
}

export! { Acl;
    /// As aclrtMapMem, but inaccessible until aclrtMemSetAccess.
    fn aclrtMemMapNoAccess(virPtr: *mut c_void, size: usize, offset: usize, handle: aclrtDrvMemHandle, flags: u64) {
        map(virPtr, size, offset, handle, flags, false)
    }
}

export! { Acl;
    /// Unmaps the mapping starting at `virPtr` (the VA stays reserved, PROT_NONE).
    fn aclrtUnmapMem(virPtr: *mut c_void) {
        ensure!(!virPtr.is_null(), ACL_ERROR_INVALID_PARAM, "virPtr is NULL");
        let addr = virPtr as usize;
        let mut mem = MEM.write();
        let Some((_, res)) = mem.reservation_at_mut(addr) else {
            bail!(ACL_ERROR_RT_PARAM_INVALID, "virPtr {virPtr:p} is not inside a reservation");
        };
        let Some(m) = res.mappings.get(&addr) else {
            bail!(ACL_ERROR_RT_PARAM_INVALID, "virPtr {virPtr:p} is not the start of a mapping");
        };
        mmap_anon(addr, m.size, libc::PROT_NONE, libc::MAP_FIXED)?;
        res.mappings.remove(&addr);
        dec(Ctr::Mappings);
        Ok(())
    }
}

export! { Acl;
    /// 2 MiB for every non-1G kind, 1 GiB for the HUGE1G kinds (MINIMUM and RECOMMENDED).
    fn aclrtMemGetAllocationGranularity(prop: *mut aclrtPhysicalMemProp, option: aclrtMemGranularityOptions, granularity: *mut usize) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(granularity, "granularity") }?;
        // SAFETY: in-pointer per the C contract.
        let prop = unsafe { read_in(prop.cast_const(), "prop") }?;
        ensure!(
            option == ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM || option == ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            ACL_ERROR_INVALID_PARAM,
            "option {option} is neither MINIMUM (0) nor RECOMMENDED (1)"
        );
        let (_, _, page) = check_prop(&prop)?;
        out.set(page);
        Ok(())
    }
}

export! { Acl;
    /// A new handle to the allocation mapped at `virPtr` (a mapping start); free it separately.
    fn aclrtMemRetainAllocationHandle(virPtr: *mut c_void, handle: *mut aclrtDrvMemHandle) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(handle, "handle") }?;
        ensure!(!virPtr.is_null(), ACL_ERROR_INVALID_PARAM, "virPtr is NULL");
        let addr = virPtr as usize;
        let mut mem = MEM.write();
        let obj = match mem.region_at(addr) {
            Some((_, Region::Res(r))) => r.mappings.get(&addr).map(|m| m.obj.clone()),
            _ => None,
        };
        let Some(obj) = obj else {
            bail!(ACL_ERROR_RT_PARAM_INVALID, "virPtr {virPtr:p} is not the start of a mapping");
        };
        let h = mem.add_handle(obj, false);
        out.set(h);
        Ok(())
    }
}

export! { Acl;
    /// The property the handle was allocated (or imported) with.
    fn aclrtMemGetAllocationPropertiesFromHandle(handle: aclrtDrvMemHandle, prop: *mut aclrtPhysicalMemProp) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(prop, "prop") }?;
        let obj = MEM.read().phys_obj(handle, "handle")?;
        out.set(obj.prop);
        Ok(())
    }
}

export! { Acl;
    /// The mapped block or malloc block containing `ptr`.
    fn aclrtMemGetAddressRange(ptr: *mut c_void, pbase: *mut *mut c_void, psize: *mut usize) {
        // SAFETY: out-pointers per the C contract.
        let ob = unsafe { Out::new(pbase, "pbase") }?;
        // SAFETY: as above.
        let os = unsafe { Out::new(psize, "psize") }?;
        ensure!(!ptr.is_null(), ACL_ERROR_INVALID_PARAM, "ptr is NULL");
        let addr = ptr as usize;
        let mem = MEM.read();
        let (b, s) = match mem.region_at(addr) {
            Some((b, Region::Malloc(m))) if addr - b < m.size => (b, m.size),
            Some((_, Region::Res(r))) => match r.mappings.pred(addr) {
                Some((mb, m)) if addr - mb < m.size => (mb, m.size),
                _ => bail!(ACL_ERROR_RT_PARAM_INVALID, "ptr {ptr:p} is reserved but not mapped"),
            },
            _ => bail!(ACL_ERROR_RT_PARAM_INVALID, "ptr {ptr:p} is not memory of this runtime"),
        };
        ob.set(b as *mut c_void);
        os.set(s);
        Ok(())
    }
}

export! { Acl;
    /// DEVICE (with its id) for device memory, HOST otherwise; pageSize of the backing memory.
    fn aclrtPointerGetAttributes(ptr: *const c_void, attributes: *mut aclrtPtrAttributes) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(attributes, "attributes") }?;
        ensure!(!ptr.is_null(), ACL_ERROR_INVALID_PARAM, "ptr is NULL");
        let addr = ptr as usize;
        let mem = MEM.read();
        let (class, page) = match mem.region_at(addr) {
            Some((_, Region::Malloc(m))) => (m.class, if m.size >= GRAN { GRAN } else { 4096 }),
            Some((_, Region::Res(r))) => match r.mappings.pred(addr) {
                Some((mb, m)) if addr - mb < m.size => (m.obj.class, m.obj.page),
                _ => (Class::Host, 4096),
            },
            None => (Class::Host, 4096),
        };
        let mut a = aclrtPtrAttributes::default();
        match class {
            Class::Dev(d) => {
                a.location = aclrtMemLocation { id: d, type_: ACL_MEM_LOCATION_TYPE_DEVICE };
            }
            _ => {
                a.location = aclrtMemLocation { id: 0, type_: ACL_MEM_LOCATION_TYPE_HOST };
            }
        }
        a.pageSize = page as u32;
        out.set(a);
        Ok(())
    }
}

fn check_location(loc: aclrtMemLocation, what: &str) -> Res {
    match loc.type_ {
        ACL_MEM_LOCATION_TYPE_HOST => ensure!(
            loc.id == 0,
            ACL_ERROR_INVALID_PARAM,
            "{what}.id {} must be 0 for HOST",
            loc.id
        ),
        ACL_MEM_LOCATION_TYPE_DEVICE => {
            let n = config().devices;
            ensure!(
                loc.id < n,
                ACL_ERROR_INVALID_PARAM,
                "{what}.id {} is not a device id (0..{n})",
                loc.id
            );
        }
        t => bail!(
            ACL_ERROR_INVALID_PARAM,
            "{what}.type {t} is neither HOST (0) nor DEVICE (1)"
        ),
    }
    Ok(())
}

export! { Acl;
    /// Sets access of the mapping `[virPtr, virPtr + size)` (must equal one mapping).
    fn aclrtMemSetAccess(virPtr: *mut c_void, size: usize, desc: *mut aclrtMemAccessDesc, count: usize) {
        ensure!(!virPtr.is_null(), ACL_ERROR_INVALID_PARAM, "virPtr is NULL");
        ensure!(!desc.is_null(), ACL_ERROR_INVALID_PARAM, "desc is NULL");
        ensure!(count > 0 && count <= 1024, ACL_ERROR_INVALID_PARAM, "count {count} must be in 1..=1024");
        let mut descs = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: `desc` points to `count` descriptors per the C contract.
            let d = unsafe { desc.add(i).read_unaligned() };
            ensure!(
                matches!(d.flags, ACL_RT_MEM_ACCESS_FLAGS_NONE | ACL_RT_MEM_ACCESS_FLAGS_READ | ACL_RT_MEM_ACCESS_FLAGS_READWRITE),
                ACL_ERROR_INVALID_PARAM,
                "desc[{i}].flags {} is not NONE, READ or READWRITE",
                d.flags
            );
            check_location(d.location, &format!("desc[{i}].location"))?;
            descs.push(d);
        }
        let addr = virPtr as usize;
        let mut mem = MEM.write();
        let Some((_, res)) = mem.reservation_at_mut(addr) else {
            bail!(ACL_ERROR_RT_PARAM_INVALID, "virPtr {virPtr:p} is not inside a reservation");
        };
        let Some(m) = res.mappings.get_mut(&addr) else {
            bail!(ACL_ERROR_RT_PARAM_INVALID, "virPtr {virPtr:p} is not the start of a mapping");
        };
        ensure!(m.size == size, ACL_ERROR_RT_PARAM_INVALID, "size {size} differs from the mapping size {}", m.size);
        for d in descs {
            let key = (d.location.type_, d.location.id);
            m.explicit.retain(|(t, id, _)| (*t, *id) != key);
            m.explicit.push((key.0, key.1, d.flags));
        }
        let eff = m.effective();
        res.mappings.refresh(addr);
        let prot = if eff & ACL_RT_MEM_ACCESS_FLAGS_READWRITE == ACL_RT_MEM_ACCESS_FLAGS_READWRITE {
            libc::PROT_READ | libc::PROT_WRITE
        } else if eff & ACL_RT_MEM_ACCESS_FLAGS_READ != 0 {
            libc::PROT_READ
        } else {
            libc::PROT_NONE
        };
        // SAFETY: `addr..addr+size` is exactly one live mapping of ours.
        if unsafe { libc::mprotect(virPtr, size, prot) } != 0 {
            return Err(drv_err("mprotect"));
        }
        Ok(())
    }
}

export! { Acl;
    /// The access flags of the mapping containing `virPtr` for `location`.
    fn aclrtMemGetAccess(virPtr: *mut c_void, location: *mut aclrtMemLocation, flag: *mut u64) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(flag, "flag") }?;
        // SAFETY: in-pointer per the C contract.
        let loc = unsafe { read_in(location.cast_const(), "location") }?;
        ensure!(!virPtr.is_null(), ACL_ERROR_INVALID_PARAM, "virPtr is NULL");
        check_location(loc, "location")?;
        let addr = virPtr as usize;
        let mem = MEM.read();
        let m = match mem.region_at(addr) {
            Some((_, Region::Res(r))) => r.mappings.pred(addr).filter(|(mb, m)| addr - *mb < m.size),
            _ => None,
        };
        let Some((_, m)) = m else {
            bail!(ACL_ERROR_RT_PARAM_INVALID, "virPtr {virPtr:p} is not inside a mapping");
        };
        let f = m
            .explicit
            .iter()
            .find(|(t, id, _)| (*t, *id) == (loc.type_, loc.id))
            .map_or(m.default_flags, |x| x.2);
        out.set(u64::from(f));
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Plain allocations

fn plain_alloc(size: usize, class: Class, charge: Option<(Pool, u64)>) -> Res<usize> {
    let map_len = size.next_multiple_of(4096);
    let p = mmap_anon(0, map_len, libc::PROT_READ | libc::PROT_WRITE, 0)
        .map_err(|e| rt::err(ACL_ERROR_RT_MEMORY_ALLOCATION, e.msg))?;
    MEM.write().regions.insert(
        p,
        Region::Malloc(MallocBlock {
            size,
            map_len,
            class,
            charge,
        }),
    );
    Ok(p)
}

fn plain_free(ptr: *mut c_void, host: bool) -> Res {
    ensure!(!ptr.is_null(), ACL_ERROR_INVALID_PARAM, "pointer is NULL");
    let addr = ptr as usize;
    let mut mem = MEM.write();
    let ok = matches!(mem.regions.get(&addr), Some(Region::Malloc(m)) if (m.class == Class::HostDev) == host);
    ensure!(
        ok,
        ACL_ERROR_RT_PARAM_INVALID,
        "{ptr:p} is not the start of an {} block",
        if host {
            "aclrtMallocHost"
        } else {
            "aclrtMalloc"
        }
    );
    if let Some(Region::Malloc(m)) = mem.regions.remove(&addr) {
        munmap(addr, m.map_len);
        if let Some((p, b)) = m.charge {
            rt::refund(p, b);
        }
    }
    Ok(())
}

export! { Acl;
    /// Device memory on the current device, charged against its HBM.
    fn aclrtMalloc(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(devPtr, "devPtr") }?;
        ensure!(size > 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        let known = ACL_MEM_TYPE_LOW_BAND_WIDTH | ACL_MEM_TYPE_HIGH_BAND_WIDTH | ACL_MEM_ACCESS_USER_SPACE_READONLY | 0xFF;
        ensure!(
            policy & !known == 0 && (policy & 0xFF) <= ACL_MEM_MALLOC_HUGE1G_ONLY_P2P,
            ACL_ERROR_INVALID_PARAM,
            "policy {policy:#x} is not an aclrtMemMallocPolicy"
        );
        let dev = device::require_current()?.device;
        rt::charge(Pool::Hbm(dev), size as u64)?;
        match plain_alloc(size, Class::Dev(dev), Some((Pool::Hbm(dev), size as u64))) {
            Ok(p) => {
                inc(Ctr::DeviceMallocs);
                out.set(p as *mut c_void);
                Ok(())
            }
            Err(e) => {
                rt::refund(Pool::Hbm(dev), size as u64);
                Err(e)
            }
        }
    }
}

export! { Acl;
    /// Frees an aclrtMalloc block (start address only).
    fn aclrtFree(devPtr: *mut c_void) {
        plain_free(devPtr, false)?;
        dec(Ctr::DeviceMallocs);
        Ok(())
    }
}

export! { Acl;
    /// Pinned (device-accessible) host memory; not charged against any cap.
    fn aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(hostPtr, "hostPtr") }?;
        ensure!(size > 0, ACL_ERROR_INVALID_PARAM, "size is 0");
        let p = plain_alloc(size, Class::HostDev, None)?;
        inc(Ctr::HostMallocs);
        out.set(p as *mut c_void);
        Ok(())
    }
}

export! { Acl;
    /// Frees an aclrtMallocHost block (start address only).
    fn aclrtFreeHost(hostPtr: *mut c_void) {
        plain_free(hostPtr, true)?;
        dec(Ctr::HostMallocs);
        Ok(())
    }
}

export! { Acl;
    /// Free and total bytes of the current device's HBM (HBM kinds) or the host cap (DDR kinds).
    fn aclrtGetMemInfo(attr: aclrtMemAttr, free: *mut usize, total: *mut usize) {
        // SAFETY: out-pointers per the C contract.
        let of = unsafe { Out::new(free, "free") }?;
        // SAFETY: as above.
        let ot = unsafe { Out::new(total, "total") }?;
        ensure!(attr <= ACL_MEM_P2P_HUGE1G, ACL_ERROR_INVALID_PARAM, "attr {attr} is not an aclrtMemAttr");
        let ddr = matches!(attr, ACL_DDR_MEM | ACL_DDR_MEM_HUGE | ACL_DDR_MEM_NORMAL | ACL_DDR_MEM_P2P_HUGE | ACL_DDR_MEM_P2P_NORMAL);
        let pool = if ddr { Pool::Host } else { Pool::Hbm(device::require_current()?.device) };
        let (used, cap) = rt::pool_used(pool);
        of.set(cap.saturating_sub(used) as usize);
        ot.set(cap as usize);
        Ok(())
    }
}

#[cfg(test)]
mod addr_map_tests {
    use super::{pack_tag, unpack_tag, AddrMap, Class, Spanned};
    use std::collections::BTreeMap;

    impl Spanned for i32 {
        fn span_len(&self) -> usize {
            1
        }
    }

    #[test]
    fn tags_round_trip() {
        for c in [Class::Dev(0), Class::Dev(63), Class::HostDev, Class::Host] {
            for f in [0u32, 1, 3] {
                assert_eq!(unpack_tag(pack_tag(c, f)), (c, f));
            }
        }
    }

    #[test]
    fn agrees_with_a_btreemap() {
        let mut m = AddrMap::new();
        let mut b = BTreeMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 5000) as usize * 16
        };
        for round in 0..4000 {
            let k = rnd();
            if round % 3 == 2 {
                assert_eq!(m.remove(&k), b.remove(&k));
            } else {
                assert_eq!(m.insert(k, round), b.insert(k, round));
            }
            let q = rnd() + 3;
            assert_eq!(
                m.pred(q).map(|(k, v)| (k, *v)),
                b.range(..=q).next_back().map(|(k, v)| (*k, *v))
            );
            assert_eq!(
                m.pred_lt(q).map(|(k, v)| (k, *v)),
                b.range(..q).next_back().map(|(k, v)| (*k, *v))
            );
            assert_eq!(
                m.first_in(q, q + 700),
                b.range(q..q + 700).next().map(|(k, _)| *k)
            );
            assert_eq!(m.get(&k), b.get(&k));
            assert_eq!(m.len(), b.len());
        }
    }
}
