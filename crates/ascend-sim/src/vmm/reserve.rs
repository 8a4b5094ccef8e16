//! Reservations of virtual address space (`aclrtReserveMemAddress*`, release) and the mmap
//! helpers.

use std::ffi::c_void;

use acl_sys::*;

use crate::config::{config, Soc};
use crate::counters::{dec, inc, Ctr};
use crate::rt::{self, Out, Res};

use super::addr_map::AddrMap;
use super::phys::{GRAN, GRAN_1G};
use super::state::{drv_err, Region, Reservation, MEM};

const TIB: usize = 1 << 40;
pub(crate) fn mmap_anon(addr: usize, len: usize, prot: i32, extra: i32) -> Res<usize> {
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

pub(crate) fn munmap(addr: usize, len: usize) {
    // SAFETY: `addr..addr+len` is a region this module mapped and no longer tracks.
    unsafe { libc::munmap(addr as *mut c_void, len) };
}

/// Reserves `size` bytes aligned to `align` (over-reserve and trim).
pub(crate) fn reserve_aligned(size: usize, align: usize) -> Res<usize> {
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

/// The size, alignment and `expectPtr` rules of a reservation (R1-R3; `no_uc`: the
/// NoUCMemory variant).
fn check_placement(size: usize, alignment: usize, expect: usize, no_uc: bool) -> Res {
    let cfg = config();
    if no_uc {
        ensure!(
            cfg.soc == Soc::A3,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "not supported on this product (ASCEND_SIM_SOC is not A3)"
        );
        // The header: "return not support if be nullptr". HIXL's VA pool relies on this code
        // to fall back to aclrtReserveMemAddress.
        ensure!(
            expect != 0,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "expectPtr is NULL: a NoUC reservation needs a fixed address (not supported without one)"
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
    Ok(())
}

pub(crate) fn reserve(
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
    let expect = expect as usize;
    check_placement(size, alignment, expect, no_uc)?;
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
