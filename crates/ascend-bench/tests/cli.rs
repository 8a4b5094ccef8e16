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
