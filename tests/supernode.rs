//! Across emulated hosts: engines on hosts of their own (network namespaces joined by a
//! bridge, each host with its own address and `ASCEND_SIM_HOST`), reaching each other by
//! those addresses, never 127.0.0.1. Needs root: skipped, saying why, elsewhere.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use ascend_testkit::cluster::{self, Cluster};
use ascend_testkit::wait_success;

/// The example `name` built next to this test, if it is.
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("examples").join(name);
    p.exists().then_some(p)
}

/// The workspace's binary `name` (another package's) built next to this test: the whole
/// suite builds it.
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("this test binary");
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join(name))
        .expect("the target directory");
    assert!(
        p.exists(),
        "{} is not built: run the whole suite (`cargo test --workspace`)",
        p.display()
    );
    p
}

/// Whether the cluster tests can run here; prints why not.
fn can_run(example_name: &str) -> Option<PathBuf> {
    if let Err(why) = cluster::available() {
        eprintln!("skipped: {why}");
        return None;
    }
    // Where the cluster can run, a missing example is a failure, not a skip.
    let p = example(example_name);
    assert!(
        p.is_some(),
        "the {example_name} example is not built next to this test: run the whole suite \
         (`cargo test --workspace` builds the examples) or `cargo build --examples` first"
    );
    p
}

/// A host's run of `exe` with `args` on the emulator, its output piped.
fn on_host(c: &Cluster, host: usize, exe: &PathBuf, args: &[&str]) -> Command {
    let mut cmd = c.command(host, exe);
    cmd.args(args)
        .env("ASCEND_MEM_BACKEND", "sim")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `fabric_transfer` with its server on host 0 and its client on host 1 of one supernode:
/// the client WRITEs host memory into the server's device memory across hosts, reads it back
/// and verifies it; the server verifies its own memory. Nothing of the cluster is left after.
#[test]
fn supernode_fabric_transfer_between_two_hosts() {
    let Some(exe) = can_run("fabric_transfer") else {
        return;
    };
    let c = Cluster::new(&[0, 0]).expect("the cluster");
    let server = format!("{}:26000", Cluster::addr(0));
    let client = format!("{}:26001", Cluster::addr(1));
    let size = (2 << 20).to_string();
    let s = on_host(&c, 0, &exe, &["--role", "server", "--server", &server])
        .args(["--size", &size, "--timeout", "60"])
        .spawn()
        .expect("the server");
    let k = on_host(&c, 1, &exe, &["--role", "client", "--server", &server])
        .args(["--client", &client, "--size", &size])
        .spawn()
        .expect("the client");
    let ko = wait_success(k, "the client on host 1");
    let so = wait_success(s, "the server on host 0");
    let (ko, so) = (
        String::from_utf8_lossy(&ko.stdout),
        String::from_utf8_lossy(&so.stdout),
    );
    assert!(ko.contains(&format!("connected to {server}")), "{ko}");
    assert!(so.contains("verified"), "{so}");
    assert_eq!(c.close(), Vec::<String>::new());
}

/// Child on host 1 of supernode 1: connects to the server on host 0 of supernode 0 until the
/// connection gets as far as importing its memory, and reports how the import was refused.
fn cross_supernode_client() {
    use ascend::fabric::{Engine, EngineOptions, Error};
    use std::time::{Duration, Instant};
    ascend_testkit::watchdog(Duration::from_secs(60));
    let rt = ascend::Runtime::from_env_or_emulator().expect("the emulator");
    let dev = rt.device(0).expect("device 0");
    let me = format!("{}:26001", Cluster::addr(1));
    let engine = Engine::new(&dev, &me, EngineOptions::default()).expect("the engine");
    let server = format!("{}:26000", Cluster::addr(0));
    let t0 = Instant::now();
    let err = loop {
        match engine.connect(&server, Duration::from_secs(1)) {
            Err(Error::Mem(e)) => break e,
            Ok(()) => {
                // A server that has not registered its memory yet offers none.
                let segs = engine.remote_segments(&server).unwrap_or_default();
                assert!(segs.is_empty(), "memory of another supernode was imported");
                engine
                    .disconnect(&server, Duration::from_secs(5))
                    .expect("disconnect");
            }
            // Not up yet: the server starts beside this child.
            Err(e) if t0.elapsed() < Duration::from_secs(20) => {
                eprintln!("waiting for {server}: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("never reached the server's memory: {e}"),
        }
    };
    let code = err.code().map(|c| c.0);
    println!("RESULT {} {err}", code.unwrap_or(0));
    assert!(
        engine.sessions().is_empty(),
        "a refused connect left a session"
    );
}

/// A FABRIC handle does not cross a supernode: a client on a host of another supernode
/// connecting to the `fabric_transfer` server gets `Error::Mem` with the emulator's 207000,
/// naming both supernodes, and no session.
#[test]
fn supernode_import_from_another_supernode_is_a_typed_error() {
    if ascend_testkit::role().as_deref() == Some("cross-supernode-client") {
        return cross_supernode_client();
    }
    let Some(exe) = can_run("fabric_transfer") else {
        return;
    };
    let c = Cluster::new(&[0, 1]).expect("the cluster");
    let server = format!("{}:26000", Cluster::addr(0));
    let s = on_host(&c, 0, &exe, &["--role", "server", "--server", &server])
        .args(["--size", &(2 << 20).to_string(), "--timeout", "60"])
        .spawn()
        .expect("the server");
    let name = ascend_testkit::test_name!(supernode_import_from_another_supernode_is_a_typed_error);
    let mut k = c.command(1, std::env::current_exe().expect("this test binary"));
    k.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ascend_testkit::ROLE_VAR, "cross-supernode-client")
        .env("ASCEND_MEM_BACKEND", "sim")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = wait_success(k.spawn().expect("the client"), "the client on host 1");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = ascend_testkit::result_line(&stdout).expect("the client's RESULT line");
    assert!(line.starts_with("207000 "), "{line}");
    assert!(
        line.contains("supernode 0") && line.contains("supernode 1"),
        "{line}"
    );
    // The server never had its memory written; dropping the cluster ends it.
    drop(s);
    assert_eq!(c.close(), Vec::<String>::new());
}

/// The namespaces and links on the machine whose names start with `prefix`.
fn named(prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    for args in [&["netns", "list"][..], &["-o", "link", "show"][..]] {
        let out = Command::new("ip").args(args).output().expect("ip");
        found.extend(
            String::from_utf8_lossy(&out.stdout)
                .split(|c: char| c.is_whitespace() || c == ':' || c == '@')
                .filter(|w| w.starts_with(prefix))
                .map(str::to_owned),
        );
    }
    found
}

/// A cluster whose process is killed (no drop runs) is removed, with the processes on its
/// hosts, by the next cluster made on the machine.
#[test]
fn supernode_a_killed_processs_cluster_is_removed_by_the_next() {
    if ascend_testkit::role().as_deref() == Some("cluster-owner") {
        let c = Cluster::new(&[0, 0]).expect("the cluster");
        // A process on a host, which must not outlive the cluster's owner for long.
        let mut sleeper = c.command(1, "sleep");
        let mut sleeping = sleeper.arg("600").spawn().expect("sleep on host 1");
        println!("READY");
        // The parent kills this process here; were it to let it go on, the cluster's drop
        // kills the sleeper.
        let _ = ascend_testkit::role::read_stdin_line();
        drop(c);
        let _ = sleeping.wait();
        return;
    }
    if can_run("fabric_transfer").is_none() {
        return;
    }
    let name =
        ascend_testkit::test_name!(supernode_a_killed_processs_cluster_is_removed_by_the_next);
    let mut owner = ascend_testkit::Spawn::new(name, "cluster-owner").start();
    owner.expect_line("READY");
    let prefix = format!("as{}c", owner.child.id());
    assert!(!named(&prefix).is_empty(), "the owner made no cluster");
    owner.child.kill().expect("kill the owner");
    owner.child.wait().expect("reap the owner");
    let c = Cluster::new(&[0]).expect("the next cluster");
    assert_eq!(named(&prefix), Vec::<String>::new());
    assert_eq!(c.close(), Vec::<String>::new());
}

/// `example` on 2 hosts x 2 ranks: one `ascend-run` per host (`--nnodes 2`), the HCCL
/// rendezvous and the symmetric windows across the hosts; every rank of both nodes exits 0
/// and node 0's output (rank 0's) contains `verified`.
fn two_hosts_of_two_ranks(example: &str, verified: &str) {
    let Some(exe) = can_run(example) else {
        return;
    };
    let run = binary("ascend-run");
    let c = Cluster::new(&[0, 0]).expect("the cluster");
    let master = Cluster::addr(0).to_string();
    let nodes: Vec<_> = (0..2)
        .map(|i| {
            let node = i.to_string();
            let mut cmd = on_host(&c, i, &run, &["--nproc", "2", "--nnodes", "2"]);
            cmd.args(["--node-rank", &node, "--master-addr", &master])
                .args(["--master-port", "29500", "--timeout-secs", "60", "--"])
                .arg(&exe);
            cmd.spawn().expect("ascend-run")
        })
        .collect();
    let outs: Vec<_> = nodes
        .into_iter()
        .enumerate()
        .map(|(i, k)| wait_success(k, &format!("{example}: node {i}")))
        .collect();
    let out0 = String::from_utf8_lossy(&outs[0].stdout);
    assert!(out0.contains(verified), "{out0}");
    assert_eq!(c.close(), Vec::<String>::new());
}

/// `symwin_allgather` on 2 hosts x 2 ranks: rank 0 verifies that every rank saw every
/// rank's values.
#[test]
fn supernode_symwin_allgather_on_two_hosts_of_two_ranks() {
    two_hosts_of_two_ranks("symwin_allgather", "verified: 4 of 4 ranks");
}

/// `symwin_put_signal` on 2 hosts x 2 ranks: one-sided puts and signals into the windows of
/// ranks on the other host.
#[test]
fn supernode_symwin_put_signal_on_two_hosts_of_two_ranks() {
    two_hosts_of_two_ranks("symwin_put_signal", "4 of 4 ranks match");
}

/// `kv_service_tokio` with its decode engine on host 0 and its prefill engine on host 1,
/// each on its host's address: 500 prepared batches across the hosts, every decode block's
/// checksum verified on both sides.
#[test]
fn supernode_kv_service_between_two_hosts() {
    let Some(exe) = can_run("kv_service_tokio") else {
        return;
    };
    let c = Cluster::new(&[0, 0]).expect("the cluster");
    let decode = format!("{}:26110", Cluster::addr(0));
    let prefill = Cluster::addr(1).to_string();
    let d = on_host(&c, 0, &exe, &["--role", "decode", "--decode", &decode])
        .args(["--timeout", "120"])
        .spawn()
        .expect("the decode process");
    let p = on_host(&c, 1, &exe, &["--role", "prefill", "--decode", &decode])
        .args(["--prefill", &prefill, "--timeout", "120"])
        .spawn()
        .expect("the prefill process");
    let po = wait_success(p, "the prefill on host 1");
    let dout = wait_success(d, "the decode on host 0");
    let dout = String::from_utf8_lossy(&dout.stdout);
    assert!(dout.contains("128 of 128 block checksums match"), "{dout}");
    let po = String::from_utf8_lossy(&po.stdout);
    assert!(po.contains(&decode), "{po}");
    assert_eq!(c.close(), Vec::<String>::new());
}
