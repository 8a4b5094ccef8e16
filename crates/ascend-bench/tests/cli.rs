//! The command line: help and version exit 0 and list the subcommands; a bad subcommand,
//! flag or value exits 2 naming it. The backend: CANN asked for and missing is the load
//! error, the parts that measure the emulator itself are refused on CANN by name, bad device
//! numbers are named, and the first line of output names the backend and the devices.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ascend-bench"))
        .args(args)
        .output()
        .expect("run the bench")
}

#[test]
fn help_and_version() {
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    for sub in ["transfer", "translate", "collectives", "all", "soak"] {
        assert!(out.contains(sub), "lists {sub}: {out}");
    }
    for sub in ["all", "transfer"] {
        let o = run(&[sub, "--help"]);
        assert_eq!(o.status.code(), Some(0));
        let out = String::from_utf8_lossy(&o.stdout);
        for var in [
            "ASCEND_MEM_BACKEND",
            "ASCEND_BENCH_DEVICE",
            "ASCEND_BENCH_PEER_DEVICE",
        ] {
            assert!(out.contains(var), "{sub} --help names {var}: {out}");
        }
    }
    let o = run(&["soak", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    for flag in ["--seconds", "--seed", "--peers", "--strict"] {
        assert!(out.contains(flag), "soak lists {flag}: {out}");
    }
    let o = run(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn bad_command_lines_are_named() {
    let cases: &[(&[&str], &[&str])] = &[
        (&[], &["Usage"]),
        (&["bogus"], &["bogus"]),
        (&["soak", "--peers", "0"], &["--peers", "0"]),
        (&["soak", "--seconds", "x"], &["--seconds", "x"]),
        (&["all", "--quik"], &["--quik"]),
    ];
    for (args, names) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        for n in *names {
            assert!(e.contains(n), "{args:?} names {n}: {e}");
        }
    }
}

/// The bench with `ASCEND_MEM_BACKEND=cann` and no CANN to find (no `ASCEND_ACL_LIB`, an
/// `ASCEND_HOME_PATH` that does not exist, no library path).
fn without_cann(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ascend-bench"));
    c.args(args)
        .env("ASCEND_MEM_BACKEND", "cann")
        .env("ASCEND_HOME_PATH", "/nonexistent")
        .env_remove("ASCEND_ACL_LIB")
        .env_remove("ASCEND_TOOLKIT_HOME")
        .env("LD_LIBRARY_PATH", "");
    c
}

/// `ASCEND_MEM_BACKEND=cann` without CANN: every part that runs on CANN fails with the load
/// error (which names the emulator's setting), never measuring the emulator instead.
#[test]
fn cann_asked_for_and_missing_is_an_error_not_the_emulator() {
    let out = env!("CARGO_TARGET_TMPDIR");
    for part in ["all", "transfer", "translate", "hixl"] {
        let o = without_cann(&[part, "--quick", "--out", out])
            .output()
            .expect("run the bench");
        let err = String::from_utf8_lossy(&o.stderr);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(!o.status.success(), "{part}: {o:?}");
        assert!(
            err.contains("could not load the ACL runtime library"),
            "{part}: {err}"
        );
        assert!(err.contains("ASCEND_MEM_BACKEND=sim"), "{part}: {err}");
        assert!(!stdout.contains("backend:"), "{part} measured: {stdout}");
        assert!(!stdout.contains("emulator"), "{part}: {stdout}");
    }
}

/// What measures the emulator itself (collectives, the soak, `--call-ns`) is refused by name
/// when `ASCEND_MEM_BACKEND=cann` asks for CANN, before any runtime is opened: the message
/// names the part or flag and `ASCEND_MEM_BACKEND=sim`, not the load error.
#[test]
fn emulator_only_parts_are_refused_on_cann() {
    let out = env!("CARGO_TARGET_TMPDIR");
    let cases: &[(&[&str], &str)] = &[
        (&["collectives", "--quick", "--out", out], "collectives"),
        (&["soak", "--seconds", "1"], "soak"),
        (
            &["all", "--quick", "--call-ns", "100", "--out", out],
            "--call-ns",
        ),
        (
            &["hixl", "--quick", "--call-ns", "5700", "--out", out],
            "--call-ns",
        ),
    ];
    for (args, name) in cases {
        let o = without_cann(args).output().expect("run the bench");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {o:?}");
        assert!(
            err.contains(&format!("{name} needs the emulator")),
            "{args:?}: {err}"
        );
        assert!(err.contains("ASCEND_MEM_BACKEND=sim"), "{args:?}: {err}");
        assert!(!err.contains("could not load"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: {o:?}");
    }
}

/// Bad device numbers are refused before anything runs, naming the variable.
#[test]
fn bad_devices_are_named() {
    let out = env!("CARGO_TARGET_TMPDIR");
    let cases: &[(&str, &str, &str)] = &[
        ("ASCEND_BENCH_DEVICE", "x", "not a device number"),
        ("ASCEND_BENCH_DEVICE", "-1", "not a device number"),
        ("ASCEND_BENCH_PEER_DEVICE", "999", "device(s)"),
        ("ASCEND_BENCH_DEVICE", "999", "device(s)"),
    ];
    for (var, value, says) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_ascend-bench"))
            .args(["transfer", "--quick", "--out", out])
            .env("ASCEND_MEM_BACKEND", "sim")
            .env_remove("ASCEND_BENCH_DEVICE")
            .env_remove("ASCEND_BENCH_PEER_DEVICE")
            .env(var, value)
            .output()
            .expect("run the bench");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{var}={value}: {o:?}");
        assert!(err.contains(&format!("{var}=")), "{var}={value}: {err}");
        assert!(err.contains(says), "{var}={value}: {err}");
    }
}

/// The first line of stdout of a run of `args` with `envs` (the rest of the run is stopped:
/// the first line comes before any measurement), and its stderr up to then.
fn first_line(args: &[&str], envs: &[(&str, Option<&str>)]) -> (String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ascend-bench"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in envs {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let mut child = c.spawn().expect("start the bench");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read stdout");
    let _ = child.kill();
    let o = child.wait_with_output().expect("wait for the bench");
    (line, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The first line names the backend and both devices; the peers' device defaults to the
/// measuring process's.
#[test]
fn first_line_names_backend_and_devices() {
    let out = env!("CARGO_TARGET_TMPDIR");
    // `collectives` starts no child process, so stopping it leaves nothing behind.
    let args = ["collectives", "--quick", "--out", out];
    let sim = [("ASCEND_MEM_BACKEND", Some("sim"))];
    let (line, err) = first_line(
        &args,
        &[
            sim[0],
            ("ASCEND_BENCH_DEVICE", Some("3")),
            ("ASCEND_BENCH_PEER_DEVICE", None),
        ],
    );
    assert_eq!(
        line.trim_end(),
        "backend: emulator (in-process); device 3, peers on device 3"
    );
    assert!(!err.contains("WARN"), "asked for by name: {err}");
    let (line, _) = first_line(
        &args,
        &[
            sim[0],
            ("ASCEND_BENCH_DEVICE", Some("1")),
            ("ASCEND_BENCH_PEER_DEVICE", Some("2")),
        ],
    );
    assert_eq!(
        line.trim_end(),
        "backend: emulator (in-process); device 1, peers on device 2"
    );
    // Unset, with no CANN to find: the emulator, and a WARN line saying why.
    let (line, err) = first_line(
        &args,
        &[
            ("ASCEND_MEM_BACKEND", None),
            ("ASCEND_HOME_PATH", Some("/nonexistent")),
            ("ASCEND_ACL_LIB", None),
            ("ASCEND_TOOLKIT_HOME", None),
            ("LD_LIBRARY_PATH", Some("")),
            ("ASCEND_BENCH_DEVICE", None),
            ("ASCEND_BENCH_PEER_DEVICE", None),
        ],
    );
    if !line.starts_with("backend: CANN") {
        assert_eq!(
            line.trim_end(),
            "backend: emulator (in-process); device 0, peers on device 0"
        );
        assert!(
            err.contains("WARN") && err.contains("ASCEND_MEM_BACKEND is unset"),
            "{err}"
        );
    }
}
