//! Mappings of physical memory into reservations (map, map without access, unmap) and the
//! address queries (range, pointer attributes).

use std::ffi::c_void;
use std::os::fd::AsRawFd;

use acl_sys::*;

use crate::counters::{dec, inc, Ctr};
use crate::rt::{Out, Res};

use super::memfd::HDR;
use super::phys::GRAN;
use super::reserve::mmap_anon;
use super::state::{drv_err, Class, Mapping, Region, MEM};
pub(crate) fn map(
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
        size % obj.page == 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "size {size} is not a multiple of the minimum granularity {:#x}",
        obj.page
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
