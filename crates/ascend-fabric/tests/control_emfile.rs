//! Out of descriptors: the server cannot accept, and pauses accepting rather than spinning on
//! a listener that stays ready; once descriptors are free again the waiting client is served.
//! One test in this binary (it changes the process's descriptor limit); the client runs in a
//! child process, which has descriptors of its own.

#[allow(dead_code)]
#[path = "control/util.rs"]
mod control_util;

use ascend_fabric::control::{self, ServerConfig};
use ascend_testkit::process::open_fds as fds;
use ascend_testkit::role::read_stdin_line;
use ascend_testkit::{role, test_name, Spawn};
use control_util::*;
use std::io::{Read, Seek};
use std::time::Duration;

/// Env var carrying the server address to the child.
const ADDR_VAR: &str = "CONTROL_EMFILE_SERVER";

/// Re-reads an already open procfs file from the start (no new descriptor needed).
fn reread(f: &mut std::fs::File) -> String {
    f.rewind().unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    s
}

/// The accept queue length of the listening socket on `port` (`rx_queue` of a LISTEN entry).
fn accept_queue(tcp: &str, port: u16) -> u64 {
    tcp.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.split(':').nth(1)?, 16).ok()?;
            let (state, queues) = (*f.get(3)?, *f.get(4)?);
            (local_port == port && state == "0A")
                .then(|| u64::from_str_radix(queues.split(':').nth(1)?, 16).ok())?
        })
        .sum()
}

/// User + system clock ticks of a thread, from its open `stat` file.
fn cpu_ticks(stat: &mut std::fs::File) -> u64 {
    let s = reread(stat);
    // Fields after the parenthesised name: state is field 3; utime and stime are 14 and 15.
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn out_of_descriptors_pauses_accepting_and_recovers() {
    if let Some(role) = role() {
        // The child: wait for the go-ahead, then connect (the server answers once it can).
        assert_eq!(role, "client");
        let addr = std::env::var(ADDR_VAR).unwrap();
        assert_eq!(read_stdin_line().as_deref(), Some("go"));
        let c = control::connect(addr.parse().unwrap(), "child", GUARD, None).unwrap();
        println!("CONNECTED {}", c.entries.len());
        return;
    }
    let (srv, _h) = server(fake_entries(1), ServerConfig::default());
    let port = srv.local_addr().port();
    let mut child = Spawn::new(
        test_name!(out_of_descriptors_pauses_accepting_and_recovers),
        "client",
    )
    .env(ADDR_VAR, srv.local_addr().to_string())
    .start();
    // The kernel keeps the first 15 bytes of a thread's name, which the new thread sets
    // itself as it starts.
    let name = format!("fabric-ctl-{port}");
    let find = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                std::fs::read_to_string(p.join("comm"))
                    .is_ok_and(|c| c.trim() == &name[..name.len().min(15)])
            })
    };
    wait_until("the control thread is named", || find().is_some());
    let ctl_tid = find().unwrap();
    let mut stat = std::fs::File::open(ctl_tid.join("stat")).unwrap();
    let mut tcp = std::fs::File::open("/proc/net/tcp").unwrap();

    // Use up every descriptor the limit allows.
    set_soft_nofile(fds() as u64 + 16);
    let mut filler = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        filler.push(f);
    }
    child.send("go");
    wait_until("the child waits in the accept queue", || {
        accept_queue(&reread(&mut tcp), port) >= 1
    });
    // A loop spinning on the ready listener would burn about 100 ticks in this second.
    let before = cpu_ticks(&mut stat);
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_ticks(&mut stat) - before;
    assert!(
        spent < 20,
        "the control loop used {spent} ticks while it could not accept"
    );
    assert_eq!(srv.stats().open_connections, 0);

    drop(filler);
    set_soft_nofile(u64::MAX);
    assert_eq!(child.expect_line("CONNECTED "), "1");
    assert!(child.child.wait().unwrap().success());
}
