//! Access control of mappings (`aclrtMemSetAccess`, `aclrtMemGetAccess`).

use std::ffi::c_void;

use acl_sys::*;

use crate::config::config;
use crate::rt::{read_in, Out, Res};

use super::state::{drv_err, Region, MEM};
pub(crate) fn check_location(loc: aclrtMemLocation, what: &str) -> Res {
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
