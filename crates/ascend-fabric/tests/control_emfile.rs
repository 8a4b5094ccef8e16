//! Out of descriptors: the server cannot accept, and pauses accepting rather than spinning on
//! a listener that stays ready; once descriptors are free again the waiting client is served.
//! One test in this binary (it changes the process's descriptor limit); the client runs in a
//! child process, which has descriptors of its own.

mod control_util;

use ascend_fabric::control::{self, ServerConfig};
use control_util::*;
use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

const ROLE: &str = "CONTROL_EMFILE_CLIENT";

fn set_soft_nofile(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for getrlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = n.min(lim.rlim_max);
    // SAFETY: `lim` is a valid rlimit; the soft limit stays at or below the hard one.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

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
    if let Ok(addr) = std::env::var(ROLE) {
        // The child: wait for the go-ahead, then connect (the server answers once it can).
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        let c = control::connect(addr.parse().unwrap(), "child", GUARD, None).unwrap();
        println!("CONNECTED {}", c.entries.len());
        return;
    }
    let (srv, _h) = server(fake_entries(1), ServerConfig::default());
    let port = srv.local_addr().port();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "out_of_descriptors_pauses_accepting_and_recovers",
            "--exact",
            "--nocapture",
        ])
        .env(ROLE, srv.local_addr().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child_in = child.stdin.take().unwrap();
    let mut child_out = BufReader::new(child.stdout.take().unwrap());
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
    child_in.write_all(b"go\n").unwrap();
    child_in.flush().unwrap();
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
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            child_out.read_line(&mut line).unwrap() > 0,
            "child exited unserved"
        );
        if line.starts_with("CONNECTED") {
            break;
        }
    }
    assert_eq!(line.trim(), "CONNECTED 1");
    assert!(child.wait().unwrap().success());
}
