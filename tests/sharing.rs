//! Sharing across real processes: the test binary re-runs itself (`child_entry`, with a role in
//! an env var) and only share-handle bytes cross between the processes.

mod common;

use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};

use acl_sys as acl;
use ascend_mem::{
    DeviceBuffer, ErrorKind, ExportFlags, PhysicalMem, ReservedVa, Runtime, ShareKind, SharedHandle,
};
use common::{from_hex, pattern, role, setup, to_hex, ROLE_VAR};

const MIB2: usize = 2 << 20;

fn spawn_child(role: &str, envs: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_VAR, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child")
}

/// The line the child prints after `RESULT `.
fn child_result(child: Child) -> (bool, String) {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or("")
        .to_string();
    (
        out.status.success(),
        if line.is_empty() { text } else { line },
    )
}

fn read_line_stdin() -> String {
    let mut s = String::new();
    std::io::stdin().lock().read_line(&mut s).unwrap();
    s
}

/// Child side: dispatches on the role; a no-op in a normal test run.
#[test]
fn child_entry() {
    let Some(role) = role() else { return };
    let rt = Runtime::emulated().unwrap();
    let dev = rt.device(0).unwrap();
    match role.as_str() {
        "import-write" => {
            let shared = SharedHandle::from_bytes(&from_hex(&read_line_stdin())).unwrap();
            let mem = shared.import(&dev).unwrap();
            let g = dev.granular(mem.len()).unwrap();
            let va = ReservedVa::new(&dev, g).unwrap();
            let map = va.map(&mem, g.zero()).unwrap();
            map.write_from(&pattern(42, map.len()), 0).unwrap();
            drop((map, va, mem));
            assert!(
                ascend_sim::counters().is_zero(),
                "{:?}",
                ascend_sim::counters()
            );
            println!("RESULT ok");
        }
        "import-expect-error" => {
            let shared = SharedHandle::from_bytes(&from_hex(&read_line_stdin())).unwrap();
            let e = shared.import(&dev).unwrap_err();
            println!("RESULT {:?} {}", e.kind(), e.code().map_or(0, |c| c.0));
        }
        "export-and-exit" => {
            let buf = DeviceBuffer::new(&dev, MIB2).unwrap();
            let h = buf
                .export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)
                .unwrap();
            println!("RESULT {}", to_hex(&h.to_bytes()));
        }
        "fabric-on-a2" => {
            let g = dev.granular(MIB2).unwrap();
            let mem = PhysicalMem::hbm(&dev, g).unwrap();
            let e = mem
                .export(ShareKind::Fabric, ExportFlags::empty())
                .unwrap_err();
            let other = PhysicalMem::hbm(&dev, g).unwrap();
            let ok = other
                .export(ShareKind::Default, ExportFlags::empty())
                .is_ok();
            println!(
                "RESULT {:?} {} default-ok={ok}",
                e.kind(),
                e.code().map_or(0, |c| c.0)
            );
        }
        other => panic!("unknown role {other}"),
    }
}

fn share_with_child(kind: ShareKind) {
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    buf.fill(0).unwrap();
    let h = buf.export(kind, ExportFlags::empty()).unwrap();
    let mut child = spawn_child("import-write", &[]);
    h.allow_pids(&[child.id() as i32]).unwrap();
    writeln!(child.stdin.take().unwrap(), "{}", to_hex(&h.to_bytes())).unwrap();
    let (ok, res) = child_result(child);
    assert!(ok && res == "ok", "child: {res}");
    assert_eq!(
        buf.to_vec().unwrap(),
        pattern(42, MIB2),
        "parent sees the child's writes"
    );
    drop((h, buf));
    env.finish();
}

#[test]
fn fabric_handle_across_processes() {
    share_with_child(ShareKind::Fabric);
}

#[test]
fn default_handle_across_processes() {
    share_with_child(ShareKind::Default);
}

#[test]
fn import_without_allow_list_is_denied() {
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let h = buf.export(ShareKind::Fabric, ExportFlags::empty()).unwrap();
    let mut child = spawn_child("import-expect-error", &[]);
    writeln!(child.stdin.take().unwrap(), "{}", to_hex(&h.to_bytes())).unwrap();
    let (ok, res) = child_result(child);
    assert!(ok, "child: {res}");
    assert_eq!(
        res,
        format!("PermissionDenied {}", acl::ACL_ERROR_RT_NO_PERMISSION)
    );
    drop((h, buf));
    env.finish();
}

#[test]
fn import_after_the_exporter_exited() {
    let env = setup();
    let child = spawn_child("export-and-exit", &[]);
    // Waits for the exit: the exporter (and its memory) is gone before we import.
    let (ok, line) = child_result(child);
    assert!(ok, "child: {line}");
    let shared = SharedHandle::from_bytes(&from_hex(&line)).unwrap();
    let e = shared.import(&env.dev).unwrap_err();
    assert_eq!(e.api(), Some("aclrtMemImportFromShareableHandleV2"));
    assert_eq!(e.code().unwrap().0, acl::ACL_ERROR_RT_INVALID_HANDLE, "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    env.finish();
}

#[test]
fn fabric_is_not_supported_on_a2() {
    let env = setup();
    let child = spawn_child("fabric-on-a2", &[("ASCEND_SIM_SOC", "A2")]);
    let (ok, res) = child_result(child);
    assert!(ok, "child: {res}");
    assert_eq!(
        res,
        format!(
            "NotSupported {} default-ok=true",
            acl::ACL_ERROR_RT_FEATURE_NOT_SUPPORT
        )
    );
    env.finish();
}
