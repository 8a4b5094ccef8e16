//! The VMM rules at the C-ABI level, through the in-process loader table. The labels R1-R20
//! are those of the rule table in ascend-mem's crate docs; each test names its rule and the
//! emulator's code for it (see the emulator's crate docs for which codes are confirmed).

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr::{null, null_mut};

use common::*;

fn fill(p: *mut c_void, len: usize, v: u8) {
    // SAFETY: test memory is mapped read-write for `len` bytes.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), v, len) }
}

fn read(p: *const c_void, len: usize) -> Vec<u8> {
    // SAFETY: test memory is mapped readable for `len` bytes.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
}

#[test]
fn happy_path_reserve_map_copy_unmap_free_release() {
    let _g = LOCK.lock();
    set_device(0);
    let (va, h) = mapped(MIB2, &dev_prop(0));
    let c = counters();
    assert_eq!((c.reservations, c.physical, c.mappings), (1, 1, 1), "{c}");
    assert_eq!(ascend_sim::hbm_in_use(0), MIB2 as u64);
    let src = vec![7u8; 4096];
    ok!(aclrtMemcpy(
        va,
        MIB2,
        src.as_ptr().cast(),
        4096,
        ACL_MEMCPY_HOST_TO_DEVICE
    ));
    let mut back = vec![0u8; 4096];
    ok!(aclrtMemcpy(
        back.as_mut_ptr().cast(),
        4096,
        va,
        4096,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    assert_eq!(back, src);
    ok!(aclrtMemset(va, MIB2, 0x5a, 16));
    assert_eq!(read(va, 16), vec![0x5a; 16]);
    teardown(va, h);
    assert_eq!(ascend_sim::hbm_in_use(0), 0);
    reset_device(0);
    assert_clean();
}

#[test]
fn r1_reserve_arguments() {
    let _g = LOCK.lock();
    let mut va = null_mut();
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtReserveMemAddress(null_mut(), MIB2, 0, null_mut(), 0)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtReserveMemAddress(&mut va, 0, 0, null_mut(), 0)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtReserveMemAddress(&mut va, MIB2, 0, null_mut(), 2)
    );
    ok!(aclrtReserveMemAddress(&mut va, 2 * MIB2, 0, null_mut(), 1));
    assert_eq!(va as usize % MIB2, 0, "reservation not 2 MiB aligned");
    ok!(aclrtReleaseMemAddress(va));
    assert_clean();
}

#[test]
fn r2_alignment_must_be_zero() {
    let _g = LOCK.lock();
    let mut va = null_mut();
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtReserveMemAddress(&mut va, MIB2, MIB2, null_mut(), 0)
    );
    assert!(last_msg().contains("alignment"));
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtReserveMemAddress(&mut va, 4096, 0, null_mut(), 0)
    );
    assert_clean();
}

#[test]
fn r3_expect_ptr() {
    let _g = LOCK.lock();
    let tib = 1usize << 40;
    let mut va = null_mut();
    // Outside [16 TiB, 24 TiB).
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtReserveMemAddress(&mut va, MIB2, 0, (8 * tib) as *mut c_void, 0)
    );
    // Unaligned for the size (power of two below 1 GiB).
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtReserveMemAddress(&mut va, 4 * MIB2, 0, (16 * tib + MIB2) as *mut c_void, 0)
    );
    let want = 17 * tib + 1024 * MIB2;
    ok!(aclrtReserveMemAddress(
        &mut va,
        MIB2,
        0,
        want as *mut c_void,
        0
    ));
    assert_eq!(va as usize, want);
    let mut va2 = null_mut();
    expect_code!(
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        aclrtReserveMemAddress(&mut va2, MIB2, 0, want as *mut c_void, 0)
    );
    ok!(aclrtReleaseMemAddress(va));
    assert_clean();
}

#[test]
fn r4_no_uc_reservation() {
    let _g = LOCK.lock();
    let gib = 1usize << 30;
    let base = (41usize << 40) as *mut c_void;
    let mut va = null_mut();
    // The header: a NULL expectPtr is "not supported" (HIXL falls back on exactly this code).
    expect_code!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        aclrtReserveMemAddressNoUCMemory(&mut va, gib, 0, null_mut(), 1)
    );
    assert!(va.is_null(), "a refused reservation writes no address");
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtReserveMemAddressNoUCMemory(&mut va, MIB2, 0, base, 1)
    );
    ok!(aclrtReserveMemAddressNoUCMemory(
        &mut va,
        2 * gib,
        0,
        base,
        1
    ));
    assert_eq!(va, base);
    ok!(aclrtReleaseMemAddress(va));
    // HIXL's VA pool: 32 TiB at 40 TiB.
    let pool = (40usize << 40) as *mut c_void;
    ok!(aclrtReserveMemAddressNoUCMemory(
        &mut va,
        32 << 40,
        0,
        pool,
        1
    ));
    assert_eq!(va, pool);
    let h = malloc_phys(MIB2, &dev_prop(0));
    let deep = (va as usize + (20usize << 40)) as *mut c_void;
    ok!(aclrtMapMem(deep, MIB2, 0, h, 0));
    ok!(aclrtMemset(deep, MIB2, 1, MIB2));
    ok!(aclrtUnmapMem(deep));
    ok!(aclrtFreePhysical(h));
    ok!(aclrtReleaseMemAddress(va));
    assert_clean();
}

#[test]
fn r5_malloc_physical_arguments() {
    let _g = LOCK.lock();
    let mut h = null_mut();
    let p = dev_prop(0);
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMallocPhysical(null_mut(), MIB2, &p, 0)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMallocPhysical(&mut h, MIB2, null(), 0)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMallocPhysical(&mut h, 0, &p, 0)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMallocPhysical(&mut h, MIB2, &p, 1)
    );
    let mut q = p;
    q.handleType = ACL_MEM_HANDLE_TYPE_POSIX;
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMallocPhysical(&mut h, MIB2, &q, 0)
    );
    let mut q = p;
    q.allocationType = 1;
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMallocPhysical(&mut h, MIB2, &q, 0)
    );
    assert!(h.is_null());
    assert_clean();
}

#[test]
fn r6_location_and_ddr_on_device() {
    let _g = LOCK.lock();
    let mut h = null_mut();
    for t in [
        ACL_MEM_LOCATION_TYPE_UNREGISTERED,
        ACL_MEM_LOCATION_TYPE_MANAGED,
        9,
    ] {
        let mut p = dev_prop(0);
        p.location.type_ = t;
        expect_code!(
            ACL_ERROR_INVALID_PARAM,
            aclrtMallocPhysical(&mut h, MIB2, &p, 0)
        );
    }
    for a in [
        ACL_DDR_MEM_HUGE,
        ACL_DDR_MEM_NORMAL,
        ACL_DDR_MEM_P2P_HUGE,
        ACL_DDR_MEM_P2P_NORMAL,
    ] {
        let mut p = dev_prop(0);
        p.memAttr = a;
        expect_code!(
            ACL_ERROR_INVALID_PARAM,
            aclrtMallocPhysical(&mut h, MIB2, &p, 0)
        );
        let mut p = host_prop();
        p.memAttr = a;
        let h = malloc_phys(MIB2, &p);
        ok!(aclrtFreePhysical(h));
    }
    assert_clean();
}

#[test]
fn r7_accepted_and_rejected_attrs() {
    let _g = LOCK.lock();
    let mut h = null_mut();
    for a in [
        ACL_DDR_MEM,
        ACL_HBM_MEM,
        ACL_HBM_MEM_P2P_HUGE,
        ACL_HBM_MEM_P2P_NORMAL,
        ACL_HBM_MEM_P2P_HUGE1G,
        18,
    ] {
        let mut p = dev_prop(0);
        p.memAttr = a;
        expect_code!(
            ACL_ERROR_INVALID_PARAM,
            aclrtMallocPhysical(&mut h, MIB2, &p, 0)
        );
    }
    for a in [
        ACL_HBM_MEM_HUGE,
        ACL_HBM_MEM_NORMAL,
        ACL_MEM_NORMAL,
        ACL_MEM_HUGE,
        ACL_MEM_P2P_NORMAL,
        ACL_MEM_P2P_HUGE,
    ] {
        let mut p = dev_prop(1);
        p.memAttr = a;
        let h = malloc_phys(MIB2, &p);
        ok!(aclrtFreePhysical(h));
    }
    let mut p = host_prop();
    p.location.id = 1;
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMallocPhysical(&mut h, MIB2, &p, 0)
    );
    p.location.type_ = ACL_MEM_LOCATION_TYPE_HOST_NUMA;
    p.location.id = 2;
    let h = malloc_phys(MIB2, &p);
    ok!(aclrtFreePhysical(h));
    assert_clean();
}

#[test]
fn r8_size_multiple_of_granularity() {
    let _g = LOCK.lock();
    let mut h = null_mut();
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMallocPhysical(&mut h, 4096, &dev_prop(0), 0)
    );
    let mut p = dev_prop(0);
    p.memAttr = ACL_HBM_MEM_HUGE1G;
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMallocPhysical(&mut h, MIB2, &p, 0)
    );
    let mut g = 0usize;
    ok!(aclrtMemGetAllocationGranularity(
        &mut p,
        ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        &mut g
    ));
    assert_eq!(g, 1 << 30);
    let mut p2 = host_prop();
    ok!(aclrtMemGetAllocationGranularity(
        &mut p2,
        ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
        &mut g
    ));
    assert_eq!(g, MIB2);
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemGetAllocationGranularity(&mut p2, 7, &mut g)
    );
    p2.memAttr = ACL_HBM_MEM;
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemGetAllocationGranularity(&mut p2, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &mut g)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemGetAllocationGranularity(null_mut(), ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &mut g)
    );
    assert_clean();
}

#[test]
fn r9_map_arguments() {
    let _g = LOCK.lock();
    let va = reserve(MIB2);
    let h = malloc_phys(MIB2, &dev_prop(0));
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMapMem(null_mut(), MIB2, 0, h, 0)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMapMem(va, MIB2, 0, null_mut(), 0)
    );
    expect_code!(ACL_ERROR_INVALID_PARAM, aclrtMapMem(va, 0, 0, h, 0));
    expect_code!(ACL_ERROR_INVALID_PARAM, aclrtMapMem(va, MIB2, 0, h, 1));
    assert_eq!(counters().mappings, 0);
    ok!(aclrtFreePhysical(h));
    ok!(aclrtReleaseMemAddress(va));
    assert_clean();
}

#[test]
fn r10_map_size_offset_bounds_overlap() {
    let _g = LOCK.lock();
    let va = reserve(4 * MIB2);
    let h = malloc_phys(2 * MIB2, &dev_prop(0));
    expect_code!(ACL_ERROR_RT_PARAM_INVALID, aclrtMapMem(va, MIB2, 0, h, 0));
    let m = last_msg();
    assert!(
        m.contains("aclrtMapMem") && m.contains("2097152") && m.contains("4194304"),
        "{m}"
    );
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMapMem(va, 2 * MIB2, MIB2, h, 0)
    );
    // Unaligned address.
    let odd = (va as usize + 4096) as *mut c_void;
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMapMem(odd, 2 * MIB2, 0, h, 0)
    );
    // Past the end of the reservation.
    let late = (va as usize + 3 * MIB2) as *mut c_void;
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMapMem(late, 2 * MIB2, 0, h, 0)
    );
    // Outside any reservation.
    let mut stack = [0u8; 16];
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMapMem(stack.as_mut_ptr().cast(), 2 * MIB2, 0, h, 0)
    );
    ok!(aclrtMapMem(va, 2 * MIB2, 0, h, 0));
    // Overlap.
    let h2 = malloc_phys(2 * MIB2, &dev_prop(0));
    let mid = (va as usize + MIB2) as *mut c_void;
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMapMem(mid, 2 * MIB2, 0, h2, 0)
    );
    let next = (va as usize + 2 * MIB2) as *mut c_void;
    ok!(aclrtMapMem(next, 2 * MIB2, 0, h2, 0));
    ok!(aclrtUnmapMem(next));
    ok!(aclrtFreePhysical(h2));
    teardown(va, h);
    assert_clean();
}

#[test]
fn r11_not_enforced_device_and_host_in_one_reservation() {
    let _g = LOCK.lock();
    let va = reserve(2 * MIB2);
    let hd = malloc_phys(MIB2, &dev_prop(0));
    let hh = malloc_phys(MIB2, &host_prop());
    let second = (va as usize + MIB2) as *mut c_void;
    ok!(aclrtMapMem(va, MIB2, 0, hd, 0));
    ok!(aclrtMapMem(second, MIB2, 0, hh, 0));
    // A D2D copy between the two works (host physical memory is device-accessible).
    fill(second, 64, 3);
    ok!(aclrtMemcpy(va, 64, second, 64, ACL_MEMCPY_DEVICE_TO_DEVICE));
    assert_eq!(read(va, 64), vec![3; 64]);
    // A copy spanning both kinds is rejected.
    let straddle = (va as usize + MIB2 - 8) as *mut c_void;
    let buf = [0u8; 16];
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemcpy(
            straddle,
            16,
            buf.as_ptr().cast(),
            16,
            ACL_MEMCPY_HOST_TO_DEVICE
        )
    );
    ok!(aclrtUnmapMem(va));
    ok!(aclrtUnmapMem(second));
    ok!(aclrtFreePhysical(hd));
    ok!(aclrtFreePhysical(hh));
    ok!(aclrtReleaseMemAddress(va));
    assert_clean();
}

#[test]
fn r12_r13_export_arguments() {
    let _g = LOCK.lock();
    set_device(0);
    let h = malloc_phys(MIB2, &dev_prop(0));
    let mut v = 0u64;
    let vp: *mut c_void = (&mut v as *mut u64).cast();
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemExportToShareableHandleV2(null_mut(), 0, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, vp)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemExportToShareableHandleV2(h, 0, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, null_mut())
    );
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemExportToShareableHandleV2(h, 2, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, vp)
    );
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemExportToShareableHandleV2(h, 0, 3, vp)
    );
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemExportToShareableHandle(h, ACL_MEM_HANDLE_TYPE_NONE, 2, &mut v)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemExportToShareableHandle(h, ACL_MEM_HANDLE_TYPE_POSIX, 0, &mut v)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemExportToShareableHandle(h, ACL_MEM_HANDLE_TYPE_NONE, 0, null_mut())
    );
    assert_eq!(counters().exports, 0);
    ok!(aclrtFreePhysical(h));
    reset_device(0);
    assert_clean();
}

#[test]
fn r14_fabric_needs_a_current_context() {
    let _g = LOCK.lock();
    let h = malloc_phys(MIB2, &dev_prop(0));
    let hv = h as usize;
    // A fresh thread has no current context.
    std::thread::spawn(move || {
        let mut f = aclrtMemFabricHandle::default();
        let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
        expect_code!(
            ACL_ERROR_RT_CONTEXT_NULL,
            aclrtMemExportToShareableHandleV2(
                hv as aclrtDrvMemHandle,
                1,
                ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
                fp
            )
        );
    })
    .join()
    .unwrap();
    set_device(0);
    let mut f = aclrtMemFabricHandle::default();
    let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
    ok!(aclrtMemExportToShareableHandleV2(
        h,
        1,
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        fp
    ));
    assert_ne!(f.data, [0u8; 128]);
    assert_eq!(counters().exports, 1);
    ok!(aclrtFreePhysical(h));
    assert_eq!(counters().exports, 0);
    reset_device(0);
    assert_clean();
}

#[test]
fn r15_export_once_per_allocation() {
    let _g = LOCK.lock();
    set_device(0);
    let (va, h) = mapped(MIB2, &dev_prop(0));
    let mut v = 0u64;
    ok!(aclrtMemExportToShareableHandle(
        h,
        ACL_MEM_HANDLE_TYPE_NONE,
        0,
        &mut v
    ));
    let mut v2 = 0u64;
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemExportToShareableHandle(h, ACL_MEM_HANDLE_TYPE_NONE, 0, &mut v2)
    );
    // A retained handle names the same allocation: still exported once.
    let mut r = null_mut();
    ok!(aclrtMemRetainAllocationHandle(va, &mut r));
    let vp: *mut c_void = (&mut v2 as *mut u64).cast();
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemExportToShareableHandleV2(r, 0, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, vp)
    );
    ok!(aclrtFreePhysical(r));
    teardown(va, h);
    reset_device(0);
    assert_clean();
}

#[test]
fn r16_import_v2_arguments() {
    let _g = LOCK.lock();
    set_device(0);
    let mut v = 0u64;
    let vp: *mut c_void = (&mut v as *mut u64).cast();
    let mut h = null_mut();
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemImportFromShareableHandleV2(
            null_mut(),
            ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
            0,
            &mut h
        )
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemImportFromShareableHandleV2(vp, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 0, null_mut())
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemImportFromShareableHandleV2(vp, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, 1, &mut h)
    );
    // Garbage bytes: an error, never a crash.
    let mut junk = aclrtMemFabricHandle { data: [0xAB; 128] };
    let jp: *mut c_void = (&mut junk as *mut aclrtMemFabricHandle).cast();
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemImportFromShareableHandleV2(jp, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &mut h)
    );
    // V1 DEFAULT handles: no exporter pid in the value → 107000; this process's pid with an
    // fd number that is not open → the memory is gone, 107017.
    let junk_u64 = 0x1234_5678_9ac0_0000u64;
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemImportFromShareableHandle(junk_u64, 0, &mut h)
    );
    let closed_fd = u64::from(std::process::id()) | (((1u64 << 20) - 1) << 22);
    expect_code!(
        ACL_ERROR_RT_INVALID_HANDLE,
        aclrtMemImportFromShareableHandle(closed_fd, 0, &mut h)
    );
    reset_device(0);
    assert_clean();
}

#[test]
fn r17_v2_import_lands_on_current_device() {
    let _g = LOCK.lock();
    set_device(0);
    let h = malloc_phys(MIB2, &dev_prop(0));
    let mut f = aclrtMemFabricHandle::default();
    let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
    ok!(aclrtMemExportToShareableHandleV2(
        h,
        1,
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        fp
    ));
    set_device(3);
    let mut imp = null_mut();
    ok!(aclrtMemImportFromShareableHandleV2(
        fp,
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        0,
        &mut imp
    ));
    let mut prop = aclrtPhysicalMemProp::default();
    ok!(aclrtMemGetAllocationPropertiesFromHandle(imp, &mut prop));
    assert_eq!(prop.location.type_, ACL_MEM_LOCATION_TYPE_DEVICE);
    assert_eq!(prop.location.id, 3);
    assert_eq!(counters().imports, 1);
    // Without a current device: 107002.
    let fv = fp as usize;
    std::thread::spawn(move || {
        let mut h2 = null_mut();
        expect_code!(
            ACL_ERROR_RT_CONTEXT_NULL,
            aclrtMemImportFromShareableHandleV2(
                fv as *mut c_void,
                ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
                0,
                &mut h2
            )
        );
    })
    .join()
    .unwrap();
    ok!(aclrtFreePhysical(imp));
    ok!(aclrtFreePhysical(h));
    reset_device(3);
    reset_device(0);
    assert_clean();
}

#[test]
fn r18_import_after_free_fails() {
    let _g = LOCK.lock();
    set_device(0);
    let h = malloc_phys(MIB2, &host_prop());
    let mut f = aclrtMemFabricHandle::default();
    let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
    ok!(aclrtMemExportToShareableHandleV2(
        h,
        1,
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        fp
    ));
    // Same-process import of an own FABRIC handle works (HIXL does it for host memory).
    let mut imp = null_mut();
    ok!(aclrtMemImportFromShareableHandleV2(
        fp,
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        0,
        &mut imp
    ));
    let va = reserve(2 * MIB2);
    let alias = (va as usize + MIB2) as *mut c_void;
    ok!(aclrtMapMem(va, MIB2, 0, h, 0));
    ok!(aclrtMapMem(alias, MIB2, 0, imp, 0));
    fill(va, 32, 9);
    assert_eq!(
        read(alias, 32),
        vec![9; 32],
        "the import aliases the same memory"
    );
    ok!(aclrtUnmapMem(va));
    ok!(aclrtUnmapMem(alias));
    ok!(aclrtFreePhysical(imp));
    ok!(aclrtFreePhysical(h));
    let mut again = null_mut();
    expect_code!(
        ACL_ERROR_RT_INVALID_HANDLE,
        aclrtMemImportFromShareableHandleV2(fp, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &mut again)
    );
    ok!(aclrtReleaseMemAddress(va));
    reset_device(0);
    assert_clean();
}

#[test]
fn r19_map_no_access_then_set_access() {
    let _g = LOCK.lock();
    set_device(0);
    let va = reserve(MIB2);
    let h = malloc_phys(MIB2, &host_prop());
    ok!(aclrtMemMapNoAccess(va, MIB2, 0, h, 0));
    let buf = [1u8; 64];
    expect_code!(
        ACL_ERROR_RT_DEVICE_MEM_ERROR,
        aclrtMemcpy(va, 64, buf.as_ptr().cast(), 64, ACL_MEMCPY_HOST_TO_DEVICE)
    );
    let mut loc = aclrtMemLocation {
        id: 0,
        type_: ACL_MEM_LOCATION_TYPE_DEVICE,
    };
    let mut flag = 99u64;
    ok!(aclrtMemGetAccess(va, &mut loc, &mut flag));
    assert_eq!(flag, u64::from(ACL_RT_MEM_ACCESS_FLAGS_NONE));
    let mut logic = -1;
    ok!(aclrtGetLogicDevIdByUserDevId(0, &mut logic));
    let mut desc = aclrtMemAccessDesc {
        flags: ACL_RT_MEM_ACCESS_FLAGS_READWRITE,
        location: aclrtMemLocation {
            id: logic as u32,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        rsv: [0; 12],
    };
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemSetAccess(va, MIB2 / 2, &mut desc, 1)
    );
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemSetAccess(va, MIB2, &mut desc, 0)
    );
    ok!(aclrtMemSetAccess(va, MIB2, &mut desc, 1));
    ok!(aclrtMemGetAccess(va, &mut loc, &mut flag));
    assert_eq!(flag, u64::from(ACL_RT_MEM_ACCESS_FLAGS_READWRITE));
    ok!(aclrtMemcpy(
        va,
        64,
        buf.as_ptr().cast(),
        64,
        ACL_MEMCPY_HOST_TO_DEVICE
    ));
    assert_eq!(read(va, 64), vec![1; 64]);
    teardown(va, h);
    reset_device(0);
    assert_clean();
}

#[test]
fn r20_teardown_order() {
    let _g = LOCK.lock();
    ascend_sim::set_call_log(true);
    let (va, h) = mapped(MIB2, &dev_prop(0));
    expect_code!(ACL_ERROR_RT_PARAM_INVALID, aclrtReleaseMemAddress(va));
    assert!(last_msg().contains("mapping"));
    // Free while mapped succeeds; the mapping keeps the memory alive.
    ok!(aclrtFreePhysical(h));
    fill(va, 128, 4);
    assert_eq!(read(va, 128), vec![4; 128]);
    assert_eq!(ascend_sim::hbm_in_use(0), MIB2 as u64);
    // The freed handle is stale.
    let mut prop = aclrtPhysicalMemProp::default();
    expect_code!(
        ACL_ERROR_RT_INVALID_HANDLE,
        aclrtMemGetAllocationPropertiesFromHandle(h, &mut prop)
    );
    ok!(aclrtUnmapMem(va));
    assert_eq!(ascend_sim::hbm_in_use(0), 0);
    ok!(aclrtReleaseMemAddress(va));
    let log = ascend_sim::call_log();
    ascend_sim::set_call_log(false);
    let pos = |s: &str| log.iter().rposition(|x| x == s).unwrap();
    assert!(pos("aclrtFreePhysical") < pos("aclrtUnmapMem"));
    assert!(pos("aclrtUnmapMem") < pos("aclrtReleaseMemAddress"));
    assert_clean();
}

#[test]
fn retain_properties_address_range_attributes() {
    let _g = LOCK.lock();
    set_device(2);
    let (va, h) = mapped(2 * MIB2, &dev_prop(2));
    let mut r = null_mut();
    let inner = (va as usize + 4096) as *mut c_void;
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemRetainAllocationHandle(inner, &mut r)
    );
    ok!(aclrtMemRetainAllocationHandle(va, &mut r));
    assert_ne!(r, h);
    assert_eq!(counters().physical, 2);
    let mut prop = aclrtPhysicalMemProp::default();
    ok!(aclrtMemGetAllocationPropertiesFromHandle(r, &mut prop));
    assert_eq!(prop, dev_prop(2));
    let (mut base, mut size) = (null_mut(), 0usize);
    ok!(aclrtMemGetAddressRange(inner, &mut base, &mut size));
    assert_eq!((base, size), (va, 2 * MIB2));
    let mut a = aclrtPtrAttributes::default();
    ok!(aclrtPointerGetAttributes(inner, &mut a));
    assert_eq!(
        (a.location.type_, a.location.id, a.pageSize),
        (ACL_MEM_LOCATION_TYPE_DEVICE, 2, MIB2 as u32)
    );
    let x = 5u32;
    ok!(aclrtPointerGetAttributes((&x as *const u32).cast(), &mut a));
    assert_eq!(a.location.type_, ACL_MEM_LOCATION_TYPE_HOST);
    ok!(aclrtFreePhysical(r));
    teardown(va, h);
    reset_device(2);
    assert_clean();
}

#[test]
fn copies_validate_ranges_and_kinds() {
    let _g = LOCK.lock();
    set_device(0);
    let va = reserve(4 * MIB2);
    let h = malloc_phys(MIB2, &dev_prop(0));
    ok!(aclrtMapMem(va, MIB2, 0, h, 0));
    let host = vec![0u8; 8192];
    let hp = host.as_ptr().cast::<c_void>();
    // count > destMax.
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtMemcpy(va, 16, hp, 32, ACL_MEMCPY_HOST_TO_DEVICE)
    );
    // Running into unmapped VA inside the reservation: an error, not a segfault.
    let tail = (va as usize + MIB2 - 16) as *mut c_void;
    expect_code!(
        ACL_ERROR_RT_DEVICE_MEM_ERROR,
        aclrtMemcpy(tail, 32, hp, 32, ACL_MEMCPY_HOST_TO_DEVICE)
    );
    let unmapped = (va as usize + 2 * MIB2) as *mut c_void;
    expect_code!(
        ACL_ERROR_RT_DEVICE_MEM_ERROR,
        aclrtMemcpy(unmapped, 32, hp, 32, ACL_MEMCPY_HOST_TO_DEVICE)
    );
    assert!(last_msg().contains("not mapped"));
    // Kind mismatches.
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemcpy(va, 32, hp, 32, ACL_MEMCPY_HOST_TO_HOST)
    );
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemcpy(va, 32, hp, 32, ACL_MEMCPY_DEVICE_TO_DEVICE)
    );
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemcpy(va, 32, hp, 32, ACL_MEMCPY_DEVICE_TO_HOST)
    );
    expect_code!(ACL_ERROR_INVALID_PARAM, aclrtMemcpy(va, 32, hp, 32, 8));
    ok!(aclrtMemcpy(va, 32, hp, 32, ACL_MEMCPY_DEFAULT));
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtMemset(host.as_ptr() as *mut c_void, 16, 0, 16)
    );
    // aclrtMalloc is device memory, aclrtMallocHost is device-accessible host memory.
    let (mut d, mut ph) = (null_mut(), null_mut());
    ok!(aclrtMalloc(&mut d, 4096, ACL_MEM_MALLOC_HUGE_FIRST));
    ok!(aclrtMallocHost(&mut ph, 4096));
    fill(ph, 4096, 6);
    ok!(aclrtMemcpy(d, 4096, ph, 4096, ACL_MEMCPY_DEVICE_TO_DEVICE));
    ok!(aclrtMemcpy(va, 4096, d, 4096, ACL_MEMCPY_DEVICE_TO_DEVICE));
    assert_eq!(read(va, 4096), vec![6; 4096]);
    expect_code!(
        ACL_ERROR_RT_DEVICE_MEM_ERROR,
        aclrtMemcpy(d, 8192, hp, 8192, ACL_MEMCPY_HOST_TO_DEVICE)
    );
    let (mut b, mut s) = (null_mut(), 0usize);
    ok!(aclrtMemGetAddressRange(
        (d as usize + 10) as *mut c_void,
        &mut b,
        &mut s
    ));
    assert_eq!((b, s), (d, 4096));
    expect_code!(ACL_ERROR_RT_PARAM_INVALID, aclrtFree(ph));
    expect_code!(ACL_ERROR_RT_PARAM_INVALID, aclrtFreeHost(d));
    assert_eq!((counters().device_mallocs, counters().host_mallocs), (1, 1));
    ok!(aclrtFree(d));
    ok!(aclrtFreeHost(ph));
    teardown(va, h);
    reset_device(0);
    assert_clean();
}

#[test]
fn out_of_memory_and_mem_info() {
    let _g = LOCK.lock();
    set_device(5);
    let (mut free, mut total) = (0usize, 0usize);
    ok!(aclrtGetMemInfo(ACL_HBM_MEM, &mut free, &mut total));
    assert_eq!(free, total);
    let mut h = null_mut();
    let too_big = (total + MIB2).next_multiple_of(MIB2);
    expect_code!(
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        aclrtMallocPhysical(&mut h, too_big, &dev_prop(5), 0)
    );
    let h = malloc_phys(total, &dev_prop(5));
    ok!(aclrtGetMemInfo(ACL_HBM_MEM, &mut free, &mut total));
    assert_eq!(free, 0);
    let mut d = null_mut();
    expect_code!(
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        aclrtMalloc(&mut d, 1, ACL_MEM_MALLOC_HUGE_FIRST)
    );
    ok!(aclrtFreePhysical(h));
    assert_eq!(ascend_sim::hbm_in_use(5), 0);
    reset_device(5);
    assert_clean();
}

#[test]
fn handles_are_checked_not_dereferenced() {
    let _g = LOCK.lock();
    set_device(0);
    let mut s = null_mut();
    ok!(aclrtCreateStream(&mut s));
    // A stream passed as a memory handle, a garbage pointer, a stale handle.
    expect_code!(ACL_ERROR_RT_INVALID_HANDLE, aclrtFreePhysical(s));
    assert!(last_msg().contains("stream"));
    expect_code!(
        ACL_ERROR_RT_INVALID_HANDLE,
        aclrtFreePhysical(0x1234usize as *mut c_void)
    );
    let h = malloc_phys(MIB2, &dev_prop(0));
    ok!(aclrtFreePhysical(h));
    expect_code!(ACL_ERROR_RT_INVALID_HANDLE, aclrtFreePhysical(h));
    expect_code!(ACL_ERROR_RT_INVALID_HANDLE, aclrtDestroyStream(h));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn error_message_and_last_error() {
    let _g = LOCK.lock();
    let _ = last_msg();
    assert!(last_msg().is_empty(), "message not cleared");
    let mut va = null_mut();
    expect_code!(
        ACL_ERROR_RT_PARAM_INVALID,
        aclrtReserveMemAddress(&mut va, MIB2, 1, null_mut(), 0)
    );
    assert_eq!(
        acl!(aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(
        acl!(aclrtGetLastError(ACL_RT_THREAD_LEVEL)),
        ACL_ERROR_RT_PARAM_INVALID
    );
    assert_eq!(acl!(aclrtGetLastError(ACL_RT_THREAD_LEVEL)), 0);
    let m = last_msg();
    assert!(m.starts_with("aclrtReserveMemAddress: alignment 1"), "{m}");
    assert!(last_msg().is_empty());
    assert_clean();
}

#[test]
fn devices_contexts_init() {
    let _g = LOCK.lock();
    let mut n = 0u32;
    ok!(aclrtGetDeviceCount(&mut n));
    assert_eq!(n, 16);
    expect_code!(ACL_ERROR_RT_INVALID_DEVICEID, aclrtSetDevice(16));
    let mut d = -1;
    let mut c = null_mut();
    std::thread::spawn(|| {
        let mut d = 0;
        expect_code!(ACL_ERROR_RT_CONTEXT_NULL, aclrtGetDevice(&mut d));
        let mut c = null_mut();
        expect_code!(ACL_ERROR_RT_CONTEXT_NULL, aclrtGetCurrentContext(&mut c));
        let mut s = null_mut();
        expect_code!(ACL_ERROR_RT_CONTEXT_NULL, aclrtCreateStream(&mut s));
    })
    .join()
    .unwrap();
    ok!(aclrtCreateContext(&mut c, 4));
    ok!(aclrtGetDevice(&mut d));
    assert_eq!(d, 4);
    let mut cur = null_mut();
    ok!(aclrtGetCurrentContext(&mut cur));
    assert_eq!(cur, c);
    assert_eq!(counters().contexts, 1);
    ok!(aclrtDestroyContext(c));
    expect_code!(ACL_ERROR_RT_INVALID_HANDLE, aclrtDestroyContext(c));
    expect_code!(ACL_ERROR_RT_CONTEXT_NULL, aclrtGetDevice(&mut d));
    let mut pid = 0;
    ok!(aclrtDeviceGetBareTgid(&mut pid));
    assert_eq!(pid, std::process::id() as i32);
    let mut phy = -1;
    ok!(aclrtGetPhyDevIdByLogicDevId(7, &mut phy));
    assert_eq!(phy, 7);
    let mut can = -1;
    ok!(aclrtDeviceCanAccessPeer(&mut can, 0, 1));
    assert_eq!(can, 1);
    set_device(0);
    expect_code!(
        ACL_ERROR_FEATURE_UNSUPPORTED,
        aclrtDeviceEnablePeerAccess(1, 1)
    );
    ok!(aclrtDeviceEnablePeerAccess(1, 0));
    ok!(aclrtDeviceDisablePeerAccess(1));
    expect_code!(ACL_ERROR_RT_PARAM_INVALID, aclrtDeviceDisablePeerAccess(1));
    reset_device(0);
    // Init counting.
    ok!(aclInit(null()));
    expect_code!(ACL_ERROR_REPEAT_INITIALIZE, aclInit(null()));
    let mut rc = 9u64;
    ok!(aclFinalizeReference(&mut rc));
    assert_eq!(rc, 1);
    ok!(aclFinalize());
    expect_code!(ACL_ERROR_REPEAT_FINALIZE, aclFinalize());
    expect_code!(ACL_ERROR_REPEAT_FINALIZE, aclFinalizeReference(&mut rc));
    assert_clean();
}
