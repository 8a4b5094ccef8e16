//! A throwaway etcd for tests: `etcd` (Debian's `etcd-server`, or the binary `ETCD_BIN` names)
//! on free loopback ports (or on an emulated host's address, inside its network namespace)
//! with a temporary data dir, killed and removed on drop. On Linux it
//! also dies with the process that started it, however that process ends (a SIGKILL, a
//! timeout): the kernel sends it SIGKILL then, so no etcd outlives a killed test binary.
//!
//! Where etcd is not installed, [`LocalEtcd::start`] panics saying how to install it, so a
//! test that needs etcd fails rather than passing without it. A test of a crate whose plain
//! `cargo test` should not need etcd asks [`available`] first: it skips, saying so, only
//! outside CI.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::spawn::{die_with_parent, spawn_for_life};

/// How long etcd may take to answer its health check after starting.
const READY: Duration = Duration::from_secs(30);

/// How long one request to etcd's HTTP endpoint may take.
const REQUEST: Duration = Duration::from_secs(5);

/// The etcd binary: `ETCD_BIN`, or `etcd` on the `PATH`.
pub fn bin() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into())
}

/// What to do where etcd is missing.
fn not_installed() -> String {
    format!(
        "etcd is not installed ({} not found): this test needs a real etcd. Install it with \
         `apt-get install etcd-server` (Debian/Ubuntu), or set ETCD_BIN to an etcd binary",
        bin()
    )
}

/// Whether etcd can be run here (`etcd --version` succeeds); the error says how to install
/// it.
///
/// # Errors
/// The message saying what is missing and how to install it.
pub fn installed() -> Result<(), String> {
    let run = Command::new(bin())
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match run {
        Ok(st) if st.success() => Ok(()),
        Ok(st) => Err(format!("`{} --version` exited with {st}", bin())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(not_installed()),
        Err(e) => Err(format!("cannot run {}: {e}", bin())),
    }
}

/// Whether etcd is installed, for a test that runs on machines without it: where it is not,
/// says so on standard error and returns `false`, except under CI (`CI=true`), which installs
/// etcd, where it panics with how to install it.
///
/// # Panics
/// Under `CI=true`, if etcd cannot be run.
pub fn available() -> bool {
    match installed() {
        Ok(()) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{e} (CI=true)"),
        Err(e) => {
            eprintln!("skipping what needs etcd: {e}");
            false
        }
    }
}

/// Where an etcd runs: on this host's loopback, or inside a network namespace on one of its
/// addresses (an emulated host, [`crate::cluster::Cluster::etcd`]).
#[derive(Debug, Clone)]
enum Site {
    Loopback,
    Netns { name: String, addr: Ipv4Addr },
}

impl Site {
    fn ip(&self) -> IpAddr {
        match self {
            Site::Loopback => Ipv4Addr::LOCALHOST.into(),
            Site::Netns { addr, .. } => (*addr).into(),
        }
    }
}

/// A running etcd, a single member listening on loopback only (or on an emulated host's
/// address only).
#[derive(Debug)]
pub struct LocalEtcd {
    child: Option<Child>,
    dir: PathBuf,
    site: Site,
    client_port: u16,
    peer_port: u16,
}

impl LocalEtcd {
    /// Starts etcd on two loopback ports from `free_port` (its client and peer ports, e.g.
    /// [`crate::free_port`]) and waits until it says it is healthy.
    ///
    /// # Panics
    /// If etcd is not installed (the message says how to install it) or does not become
    /// healthy (the message holds its log).
    pub fn start(free_port: impl Fn() -> u16) -> LocalEtcd {
        LocalEtcd::start_at(Site::Loopback, free_port(), free_port())
    }

    /// Starts etcd inside network namespace `netns` on its address `addr`, ports 2379 and
    /// 2380 (etcd's own: the namespace is the host's alone), and waits until it says it is
    /// healthy, asking from inside the namespace. Panics as [`LocalEtcd::start`].
    pub(crate) fn start_in(netns: &str, addr: Ipv4Addr) -> LocalEtcd {
        let site = Site::Netns {
            name: netns.to_owned(),
            addr,
        };
        LocalEtcd::start_at(site, 2379, 2380)
    }

    fn start_at(site: Site, client_port: u16, peer_port: u16) -> LocalEtcd {
        // Named by where it runs too: two clusters' hosts may have the same address.
        let place = match &site {
            Site::Loopback => "lo",
            Site::Netns { name, .. } => name.as_str(),
        };
        let dir = std::env::temp_dir().join(format!(
            "ascend-etcd-{}-{place}-{client_port}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary etcd data dir");
        let mut e = LocalEtcd {
            child: None,
            dir,
            site,
            client_port,
            peer_port,
        };
        e.restart();
        e
    }

    /// The client URL (`http://127.0.0.1:PORT`, or the emulated host's address).
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.site.ip(), self.client_port)
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// Kills etcd (SIGKILL, as a crash) and waits for it; the data dir stays.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts etcd again on the same ports and data dir (after [`LocalEtcd::stop`]) and waits
    /// until it is healthy.
    ///
    /// # Panics
    /// If etcd is running, is not installed, or does not become healthy.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "etcd is running");
        let peer = format!("http://{}:{}", self.site.ip(), self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .expect("the etcd log file");
        let mut cmd = match &self.site {
            Site::Loopback => Command::new(bin()),
            Site::Netns { name, .. } => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", name]).arg(bin());
                c
            }
        };
        cmd.arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={}", self.url()))
            .arg(format!("--advertise-client-urls={}", self.url()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the etcd log file"))
            .stderr(log);
        die_with_parent(&mut cmd);
        self.child = Some(match spawn_for_life(cmd) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!("{}", not_installed()),
            Err(e) => panic!("cannot start {}: {e}", bin()),
        });
        self.wait_healthy();
    }

    /// Polls `/health` until etcd answers healthy: its start has no event to wait on.
    fn wait_healthy(&mut self) {
        let t0 = Instant::now();
        while !self.healthy() {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "etcd exited with {st} before it was healthy; log:\n{}",
                    self.log()
                );
            }
            assert!(
                t0.elapsed() < READY,
                "etcd not healthy after {READY:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether etcd's `/health` says so.
    fn healthy(&self) -> bool {
        self.request("GET", "/health", "")
            .is_ok_and(|a| a.contains("\"health\":\"true\""))
    }

    /// POSTs `body` to etcd's JSON gateway at `path` (`/v3/kv/put`, ...); the whole answer,
    /// status line and headers included.
    ///
    /// # Panics
    /// If etcd does not answer, or answers with a status other than 200.
    pub fn post(&self, path: &str, body: &str) -> String {
        let answer = self
            .request("POST", path, body)
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        assert!(
            answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
            "POST {path}: {answer}"
        );
        answer
    }

    /// One HTTP/1.0 request on a new connection; the answer as sent.
    fn request(&self, method: &str, path: &str, body: &str) -> std::io::Result<String> {
        let at = SocketAddr::new(self.site.ip(), self.client_port);
        let mut s = match &self.site {
            Site::Loopback => TcpStream::connect(at)?,
            Site::Netns { name, .. } => crate::netns::dial(name, at, REQUEST)?,
        };
        s.set_read_timeout(Some(REQUEST))?;
        s.set_write_timeout(Some(REQUEST))?;
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.site.ip(),
            body.len()
        )?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        Ok(answer)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_named_with_how_to_install_it() {
        let m = not_installed();
        assert!(m.contains(&bin()) && m.contains("etcd-server") && m.contains("ETCD_BIN"));
    }

    #[test]
    fn starts_answers_restarts_and_cleans_up() {
        if !available() {
            return;
        }
        let mut e = LocalEtcd::start(crate::free_port);
        assert_eq!(e.url(), format!("http://127.0.0.1:{}", e.client_port()));
        // {"key": "k", "value": "v"}, base64.
        let put = e.post("/v3/kv/put", r#"{"key":"aw==","value":"dg=="}"#);
        assert!(put.contains("\"revision\""), "{put}");
        e.stop();
        assert!(!e.healthy());
        e.restart();
        let got = e.post("/v3/kv/range", r#"{"key":"aw=="}"#);
        assert!(
            got.contains("\"value\":\"dg==\""),
            "the data dir kept it: {got}"
        );
        let dir = e.dir.clone();
        drop(e);
        assert!(!dir.exists());
    }

    /// When process `pid` started (field 22 of `/proc/<pid>/stat`) while it runs; `None` once
    /// it has exited (a zombie, or reaped). A pid reused since has another start time.
    fn running_since(pid: u32) -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The name, in parentheses, may hold spaces: fields start after the last `)`.
        let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
        if matches!(fields.first(), Some(&("Z" | "X"))) {
            return None;
        }
        fields.get(19)?.parse().ok()
    }

    /// A child of this test starts etcd and is SIGKILLed (no drop runs): its etcd dies too.
    /// The data dir the child's drop would have removed is removed here.
    #[test]
    #[cfg(target_os = "linux")]
    fn etcd_dies_with_a_killed_parent() {
        if crate::role().is_some() {
            let e = LocalEtcd::start(crate::free_port);
            let pid = e.child.as_ref().expect("etcd is running").id();
            println!("ETCD {pid} {}", e.dir.display());
            // Killed while waiting here; a parent gone before that closes our stdin.
            let _ = crate::role::read_stdin_line();
            return;
        }
        if !available() {
            return;
        }
        let mut c = crate::Spawn::new(
            crate::test_name!(etcd_dies_with_a_killed_parent),
            "etcd-parent",
        )
        .start();
        let said = c.expect_line("ETCD ");
        let (pid, dir) = said.split_once(' ').expect("etcd's pid and data dir");
        let pid: u32 = pid.parse().expect("etcd's pid");
        let since = running_since(pid).expect("etcd runs while its parent does");
        c.child.kill().expect("SIGKILL etcd's parent");
        c.child.wait().expect("reap etcd's parent");
        // The kernel kills etcd as its parent dies; the bound only ends a hang.
        crate::wait_until("etcd to die with its parent", READY, || {
            running_since(pid) != Some(since)
        });
        std::fs::remove_dir_all(dir).expect("remove the killed child's etcd data dir");
    }
}
