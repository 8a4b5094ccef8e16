//! Physical allocations: property checks, memfds with their header page, malloc/free of
//! physical memory, granularity, retained handles and properties.

use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use acl_sys::*;

use crate::config::config;
use crate::counters::dec;
use crate::handles::{self, Kind};
use crate::rt::{self, read_in, Out, Pool, Res};

use super::memfd::{fstat, write_header, Header, HDR, MAGIC};
use super::state::{drv_err, Class, PhysObj, Region, MEM};

/// Minimum and recommended granularity of every non-1G kind.
pub(crate) const GRAN: usize = 2 << 20;
/// Granularity of the HUGE1G kinds.
pub(crate) const GRAN_1G: usize = 1 << 30;
pub(crate) fn is_1g(attr: aclrtMemAttr) -> bool {
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
pub(crate) fn new_memfd(
    size: usize,
    prop: &aclrtPhysicalMemProp,
    device: i32,
) -> Res<(OwnedFd, u64)> {
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
    let ino = fstat(fd.as_raw_fd())?.st_ino;
    let mut h = Header::zeroed();
    h.magic = MAGIC;
    h.version = 1;
    h.owner_pid = rt::getpid();
    h.loc_type = prop.location.type_;
    h.loc_id = prop.location.id;
    h.mem_attr = prop.memAttr;
    h.device = device;
    h.size = size as u64;
    h.ino = ino;
    write_header(fd.as_raw_fd(), &h)?;
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
