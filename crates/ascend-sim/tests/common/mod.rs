//! Shared helpers of the ascend-sim integration tests. Counters and faults are process-global
//! and tests run on parallel threads, so every test holds [`LOCK`].
#![allow(dead_code, clippy::missing_safety_doc)]

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

pub use acl_sys::*;
pub use ascend_sim::counters;

/// Serialises tests that touch process-global state.
pub static LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

pub const MIB2: usize = 2 << 20;

/// The in-process loader table.
pub fn t() -> &'static AclLib {
    ascend_sim::acl_table()
}

/// Calls a table method and unwraps the missing-symbol layer.
macro_rules! acl {
    ($f:ident($($a:expr),* $(,)?)) => {{
        #[allow(unused_unsafe)]
        // SAFETY: test calls follow the C contract; arguments are live locals.
        let r = unsafe { $crate::common::t().$f($($a),*) };
        r.expect(concat!(stringify!($f), " missing"))
    }};
}

/// Asserts a call returns `code`, printing the error message otherwise.
macro_rules! expect_code {
    ($code:expr, $f:ident($($a:expr),* $(,)?)) => {{
        let got = acl!($f($($a),*));
        let want: i32 = $code;
        assert_eq!(got, want, "{} returned {got}, expected {want}; message: {}", stringify!($f), $crate::common::last_msg());
    }};
}

/// Asserts success.
macro_rules! ok {
    ($f:ident($($a:expr),* $(,)?)) => {
        expect_code!(0, $f($($a),*))
    };
}

/// The thread's recent error message (consumed).
pub fn last_msg() -> String {
    // SAFETY: no arguments.
    let p = unsafe { t().aclGetRecentErrMsg() }.unwrap();
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string valid until the next call on this thread.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub fn dev_prop(dev: u32) -> aclrtPhysicalMemProp {
    aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: ACL_HBM_MEM_HUGE,
        location: aclrtMemLocation {
            id: dev,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        reserve: 0,
    }
}

pub fn host_prop() -> aclrtPhysicalMemProp {
    aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: ACL_MEM_P2P_HUGE,
        location: aclrtMemLocation {
            id: 0,
            type_: ACL_MEM_LOCATION_TYPE_HOST,
        },
        reserve: 0,
    }
}

pub fn set_device(d: i32) {
    ok!(aclrtSetDevice(d));
}

pub fn reset_device(d: i32) {
    ok!(aclrtResetDevice(d));
}

pub fn reserve(size: usize) -> *mut c_void {
    let mut va = null_mut();
    ok!(aclrtReserveMemAddress(&mut va, size, 0, null_mut(), 0));
    va
}

pub fn malloc_phys(size: usize, prop: &aclrtPhysicalMemProp) -> aclrtDrvMemHandle {
    let mut h = null_mut();
    ok!(aclrtMallocPhysical(&mut h, size, prop, 0));
    h
}

/// reserve + malloc + map of `size` bytes; returns (va, handle).
pub fn mapped(size: usize, prop: &aclrtPhysicalMemProp) -> (*mut c_void, aclrtDrvMemHandle) {
    let va = reserve(size);
    let h = malloc_phys(size, prop);
    ok!(aclrtMapMem(va, size, 0, h, 0));
    (va, h)
}

/// unmap + free + release in the documented order.
pub fn teardown(va: *mut c_void, h: aclrtDrvMemHandle) {
    ok!(aclrtUnmapMem(va));
    ok!(aclrtFreePhysical(h));
    ok!(aclrtReleaseMemAddress(va));
}

/// Copies `data` to device memory at `p` (aclrtMemcpy).
pub fn write_dev(p: *mut c_void, data: &[u8]) {
    ok!(aclrtMemcpy(
        p,
        data.len(),
        data.as_ptr().cast(),
        data.len(),
        ACL_MEMCPY_HOST_TO_DEVICE
    ));
}

/// `n` bytes of device memory at `p` (aclrtMemcpy).
pub fn read_dev(p: *mut c_void, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    ok!(aclrtMemcpy(
        v.as_mut_ptr().cast(),
        n,
        p,
        n,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    v
}

/// Asserts nothing leaked.
pub fn assert_clean() {
    let c = counters();
    assert!(c.is_zero(), "leaked objects: {c}");
}

/// Runs the current test binary as a child with `envs`, running only test `name` (in the
/// role `rerun`: the test tells itself apart by its own variables in `envs`).
pub fn rerun(name: &str, envs: &[(&str, &str)]) -> std::process::Output {
    ascend_testkit::Spawn::new(name, "rerun")
        .envs(envs)
        .output()
}

/// Asserts a child run passed and ran exactly one test.
pub fn assert_child_ok(out: &std::process::Output) {
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed:\nstdout:\n{so}\nstderr:\n{se}"
    );
    assert!(so.contains("1 passed"), "child ran no test:\n{so}\n{se}");
}

/// A new stream of the current device.
pub fn stream() -> aclrtStream {
    let mut s = null_mut();
    ok!(aclrtCreateStream(&mut s));
    s
}

/// `size` bytes of device memory (`aclrtMalloc`).
pub fn dev_buf(size: usize) -> *mut c_void {
    let mut d = null_mut();
    ok!(aclrtMalloc(&mut d, size, ACL_MEM_MALLOC_HUGE_FIRST));
    d
}

/// Runs the whole test binary again in a child with `ASCEND_SIM_STREAM_MODE=deterministic`
/// (marked by `child_var`, which the calling test checks so the child does not recurse) and
/// asserts every test passed there too.
pub fn rerun_deterministic(child_var: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--test-threads=2"])
        .env(child_var, "1")
        .env("ASCEND_SIM_STREAM_MODE", "deterministic")
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "deterministic run failed:\n{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(so.contains("test result: ok"), "{so}");
}
