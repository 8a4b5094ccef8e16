//! The emulator's HCCL as a shared library: `HcclLib::open_paths` on `libascend_sim.so`
//! (what `ASCEND_HCCL_LIB=…/libascend_sim.so` does), a one-rank symmetric AllGather through it.

mod sim_cdylib;

use std::ffi::c_void;
use std::ptr::null_mut;

use acl_sys::*;
use hccl_sys::*;
use sim_cdylib::lib_path;

#[test]
fn hccl_through_the_shared_library() {
    let path = lib_path();
    // SAFETY: our own emulator library.
    let a = unsafe { AclLib::open_path(&path) }.unwrap();
    // SAFETY: as above.
    let h = unsafe { HcclLib::open_paths(std::slice::from_ref(&path)) }.unwrap();
    for s in hccl_sys::SYMBOLS {
        assert!(h.is_available(s), "{s} not exported by {}", path.display());
    }
    let mib2 = 2usize << 20;
    let prop = aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: ACL_HBM_MEM_HUGE,
        location: aclrtMemLocation {
            id: 0,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        reserve: 0,
    };
    // SAFETY: every call passes live locals as the C contract requires.
    unsafe {
        assert_eq!(a.aclrtSetDevice(0).unwrap(), 0);
        let mut stream = null_mut();
        assert_eq!(a.aclrtCreateStream(&mut stream).unwrap(), 0);
        let mut root = HcclRootInfo::default();
        assert_eq!(h.HcclGetRootInfo(&mut root).unwrap(), 0);
        let mut comm = null_mut();
        assert_eq!(h.HcclCommInitRootInfo(1, &root, 0, &mut comm).unwrap(), 0);
        let mut va: *mut c_void = null_mut();
        assert_eq!(
            a.aclrtReserveMemAddress(&mut va, mib2, 0, null_mut(), 0)
                .unwrap(),
            0
        );
        let mut ph = null_mut();
        assert_eq!(a.aclrtMallocPhysical(&mut ph, mib2, &prop, 0).unwrap(), 0);
        assert_eq!(a.aclrtMapMem(va, mib2, 0, ph, 0).unwrap(), 0);
        let mut w = null_mut();
        assert_eq!(
            h.HcclCommSymWinRegister(comm, va, mib2 as u64, &mut w, 1)
                .unwrap(),
            0
        );
        va.cast::<u32>().write(0xABCD_0123);
        let dst = va.cast::<u8>().add(4096).cast::<c_void>();
        assert_eq!(
            h.HcclAllGather(va, dst, 1, HCCL_DATA_TYPE_UINT32, comm, stream)
                .unwrap(),
            0
        );
        assert_eq!(a.aclrtSynchronizeStream(stream).unwrap(), 0);
        assert_eq!(dst.cast::<u32>().read(), 0xABCD_0123);
        let text = std::ffi::CStr::from_ptr(h.HcclGetErrorString(HCCL_E_PARA).unwrap());
        assert_eq!(text.to_str().unwrap(), "parameter error");
        assert_eq!(h.HcclGroupStart().unwrap(), HCCL_E_NOT_SUPPORT);
        assert_eq!(h.HcclCommSymWinDeregister(w).unwrap(), 0);
        assert_eq!(h.HcclCommDestroy(comm).unwrap(), 0);
        assert_eq!(a.aclrtUnmapMem(va).unwrap(), 0);
        assert_eq!(a.aclrtFreePhysical(ph).unwrap(), 0);
        assert_eq!(a.aclrtReleaseMemAddress(va).unwrap(), 0);
        assert_eq!(a.aclrtDestroyStream(stream).unwrap(), 0);
        assert_eq!(a.aclrtResetDevice(0).unwrap(), 0);
    }
}
