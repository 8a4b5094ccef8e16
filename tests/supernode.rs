//! Across emulated hosts: engines on hosts of their own (network namespaces joined by a
//! bridge, each host with its own address and `ASCEND_SIM_HOST`), reaching each other by
//! those addresses, never 127.0.0.1. Needs root: skipped, saying why, elsewhere. The ones
//! with the engine directory need the feature `etcd` too (`fabric_cluster` does):
//! `cargo test --workspace --features etcd -- supernode` runs them all.

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

/// The `fabric_transfer` server at `server` on `host`, serving 2 MiB for up to 60 s.
fn transfer_server(c: &Cluster, host: usize, server: &str) -> std::process::Child {
    let exe = example("fabric_transfer").expect("the fabric_transfer example is built");
    on_host(c, host, &exe, &["--role", "server", "--server", server])
        .args(["--size", &(2 << 20).to_string(), "--timeout", "60"])
        .spawn()
        .expect("the server")
}

/// This test binary on `host`, running test `name` alone in child role `role`, on the
/// emulator, its output piped.
fn role_on_host(c: &Cluster, host: usize, name: &str, role: &str) -> Command {
    let mut k = c.command(host, std::env::current_exe().expect("this test binary"));
    k.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ascend_testkit::ROLE_VAR, role)
        .env("ASCEND_MEM_BACKEND", "sim")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    k
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
    if can_run("fabric_transfer").is_none() {
        return;
    }
    let c = Cluster::new(&[0, 1]).expect("the cluster");
    let server = format!("{}:26000", Cluster::addr(0));
    let s = transfer_server(&c, 0, &server);
    let name = ascend_testkit::test_name!(supernode_import_from_another_supernode_is_a_typed_error);
    let k = role_on_host(&c, 1, name, "cross-supernode-client").spawn();
    let out = wait_success(k.expect("the client"), "the client on host 1");
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

/// Child on host 0: connects to the `fabric_transfer` server on host 1, says so, and once told
/// that host 1 was cut off (a line on its stdin), waits until its engine has lost the peer,
/// then reports why (the disconnect counter's reason) and how long it took.
fn cut_off_client() {
    use ascend::fabric::metrics::DISCONNECTS;
    use ascend::fabric::{Engine, EngineOptions};
    use ascend_testkit::metrics::{DebuggingRecorder, Recorded};
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    ascend_testkit::watchdog(Duration::from_secs(90));
    let rec = DebuggingRecorder::new();
    let snap = rec.snapshotter();
    let rt = ascend::Runtime::from_env_or_emulator().expect("the emulator");
    let dev = rt.device(0).expect("device 0");
    let opts = EngineOptions::builder()
        .heartbeat_interval(Duration::from_millis(100))
        .peer_timeout(Some(Duration::from_millis(450)))
        .build()
        .expect("options");
    let me = format!("{}:26001", Cluster::addr(0));
    let engine = Engine::new(&dev, &me, opts).expect("the engine");
    let server = format!("{}:26000", Cluster::addr(1));
    ascend_testkit::wait_until(
        "the server on host 1 accepts",
        Duration::from_secs(30),
        || {
            metrics::with_local_recorder(&rec, || engine.connect(&server, Duration::from_secs(1)))
                .is_ok()
        },
    );
    println!("CONNECTED");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).expect("stdin");
    assert_eq!(line.trim(), "cut", "the test says when host 1 is cut off");
    let cut = Instant::now();
    // The channel leaves the engine's map before its loss is counted: wait for the count.
    let lost = || {
        let got = Recorded::take(&snap);
        let n: u64 = got
            .named(DISCONNECTS)
            .map(|s| match s.value {
                ascend_testkit::metrics::DebugValue::Counter(c) => c,
                _ => 0,
            })
            .sum();
        (n > 0).then_some(got)
    };
    let mut got = None;
    ascend_testkit::wait_until("the cut-off peer lost", Duration::from_secs(30), || {
        got = lost();
        got.is_some()
    });
    let after = cut.elapsed();
    let got = got.expect("counted");
    assert!(
        !engine.is_connected(&server),
        "a lost peer is not connected"
    );
    let count = |reason| got.counter(DISCONNECTS, &[("reason", reason)]);
    println!(
        "RESULT {} {} {}",
        count("peer_unresponsive"),
        count("keepalive_closed") + count("heartbeat_failed"),
        after.as_millis()
    );
}

/// A host cut off (its processes still running, unreachable: nothing closes a connection) is
/// found by the engine's peer timeout: the peer is lost as `PeerUnresponsive` within about a
/// heartbeat interval plus the timeout (100 ms and 450 ms here), without any directory.
#[test]
fn supernode_a_cut_off_host_is_lost_as_unresponsive() {
    if ascend_testkit::role().as_deref() == Some("cut-off-client") {
        return cut_off_client();
    }
    if can_run("fabric_transfer").is_none() {
        return;
    }
    let c = Cluster::new(&[0, 0]).expect("the cluster");
    let server = format!("{}:26000", Cluster::addr(1));
    let s = transfer_server(&c, 1, &server);
    let name = ascend_testkit::test_name!(supernode_a_cut_off_host_is_lost_as_unresponsive);
    let mut k = role_on_host(&c, 0, name, "cut-off-client")
        .stdin(Stdio::piped())
        .spawn()
        .expect("the client");
    let mut out = std::io::BufReader::new(k.stdout.take().expect("piped"));
    let mut line = String::new();
    // libtest may print `test name ... ` before it on the same line.
    while !line.contains("CONNECTED") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).expect("the client's output");
        if n == 0 {
            let o = k.wait_with_output().expect("the client");
            panic!(
                "the client ended before it connected: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    c.cut(1).expect("cut host 1 off");
    std::io::Write::write_all(&mut k.stdin.take().expect("piped"), b"cut\n").expect("tell it");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("the client's output");
    let done = wait_success(k, "the client on host 0");
    let res: Vec<u64> = ascend_testkit::result_line(&rest)
        .unwrap_or_else(|| panic!("no RESULT line: {rest}\n{done:?}"))
        .split_whitespace()
        .map(|x| x.parse().expect("a number"))
        .collect();
    assert_eq!(res[0], 1, "lost as unresponsive once: {rest}");
    assert_eq!(res[1], 0, "no close reached it from a cut-off host: {rest}");
    println!("lost {} ms after the cut", res[2]);
    drop(s);
    assert_eq!(c.close(), Vec::<String>::new());
}

/// The engines across hosts that meet through the engine directory on etcd, on a fifth host
/// (feature `etcd`: `fabric_cluster` needs it, and so these).
#[cfg(feature = "etcd")]
mod directory {
    use super::*;

    /// `fabric_cluster`'s coordinator for host `k` of 4, etcd at `url`, with `extra` arguments.
    fn cluster_host(c: &Cluster, exe: &PathBuf, k: usize, url: &str, extra: &[&str]) -> Command {
        let (addr, host) = (Cluster::addr(k).to_string(), k.to_string());
        let mut cmd = on_host(c, k, exe, &["--etcd", url, "--prefix", "/fc"]);
        cmd.args(["--hosts", "4", "--host", &host, "--addr", &addr])
            .args(extra);
        cmd
    }

    /// Whether etcd can run here (where it cannot, outside CI, the test is skipped saying so).
    fn with_etcd(example_name: &str) -> Option<PathBuf> {
        let exe = can_run(example_name)?;
        ascend_testkit::etcd::available().then_some(exe)
    }

    /// `fabric_cluster` with its 8 engines spread over 4 hosts (2 each, on their hosts'
    /// addresses) and etcd on a fifth: they find each other by name, write to every other one,
    /// verify, and when the last (on host 3) is killed every other engine, on every host, sees it
    /// leave the directory.
    #[test]
    fn supernode_fabric_cluster_over_four_hosts_with_etcd_on_a_fifth() {
        let Some(exe) = with_etcd("fabric_cluster") else {
            return;
        };
        let c = Cluster::new(&[0; 5]).expect("the cluster");
        let etcd = c.etcd(4);
        let hosts: Vec<_> = (0..4)
            .map(|k| {
                cluster_host(&c, &exe, k, &etcd.url(), &[])
                    .spawn()
                    .expect("a coordinator")
            })
            .collect();
        let outs: Vec<String> = hosts
            .into_iter()
            .enumerate()
            .map(|(k, h)| {
                let o = wait_success(h, &format!("host {k}'s coordinator"));
                String::from_utf8_lossy(&o.stdout).into_owned()
            })
            .collect();
        for (k, out) in outs.iter().enumerate() {
            for i in (k..8).step_by(4) {
                assert!(
                    out.contains(&format!("[engine-{i:02}] verified 7 blocks")),
                    "host {k}: {out}"
                );
                if i != 7 {
                    assert!(
                        out.contains(&format!("[engine-{i:02}] saw engine-07 leave")),
                        "host {k}: {out}"
                    );
                }
            }
        }
        assert!(
            outs[3].contains("[coordinator] killed engine-07"),
            "{}",
            outs[3]
        );
        assert!(
            outs[3].contains("engine-07 left the directory"),
            "{}",
            outs[3]
        );
        drop(etcd);
        assert_eq!(c.close(), Vec::<String>::new());
    }

    /// A whole host lost while transfers are in flight: `fabric_cluster`'s 8 engines over 4 hosts
    /// write to each other without pause; host 3 is cut off and everything on it killed (its
    /// engines 3 and 7 send nothing more, close nothing). Every engine on the other hosts loses
    /// both (their channels ended, by the peer timeout or the directory) and sees both leave the
    /// directory, then serves 10 more rounds to every survivor and verifies their blocks.
    #[test]
    fn supernode_a_lost_host_is_seen_by_every_peer_which_serves_on() {
        use std::io::BufRead;
        let Some(exe) = with_etcd("fabric_cluster") else {
            return;
        };
        let c = Cluster::new(&[0; 5]).expect("the cluster");
        let etcd = c.etcd(4);
        let lose = ["--lose-host", "3"];
        let mut hosts: Vec<_> = (0..4)
            .map(|k| {
                cluster_host(&c, &exe, k, &etcd.url(), &lose)
                    .spawn()
                    .expect("a coordinator")
            })
            .collect();
        let mut victim = hosts.pop().expect("host 3");
        let out = std::io::BufReader::new(victim.stdout.take().expect("piped"));
        let mut seen = String::new();
        for line in out.lines() {
            let line = line.expect("host 3's output");
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("all engines streaming") {
                break;
            }
        }
        if !seen.contains("all engines streaming") {
            let mut why = format!("host 3 ended before all engines streamed: {seen}");
            let err = victim.wait_with_output().expect("host 3's coordinator");
            why += &format!("\nhost 3 stderr: {}", String::from_utf8_lossy(&err.stderr));
            for (k, mut h) in hosts.into_iter().enumerate() {
                let _ = h.kill();
                let o = h.wait_with_output().expect("a coordinator");
                why += &format!(
                    "\nhost {k}: {}\n{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            panic!("{why}");
        }
        c.lose(3).expect("lose host 3");
        let st = victim.wait().expect("host 3's coordinator");
        assert!(!st.success(), "host 3's coordinator was killed: {st}");
        for (k, h) in hosts.into_iter().enumerate() {
            let o = wait_success(h, &format!("host {k}'s coordinator"));
            let out = String::from_utf8_lossy(&o.stdout);
            for i in [k, k + 4] {
                let e = format!("[engine-{i:02}]");
                for v in ["engine-03", "engine-07"] {
                    let lost = out
                        .lines()
                        .find(|l| l.starts_with(&e) && l.contains(&format!("lost {v}: ")))
                        .unwrap_or_else(|| panic!("{e} did not lose {v}: {out}"));
                    assert!(
                        [
                            "peer_unresponsive",
                            "directory_left",
                            "channel already ended"
                        ]
                        .iter()
                        .any(|how| lost.contains(how)),
                        "{lost}"
                    );
                    println!("host {k}: {lost}");
                }
                let served = format!("{e} survived: served 10 rounds to 5 survivors");
                assert!(out.contains(&served), "{out}");
                assert!(out.contains(&format!("{e} done")), "{out}");
            }
        }
        drop(etcd);
        assert_eq!(c.close(), Vec::<String>::new());
    }
}
