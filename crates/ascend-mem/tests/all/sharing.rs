//! Sharing across real processes: each test re-runs the test binary as its own child in a role
//! (`ascend_testkit::role`) and only share-handle bytes cross between the processes.

use std::io::Write;
use std::process::Child;

use crate::common::{pattern, setup};
use ascend_mem::prelude::*;
use ascend_mem::{
    DeviceBuffer, ErrorKind, ExportFlags, PhysicalMem, ReservedVa, Runtime, ShareKind, SharedHandle,
};
use ascend_testkit::role::read_stdin_line;
use ascend_testkit::{from_hex, result_of, role, test_name, to_hex, Spawn};

const MIB2: usize = 2 << 20;

/// Starts `test` again as a child in `role` with `envs` set, stdin and stdout piped.
fn spawn_child(test: &str, role: &str, envs: &[(&str, &str)]) -> Child {
    Spawn::new(test, role).envs(envs).spawn()
}

/// Whether the child succeeded, and its RESULT line (or what it printed instead).
fn child_result(child: Child) -> (bool, String) {
    let out = child.wait_with_output().unwrap();
    (out.status.success(), result_of(&out))
}

/// One line of stdin; the parent always sends it.
fn read_line_stdin() -> String {
    read_stdin_line().expect("a line from the parent")
}

/// The child side of the tests here that spawn themselves, by role.
fn child_main(role: &str) {
    let rt = Runtime::emulated().unwrap();
    let dev = rt.device(0).unwrap();
    match role {
        "import-write" => {
            if std::env::var_os(DENY_VAR).is_some() {
                deny_pidfd_getfd();
            }
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
        "import-forged-default" => {
            let v: u64 = read_line_stdin().trim().parse().unwrap();
            let mut data = [0u8; 128];
            data[..8].copy_from_slice(&v.to_le_bytes());
            let e = SharedHandle::from_parts(ShareKind::Default, MIB2, data)
                .import(&dev)
                .unwrap_err();
            println!(
                "RESULT {:?} {} {}",
                e.kind(),
                e.code().map_or(0, |c| c.0),
                e
            );
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

/// Makes the child take descriptors from the exporter's broker, not with `pidfd_getfd`.
const VIA_BROKER: (&str, &str) = ("ASCEND_SIM_SHARE_VIA", "broker");

/// Makes the importing child refuse itself `pidfd_getfd`, as a container's seccomp profile
/// does without `CAP_SYS_PTRACE`.
const DENY_VAR: &str = "ASCEND_TEST_DENY_PIDFD_GETFD";

/// Installs a seccomp filter on this thread that fails `pidfd_getfd` with EPERM, and checks
/// that it does.
fn deny_pidfd_getfd() {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let filter = [
        // Load the syscall number (offset 0 of struct seccomp_data).
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_pidfd_getfd as u32,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with plain values, then with a pointer to a filter program that lives
    // across the call (the kernel copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog
            ),
            0
        );
    }
    // SAFETY: raw syscalls with integer arguments; the pidfd is closed below.
    let (pidfd, r) = unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as i32;
        (pidfd, libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0))
    };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EPERM))
    );
    // SAFETY: closing the pidfd opened above.
    unsafe { libc::close(pidfd) };
}

/// Exports `kind` memory to a child of `test` (the caller) that writes into it.
fn share_with_child(test: &str, kind: ShareKind, envs: &[(&str, &str)]) {
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    buf.fill(0).unwrap();
    let h = buf.export(kind, ExportFlags::empty()).unwrap();
    let mut child = spawn_child(test, "import-write", envs);
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
    if let Some(role) = role() {
        return child_main(&role);
    }
    share_with_child(
        test_name!(fabric_handle_across_processes),
        ShareKind::Fabric,
        &[],
    );
}

#[test]
fn default_handle_across_processes() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    share_with_child(
        test_name!(default_handle_across_processes),
        ShareKind::Default,
        &[],
    );
}

/// Where `pidfd_getfd` is refused (here by a seccomp filter in the importer, as Docker's
/// default profile does), the importer takes the descriptor from the exporter's broker over a
/// Unix socket; `ASCEND_SIM_SHARE_VIA=broker` goes there first.
#[test]
fn both_handles_across_processes_through_the_broker() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    for kind in [ShareKind::Fabric, ShareKind::Default] {
        share_with_child(
            test_name!(both_handles_across_processes_through_the_broker),
            kind,
            &[(DENY_VAR, "1")],
        );
        share_with_child(
            test_name!(both_handles_across_processes_through_the_broker),
            kind,
            &[VIA_BROKER],
        );
    }
}

#[test]
fn import_without_allow_list_is_denied() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    for envs in [&[][..], &[VIA_BROKER]] {
        let env = setup();
        let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
        let h = buf.export(ShareKind::Fabric, ExportFlags::empty()).unwrap();
        let mut child = spawn_child(
            test_name!(import_without_allow_list_is_denied),
            "import-expect-error",
            envs,
        );
        writeln!(child.stdin.take().unwrap(), "{}", to_hex(&h.to_bytes())).unwrap();
        let (ok, res) = child_result(child);
        assert!(ok, "child: {res}");
        assert_eq!(
            res,
            format!("PermissionDenied {}", acl::ACL_ERROR_RT_NO_PERMISSION),
            "{envs:?}"
        );
        drop((h, buf));
        env.finish();
    }
}

/// The broker hands over only the emulator's memfds: a forged handle naming another
/// descriptor of the exporter (its stdin) is refused before any descriptor crosses.
#[test]
fn the_broker_refuses_descriptors_that_are_not_exported_memory() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let env = setup();
    // An export starts this process's broker.
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let h = buf
        .export(ShareKind::Default, ExportFlags::DISABLE_PID_VALIDATION)
        .unwrap();
    // DEFAULT handle layout: pid in bits 0..22, fd in bits 22..42, inode bits above.
    let stdin_fd: u64 = std::hint::black_box(0);
    let forged = std::process::id() as u64 | (stdin_fd << 22) | (1u64 << 42);
    let mut child = spawn_child(
        test_name!(the_broker_refuses_descriptors_that_are_not_exported_memory),
        "import-forged-default",
        &[VIA_BROKER],
    );
    writeln!(child.stdin.take().unwrap(), "{forged}").unwrap();
    let (ok, res) = child_result(child);
    assert!(ok, "child: {res}");
    assert!(
        res.starts_with(&format!(
            "InvalidArgument {}",
            acl::ACL_ERROR_RT_INVALID_HANDLE
        )) && res.contains("no longer exists"),
        "{res}"
    );
    drop((h, buf));
    env.finish();
}

/// A client that connects to the broker and never asks (or any slow one) does not hold up
/// other importers: each request is served on its own.
#[test]
fn a_stalled_broker_connection_does_not_hold_up_imports() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    use std::os::linux::net::SocketAddrExt;
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    buf.fill(0).unwrap();
    let h = buf.export(ShareKind::Fabric, ExportFlags::empty()).unwrap();
    let name = format!("ascend-sim-broker.{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let stalled: Vec<_> = (0..3)
        .map(|_| std::os::unix::net::UnixStream::connect_addr(&addr).unwrap())
        .collect();
    let mut child = spawn_child(
        test_name!(a_stalled_broker_connection_does_not_hold_up_imports),
        "import-write",
        &[VIA_BROKER],
    );
    h.allow_pids(&[child.id() as i32]).unwrap();
    writeln!(child.stdin.take().unwrap(), "{}", to_hex(&h.to_bytes())).unwrap();
    // The importer waits at most 5 s for its answer, and a broker serving one connection at a
    // time would reach it only after the stalled ones' 5 s each: its success is the proof.
    let (ok, res) = child_result(child);
    assert!(ok && res == "ok", "child: {res}");
    assert_eq!(buf.to_vec().unwrap(), pattern(42, MIB2));
    drop(stalled);
    drop((h, buf));
    env.finish();
}

#[test]
fn import_after_the_exporter_exited() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let env = setup();
    let child = spawn_child(
        test_name!(import_after_the_exporter_exited),
        "export-and-exit",
        &[],
    );
    // Waits for the exit: the exporter (and its memory) is gone before we import.
    let (ok, line) = child_result(child);
    assert!(ok, "child: {line}");
    let shared = SharedHandle::from_bytes(&from_hex(&line)).unwrap();
    let e = shared.import(&env.dev).unwrap_err();
    assert_eq!(e.api(), Some("aclrtMemImportFromShareableHandleV2"));
    assert_eq!(e.code().unwrap().0, acl::ACL_ERROR_RT_INVALID_HANDLE, "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // The same through the broker (of a process that is gone), from another child.
    let mut c = spawn_child(
        test_name!(import_after_the_exporter_exited),
        "import-expect-error",
        &[VIA_BROKER],
    );
    writeln!(c.stdin.take().unwrap(), "{line}").unwrap();
    let (ok, res) = child_result(c);
    assert!(ok, "child: {res}");
    assert_eq!(
        res,
        format!("InvalidArgument {}", acl::ACL_ERROR_RT_INVALID_HANDLE)
    );
    env.finish();
}

#[test]
fn fabric_is_not_supported_on_a2() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let env = setup();
    let child = spawn_child(
        test_name!(fabric_is_not_supported_on_a2),
        "fabric-on-a2",
        &[("ASCEND_SIM_SOC", "A2")],
    );
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
