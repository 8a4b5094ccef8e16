//! Fault injection: every VMM (and copy) symbol failing once returns the injected code, sets the
//! message and leaves no object behind; ASCEND_SIM_FAIL arms the same from the environment. HCCL
//! and HIXL exports go through the same entry guard: counted, in the call log, injectable.

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr::null_mut;

use ascend_sim::fault;
use common::*;

const CODE: i32 = 555_555;

/// Arms `sym` to fail once, runs `f`, checks the code, message, counters and call count.
fn fails_once(sym: &str, f: impl FnOnce() -> i32) {
    let before = counters();
    let calls = fault::calls(sym);
    fault::fail_nth(sym, 1, CODE);
    let code = f();
    assert_eq!(code, CODE, "{sym} did not return the injected code");
    assert_eq!(
        last_msg(),
        format!("{sym}: injected failure (ASCEND_SIM_FAIL)")
    );
    assert_eq!(counters(), before, "{sym} changed objects while failing");
    assert_eq!(fault::calls(sym), calls + 1);
}

#[test]
fn every_vmm_symbol_fails_once_without_side_effects() {
    let _g = LOCK.lock();
    set_device(0);
    let mut va: *mut c_void = null_mut();
    fails_once("aclrtReserveMemAddress", || {
        acl!(aclrtReserveMemAddress(&mut va, MIB2, 0, null_mut(), 0))
    });
    let base = (42usize << 40) as *mut c_void;
    fails_once("aclrtReserveMemAddressNoUCMemory", || {
        acl!(aclrtReserveMemAddressNoUCMemory(
            &mut va,
            1 << 30,
            0,
            base,
            1
        ))
    });
    let mut h: aclrtDrvMemHandle = null_mut();
    let prop = dev_prop(0);
    fails_once("aclrtMallocPhysical", || {
        acl!(aclrtMallocPhysical(&mut h, MIB2, &prop, 0))
    });
    assert_eq!(ascend_sim::hbm_in_use(0), 0);
    let va = reserve(2 * MIB2);
    let h = malloc_phys(MIB2, &prop);
    fails_once("aclrtMapMem", || acl!(aclrtMapMem(va, MIB2, 0, h, 0)));
    fails_once("aclrtMemMapNoAccess", || {
        acl!(aclrtMemMapNoAccess(va, MIB2, 0, h, 0))
    });
    ok!(aclrtMapMem(va, MIB2, 0, h, 0));
    let mut p2 = dev_prop(0);
    let mut g = 0usize;
    fails_once("aclrtMemGetAllocationGranularity", || {
        acl!(aclrtMemGetAllocationGranularity(&mut p2, 0, &mut g))
    });
    let mut r = null_mut();
    fails_once("aclrtMemRetainAllocationHandle", || {
        acl!(aclrtMemRetainAllocationHandle(va, &mut r))
    });
    let mut pp = aclrtPhysicalMemProp::default();
    fails_once("aclrtMemGetAllocationPropertiesFromHandle", || {
        acl!(aclrtMemGetAllocationPropertiesFromHandle(h, &mut pp))
    });
    let (mut b, mut s) = (null_mut(), 0usize);
    fails_once("aclrtMemGetAddressRange", || {
        acl!(aclrtMemGetAddressRange(va, &mut b, &mut s))
    });
    let mut attr = aclrtPtrAttributes::default();
    fails_once("aclrtPointerGetAttributes", || {
        acl!(aclrtPointerGetAttributes(va, &mut attr))
    });
    let mut desc = aclrtMemAccessDesc {
        flags: ACL_RT_MEM_ACCESS_FLAGS_READWRITE,
        location: aclrtMemLocation {
            id: 0,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        rsv: [0; 12],
    };
    fails_once("aclrtMemSetAccess", || {
        acl!(aclrtMemSetAccess(va, MIB2, &mut desc, 1))
    });
    let mut loc = desc.location;
    let mut flag = 0u64;
    fails_once("aclrtMemGetAccess", || {
        acl!(aclrtMemGetAccess(va, &mut loc, &mut flag))
    });
    let buf = [0u8; 64];
    fails_once("aclrtMemcpy", || {
        acl!(aclrtMemcpy(
            va,
            64,
            buf.as_ptr().cast(),
            64,
            ACL_MEMCPY_HOST_TO_DEVICE
        ))
    });
    fails_once("aclrtMemcpyAsync", || {
        acl!(aclrtMemcpyAsync(
            va,
            64,
            buf.as_ptr().cast(),
            64,
            ACL_MEMCPY_HOST_TO_DEVICE,
            null_mut()
        ))
    });
    // Sharing.
    let mut v = 0u64;
    fails_once("aclrtMemExportToShareableHandle", || {
        acl!(aclrtMemExportToShareableHandle(
            h,
            ACL_MEM_HANDLE_TYPE_NONE,
            0,
            &mut v
        ))
    });
    let mut f = aclrtMemFabricHandle::default();
    let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
    fails_once("aclrtMemExportToShareableHandleV2", || {
        acl!(aclrtMemExportToShareableHandleV2(
            h,
            1,
            ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
            fp
        ))
    });
    ok!(aclrtMemExportToShareableHandleV2(
        h,
        0,
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        fp
    ));
    let mut pids = [std::process::id() as i32];
    fails_once("aclrtMemSetPidToShareableHandleV2", || {
        acl!(aclrtMemSetPidToShareableHandleV2(
            fp,
            ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
            pids.as_mut_ptr(),
            1
        ))
    });
    fails_once("aclrtMemSetPidToShareableHandle", || {
        acl!(aclrtMemSetPidToShareableHandle(v, pids.as_mut_ptr(), 1))
    });
    let mut imp = null_mut();
    fails_once("aclrtMemImportFromShareableHandleV2", || {
        acl!(aclrtMemImportFromShareableHandleV2(
            fp,
            ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
            0,
            &mut imp
        ))
    });
    fails_once("aclrtMemImportFromShareableHandle", || {
        acl!(aclrtMemImportFromShareableHandle(v, 0, &mut imp))
    });
    // Teardown calls fail and leave the object in place.
    fails_once("aclrtUnmapMem", || acl!(aclrtUnmapMem(va)));
    ok!(aclrtUnmapMem(va));
    fails_once("aclrtFreePhysical", || acl!(aclrtFreePhysical(h)));
    ok!(aclrtFreePhysical(h));
    fails_once("aclrtReleaseMemAddress", || {
        acl!(aclrtReleaseMemAddress(va))
    });
    ok!(aclrtReleaseMemAddress(va));
    // Plain allocations.
    let mut d = null_mut();
    fails_once("aclrtMalloc", || acl!(aclrtMalloc(&mut d, 4096, 0)));
    fails_once("aclrtMallocHost", || acl!(aclrtMallocHost(&mut d, 4096)));
    ok!(aclrtMalloc(&mut d, 4096, 0));
    fails_once("aclrtFree", || acl!(aclrtFree(d)));
    ok!(aclrtFree(d));
    ok!(aclrtMallocHost(&mut d, 4096));
    fails_once("aclrtFreeHost", || acl!(aclrtFreeHost(d)));
    ok!(aclrtFreeHost(d));
    fault::clear();
    reset_device(0);
    assert_clean();
}

#[test]
fn nth_call_counts_from_arming_and_clear_disarms() {
    let _g = LOCK.lock();
    fault::fail_nth("aclrtReserveMemAddress", 3, ACL_ERROR_RT_MEMORY_ALLOCATION);
    let a = reserve(MIB2);
    let b = reserve(MIB2);
    let mut c = null_mut();
    expect_code!(
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        aclrtReserveMemAddress(&mut c, MIB2, 0, null_mut(), 0)
    );
    let d = reserve(MIB2);
    fault::fail_nth("aclrtReleaseMemAddress", 1, 1);
    fault::clear();
    for x in [a, b, d] {
        ok!(aclrtReleaseMemAddress(x));
    }
    assert_clean();
}

#[test]
fn injected_panic_is_caught() {
    let _g = LOCK.lock();
    fault::fail_nth("aclrtGetDeviceCount", 1, fault::PANIC);
    let mut n = 0u32;
    expect_code!(ACL_ERROR_RT_INTERNAL_ERROR, aclrtGetDeviceCount(&mut n));
    assert!(last_msg().contains("panic"));
    ok!(aclrtGetDeviceCount(&mut n));
    assert_clean();
}

#[test]
fn hidden_symbols_are_missing_from_lookup() {
    let _g = LOCK.lock();
    assert!(!ascend_sim::lookup("aclrtMemMapNoAccess").is_null());
    fault::hide_symbol("aclrtMemMapNoAccess");
    assert!(ascend_sim::lookup("aclrtMemMapNoAccess").is_null());
    // SAFETY: the emulator's lookup returns its exports, which have acl-sys's signatures.
    let fresh = unsafe {
        AclLib::from_source(acl_sys::Source::InProcess {
            name: "sim",
            lookup: ascend_sim::lookup,
        })
    };
    assert!(!fresh.is_available("aclrtMemMapNoAccess"));
    // SAFETY: the call is never made; the symbol is missing.
    let r = unsafe { fresh.aclrtMemMapNoAccess(null_mut(), 0, 0, null_mut(), 0) };
    assert!(r.is_err());
    fault::clear();
    assert!(!ascend_sim::lookup("aclrtMemMapNoAccess").is_null());
    assert_clean();
}

#[test]
fn env_var_arms_faults() {
    if std::env::var_os("ASCEND_SIM_FAIL").is_some() {
        // Child: the 2nd reserve fails with 207001, the 1st map with the default 507899.
        let _g = LOCK.lock();
        let a = reserve(MIB2);
        let mut b = null_mut();
        expect_code!(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            aclrtReserveMemAddress(&mut b, MIB2, 0, null_mut(), 0)
        );
        let h = malloc_phys(MIB2, &dev_prop(0));
        expect_code!(
            ACL_ERROR_RT_DRV_INTERNAL_ERROR,
            aclrtMapMem(a, MIB2, 0, h, 0)
        );
        ok!(aclrtMapMem(a, MIB2, 0, h, 0));
        teardown(a, h);
        assert_clean();
        return;
    }
    let out = rerun(
        "env_var_arms_faults",
        &[(
            "ASCEND_SIM_FAIL",
            "aclrtReserveMemAddress:2:207001,aclrtMapMem:1",
        )],
    );
    assert_child_ok(&out);
}

fn hccl() -> &'static hccl_sys::HcclLib {
    ascend_sim::hccl_table()
}

fn hixl() -> &'static hixl_sys::HixlLib {
    ascend_sim::hixl_table()
}

/// `HcclCommSymWinRegister(NULL, NULL, 0, NULL, 0)` through the in-process table.
fn sym_win_register_nulls() -> hccl_sys::HcclResult {
    // SAFETY: null arguments are rejected by the emulator (or the injected fault fires first).
    unsafe { hccl().HcclCommSymWinRegister(null_mut(), null_mut(), 0, null_mut(), 0) }
        .expect("HcclCommSymWinRegister missing")
}

#[test]
fn hccl_faults_are_injected_like_acl_ones() {
    let _g = LOCK.lock();
    let sym = "HcclCommSymWinRegister";
    let calls = fault::calls(sym);
    fault::fail_nth(sym, 1, 4242);
    assert_eq!(sym_win_register_nulls(), 4242);
    let msg = ascend_sim::hccl_last_error_message().unwrap();
    assert!(
        msg.starts_with("HcclCommSymWinRegister: injected failure (ASCEND_SIM_FAIL)"),
        "{msg}"
    );
    // One-shot: the next call runs the body, which rejects the NULL communicator.
    assert_ne!(sym_win_register_nulls(), 4242);
    assert_ne!(sym_win_register_nulls(), hccl_sys::HCCL_SUCCESS);
    assert_eq!(fault::calls(sym), calls + 3);

    fault::fail_nth(sym, 2, fault::PANIC);
    assert_ne!(sym_win_register_nulls(), hccl_sys::HCCL_E_INTERNAL);
    assert_eq!(sym_win_register_nulls(), hccl_sys::HCCL_E_INTERNAL);
    assert!(ascend_sim::hccl_last_error_message()
        .unwrap()
        .contains("panic"));

    // Calls that do not return an HcclResult are guarded too: the fallback text on a fault.
    fault::fail_nth("HcclGetErrorString", 1, 1);
    // SAFETY: any code is accepted; the result is a static string.
    let text = |c| unsafe { std::ffi::CStr::from_ptr(hccl().HcclGetErrorString(c).unwrap()) };
    assert_eq!(text(hccl_sys::HCCL_SUCCESS), c"unknow error");
    assert_eq!(text(hccl_sys::HCCL_SUCCESS), c"no error");
    fault::clear();
    assert_clean();
}

#[test]
fn hccl_and_hixl_calls_are_counted_and_logged() {
    let _g = LOCK.lock();
    let (reg, destroy) = ("HcclCommSymWinRegister", "HixlCSServerDestroy");
    let (reg_calls, destroy_calls) = (fault::calls(reg), fault::calls(destroy));
    ascend_sim::set_call_log(true);
    sym_win_register_nulls();
    // SAFETY: a NULL handle is rejected by the emulator.
    let st = unsafe { hixl().HixlCSServerDestroy(null_mut()) }.unwrap();
    let mut n = 0u32;
    ok!(aclrtGetDeviceCount(&mut n));
    let log = ascend_sim::call_log();
    ascend_sim::set_call_log(false);
    assert_ne!(st, hixl_sys::HIXL_SUCCESS);
    assert_eq!(log, [reg, destroy, "aclrtGetDeviceCount"]);
    assert_eq!(fault::calls(reg), reg_calls + 1);
    assert_eq!(fault::calls(destroy), destroy_calls + 1);

    // The HIXL fault API and the common one arm the same table.
    fault::fail_nth(destroy, 1, hixl_sys::HIXL_TIMEOUT as i32);
    // SAFETY: as above.
    let st = unsafe { hixl().HixlCSServerDestroy(null_mut()) }.unwrap();
    assert_eq!(st, hixl_sys::HIXL_TIMEOUT);
    assert_eq!(ascend_sim::hixl_fault::calls(destroy), destroy_calls + 2);
    assert_clean();
}

#[test]
fn env_var_arms_hccl_faults() {
    if std::env::var_os("ASCEND_SIM_FAIL").is_some() {
        // Child: the 1st register fails with HCCL's default injected code.
        let _g = LOCK.lock();
        assert_eq!(sym_win_register_nulls(), hccl_sys::HCCL_E_INTERNAL);
        assert!(ascend_sim::hccl_last_error_message()
            .unwrap()
            .contains("HcclCommSymWinRegister: injected failure"));
        assert_eq!(sym_win_register_nulls(), hccl_sys::HCCL_E_PTR);
        return;
    }
    let out = rerun(
        "env_var_arms_hccl_faults",
        &[("ASCEND_SIM_FAIL", "HcclCommSymWinRegister:1")],
    );
    assert_child_ok(&out);
}
