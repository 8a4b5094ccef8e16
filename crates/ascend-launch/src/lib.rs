//! Multi-rank programs on one host or several, with torchrun's conventions.
//!
//! * [`Launcher`] spawns `N` copies of a command, each with `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
//!   `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `GROUP_WORLD_SIZE`, `ROLE_RANK`, `ROLE_WORLD_SIZE`,
//!   `MASTER_ADDR` and `MASTER_PORT` set, waits for them, and
//!   stops the others when one fails (so a dead rank never leaves the rest hanging). A job of
//!   several nodes runs one launcher per node ([`Launcher::nodes`], torchrun's `--nnodes` and
//!   `--node-rank`): node `k`'s ranks are `k * N .. (k + 1) * N`, and every node names the
//!   same master (rank 0, on node 0).
//! * [`Rendezvous`] is what each rank uses to exchange bootstrap bytes (an HCCL root info, a
//!   list of handles) over TCP: rank 0 listens on `MASTER_ADDR:MASTER_PORT`, every other rank
//!   connects, and the connections stay open for [`Rendezvous::broadcast`],
//!   [`Rendezvous::all_gather`] and [`Rendezvous::barrier`]. A rank that dies closes its socket,
//!   so the others get [`Error::PeerLost`] instead of waiting forever; every wait has a timeout.
//!
//! The same program runs under this launcher, under torchrun, or under a cluster scheduler
//! that sets the same variables, on one host or across the hosts of an A3 supernode.
#![deny(unsafe_code)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Everything that can fail while launching or exchanging.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A variable is missing or does not parse.
    #[error("environment variable {name} = {value:?}: {reason}")]
    Env {
        /// The variable.
        name: &'static str,
        /// Its value (empty when unset).
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Rank and world size are inconsistent.
    #[error("rank {rank} is outside a world of {world_size}")]
    BadRank {
        /// The rank.
        rank: u32,
        /// The world size.
        world_size: u32,
    },
    /// A peer did not connect or answer within the timeout.
    #[error("rendezvous {what} timed out after {after:?}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// The budget spent.
        after: Duration,
    },
    /// A peer closed its connection (it exited or crashed).
    #[error("rank {rank} left the rendezvous: {reason}")]
    PeerLost {
        /// The rank whose connection closed (0 when a worker lost the master).
        rank: u32,
        /// The I/O error text.
        reason: String,
    },
    /// A peer sent bytes that are not this protocol.
    #[error("rendezvous protocol error from rank {rank}: {what}")]
    Protocol {
        /// The sender.
        rank: u32,
        /// What was wrong.
        what: String,
    },
    /// Spawning or waiting for a rank process failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A rank's place in the job, read from the torchrun variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    /// `RANK`.
    pub rank: u32,
    /// `WORLD_SIZE`.
    pub world_size: u32,
    /// `LOCAL_RANK` (defaults to `RANK`).
    pub local_rank: u32,
    /// `MASTER_ADDR` (default `127.0.0.1`).
    pub master_addr: String,
    /// `MASTER_PORT` (default 29500).
    pub master_port: u16,
}

fn env_num<T: std::str::FromStr>(name: &'static str, default: Option<T>) -> Result<T> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|_| Error::Env {
            name,
            value: v,
            reason: "not a number in range",
        }),
        Err(_) => default.ok_or(Error::Env {
            name,
            value: String::new(),
            reason: "not set (run under ascend-run, torchrun or a scheduler that sets it)",
        }),
    }
}

impl RankEnv {
    /// Reads `RANK`, `WORLD_SIZE` (both required), `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`.
    ///
    /// # Errors
    /// [`Error::Env`] for a missing or malformed variable, [`Error::BadRank`] when
    /// `RANK >= WORLD_SIZE`.
    pub fn from_env() -> Result<Self> {
        let rank: u32 = env_num("RANK", None)?;
        let world_size: u32 = env_num("WORLD_SIZE", None)?;
        if world_size == 0 || rank >= world_size {
            return Err(Error::BadRank { rank, world_size });
        }
        Ok(RankEnv {
            rank,
            world_size,
            local_rank: env_num("LOCAL_RANK", Some(rank))?,
            master_addr: std::env::var("MASTER_ADDR").unwrap_or_else(|_| "127.0.0.1".into()),
            master_port: env_num("MASTER_PORT", Some(29500))?,
        })
    }

    /// Whether this process was started as a rank (both `RANK` and `WORLD_SIZE` are set).
    pub fn is_set() -> bool {
        std::env::var_os("RANK").is_some() && std::env::var_os("WORLD_SIZE").is_some()
    }
}

const HELLO: &[u8; 4] = b"ARDV";

/// Bootstrap exchange between the ranks of one job.
#[derive(Debug)]
pub struct Rendezvous {
    rank: u32,
    world_size: u32,
    timeout: Duration,
    /// Rank 0: the stream of every other rank, indexed by rank (index 0 unused). Others: one
    /// stream, to rank 0.
    peers: Vec<Option<TcpStream>>,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

fn resolve(addr: &str, port: u16) -> Result<SocketAddr> {
    (addr, port)
        .to_socket_addrs()
        .map_err(io_err(format!("resolving {addr}:{port}")))?
        .next()
        .ok_or_else(|| Error::Env {
            name: "MASTER_ADDR",
            value: addr.into(),
            reason: "resolves to no address",
        })
}

impl Rendezvous {
    /// Joins the job described by `env`. Rank 0 binds `MASTER_ADDR:MASTER_PORT` and waits for
    /// every other rank; the others connect, retrying until `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the job does not assemble in time, [`Error::Io`] when the port
    /// cannot be bound, [`Error::Protocol`] for a stranger on the port.
    pub fn join(env: &RankEnv, timeout: Duration) -> Result<Self> {
        let addr = resolve(&env.master_addr, env.master_port)?;
        let deadline = Instant::now() + timeout;
        let mut peers: Vec<Option<TcpStream>> = (0..env.world_size).map(|_| None).collect();
        if env.rank == 0 {
            let listener = TcpListener::bind(addr).map_err(io_err(format!("binding {addr}")))?;
            listener.set_nonblocking(true).map_err(io_err("listener"))?;
            let mut missing = env.world_size - 1;
            while missing > 0 {
                match listener.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false)
                            .map_err(io_err("accepted socket"))?;
                        s.set_nodelay(true).ok();
                        s.set_read_timeout(Some(timeout)).ok();
                        let mut s = s;
                        let mut hello = [0u8; 12];
                        if s.read_exact(&mut hello).is_err() || &hello[..4] != HELLO {
                            continue; // a stranger or a dead peer: ignore it
                        }
                        let r = u32::from_le_bytes(hello[4..8].try_into().unwrap());
                        let w = u32::from_le_bytes(hello[8..12].try_into().unwrap());
                        if w != env.world_size || r == 0 || r >= w {
                            return Err(Error::Protocol {
                                rank: r,
                                what: format!(
                                    "joined as rank {r} of {w}, expected world {}",
                                    env.world_size
                                ),
                            });
                        }
                        if peers[r as usize].replace(s).is_none() {
                            missing -= 1;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            return Err(Error::Timeout {
                                what: format!("waiting for {missing} rank(s) to join at {addr}"),
                                after: timeout,
                            });
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(io_err("accept")(e)),
                }
            }
        } else {
            let s = loop {
                match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        return Err(Error::Timeout {
                            what: format!("connecting to rank 0 at {addr} ({e})"),
                            after: timeout,
                        })
                    }
                }
            };
            s.set_nodelay(true).ok();
            s.set_read_timeout(Some(timeout)).ok();
            let mut s = s;
            let mut hello = Vec::with_capacity(12);
            hello.extend_from_slice(HELLO);
            hello.extend_from_slice(&env.rank.to_le_bytes());
            hello.extend_from_slice(&env.world_size.to_le_bytes());
            s.write_all(&hello).map_err(|e| Error::PeerLost {
                rank: 0,
                reason: e.to_string(),
            })?;
            peers[0] = Some(s);
        }
        Ok(Rendezvous {
            rank: env.rank,
            world_size: env.world_size,
            timeout,
            peers,
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    fn send(&mut self, peer: u32, bytes: &[u8]) -> Result<()> {
        let s = self.peers[peer as usize].as_mut().expect("connected peer");
        let mut msg = Vec::with_capacity(8 + bytes.len());
        msg.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        msg.extend_from_slice(bytes);
        s.write_all(&msg).map_err(|e| Error::PeerLost {
            rank: peer,
            reason: e.to_string(),
        })
    }

    fn recv(&mut self, peer: u32) -> Result<Vec<u8>> {
        let timeout = self.timeout;
        let s = self.peers[peer as usize].as_mut().expect("connected peer");
        let lost = |e: io::Error| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout {
                what: format!("waiting for rank {peer}"),
                after: timeout,
            },
            _ => Error::PeerLost {
                rank: peer,
                reason: e.to_string(),
            },
        };
        let mut len = [0u8; 8];
        s.read_exact(&mut len).map_err(lost)?;
        let len = u64::from_le_bytes(len);
        if len > 1 << 30 {
            return Err(Error::Protocol {
                rank: peer,
                what: format!("message of {len} bytes"),
            });
        }
        let mut buf = vec![0u8; len as usize];
        s.read_exact(&mut buf).map_err(lost)?;
        Ok(buf)
    }

    /// Every rank contributes `mine`; every rank gets all contributions, indexed by rank.
    ///
    /// # Errors
    /// [`Error::PeerLost`] when a rank has gone, [`Error::Timeout`] when one is too slow.
    pub fn all_gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        if self.rank == 0 {
            let mut all = vec![mine.to_vec()];
            for r in 1..self.world_size {
                all.push(self.recv(r)?);
            }
            let mut packed = Vec::new();
            for part in &all {
                packed.extend_from_slice(&(part.len() as u64).to_le_bytes());
                packed.extend_from_slice(part);
            }
            for r in 1..self.world_size {
                self.send(r, &packed)?;
            }
            Ok(all)
        } else {
            self.send(0, mine)?;
            let packed = self.recv(0)?;
            let mut all = Vec::with_capacity(self.world_size as usize);
            let mut at = 0usize;
            while at < packed.len() {
                let bad = || Error::Protocol {
                    rank: 0,
                    what: "truncated all-gather reply".into(),
                };
                let len = packed
                    .get(at..at + 8)
                    .ok_or_else(bad)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)?;
                at += 8;
                all.push(packed.get(at..at + len).ok_or_else(bad)?.to_vec());
                at += len;
            }
            if all.len() != self.world_size as usize {
                return Err(Error::Protocol {
                    rank: 0,
                    what: format!("{} parts for {} ranks", all.len(), self.world_size),
                });
            }
            Ok(all)
        }
    }

    /// Rank 0's `bytes` reach every rank (other ranks pass anything, e.g. an empty slice).
    ///
    /// # Errors
    /// As for [`Rendezvous::all_gather`].
    pub fn broadcast(&mut self, bytes: &[u8]) -> Result<Vec<u8>> {
        if self.rank == 0 {
            for r in 1..self.world_size {
                self.send(r, bytes)?;
            }
            Ok(bytes.to_vec())
        } else {
            self.recv(0)
        }
    }

    /// Returns once every rank has called it.
    ///
    /// # Errors
    /// As for [`Rendezvous::all_gather`].
    pub fn barrier(&mut self) -> Result<()> {
        self.all_gather(&[]).map(drop)
    }
}

/// Picks a loopback port that is free right now (for `MASTER_PORT`).
///
/// A port the kernel hands out for `bind(0)` lies in its ephemeral range, from which it also
/// takes the local ports of outgoing connections: between picking such a port and rank 0
/// binding it, any connection on the host may take it. So the port comes from below that
/// range (read from `/proc/sys/net/ipv4/ip_local_port_range`; 10000 and up), where only an
/// explicit bind can take it, and a process never gets the same port twice. Only when no
/// such port is free does it fall back to `bind(0)`.
///
/// # Errors
/// [`Error::Io`] when no port can be bound.
pub fn free_port() -> Result<u16> {
    static HANDED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    const LOW: u32 = 10_000;
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    if ephemeral_start > LOW + 1_000 {
        let span = ephemeral_start - LOW;
        // Where to start looking: spread over processes and calls.
        let seed = std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
        let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..span {
            let port = (LOW + (seed.wrapping_add(i.wrapping_mul(7_919))) % span) as u16;
            if handed.contains(&port) {
                continue;
            }
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                handed.push(port);
                return Ok(port);
            }
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("binding a free port"))?;
    Ok(l.local_addr().map_err(io_err("local_addr"))?.port())
}

/// Spawns the ranks of a job on this host.
#[derive(Debug, Clone)]
pub struct Launcher {
    ranks: u32,
    /// (nodes, this node's rank).
    nodes: (u32, u32),
    /// Set by [`Launcher::master_addr`] (else 127.0.0.1, for a single node).
    master_addr: Option<String>,
    master_port: Option<u16>,
    timeout: Option<Duration>,
}

/// How each rank ended.
#[derive(Debug)]
pub struct JobResult {
    /// Exit status per rank.
    pub statuses: Vec<ExitStatus>,
}

impl JobResult {
    /// Whether every rank exited with status 0.
    pub fn success(&self) -> bool {
        self.statuses.iter().all(|s| s.success())
    }
}

impl Launcher {
    /// A job of `ranks` processes on 127.0.0.1 with a free port.
    pub fn new(ranks: u32) -> Self {
        Launcher {
            ranks,
            nodes: (1, 0),
            master_addr: None,
            master_port: None,
            timeout: None,
        }
    }

    /// Makes this launcher node `node_rank` of a job of `nnodes` nodes, each starting the
    /// same number of ranks. With more than one node, every node must be given the master's
    /// address and port ([`Launcher::master_addr`], [`Launcher::master_port`]);
    /// [`Launcher::run`] checks it.
    pub fn nodes(mut self, nnodes: u32, node_rank: u32) -> Self {
        self.nodes = (nnodes, node_rank);
        self
    }

    /// Sets `MASTER_ADDR`.
    pub fn master_addr(mut self, addr: impl Into<String>) -> Self {
        self.master_addr = Some(addr.into());
        self
    }

    /// Sets `MASTER_PORT` (default: a free port).
    pub fn master_port(mut self, port: u16) -> Self {
        self.master_port = Some(port);
        self
    }

    /// Kills every rank still running after `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Runs `make_command(local rank)` once per rank of this node with the rank variables set, waits for all, and
    /// kills the remaining ranks as soon as one fails or the timeout passes.
    ///
    /// # Errors
    /// [`Error::Io`] when a process cannot be spawned or waited for; [`Error::BadRank`] for
    /// zero ranks, zero nodes or a node rank outside them; [`Error::Env`] for a job of several
    /// nodes without a master address or port (loopback and a free port are one host's).
    pub fn run(&self, mut make_command: impl FnMut(u32) -> Command) -> Result<JobResult> {
        let (nnodes, node) = self.nodes;
        if self.ranks == 0 || node >= nnodes {
            return Err(Error::BadRank {
                rank: node,
                world_size: nnodes.saturating_mul(self.ranks),
            });
        }
        let world = nnodes.checked_mul(self.ranks).ok_or(Error::BadRank {
            rank: node,
            world_size: u32::MAX,
        })?;
        let master_addr = match &self.master_addr {
            Some(a) => a.clone(),
            None if nnodes > 1 => {
                return Err(Error::Env {
                    name: "MASTER_ADDR",
                    value: String::new(),
                    reason: "a job of several nodes needs the master's address on every node",
                })
            }
            None => "127.0.0.1".into(),
        };
        let port = match self.master_port {
            Some(p) => p,
            None if nnodes > 1 => {
                return Err(Error::Env {
                    name: "MASTER_PORT",
                    value: String::new(),
                    reason: "a job of several nodes needs the master's port on every node",
                })
            }
            None => free_port()?,
        };
        let mut children: Vec<Child> = Vec::new();
        for r in 0..self.ranks {
            let mut cmd = make_command(r);
            cmd.env("RANK", (node * self.ranks + r).to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_WORLD_SIZE", self.ranks.to_string())
                .env("GROUP_RANK", node.to_string())
                .env("GROUP_WORLD_SIZE", nnodes.to_string())
                .env("ROLE_RANK", (node * self.ranks + r).to_string())
                .env("ROLE_WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", &master_addr)
                .env("MASTER_PORT", port.to_string());
            match cmd.spawn() {
                Ok(c) => children.push(c),
                Err(e) => {
                    kill_all(&mut children);
                    return Err(io_err(format!("spawning rank {r}"))(e));
                }
            }
        }
        let start = Instant::now();
        let mut statuses: Vec<Option<ExitStatus>> = vec![None; children.len()];
        loop {
            let mut failed = false;
            for (i, c) in children.iter_mut().enumerate() {
                if statuses[i].is_none() {
                    if let Some(s) = c
                        .try_wait()
                        .map_err(io_err(format!("waiting for rank {i}")))?
                    {
                        failed |= !s.success();
                        statuses[i] = Some(s);
                    }
                }
            }
            let timed_out = self.timeout.is_some_and(|t| start.elapsed() > t);
            if failed || timed_out {
                kill_all(&mut children);
            }
            if statuses.iter().all(Option::is_some) {
                break;
            }
            if failed || timed_out {
                for (i, c) in children.iter_mut().enumerate() {
                    if statuses[i].is_none() {
                        statuses[i] = Some(c.wait().map_err(io_err(format!("reaping rank {i}")))?);
                    }
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(JobResult {
            statuses: statuses.into_iter().map(Option::unwrap).collect(),
        })
    }
}

fn kill_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
    }
}
