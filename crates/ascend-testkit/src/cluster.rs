//! An emulated supernode of several hosts on one machine: one network namespace per host,
//! joined by a bridge of their own, each host with its own address.
//!
//! The bridge is connected to no real interface and has no address, nothing is routed: the
//! hosts reach each other and nothing else. Their addresses are `198.18.0.1`, `198.18.0.2`, …
//! (the benchmarking range of RFC 2544, never routed on the internet); two clusters on one
//! machine may use the same addresses, each on its own bridge. A host's processes get
//! `ASCEND_SIM_HOST` (its index) and `ASCEND_SIM_SUPERNODE` (its supernode), so the emulator
//! applies its cross-host sharing rules. [`Cluster::etcd`] runs etcd on one host (the fleet's
//! directory) and [`Cluster::lose`] fails a host (its link cut, then its processes killed).
//!
//! Making namespaces needs root (`CAP_NET_ADMIN` and `CAP_SYS_ADMIN`) and `ip` from iproute2:
//! [`Cluster::new`] says so in its error. A dropped cluster kills every process in its
//! namespaces and removes them, their links and its bridge; a cluster whose process died without dropping
//! it (killed) is removed by the next [`Cluster::new`] on the machine.

use std::net::Ipv4Addr;
use std::process::{Command, Output, Stdio};

use crate::etcd::LocalEtcd;

/// Names of everything a cluster makes start with this, the owning process's pid, `c` and
/// the cluster's number in that process (short: an interface name has at most 15 bytes).
const PREFIX: &str = "as";

/// Most hosts in a cluster (addresses `198.18.0.1` to `198.18.0.250`).
pub const MAX_HOSTS: usize = 250;

/// Clusters made by this process so far.
static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// One emulated host: its namespace, the bridge side of its link, and its supernode.
#[derive(Debug)]
struct Host {
    netns: String,
    link: String,
    supernode: u32,
}

/// A cluster of emulated hosts (see the module docs). Dropping it kills every process on its
/// hosts and removes the hosts.
#[must_use = "dropping the cluster removes its hosts"]
#[derive(Debug)]
pub struct Cluster {
    /// What every name of this cluster starts with.
    base: String,
    bridge: String,
    hosts: Vec<Host>,
}

/// Why a cluster could not be made: not root, no `ip`, or a step that failed (named).
#[derive(Debug)]
pub struct ClusterError(pub String);

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClusterError {}

/// Runs `ip` with `args`; the error names the command and what it printed.
fn ip(args: &[&str]) -> Result<Output, ClusterError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ClusterError(format!("cannot run `ip` (iproute2): {e}")))?;
    if !out.status.success() {
        return Err(ClusterError(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

/// The pid a cluster object's name carries (`as<pid>c<n>…`), if it is one.
fn owner_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, rest) = rest.split_once('c')?;
    let numbered = rest.starts_with(|c: char| c.is_ascii_digit());
    pid.parse().ok().filter(|_| numbered)
}

/// Kills every process in namespace `netns` (`ip netns pids`), again until none is left
/// (one may have been forking while the last were killed), for up to about 5 s.
fn kill_all_in(netns: &str) {
    for _ in 0..500 {
        let Ok(out) = ip(&["netns", "pids", netns]) else {
            return;
        };
        let pids: Vec<libc::pid_t> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: kill with a pid read from the kernel and a constant signal.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Removes what clusters of processes that no longer exist left behind (their namespaces'
/// processes killed first). An owner is looked up in this process's pid namespace: processes
/// that share the machine's network stack from different pid namespaces (containers with
/// host networking) must not make clusters at the same time.
fn remove_stale() {
    let dead = |name: &str| {
        owner_of(name).is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(out) = ip(&["netns", "list"]) {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if dead(name) {
                kill_all_in(name);
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    if let Ok(out) = ip(&["-o", "link", "show"]) {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "7: as123c0b: <...": the name, without any "@peer".
            let name = line.split(':').nth(1).unwrap_or("").trim();
            let name = name.split('@').next().unwrap_or("");
            if dead(name) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
}

/// Whether this process may make namespaces: root, and `ip` present.
pub fn available() -> Result<(), ClusterError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(ClusterError(
            "an emulated cluster needs root (network namespaces need CAP_NET_ADMIN and \
             CAP_SYS_ADMIN)"
                .into(),
        ));
    }
    ip(&["-V"]).map(|_| ())
}

impl Cluster {
    /// A cluster of `supernodes.len()` hosts, host `i` in supernode `supernodes[i]`, its
    /// address [`Cluster::addr`]`(i)`.
    pub fn new(supernodes: &[u32]) -> Result<Cluster, ClusterError> {
        if supernodes.len() > MAX_HOSTS {
            return Err(ClusterError(format!(
                "{} hosts asked for; a cluster has at most {MAX_HOSTS} (one /24 of addresses)",
                supernodes.len()
            )));
        }
        available()?;
        remove_stale();
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = format!("{PREFIX}{}c{n}", std::process::id());
        // The longest name: the bridge side of the last host's link.
        let longest = format!("{base}v{}", supernodes.len().saturating_sub(1));
        if longest.len() > 15 {
            return Err(ClusterError(format!(
                "interface name {longest} is longer than Linux's 15 bytes (pid or cluster \
                 number too large)"
            )));
        }
        let mut c = Cluster {
            bridge: format!("{base}b"),
            base: base.clone(),
            hosts: Vec::new(),
        };
        // On any failure below, dropping `c` removes what was made so far.
        ip(&["link", "add", &c.bridge, "type", "bridge"])?;
        ip(&["link", "set", &c.bridge, "up"])?;
        for (i, &supernode) in supernodes.iter().enumerate() {
            let host = Host {
                netns: format!("{base}h{i}"),
                link: format!("{base}v{i}"),
                supernode,
            };
            ip(&["netns", "add", &host.netns])?;
            let peer = format!("{base}p{i}");
            c.hosts.push(host);
            let host = &c.hosts[i];
            ip(&[
                "link", "add", &host.link, "type", "veth", "peer", "name", &peer,
            ])?;
            ip(&["link", "set", &peer, "netns", &host.netns])?;
            ip(&["link", "set", &host.link, "master", &c.bridge])?;
            ip(&["link", "set", &host.link, "up"])?;
            let inside = |args: &[&str]| {
                let mut a = vec!["netns", "exec", &host.netns, "ip"];
                a.extend_from_slice(args);
                ip(&a)
            };
            inside(&["link", "set", &peer, "name", "eth0"])?;
            let addr = format!("{}/24", Cluster::addr(i));
            inside(&["addr", "add", &addr, "dev", "eth0"])?;
            inside(&["link", "set", "eth0", "up"])?;
            inside(&["link", "set", "lo", "up"])?;
        }
        Ok(c)
    }

    /// The address of host `i`.
    pub fn addr(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 0, (i + 1) as u8)
    }

    /// How many hosts there are.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// A command running `program` on host `i`: in its namespace, with its
    /// `ASCEND_SIM_HOST`, `ASCEND_SIM_SUPERNODE` and `HCCL_IF_IP` (its address). `ip netns
    /// exec` execs the program, so the process is the program itself; it gets a parent-death
    /// signal, which Linux sends when the *thread* that spawned it ends (spawn from a thread
    /// that outlives the process), and which its own children do not inherit: the cluster's
    /// drop kills whatever runs on its hosts, and a next cluster what a killed owner left.
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let h = &self.hosts[i];
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &h.netns])
            .arg(program)
            .env("ASCEND_SIM_HOST", i.to_string())
            .env("ASCEND_SIM_SUPERNODE", h.supernode.to_string())
            .env("HCCL_IF_IP", Cluster::addr(i).to_string());
        crate::spawn::die_with_parent(&mut c);
        c
    }

    /// Cuts host `i`'s link (its namespace stays, its processes run on, unreachable).
    pub fn cut(&self, i: usize) -> Result<(), ClusterError> {
        ip(&["link", "set", &self.hosts[i].link, "down"]).map(|_| ())
    }

    /// Loses host `i` as a host that fails is lost: its link is cut first, so its peers see
    /// no connection close, then every process on it is killed (its namespace stays until
    /// the cluster goes). Returns once no process is left on it.
    pub fn lose(&self, i: usize) -> Result<(), ClusterError> {
        self.cut(i)?;
        kill_all_in(&self.hosts[i].netns);
        match ip(&["netns", "pids", &self.hosts[i].netns]) {
            Ok(out) if out.stdout.iter().all(u8::is_ascii_whitespace) => Ok(()),
            Ok(out) => Err(ClusterError(format!(
                "host {i} still runs {} after its processes were killed",
                String::from_utf8_lossy(&out.stdout).trim()
            ))),
            Err(e) => Err(e),
        }
    }

    /// Starts etcd on host `i`, listening on its address only (ports 2379 and 2380): the
    /// cluster's directory. It is a process on that host, killed with the host's processes.
    ///
    /// # Panics
    /// As [`LocalEtcd::start`]: etcd not installed, or not healthy in time.
    pub fn etcd(&self, i: usize) -> LocalEtcd {
        LocalEtcd::start_in(&self.hosts[i].netns, Cluster::addr(i))
    }
}

impl Cluster {
    /// Tears the cluster down as dropping it does, then returns what is still there of it
    /// (namespaces and links by name): nothing, unless the teardown failed.
    pub fn close(mut self) -> Vec<String> {
        self.teardown();
        let mine = |w: &&str| {
            w.strip_prefix(self.base.as_str())
                .is_some_and(|rest| rest.starts_with(['b', 'h', 'v', 'p']))
        };
        let mut left = Vec::new();
        for args in [&["netns", "list"][..], &["-o", "link", "show"][..]] {
            if let Ok(out) = ip(args) {
                left.extend(
                    String::from_utf8_lossy(&out.stdout)
                        .split(|c: char| c.is_whitespace() || c == ':' || c == '@')
                        .filter(mine)
                        .map(str::to_owned),
                );
            }
        }
        left
    }

    fn teardown(&mut self) {
        for h in &self.hosts {
            kill_all_in(&h.netns);
            // The link goes with its namespace's end; deleting it here too covers a host
            // whose peer never moved in.
            let _ = ip(&["link", "del", &h.link]);
            let _ = ip(&["netns", "del", &h.netns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
        self.hosts.clear();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.teardown();
    }
}
