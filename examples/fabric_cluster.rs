//! Engines that find each other by name only, through the engine directory on etcd.
//!
//! Starts etcd (a throwaway one on free loopback ports, or the one `--etcd URL` names) and
//! `--engines N` engine processes (default 8). Each engine publishes itself as `engine-<i>`
//! with one segment, `inbox` (a slot per peer), waits until all N are listed, connects to every
//! other engine by name and writes a block into its slot there; once all have written, each
//! verifies what it received. Then the last engine is killed (SIGKILL: it withdraws nothing)
//! and every other engine, and this coordinator, see it leave through the directory when its
//! lease runs out.
//!
//! ```text
//! cargo run --features etcd --example fabric_cluster
//! cargo run --features etcd --example fabric_cluster -- --engines 16
//! cargo run --features etcd --example fabric_cluster -- --etcd http://127.0.0.1:2379
//! ```
//! Exits 0 only when every block verified and every survivor saw the killed engine leave.

use ascend::prelude::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ascend::fabric::directory::{
    Directory, DirectoryEvent, EtcdDirectory, EtcdOptions, Member, SegmentInfo,
};
use ascend::fabric::{Engine, EngineOptions, TransferDesc, TransferOp};
use ascend::Runtime;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const BLOCK: usize = 256 << 10;
const TTL: Duration = Duration::from_secs(2);
const T: Duration = Duration::from_secs(30);

struct Args {
    engines: usize,
    etcd: Option<String>,
    /// Set for an engine process: its index, port and the directory prefix.
    engine: Option<(usize, u16, String)>,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        engines: 8,
        etcd: None,
        engine: None,
    };
    let (mut index, mut port, mut prefix) = (None, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--engines" => a.engines = v()?.parse()?,
            "--etcd" => a.etcd = Some(v()?),
            "--index" => index = Some(v()?.parse()?),
            "--port" => port = Some(v()?.parse()?),
            "--prefix" => prefix = Some(v()?),
            "-h" | "--help" => {
                println!("usage: fabric_cluster [--engines N] [--etcd URL]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {k}").into()),
        }
    }
    if !(2..=64).contains(&a.engines) {
        return Err(format!("--engines must be in 2..=64, not {}", a.engines).into());
    }
    if let (Some(i), Some(p), Some(x)) = (index, port, prefix) {
        a.engine = Some((i, p, x));
    }
    Ok(a)
}

fn name(i: usize) -> String {
    format!("engine-{i:02}")
}

/// The byte engine `from` writes into engine `to`'s inbox.
fn byte(from: usize, to: usize) -> u8 {
    (from * 64 + to) as u8 | 1
}

fn directory(url: &str, prefix: &str) -> Res<Arc<EtcdDirectory>> {
    let opts = EtcdOptions::new(url).prefix(prefix).ttl(TTL);
    Ok(Arc::new(EtcdDirectory::connect(opts)?))
}

/// One engine process: publish, wait for all, write to all, verify on order, watch the victim.
fn engine_role(a: &Args, i: usize, port: u16, prefix: &str) -> Res<()> {
    let n = a.engines;
    let url = a.etcd.as_deref().ok_or("--etcd is required")?;
    let rt = Runtime::from_env_or_emulator()?;
    let dev = rt.device(0)?;
    let opts = EngineOptions::builder()
        .task_stream_num(2)
        .pool_capacity((2 * n + 4) << 30)
        .build()?;
    let engine = Engine::new(&dev, &format!("127.0.0.1:{port}"), opts)?;
    let inbox = engine.alloc_device(n * BLOCK)?;
    inbox.fill(0)?;
    let inbox_reg = engine.register(&inbox)?;
    let src = engine.alloc_host(BLOCK)?;
    let src_reg = engine.register(&src)?;
    let seg = SegmentInfo::new("inbox", inbox_reg.addr(), inbox_reg.len());
    let dir = directory(url, prefix)?;
    let member = Member::join(
        &engine,
        dir.clone(),
        &name(i),
        rt.backend().to_string().as_str(),
        vec![seg],
    )?;
    let events = member.subscribe();
    println!("ready");

    let t0 = Instant::now();
    while member.list("engine-")?.len() < n {
        if t0.elapsed() > T {
            return Err("not every engine published in time".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for j in (0..n).filter(|&j| j != i) {
        let peer = member.connect_by_name(&name(j), T)?;
        let slot = peer.segment("inbox").ok_or("no inbox")?.addr + i * BLOCK;
        src.fill(byte(i, j))?;
        let d = [TransferDesc::raw(src_reg.addr(), slot, BLOCK)];
        engine.transfer_sync(&peer.addr, TransferOp::Write, &d, T)?;
    }
    println!("wrote {} blocks", n - 1);

    let mut cmd = String::new();
    let stdin = std::io::stdin();
    stdin.lock().read_line(&mut cmd)?;
    let got = inbox.to_vec()?;
    for j in (0..n).filter(|&j| j != i) {
        let s = &got[j * BLOCK..(j + 1) * BLOCK];
        if s.iter().any(|&b| b != byte(j, i)) {
            return Err(format!("the block from {} is wrong", name(j)).into());
        }
    }
    println!("verified {} blocks", n - 1);

    cmd.clear();
    stdin.lock().read_line(&mut cmd)?;
    let victim = cmd
        .trim()
        .strip_prefix("leave ")
        .ok_or("expected `leave NAME`")?;
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
        engine.peers().len()
    );
    drop((member, src_reg, inbox_reg));
    Ok(())
}

struct Proc {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Proc {
    /// The next line that starts with `word`.
    fn expect(&mut self, who: &str, word: &str) -> Res<String> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.out.read_line(&mut line)? == 0 {
                return Err(format!("{who} exited before saying {word:?}").into());
            }
            if line.starts_with(word) {
                println!("[{who}] {}", line.trim_end());
                return Ok(line);
            }
        }
    }
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
    let prefix = format!("/fabric-cluster-{}", std::process::id());
    println!("[coordinator] etcd at {url}, prefix {prefix}, {n} engines, lease TTL {TTL:?}");
    let dir = directory(&url, &prefix)?;
    let watch = dir.watch()?;
    let exe = std::env::current_exe()?;
    let mut procs = Vec::new();
    for i in 0..n {
        let port = ascend_launch::free_port()?;
        let mut child = Command::new(&exe)
            .args([
                "--engines",
                &n.to_string(),
                "--etcd",
                &url,
                "--prefix",
                &prefix,
            ])
            .args(["--index", &i.to_string(), "--port", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        procs.push(Proc { child, stdin, out });
    }
    for (i, p) in procs.iter_mut().enumerate() {
        p.expect(&name(i), "ready")?;
    }
    for (i, p) in procs.iter_mut().enumerate() {
        p.expect(&name(i), "wrote")?;
    }
    for (i, p) in procs.iter_mut().enumerate() {
        writeln!(p.stdin, "verify")?;
        p.expect(&name(i), "verified")?;
    }
    let mut victim = procs.pop().ok_or("no engines")?;
    let vname = name(n - 1);
    victim.child.kill()?;
    let killed = Instant::now();
    victim.child.wait()?;
    println!("[coordinator] killed {vname}");
    for p in procs.iter_mut() {
        writeln!(p.stdin, "leave {vname}")?;
    }
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
    let mut ok = true;
    for (i, p) in procs.iter_mut().enumerate() {
        p.expect(&name(i), "saw")?;
        let st = p.child.wait()?;
        ok &= st.success();
        if !st.success() {
            println!("[coordinator] {} exited with {st}", name(i));
        }
    }
    if !ok {
        return Err("an engine failed".into());
    }
    println!(
        "[coordinator] all {} survivors saw {vname} leave; stats {:?}",
        n - 1,
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
        Some((i, port, prefix)) => engine_role(&a, *i, *port, prefix),
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
