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
            "--nnodes",
            "--node-rank",
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
        (
            &["--nproc", "1", "--nnodes", "0", "--", "true"],
            &["--nnodes", "'0'"],
        ),
        (
            &[
                "--nproc",
                "1",
                "--nnodes",
                "2",
                "--node-rank",
                "2",
                "--",
                "true",
            ],
            &["--node-rank 2", "--nnodes 2"],
        ),
        (
            &[
                "--nproc",
                "1",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
                "--",
                "true",
            ],
            &["--master-addr", "--master-port"],
        ),
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

/// Two nodes of two ranks each, as two `ascend-run`s (here on one host, the master on
/// 127.0.0.1): every rank gets its global RANK, its LOCAL_RANK, the job's WORLD_SIZE, its
/// node's GROUP_RANK and the same master; the second node's flags come from torchrun's
/// variables.
#[test]
fn two_nodes_of_two_ranks_get_torchruns_variables() {
    let dir = std::env::temp_dir().join(format!("ascend-run-nodes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = ascend_launch::free_port().unwrap().to_string();
    let script = format!(
        "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE $ROLE_RANK $MASTER_ADDR:$MASTER_PORT\" > {}/rank$RANK",
        dir.display()
    );
    let node0 = Command::new(env!("CARGO_BIN_EXE_ascend-run"))
        .args(["--nproc", "2", "--nnodes", "2", "--node-rank", "0"])
        .args(["--master-addr", "127.0.0.1", "--master-port", &port])
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let node1 = Command::new(env!("CARGO_BIN_EXE_ascend-run"))
        .env("PET_NNODES", "2")
        .env("PET_NODE_RANK", "1")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port)
        .args(["--nproc", "2", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(node0.status.success(), "{node0:?}");
    assert!(node1.status.success(), "{node1:?}");
    for rank in 0..4 {
        let got = std::fs::read_to_string(dir.join(format!("rank{rank}"))).unwrap();
        let want = format!(
            "{rank} {} 4 2 {} 2 {rank} 127.0.0.1:{port}\n",
            rank % 2,
            rank / 2
        );
        assert_eq!(got, want, "rank {rank}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    // A single-node run takes a free port, not a MASTER_PORT its environment has (an outer
    // job's).
    let o = Command::new(env!("CARGO_BIN_EXE_ascend-run"))
        .env("MASTER_PORT", "1")
        .args(["--nproc", "1", "--", "sh", "-c", "echo port=$MASTER_PORT"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("port=") && !out.contains("port=1\n"),
        "{out}"
    );
}
