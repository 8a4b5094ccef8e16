//! Cross-process sharing: each test re-executes the test binary as its own child in a role
//! (`ascend_testkit::role`); only the handle bytes cross, as hex lines on stdin/stdout.

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::Duration;

use ascend_testkit::{from_hex, role, test_name, to_hex, watchdog, Spawn};

use common::*;

/// A child's guard against a parent that stopped driving it.
const CHILD_GUARD: Duration = Duration::from_secs(20);

fn read(p: *const c_void, len: usize) -> Vec<u8> {
    // SAFETY: test memory is mapped readable for `len` bytes.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
}

fn fill(p: *mut c_void, len: usize, v: u8) {
    // SAFETY: test memory is mapped writable for `len` bytes.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), v, len) }
}

/// What an importer role does: whether its handle is FABRIC, the code its import must give
/// (0: it imports) and what the refusal's message must name.
fn role_plan(role: &str) -> (bool, i32, &'static str) {
    match role {
        "import-default" => (false, 0, ""),
        "import-fabric" => (true, 0, ""),
        "import-denied" => (false, ACL_ERROR_RT_NO_PERMISSION, "allow-list"),
        "refused-default" => (
            false,
            ACL_ERROR_RT_INVALID_HANDLE,
            "DEFAULT handle of host 0",
        ),
        "refused-fabric" => (
            true,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "FABRIC memory of host 0 in supernode 0",
        ),
        "refused-fabric-a2" => (true, ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "A3"),
        _ => panic!("unknown importer role {role}"),
    }
}

/// Child: imports the handle on stdin, checks 0xA1, writes 0xB2, cleans up; in a refusing
/// role, checks the refusal's code and message instead.
fn importer(role: &str) {
    watchdog(CHILD_GUARD);
    let _g = LOCK.lock();
    let line = ascend_testkit::role::read_stdin_line().expect("the handle from the parent");
    let bytes = from_hex(&line);
    let (fabric, want, names) = role_plan(role);
    set_device(1);
    let mut h = null_mut();
    let code = if !fabric {
        let v = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        acl!(aclrtMemImportFromShareableHandle(v, 1, &mut h))
    } else {
        let mut f = aclrtMemFabricHandle::default();
        f.data.copy_from_slice(&bytes);
        let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
        acl!(aclrtMemImportFromShareableHandleV2(
            fp,
            ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
            0,
            &mut h
        ))
    };
    if want != 0 {
        let msg = last_msg();
        assert_eq!(code, want, "{msg}");
        assert!(
            msg.contains(names),
            "{role}: {msg:?} does not name {names:?}"
        );
        assert!(h.is_null(), "{role}: a refused import gave a handle");
        reset_device(1);
        assert_clean();
        println!("RESULT ok");
        return;
    }
    assert_eq!(code, 0, "import failed: {}", last_msg());
    let mut prop = aclrtPhysicalMemProp::default();
    ok!(aclrtMemGetAllocationPropertiesFromHandle(h, &mut prop));
    let va = reserve(MIB2);
    ok!(aclrtMapMem(va, MIB2, 0, h, 0));
    assert_eq!(read(va, 4096), vec![0xA1; 4096]);
    fill(va, 4096, 0xB2);
    teardown(va, h);
    reset_device(1);
    assert_clean();
    println!("RESULT ok");
}

/// Exports memory to a child of `test` (the caller) in `child_role`, which imports it; the
/// child's environment adds `env` (its emulated host, supernode or product).
fn exporter_roundtrip(
    test: &str,
    fabric: bool,
    allow: bool,
    child_role: &str,
    env: &[(&str, &str)],
) {
    set_device(0);
    let (va, h) = mapped(MIB2, &dev_prop(0));
    fill(va, 4096, 0xA1);
    let mut child = Spawn::new(test, child_role).envs(env).start();
    let bytes = if fabric {
        let mut f = aclrtMemFabricHandle::default();
        let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
        ok!(aclrtMemExportToShareableHandleV2(
            h,
            1,
            ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
            fp
        ));
        f.data.to_vec()
    } else {
        let mut v = 0u64;
        ok!(aclrtMemExportToShareableHandle(
            h,
            ACL_MEM_HANDLE_TYPE_NONE,
            0,
            &mut v
        ));
        if allow {
            let mut pids = [child.child.id() as i32];
            expect_code!(
                ACL_ERROR_INVALID_PARAM,
                aclrtMemSetPidToShareableHandle(v, pids.as_mut_ptr(), 0)
            );
            ok!(aclrtMemSetPidToShareableHandle(v, pids.as_mut_ptr(), 1));
        }
        v.to_le_bytes().to_vec()
    };
    child.send(&to_hex(&bytes));
    child.finish();
    let want = if role_plan(child_role).1 != 0 {
        0xA1
    } else {
        0xB2
    };
    assert_eq!(
        read(va, 4096),
        vec![want; 4096],
        "writes of the importer not visible"
    );
    teardown(va, h);
    reset_device(0);
    assert_clean();
}

/// A test that exports memory to a child of its own in an importer role: `fabric` (else
/// DEFAULT), `allow` (the child's pid in the allow-list), the child's role and environment.
macro_rules! roundtrip_test {
    ($(#[$doc:meta])* $name:ident, fabric: $fabric:expr, allow: $allow:expr, $role:expr, $env:expr) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            if let Some(role) = role() {
                return importer(&role);
            }
            let _g = LOCK.lock();
            exporter_roundtrip(test_name!($name), $fabric, $allow, $role, $env);
        }
    };
}

roundtrip_test!(
    default_handle_cross_process_with_allow_list,
    fabric: false,
    allow: true,
    "import-default",
    &[]
);

roundtrip_test!(
    fabric_handle_cross_process,
    fabric: true,
    allow: false,
    "import-fabric",
    &[]
);

roundtrip_test!(
    pid_not_in_allow_list_is_rejected,
    fabric: false,
    allow: false,
    "import-denied",
    &[]
);

roundtrip_test!(
    /// Across emulated hosts of one supernode, FABRIC memory is shared: the child on host 1
    /// imports it, reads the exporter's bytes and its writes reach the exporter.
    supernode_fabric_import_on_another_host_of_the_supernode,
    fabric: true,
    allow: false,
    "import-fabric",
    &[("ASCEND_SIM_HOST", "1")]
);

roundtrip_test!(
    /// A FABRIC handle does not reach past its supernode: 207000, naming both ends.
    supernode_fabric_import_from_another_supernode_is_refused,
    fabric: true,
    allow: false,
    "refused-fabric",
    &[("ASCEND_SIM_HOST", "1"), ("ASCEND_SIM_SUPERNODE", "1")]
);

roundtrip_test!(
    /// A DEFAULT handle is one host's: on another host of the same supernode, even with the
    /// importer in the allow-list, it is a handle the host does not know (107017).
    supernode_default_handle_on_another_host_is_refused,
    fabric: false,
    allow: true,
    "refused-default",
    &[("ASCEND_SIM_HOST", "1")]
);

roundtrip_test!(
    /// An A2 host has no fabric: a FABRIC handle from an A3 host is refused at import (207000).
    supernode_a2_host_refuses_a_fabric_import,
    fabric: true,
    allow: false,
    "refused-fabric-a2",
    &[("ASCEND_SIM_HOST", "1"), ("ASCEND_SIM_SOC", "A2")]
);

/// Child: exports host memory filled with 0xC3 as FABRIC, prints it, waits for a line, exits.
fn exporter() {
    watchdog(CHILD_GUARD);
    let _g = LOCK.lock();
    set_device(0);
    let (va, h) = mapped(MIB2, &host_prop());
    fill(va, MIB2, 0xC3);
    let mut f = aclrtMemFabricHandle::default();
    let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
    ok!(aclrtMemExportToShareableHandleV2(
        h,
        1,
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        fp
    ));
    println!("HANDLE {}", to_hex(&f.data));
    let _go = ascend_testkit::role::read_stdin_line();
    // Exit without cleaning up, like a crashed peer.
    std::process::exit(0);
}

#[test]
fn import_survives_and_fails_after_exporter_exit() {
    if let Some(role) = role() {
        assert_eq!(role, "export");
        return exporter();
    }
    let _g = LOCK.lock();
    set_device(2);
    let mut child = Spawn::new(
        test_name!(import_survives_and_fails_after_exporter_exit),
        "export",
    )
    .start();
    let bytes = from_hex(&child.expect_line("HANDLE "));
    let mut f = aclrtMemFabricHandle::default();
    f.data.copy_from_slice(&bytes);
    let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
    let mut h = null_mut();
    ok!(aclrtMemImportFromShareableHandleV2(
        fp,
        ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        0,
        &mut h
    ));
    let va = reserve(MIB2);
    ok!(aclrtMapMem(va, MIB2, 0, h, 0));
    child.send("go");
    let status = child.child.wait().unwrap();
    assert!(status.success());
    // The importer keeps the memory alive.
    assert_eq!(read(va, MIB2), vec![0xC3; MIB2]);
    let mut h2 = null_mut();
    expect_code!(
        ACL_ERROR_RT_INVALID_HANDLE,
        aclrtMemImportFromShareableHandleV2(fp, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, 0, &mut h2)
    );
    assert!(last_msg().contains("gone"));
    teardown(va, h);
    reset_device(2);
    assert_clean();
}

/// Child under ASCEND_SIM_SOC=A2: FABRIC and the NoUC reservation are unsupported.
fn a2_child() {
    let _g = LOCK.lock();
    set_device(0);
    let h = malloc_phys(MIB2, &dev_prop(0));
    let mut f = aclrtMemFabricHandle::default();
    let fp: *mut c_void = (&mut f as *mut aclrtMemFabricHandle).cast();
    expect_code!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        aclrtMemExportToShareableHandleV2(h, 1, ACL_MEM_SHARE_HANDLE_TYPE_FABRIC, fp)
    );
    let mut v = 0u64;
    let vp: *mut c_void = (&mut v as *mut u64).cast();
    ok!(aclrtMemExportToShareableHandleV2(
        h,
        1,
        ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
        vp
    ));
    let mut va = null_mut();
    expect_code!(
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        aclrtReserveMemAddressNoUCMemory(&mut va, 1 << 30, 0, (40usize << 40) as *mut c_void, 1)
    );
    ok!(aclrtFreePhysical(h));
    reset_device(0);
    assert_clean();
    println!("RESULT ok");
}

#[test]
fn a2_rejects_fabric() {
    if let Some(role) = role() {
        assert_eq!(role, "a2");
        return a2_child();
    }
    let out = Spawn::new(test_name!(a2_rejects_fabric), "a2")
        .env("ASCEND_SIM_SOC", "A2")
        .output();
    ascend_testkit::assert_ok(&out);
}

#[test]
fn garbage_default_handles_are_errors() {
    let _g = LOCK.lock();
    // pid 1's fds, our own fds, a dead pid: errors, never a crash or a wrong import.
    for v in [
        1u64 | (3 << 22),
        u64::from(std::process::id()) | (1 << 22),
        0x3F_FFFF,
        0,
    ] {
        let mut h = null_mut();
        let code = acl!(aclrtMemImportFromShareableHandle(v, 0, &mut h));
        assert_ne!(code, 0, "garbage handle {v:#x} imported");
        assert!(h.is_null());
    }
    assert_clean();
}
