//! The command line: help and version exit 0 and list the subcommands; a bad subcommand,
//! flag or value exits 2 naming it.

use std::process::{Command, Output};

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

/// `ASCEND_MEM_BACKEND=cann` without CANN: every part fails with the load error (which names
/// the emulator's setting), never measuring the emulator instead.
#[test]
fn cann_asked_for_and_missing_is_an_error_not_the_emulator() {
    let out = ["--out", env!("CARGO_TARGET_TMPDIR")];
    for args in [
        &["all"][..],
        &["transfer"],
        &["hixl"],
        &["soak", "--seconds", "1"],
    ] {
        let part = args[0];
        let extra: &[&str] = if part == "soak" { &[] } else { &out };
        let o = Command::new(env!("CARGO_BIN_EXE_ascend-bench"))
            .args(args)
            .args(extra)
            .env("ASCEND_MEM_BACKEND", "cann")
            .env("ASCEND_HOME_PATH", "/nonexistent")
            .env_remove("ASCEND_ACL_LIB")
            .env_remove("ASCEND_TOOLKIT_HOME")
            .env("LD_LIBRARY_PATH", "")
            .output()
            .expect("run the bench");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{part}: {o:?}");
        assert!(err.contains("ASCEND_MEM_BACKEND=sim"), "{part}: {err}");
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("emulator"),
            "{part}"
        );
    }
}
