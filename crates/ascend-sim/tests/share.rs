//! Cross-process sharing: the test binary re-executes itself as a child whose role is named by
//! `ASCEND_SIM_SHARE_ROLE`; only the handle bytes cross, as hex lines on stdin/stdout.

#[macro_use]
mod common;

use std::ffi::c_void;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::ptr::null_mut;

use common::*;

const ROLE: &str = "ASCEND_SIM_SHARE_ROLE";

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// In a child: exits the process after a while so a broken parent never leaves it hanging.
fn watchdog() {
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(20));
        eprintln!("child watchdog: giving up");
        std::process::exit(3);
    });
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn read(p: *const c_void, len: usize) -> Vec<u8> {
    // SAFETY: test memory is mapped readable for `len` bytes.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
}

fn fill(p: *mut c_void, len: usize, v: u8) {
    // SAFETY: test memory is mapped writable for `len` bytes.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), v, len) }
}

/// Spawns this binary running only `test` with role `role`.
fn spawn(test: &str, role: &str, envs: &[(&str, &str)]) -> std::process::Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(ROLE, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Reads lines of the child's stdout until one starts with `prefix`; returns the rest.
fn line_with(r: &mut impl BufRead, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "child closed stdout before `{prefix}`"
        );
        // The harness may print "test name ... " on the same line first.
        if let Some(i) = line.find(prefix) {
            return line[i + prefix.len()..].trim().to_string();
        }
    }
}

/// Child: imports the handle on stdin, checks 0xA1, writes 0xB2, cleans up.
#[test]
fn child_importer() {
    let Some(role) = role() else { return };
    watchdog();
    let _g = LOCK.lock();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let bytes = unhex(line.trim());
    set_device(1);
    let mut h = null_mut();
    let code = if role == "import-default" || role == "import-denied" {
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
    if role == "import-denied" {
        assert_eq!(code, ACL_ERROR_RT_NO_PERMISSION, "{}", last_msg());
        reset_device(1);
        assert_clean();
        println!("CHILD-OK");
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
    println!("CHILD-OK");
}

fn exporter_roundtrip(fabric: bool, allow: bool, child_role: &str) {
    set_device(0);
    let (va, h) = mapped(MIB2, &dev_prop(0));
    fill(va, 4096, 0xA1);
    let mut child = spawn("child_importer", child_role, &[]);
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
            let mut pids = [child.id() as i32];
            expect_code!(
                ACL_ERROR_INVALID_PARAM,
                aclrtMemSetPidToShareableHandle(v, pids.as_mut_ptr(), 0)
            );
            ok!(aclrtMemSetPidToShareableHandle(v, pids.as_mut_ptr(), 1));
        }
        v.to_le_bytes().to_vec()
    };
    writeln!(child.stdin.as_mut().unwrap(), "{}", hex(&bytes)).unwrap();
    let out = child.wait_with_output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && so.contains("CHILD-OK"),
        "child failed:\n{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = if child_role == "import-denied" {
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

#[test]
fn default_handle_cross_process_with_allow_list() {
    if role().is_some() {
        return;
    }
    let _g = LOCK.lock();
    exporter_roundtrip(false, true, "import-default");
}

#[test]
fn fabric_handle_cross_process() {
    if role().is_some() {
        return;
    }
    let _g = LOCK.lock();
    exporter_roundtrip(true, false, "import-fabric");
}

#[test]
fn pid_not_in_allow_list_is_rejected() {
    if role().is_some() {
        return;
    }
    let _g = LOCK.lock();
    exporter_roundtrip(false, false, "import-denied");
}

/// Child: exports host memory filled with 0xC3 as FABRIC, prints it, waits for a line, exits.
#[test]
fn child_exporter() {
    if role().as_deref() != Some("export") {
        return;
    }
    watchdog();
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
    println!("HANDLE {}", hex(&f.data));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    // Exit without cleaning up, like a crashed peer.
    std::process::exit(0);
}

#[test]
fn import_survives_and_fails_after_exporter_exit() {
    if role().is_some() {
        return;
    }
    let _g = LOCK.lock();
    set_device(2);
    let mut child = spawn("child_exporter", "export", &[]);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let bytes = unhex(&line_with(&mut out, "HANDLE "));
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
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let status = child.wait().unwrap();
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
#[test]
fn child_a2() {
    if role().as_deref() != Some("a2") {
        return;
    }
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
    println!("CHILD-OK");
}

#[test]
fn a2_rejects_fabric() {
    if role().is_some() {
        return;
    }
    let child = spawn("child_a2", "a2", &[("ASCEND_SIM_SOC", "A2")]);
    let out = child.wait_with_output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && so.contains("CHILD-OK"),
        "{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn garbage_default_handles_are_errors() {
    if role().is_some() {
        return;
    }
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
