//! The address table and what it holds: the memory [`Class`] of a range, physical objects
//! (memfds) and their handles, reservations with their mappings, plain mallocs, and the
//! lookups every copy uses (`classify`, `vmm_pieces`).
//!
//! Everything lives in one table behind one `RwLock`: copies validate and run under the read
//! lock, so an unmap or release (write lock) can never pull memory out from under a copy.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Weak};

use acl_sys::*;
use parking_lot::RwLock;

use crate::counters::{dec, inc, Ctr};
use crate::handles::{self, Kind};
use crate::rt::{self, AclErr, Pool, Res};

use super::addr_map::{AddrMap, Ent, Spanned};
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
    pub(crate) fn device_accessible(self) -> bool {
        !matches!(self, Class::Host)
    }

    pub(crate) fn host_side(self) -> bool {
        !matches!(self, Class::Dev(_))
    }

    pub(crate) fn describe(self) -> String {
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
    pub(crate) ctr: Ctr,
}

pub(crate) struct Mapping {
    pub(crate) size: usize,
    /// `obj.class`, kept here so validating a copy does not chase the object.
    pub(crate) class: Class,
    pub(crate) obj: Arc<PhysObj>,
    pub(crate) default_flags: u32,
    /// (location type, id, flags) set by aclrtMemSetAccess.
    pub(crate) explicit: Vec<(u32, u32, u32)>,
}

impl Mapping {
    pub(crate) fn effective(&self) -> u32 {
        self.explicit
            .iter()
            .fold(self.default_flags, |a, (_, _, f)| a | f)
    }
}

/// A mapping's class and effective access flags in one word (the [`Ent::tag`]).
pub(crate) fn pack_tag(class: Class, flags: u32) -> u64 {
    let (kind, id) = match class {
        Class::Dev(d) => (0u64, d),
        Class::HostDev => (1, 0),
        Class::Host => (2, 0),
    };
    (u64::from(flags) << 40) | (kind << 32) | u64::from(id)
}

pub(crate) fn unpack_tag(tag: u64) -> (Class, u32) {
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

pub(crate) struct Reservation {
    pub(crate) size: usize,
    pub(crate) mappings: AddrMap<Mapping>,
}

pub(crate) struct MallocBlock {
    pub(crate) size: usize,
    pub(crate) map_len: usize,
    pub(crate) class: Class,
    pub(crate) charge: Option<(Pool, u64)>,
    /// Made by `aclrtMalloc`/`aclrtMallocHost`, so `aclrtFree`/`aclrtFreeHost` may end it;
    /// false for ranges entered by others (a symmetric window's peer slots).
    pub(crate) freeable: bool,
}

pub(crate) enum Region {
    Res(Reservation),
    Malloc(MallocBlock),
}

impl Region {
    pub(crate) fn len(&self) -> usize {
        match self {
            Region::Res(r) => r.size,
            Region::Malloc(m) => m.map_len,
        }
    }
}

pub(crate) struct MemState {
    pub(crate) regions: AddrMap<Region>,
    pub(crate) phys: BTreeMap<u64, PhysHandle>,
    /// Exported objects by their fd number (for aclrtMemSetPid…).
    pub(crate) exports: BTreeMap<i32, Weak<PhysObj>>,
    /// `exports` is cleared of dead entries when it reaches this size (then twice the live
    /// count): amortized constant time per export, not a scan of every export each time.
    pub(crate) exports_prune_at: usize,
}

pub(crate) static MEM: RwLock<MemState> = RwLock::new(MemState {
    regions: AddrMap::new(),
    phys: BTreeMap::new(),
    exports: BTreeMap::new(),
    exports_prune_at: 0,
});

pub(crate) fn drv_err(what: &str) -> AclErr {
    let e = std::io::Error::last_os_error();
    rt::err(
        ACL_ERROR_RT_DRV_INTERNAL_ERROR,
        format!("{what} failed: {e}"),
    )
}

impl MemState {
    pub(crate) fn region_at(&self, addr: usize) -> Option<(usize, &Region)> {
        self.regions.pred(addr).filter(|(b, r)| addr - *b < r.len())
    }

    pub(crate) fn reservation_at_mut(&mut self, addr: usize) -> Option<(usize, &mut Reservation)> {
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
        self.classify_span(addr, len, write, what).map(|(c, _)| c)
    }

    /// [`MemState::classify`], answered from `hint` when the range lies inside the mapping or
    /// allocation it remembers (with the access asked for), else looked up and remembered.
    /// A hint is valid only under the read guard it was filled under.
    pub(crate) fn classify_hinted(
        &self,
        addr: usize,
        len: usize,
        write: bool,
        what: &str,
        hint: &mut Hint,
    ) -> Res<Class> {
        if let Some(c) = hint.answer(addr, len, write) {
            return Ok(c);
        }
        let (c, h) = self.classify_span(addr, len, write, what)?;
        if let Some(h) = h {
            *hint = h;
        }
        Ok(c)
    }

    /// [`MemState::classify`], and the mapping or allocation the range lies in when it is one.
    fn classify_span(
        &self,
        addr: usize,
        len: usize,
        write: bool,
        what: &str,
    ) -> Res<(Class, Option<Hint>)> {
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
                let h = Hint::new(b, b + m.size, m.class, true, true);
                Ok((m.class, Some(h)))
            }
            Some((b, Region::Res(r))) => {
                let mut cur = addr;
                let mut class: Option<Class> = None;
                let mut hint = None;
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
                    if class == Some(mclass) && cur == addr && mb + msize >= end {
                        let read = flags & ACL_RT_MEM_ACCESS_FLAGS_READ != 0;
                        let rw = flags & ACL_RT_MEM_ACCESS_FLAGS_READWRITE
                            == ACL_RT_MEM_ACCESS_FLAGS_READWRITE;
                        hint = Some(Hint::new(mb, mb + msize, mclass, read, rw));
                    }
                    cur = mb + msize;
                    if cur >= end {
                        break;
                    }
                }
                Ok((class.unwrap_or(Class::Host), hint))
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
                Ok((Class::Host, None))
            }
        }
    }
}

/// The mapping (or allocation) a range was last classified in, for
/// [`MemState::classify_hinted`]: runs of copies under one read guard mostly touch the same
/// few mappings, and a range inside one classifies the same without a lookup.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Hint {
    lo: usize,
    hi: usize,
    class: Option<Class>,
    read: bool,
    write: bool,
}

impl Hint {
    fn new(lo: usize, hi: usize, class: Class, read: bool, write: bool) -> Hint {
        Hint {
            lo,
            hi,
            class: Some(class),
            read,
            write,
        }
    }

    /// The class of `[addr, addr + len)` when it lies inside the remembered span (its start
    /// too, even when empty: an empty range at the span's end is another mapping's) and the
    /// access is allowed there.
    #[inline]
    fn answer(&self, addr: usize, len: usize, write: bool) -> Option<Class> {
        let end = addr.checked_add(len)?;
        let allowed = if write { self.write } else { self.read };
        (addr >= self.lo && addr < self.hi && end <= self.hi && allowed)
            .then_some(self.class)
            .flatten()
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

#[cfg(test)]
mod tests {
    use super::{pack_tag, unpack_tag, Class};

    #[test]
    fn tags_round_trip() {
        for c in [Class::Dev(0), Class::Dev(63), Class::HostDev, Class::Host] {
            for f in [0u32, 1, 3] {
                assert_eq!(unpack_tag(pack_tag(c, f)), (c, f));
            }
        }
    }
}
