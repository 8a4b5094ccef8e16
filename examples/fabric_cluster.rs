//! Engines that find each other by name only, through the engine directory on etcd, on one
//! host or spread over several.
//!
//! Starts etcd (a throwaway one on free loopback ports, or the one `--etcd URL` names) and
//! `--engines N` engine processes (default 8). Each engine publishes itself as `engine-<i>`
//! with one segment, `inbox` (a slot per peer), waits until all N are listed, connects to every
//! other engine by name and writes a block into its slot there; once all have written (a
//! barrier in the directory), each verifies what it received. Then the last engine is killed
//! (SIGKILL: it withdraws nothing) and every other engine, and the coordinator that killed
//! it, see it leave through the directory when its lease runs out.
//!
//! Over several hosts, each host runs this program with `--hosts H --host K --addr IP` and
//! the same `--etcd` and `--prefix`: host K runs the engines whose index is K modulo H, on its
//! address IP, and the hosts meet through the directory alone. With `--lose-host L`, the
//! engines do not stop after verifying: they go on writing to every peer until the engines of
//! host L are lost (its host fails: someone cuts it off and kills what runs there); every
//! other engine must see each of them lost by the engine (`PeerLost`, its channel ended)
//! and leave the directory, then serve 10 more rounds to every survivor. Host L's
//! coordinator says `all engines streaming` when the loss may come.
//!
//! ```text
//! cargo run --features etcd --example fabric_cluster
//! cargo run --features etcd --example fabric_cluster -- --engines 16
//! cargo run --features etcd --example fabric_cluster -- --etcd http://127.0.0.1:2379
//! # host K of 4, etcd elsewhere:
//! fabric_cluster --etcd http://E:2379 --hosts 4 --host K --addr IP_K
//! ```
//! Exits 0 only when every block verified and every survivor saw the killed engine (or the
//! lost host's engines) leave.

use ascend::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ascend::fabric::directory::{
    Directory, DirectoryEvent, EngineEntry, EtcdDirectory, EtcdOptions, Member, Publication,
    SegmentInfo, Watch,
};
use ascend::fabric::{Engine, EngineOptions, Error, Registration, TransferDesc, TransferOp};
use ascend::Runtime;
use ascend::{DeviceBuffer, HostBuffer};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const BLOCK: usize = 256 << 10;
const TTL: Duration = Duration::from_secs(2);
/// The lease TTL while engines write to each other without pause on a loaded machine (a late
/// renewal must not look like a departure).
const LOSS_TTL: Duration = Duration::from_secs(5);
const T: Duration = Duration::from_secs(30);
/// Rounds to every survivor after a host was lost.
const AFTER_LOSS: usize = 10;

struct Args {
    engines: usize,
    etcd: Option<String>,
    prefix: Option<String>,
    hosts: usize,
    host: usize,
    addr: String,
    lose_host: Option<usize>,
    /// Set for an engine process: its index and port.
    engine: Option<(usize, u16)>,
}

impl Args {
    /// The directory's lease TTL.
    fn ttl(&self) -> Duration {
        if self.lose_host.is_some() {
            LOSS_TTL
        } else {
            TTL
        }
    }

    /// The engines host `k` runs.
    fn on_host(&self, k: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.engines).filter(move |i| i % self.hosts == k)
    }

    /// The arguments that every process of the run shares.
    fn shared(&self, url: &str, prefix: &str) -> Vec<String> {
        let mut v = vec![
            "--engines".into(),
            self.engines.to_string(),
            "--etcd".into(),
            url.into(),
            "--prefix".into(),
            prefix.into(),
            "--hosts".into(),
            self.hosts.to_string(),
            "--host".into(),
            self.host.to_string(),
            "--addr".into(),
            self.addr.clone(),
        ];
        if let Some(l) = self.lose_host {
            v.extend(["--lose-host".into(), l.to_string()]);
        }
        v
    }
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        engines: 8,
        etcd: None,
        prefix: None,
        hosts: 1,
        host: 0,
        addr: "127.0.0.1".into(),
        lose_host: None,
        engine: None,
    };
    let (mut index, mut port) = (None, None);
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--engines" => a.engines = v()?.parse()?,
            "--etcd" => a.etcd = Some(v()?),
            "--prefix" => a.prefix = Some(v()?),
            "--hosts" => a.hosts = v()?.parse()?,
            "--host" => a.host = v()?.parse()?,
            "--addr" => a.addr = v()?,
            "--lose-host" => a.lose_host = Some(v()?.parse()?),
            "--index" => index = Some(v()?.parse()?),
            "--port" => port = Some(v()?.parse()?),
            "-h" | "--help" => {
                println!(
                    "usage: fabric_cluster [--engines N] [--etcd URL] [--prefix P] \
                     [--hosts H --host K --addr IP] [--lose-host L]"
                );
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {k}").into()),
        }
    }
    check_args(&a)?;
    if let (Some(i), Some(p)) = (index, port) {
        a.engine = Some((i, p));
    }
    Ok(a)
}

fn check_args(a: &Args) -> Res<()> {
    if !(2..=64).contains(&a.engines) {
        return Err(format!("--engines must be in 2..=64, not {}", a.engines).into());
    }
    if !(1..=a.engines).contains(&a.hosts) || a.host >= a.hosts {
        return Err(format!(
            "--hosts {} --host {}: need 1 <= hosts <= engines and host < hosts",
            a.hosts, a.host
        )
        .into());
    }
    if a.hosts > 1 && (a.etcd.is_none() || a.prefix.is_none()) {
        return Err("several hosts meet in one etcd: give --etcd URL and --prefix P".into());
    }
    match a.lose_host {
        Some(l) if l >= a.hosts || a.hosts < 2 => Err(format!(
            "--lose-host {l}: needs another host to survive it, of {}",
            a.hosts
        )
        .into()),
        _ => Ok(()),
    }
}

fn name(i: usize) -> String {
    format!("engine-{i:02}")
}

fn index_of(name: &str) -> Option<usize> {
    name.strip_prefix("engine-")?.parse().ok()
}

/// The byte engine `from` writes into engine `to`'s inbox.
fn byte(from: usize, to: usize) -> u8 {
    (from * 64 + to) as u8 | 1
}

fn directory(url: &str, prefix: &str, ttl: Duration) -> Res<Arc<EtcdDirectory>> {
    let opts = EtcdOptions::new(url).prefix(prefix).ttl(ttl);
    Ok(Arc::new(EtcdDirectory::connect(opts)?))
}

/// Where engines mark the phases they finished (`wrote-engine-03`, ...): a directory next to
/// the one they publish themselves in, so a mark is never taken for an engine. A mark counts
/// once seen, listed or arriving, even after its engine has ended and withdrawn it.
struct Marks {
    dir: Arc<EtcdDirectory>,
    watch: Watch,
    seen: BTreeSet<String>,
    held: Vec<Publication>,
}

impl Marks {
    fn open(url: &str, prefix: &str, ttl: Duration) -> Res<Marks> {
        let dir = directory(url, &format!("{prefix}-marks"), ttl)?;
        let watch = dir.watch()?;
        Ok(Marks {
            dir,
            watch,
            seen: BTreeSet::new(),
            held: Vec::new(),
        })
    }

    /// Marks `phase` done by engine `i` (until this process ends).
    fn mark(&mut self, phase: &str, i: usize, entry: &EngineEntry) -> Res<()> {
        let p = self.dir.publish(&format!("{phase}-{}", name(i)), entry)?;
        self.held.push(p);
        Ok(())
    }

    /// Waits until `n` engines have marked `phase` (the watch, opened before any mark of
    /// this process, sees every mark made since; the listing those made before).
    fn wait(&mut self, phase: &str, n: usize) -> Res<()> {
        let want = format!("{phase}-");
        let t0 = Instant::now();
        let mut failed = None;
        loop {
            // A listing the store could not answer in time (a loaded machine) is asked again.
            match self.dir.list(&want) {
                Ok(v) => self.seen.extend(v.into_iter().map(|(k, _)| k)),
                Err(e) => failed = Some(e),
            }
            if self.seen.iter().filter(|k| k.starts_with(&want)).count() >= n {
                return Ok(());
            }
            let left = T.checked_sub(t0.elapsed()).ok_or_else(|| {
                format!("not every engine got to {phase} in time (last listing error: {failed:?})")
            })?;
            if let Some(DirectoryEvent::Joined { name, .. }) = self
                .watch
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                self.seen.insert(name);
            }
        }
    }
}

/// One engine's state: its memory, its membership and its peers' inbox slots.
struct Node {
    i: usize,
    engine: Engine,
    inbox: DeviceBuffer,
    src: HostBuffer,
    src_reg: Registration,
    _inbox_reg: Registration,
    member: Member,
    marks: Marks,
    /// Peer index to its engine address and its slot for this engine.
    peers: BTreeMap<usize, (String, ascend::Addr)>,
}

impl Node {
    fn start(a: &Args, i: usize, port: u16, url: &str, prefix: &str) -> Res<Node> {
        let n = a.engines;
        let rt = Runtime::from_env_or_emulator()?;
        let dev = rt.device(0)?;
        let mut opts = EngineOptions::builder()
            .task_stream_num(2)
            .pool_capacity((2 * n + 4) << 30);
        if a.lose_host.is_some() {
            // A lost host is found by its unacknowledged heartbeats: send them often.
            opts = opts
                .heartbeat_interval(Duration::from_millis(200))
                .peer_timeout(Some(Duration::from_millis(1050)));
        }
        let engine = Engine::new(&dev, &format!("{}:{port}", a.addr), opts.build()?)?;
        let inbox = engine.alloc_device(n * BLOCK)?;
        inbox.fill(0)?;
        let inbox_reg = engine.register(&inbox)?;
        let src = engine.alloc_host(BLOCK)?;
        let src_reg = engine.register(&src)?;
        let seg = SegmentInfo::new("inbox", inbox_reg.addr(), inbox_reg.len());
        let backend = rt.backend().to_string();
        let member = Member::join(
            &engine,
            directory(url, prefix, a.ttl())?,
            &name(i),
            &backend,
            vec![seg],
        )?;
        Ok(Node {
            i,
            engine,
            inbox,
            src,
            src_reg,
            _inbox_reg: inbox_reg,
            member,
            marks: Marks::open(url, prefix, a.ttl())?,
            peers: BTreeMap::new(),
        })
    }

    /// Marks `phase` done for this engine (until it exits).
    fn mark(&mut self, phase: &str) -> Res<()> {
        self.marks.mark(phase, self.i, self.member.entry())
    }

    /// Connects to every other engine by name.
    fn connect_all(&mut self, n: usize) -> Res<()> {
        let t0 = Instant::now();
        // A listing the store could not answer in time is asked again, until `T`.
        while self.member.list("engine-").map_or(0, |v| v.len()) < n {
            if t0.elapsed() > T {
                let now = self.member.list("engine-").map(|v| v.len());
                return Err(format!("not every engine published in time ({now:?} listed)").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for j in (0..n).filter(|&j| j != self.i) {
            let peer = self.member.connect_by_name(&name(j), T)?;
            let slot = peer.segment("inbox").ok_or("no inbox")?.addr + self.i * BLOCK;
            self.peers.insert(j, (peer.addr.clone(), slot));
        }
        Ok(())
    }

    /// Writes this engine's block for `j` into its slot there.
    fn write(&self, j: usize) -> Result<(), Error> {
        let (addr, slot) = &self.peers[&j];
        self.src.fill(byte(self.i, j))?;
        let d = [TransferDesc::raw(self.src_reg.addr(), *slot, BLOCK)];
        self.engine.transfer_sync(addr, TransferOp::Write, &d, T)
    }

    /// Checks the blocks engines `from` wrote here.
    fn verify(&self, from: impl Iterator<Item = usize>) -> Res<usize> {
        let got = self.inbox.to_vec()?;
        let mut k = 0;
        for j in from {
            let s = &got[j * BLOCK..(j + 1) * BLOCK];
            if s.iter().any(|&b| b != byte(j, self.i)) {
                return Err(format!("the block from {} is wrong", name(j)).into());
            }
            k += 1;
        }
        Ok(k)
    }
}

/// One engine process: publish, connect to all, write to all, verify once all wrote; then
/// watch the killed engine leave, or stream until a host is lost.
fn engine_role(a: &Args, i: usize, port: u16) -> Res<()> {
    let n = a.engines;
    let url = a.etcd.as_deref().ok_or("--etcd is required")?;
    let prefix = a.prefix.as_deref().ok_or("--prefix is required")?;
    let mut node = Node::start(a, i, port, url, prefix)?;
    let events = node.member.subscribe();
    println!("ready");
    node.connect_all(n)?;
    for j in (0..n).filter(|&j| j != i) {
        node.write(j)?;
    }
    println!("wrote {} blocks", n - 1);
    node.mark("wrote")?;
    node.marks.wait("wrote", n)?;
    let k = node.verify((0..n).filter(|&j| j != i))?;
    println!("verified {k} blocks");
    node.mark("verified")?;
    match a.lose_host {
        None => watch_victim(&node, &events, n),
        Some(l) => {
            let victims: BTreeSet<usize> = a.on_host(l).filter(|&j| j != i).collect();
            stream_until_lost(&mut node, &events, &victims)?;
            let survivors = n - a.on_host(l).count();
            node.mark("survived")?;
            node.marks.wait("survived", survivors)?;
            println!("done");
            Ok(())
        }
    }
}

/// Waits for the last engine to leave the directory (it is killed); the last engine itself
/// waits to be killed.
fn watch_victim(node: &Node, events: &Receiver<DirectoryEvent>, n: usize) -> Res<()> {
    let victim = name(n - 1);
    if node.i == n - 1 {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        return Err("the victim was not killed".into());
    }
    let t1 = Instant::now();
    loop {
        let left = (TTL + T)
            .checked_sub(t1.elapsed())
            .ok_or("the victim never left")?;
        if let DirectoryEvent::Left { name: who } = events.recv_timeout(left)? {
            if who == victim {
                break;
            }
        }
    }
    println!(
        "saw {victim} leave; connected to {} peers",
        node.engine.peers().len()
    );
    Ok(())
}

/// How a write to a lost peer ended, or `None` when it was not a loss.
fn loss(e: &Error) -> Option<String> {
    match e {
        Error::PeerLost { reason, .. } => Some(format!("PeerLost ({})", reason.label())),
        Error::NotConnected { .. } => Some("channel already ended".into()),
        _ => None,
    }
}

/// Writes to every peer in turn until each of `victims` is both lost by the engine and gone
/// from the directory, then `AFTER_LOSS` rounds to the survivors, whose blocks it verifies.
fn stream_until_lost(
    node: &mut Node,
    events: &Receiver<DirectoryEvent>,
    victims: &BTreeSet<usize>,
) -> Res<()> {
    let mut live: BTreeSet<usize> = node.peers.keys().copied().collect();
    let (mut lost, mut left) = (BTreeMap::new(), BTreeSet::new());
    let t0 = Instant::now();
    for round in 0.. {
        for j in live.clone() {
            if let Err(e) = node.write(j) {
                let how = loss(&e).ok_or_else(|| format!("writing to {}: {e}", name(j)))?;
                lost.insert(j, how);
                live.remove(&j);
            }
        }
        while let Ok(ev) = events.try_recv() {
            if let DirectoryEvent::Left { name: who } = ev {
                left.extend(index_of(&who));
            }
        }
        if round == 0 {
            node.mark("streaming")?;
            println!("streaming");
        }
        if let Some(j) = lost.keys().chain(&left).find(|j| !victims.contains(j)) {
            return Err(format!("lost {}, which is not on the lost host", name(*j)).into());
        }
        if victims
            .iter()
            .all(|j| lost.contains_key(j) && left.contains(j))
        {
            break;
        }
        if t0.elapsed() > 2 * T {
            return Err(format!(
                "still not lost: {:?} (lost {lost:?}, left {left:?})",
                victims
            )
            .into());
        }
    }
    for (j, how) in &lost {
        println!("lost {}: {how}, and it left the directory", name(*j));
    }
    for _ in 0..AFTER_LOSS {
        for &j in &live {
            node.write(j)
                .map_err(|e| format!("writing to survivor {}: {e}", name(j)))?;
        }
    }
    let n = node.peers.len() + 1;
    let from_survivors = (0..n).filter(|j| *j != node.i && !victims.contains(j));
    let k = node.verify(from_survivors)?;
    println!(
        "survived: served {AFTER_LOSS} rounds to {} survivors after the loss; verified {k} blocks",
        live.len()
    );
    Ok(())
}

/// An engine process this coordinator started (its stdin held open: the engine that waits
/// to be killed reads it).
struct Proc {
    i: usize,
    child: Child,
    _stdin: ChildStdin,
}

/// The lines the engines print, relayed by a thread each (an engine's index and its line, or
/// `None` when its output ended), and what was heard so far: an engine may say the next word
/// while the coordinator still waits for another engine's previous one.
struct Lines {
    rx: Receiver<(usize, Option<String>)>,
    heard: Vec<(usize, String)>,
    ended: BTreeSet<usize>,
}

impl Lines {
    /// Prints the engines' lines as they come until every engine of `who` printed one that
    /// starts with `word` (now or before this call).
    fn until(&mut self, who: &BTreeSet<usize>, word: &str) -> Res<()> {
        let mut pending: BTreeSet<usize> = who
            .iter()
            .copied()
            .filter(|i| {
                !self
                    .heard
                    .iter()
                    .any(|(j, l)| j == i && l.starts_with(word))
            })
            .collect();
        loop {
            if let Some(i) = pending.intersection(&self.ended).next() {
                return Err(format!("{} exited before saying {word:?}", name(*i)).into());
            }
            if pending.is_empty() {
                return Ok(());
            }
            let (i, line) = self
                .rx
                .recv_timeout(2 * T + LOSS_TTL)
                .map_err(|_| format!("no engine said {word:?} in time ({pending:?} did not)"))?;
            match line {
                Some(l) => {
                    println!("[{}] {l}", name(i));
                    if l.starts_with(word) {
                        pending.remove(&i);
                    }
                    self.heard.push((i, l));
                }
                None => {
                    self.ended.insert(i);
                }
            }
        }
    }
}

/// Starts this host's engines.
fn spawn_engines(a: &Args, url: &str, prefix: &str) -> Res<(Vec<Proc>, Lines)> {
    let exe = std::env::current_exe()?;
    let (tx, rx) = mpsc::channel();
    let mut procs = Vec::new();
    for i in a.on_host(a.host) {
        let port = ascend_launch::free_port()?;
        let mut child = Command::new(&exe)
            .args(a.shared(url, prefix))
            .args(["--index", &i.to_string(), "--port", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send((i, Some(line)));
            }
            let _ = tx.send((i, None));
        });
        procs.push(Proc {
            i,
            child,
            _stdin: stdin,
        });
    }
    let lines = Lines {
        rx,
        heard: Vec::new(),
        ended: BTreeSet::new(),
    };
    Ok((procs, lines))
}

/// Kills the last engine once every engine verified, and waits until it left the directory.
fn kill_victim(a: &Args, procs: &mut Vec<Proc>, marks: &mut Marks, dir: &EtcdDirectory) -> Res<()> {
    let n = a.engines;
    let Some(at) = procs.iter().position(|p| p.i == n - 1) else {
        return Ok(());
    };
    let watch = dir.watch()?;
    marks.wait("verified", n)?;
    let mut victim = procs.remove(at);
    let vname = name(n - 1);
    victim.child.kill()?;
    let killed = Instant::now();
    victim.child.wait()?;
    println!("[coordinator] killed {vname}");
    loop {
        let left = (TTL + T)
            .checked_sub(killed.elapsed())
            .ok_or("the victim never left")?;
        match watch.recv_timeout(left) {
            Some(DirectoryEvent::Left { name }) if name == vname => break,
            Some(_) => {}
            None => return Err("the victim never left".into()),
        }
    }
    println!(
        "[coordinator] {vname} left the directory {:?} after the kill (lease TTL {TTL:?})",
        killed.elapsed()
    );
    Ok(())
}

fn coordinator(a: &Args) -> Res<()> {
    let n = a.engines;
    let local = match &a.etcd {
        Some(_) => None,
        None => Some(ascend_testkit::etcd::LocalEtcd::start(|| {
            ascend_launch::free_port().expect("a free loopback port")
        })),
    };
    let url = a
        .etcd
        .clone()
        .or(local.as_ref().map(|e| e.url()))
        .ok_or("no etcd")?;
    let prefix = a
        .prefix
        .clone()
        .unwrap_or_else(|| format!("/fabric-cluster-{}", std::process::id()));
    println!(
        "[coordinator] host {} of {}: etcd at {url}, prefix {prefix}, {n} engines, lease TTL {:?}",
        a.host,
        a.hosts,
        a.ttl()
    );
    let dir = directory(&url, &prefix, a.ttl())?;
    let mut marks = Marks::open(&url, &prefix, a.ttl())?;
    let (mut procs, mut lines) = spawn_engines(a, &url, &prefix)?;
    let mine: BTreeSet<usize> = a.on_host(a.host).collect();
    lines.until(&mine, "verified")?;
    match a.lose_host {
        None => {
            kill_victim(a, &mut procs, &mut marks, &dir)?;
            let rest = procs.iter().map(|p| p.i).collect();
            lines.until(&rest, "saw")?;
        }
        Some(l) if l == a.host => {
            lines.until(&mine, "streaming")?;
            marks.wait("streaming", n)?;
            println!("[coordinator] all engines streaming");
        }
        Some(_) => lines.until(&mine, "done")?,
    }
    let mut ok = true;
    for p in procs.iter_mut() {
        let st = p.child.wait()?;
        if !st.success() {
            println!("[coordinator] {} exited with {st}", name(p.i));
            ok = false;
        }
    }
    if !ok {
        return Err("an engine failed".into());
    }
    println!(
        "[coordinator] every engine of host {} ended well; stats {:?}",
        a.host,
        dir.stats()
    );
    Ok(())
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fabric_cluster: {e}");
            return ExitCode::from(2);
        }
    };
    let r = match &a.engine {
        Some((i, port)) => engine_role(&a, *i, *port),
        None => coordinator(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fabric_cluster: {e}");
            ExitCode::FAILURE
        }
    }
}
