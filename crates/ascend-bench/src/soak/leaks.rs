//! The end of a run: everything waited for, disconnected and dropped, then the leak checks.

use std::time::{Duration, Instant};

use super::driver::{Driver, Stats, OP_TIMEOUT};

/// How long threads and descriptors the library ends asynchronously may take.
const GRACE: Duration = Duration::from_secs(2);

/// Open descriptors and threads of this process at the start.
pub(crate) struct Baseline {
    fds: Vec<String>,
    threads: Vec<String>,
}

fn fds() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| {
                    let t = std::fs::read_link(e.path()).unwrap_or_default();
                    format!("{}->{}", e.file_name().to_string_lossy(), t.display())
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Threads that have not begun to exit (a joined one can stay listed a while), as `tid:name`.
fn threads() -> Vec<String> {
    ascend_testkit::process::live_threads()
        .into_iter()
        .map(|t| format!("{}:{}", t.tid, t.name))
        .collect()
}

impl Baseline {
    pub(crate) fn now() -> Baseline {
        Baseline {
            fds: fds(),
            threads: threads(),
        }
    }
}

/// The inode of this process's emulator descriptor broker socket, if it listens: the
/// broker (`ascend-sim-broker.<pid>`) starts at the first export and lives as long as the
/// process by design, so its listening socket and accept thread are not counted.
fn broker_inode() -> Option<String> {
    let want = format!("@ascend-sim-broker.{}", std::process::id());
    let t = std::fs::read_to_string("/proc/net/unix").ok()?;
    t.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 8 && f[7] == want).then(|| f[6].to_owned())
    })
}

/// What is in `now` and not in `base`, less the broker's socket and accept thread.
fn extra(now: &[String], base: &[String]) -> Vec<String> {
    let mut v: Vec<String> = now.iter().filter(|x| !base.contains(x)).cloned().collect();
    if let Some(ino) = broker_inode() {
        let sock = format!("->socket:[{ino}]");
        v.retain(|x| !x.ends_with(&sock));
        let was_there = base.iter().any(|x| x.ends_with(":ascend-sim-brok"));
        if let Some(i) = v.iter().position(|x| x.ends_with(":ascend-sim-brok")) {
            if !was_there {
                v.remove(i);
            }
        }
    }
    v
}

/// Checks descriptors and threads against `base` (the fd listing itself opens one, which
/// both listings include; the emulator's descriptor broker is not counted); returns the
/// number of leaks and of findings (ended asynchronously).
pub(crate) fn check_process(base: &Baseline) -> (u64, u64) {
    let (mut leaked, mut findings) = (0, 0);
    for (what, now, was) in [
        ("file descriptor", fds as fn() -> Vec<String>, &base.fds),
        ("thread", threads, &base.threads),
    ] {
        let first = extra(&now(), was);
        if first.is_empty() {
            continue;
        }
        let t = Instant::now();
        while t.elapsed() < GRACE && !extra(&now(), was).is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = extra(&now(), was);
        if left.is_empty() {
            findings += 1;
            println!(
                "FINDING: {} {what}(s) still open right after the engine was dropped, ended \
                 asynchronously within {:?}: {first:?}",
                first.len(),
                t.elapsed()
            );
        } else {
            println!(
                "LEAK: {} {what}(s) still open after {GRACE:?}: {left:?}",
                left.len()
            );
            leaked += left.len() as u64;
        }
    }
    (leaked, findings)
}

/// Waits for every transfer, disconnects and ends every peer, checks the VA pool and the
/// emulator's counters, and drops the engine. Returns the final tallies.
pub(crate) fn teardown(mut d: Driver) -> Stats {
    if let Err(e) = d.drain(None).and_then(|()| d.verify_locals()) {
        d.unexpected("final wait", e.to_string());
    }
    for (i, p) in std::mem::take(&mut d.peers).into_iter().enumerate() {
        let pool0 = d.eng.pool_usage().0;
        match d.eng.disconnect(&p.addr, OP_TIMEOUT) {
            Ok(()) => {
                let want = pool0.saturating_sub(d.peer_slots[i]);
                d.check_imports_gone(&p.addr, "disconnected", want);
            }
            Err(e) => d.unexpected("final disconnect", format!("{}: {e:?}", p.addr)),
        }
        let addr = p.addr.clone();
        match p.finish() {
            Ok(c) if c == "ok" => {}
            Ok(c) => {
                println!("LEAK: peer {addr} reports counters {c}");
                d.stats.leaked += 1;
            }
            Err(e) => d.unexpected("ending a peer", format!("{addr}: {e}")),
        }
    }
    print_faults(&d);
    let unknown: usize = d.locals.iter().map(|l| l.shadow.unknown_bytes()).sum();
    println!(
        "model: {unknown} byte(s) of local memory unknown at the end (failed READs not rewritten)"
    );
    let pool = d.eng.pool_usage().0;
    if pool != 0 {
        println!("LEAK: {pool} VA pool slot(s) in use after every peer was disconnected");
        d.stats.leaked += 1;
    }
    let Driver {
        eng, locals, stats, ..
    } = d;
    let mut stats = stats;
    drop(locals);
    if eng.registrations() != 0 {
        println!(
            "LEAK: {} registration(s) live after every buffer was dropped",
            eng.registrations()
        );
        stats.leaked += 1;
    }
    drop(eng);
    let c = ascend_sim::counters();
    if !c.is_zero() {
        println!("LEAK: emulator counters after the engine was dropped: {c}");
        stats.leaked += 1;
    }
    stats
}

fn print_faults(d: &Driver) {
    let per: Vec<String> = d
        .faults
        .fired
        .iter()
        .map(|(s, (failed, absorbed))| format!("{s} {failed} failed/{absorbed} absorbed"))
        .collect();
    println!("faults fired: {}", per.join(", "));
    println!(
        "fault candidates the engine never called (not armed): {:?}",
        d.faults.never_called()
    );
    if !d.faults.missing.is_empty() {
        println!(
            "fault symbols the emulator lacks (skipped): {:?}",
            d.faults.missing
        );
    }
}
