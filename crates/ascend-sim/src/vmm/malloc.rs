//! Plain allocations (`aclrtMalloc`, `aclrtMallocHost`, their frees) and `aclrtGetMemInfo`.

use std::ffi::c_void;

use acl_sys::*;

use crate::counters::{dec, inc, Ctr};
use crate::device;
use crate::rt::{self, Out, Pool, Res};

use super::reserve::{mmap_anon, munmap};
use super::state::{Class, MallocBlock, Region, MEM};
pub(crate) fn plain_alloc(size: usize, class: Class, charge: Option<(Pool, u64)>) -> Res<usize> {
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
            freeable: true,
        }),
    );
    Ok(p)
}

pub(crate) fn plain_free(ptr: *mut c_void, host: bool) -> Res {
    ensure!(!ptr.is_null(), ACL_ERROR_INVALID_PARAM, "pointer is NULL");
    let addr = ptr as usize;
    let mut mem = MEM.write();
    let ok = matches!(mem.regions.get(&addr),
        Some(Region::Malloc(m)) if m.freeable && (m.class == Class::HostDev) == host);
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
