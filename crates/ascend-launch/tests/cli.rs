//! The `ascend-run` command line: help and version exit 0, and each bad flag or value is an
//! error (exit 2) that names it.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ascend-run"))
        .args(args)
        .output()
        .expect("run ascend-run")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_and_version_exit_zero_and_describe_the_options() {
    for flag in ["--help", "-h"] {
        let o = run(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{flag}: {o:?}");
        let out = String::from_utf8_lossy(&o.stdout);
        for opt in [
            "--nproc",
            "--master-addr",
            "--master-port",
            "--timeout-secs",
        ] {
            assert!(out.contains(opt), "{flag} lists {opt}: {out}");
        }
    }
    let o = run(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn bad_flags_and_values_are_named() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["--nproc", "x", "--", "true"], &["--nproc", "'x'"]),
        (&["--nproc", "0", "--", "true"], &["--nproc", "'0'"]),
        (&["--nprocs", "2", "--", "true"], &["--nprocs"]),
        (
            &["--nproc", "2", "--master-port", "70000", "--", "true"],
            &["--master-port", "70000"],
        ),
        (&["--nproc", "2"], &["PROGRAM"]),
        (&["--", "true"], &["--nproc"]),
    ];
    for (args, names) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let e = stderr(&o);
        for n in *names {
            assert!(e.contains(n), "{args:?}: the error names {n}: {e}");
        }
    }
}

#[test]
fn ranks_run_and_a_failing_rank_fails_the_run() {
    let o = run(&["--nproc", "2", "--", "sh", "-c", "test -n \"$RANK\""]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let o = run(&["--nproc", "2", "--", "sh", "-c", "exit $RANK"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("rank 1"), "{}", stderr(&o));
}
