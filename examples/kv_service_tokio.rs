//! A KV-cache service between a prefill engine and a decode engine, driven from tokio: two
//! processes, prepared 128-block caches, 500 batches with 32 in flight and a deadline each, a
//! batch dropped mid-flight, and the decode process SIGKILLed and restarted on its address.
//!
//! The decode process registers a KV cache of 128 blocks of 256 KiB under the name `kv` and
//! waits. The prefill process fills its own cache of 128 blocks (each with a pattern of its
//! own), connects (`connect_async`), prepares both caches as block lists once
//! (`prepare_local`, `prepare_remote` by the name `kv`), and WRITEs batches of random
//! (local block, decode block) pairs with `post_prepared`: each future waits for a free stream
//! slot (back-pressure) and resolves to the running request, which goes into a
//! `CompletionQueue` with the batch's pairs as its user data; at most 32 batches are in
//! flight, each with a stall deadline of its own (`TransferOptions::stall_timeout`), and one
//! task takes the completions (`queue.next().await`). Two batches in flight never write the
//! same decode block, so each decode block ends up holding the local block of the last batch
//! that wrote it.
//!
//! After 250 batches one more is dropped while its copies are queued (a tokio timeout drops
//! the future): the drop returns at once, and the engine lets go of the batch's memory once
//! the runtime says the aborted copies are done. Then (when this process started the decode
//! process) the decode process is SIGKILLed with batches in flight: those end with `PeerLost`,
//! the engine tears the channel down by itself, and a new decode process is started on the
//! same address. The prefill connects again, prepares the new decode cache (the old list is
//! stale), and runs the other 250 batches.
//!
//! Finally the prefill READs every decode block back and compares checksums with what it
//! expects, and sends the expected checksums to the decode process as a notify, which compares
//! them with its own memory. Both exit 0 only when every checksum matches.
//!
//! ```text
//! cargo run --example kv_service_tokio                    # both roles (spawns decode, kills and restarts it)
//! cargo run --example kv_service_tokio -- --role decode   # in one terminal
//! cargo run --example kv_service_tokio -- --role prefill  # in another (no kill)
//! ```
//! Options: `--decode ADDR` (default 127.0.0.1:26110), `--prefill IP` (the prefill engine's
//! own address, default 127.0.0.1), `--seed N`, `--timeout SECS`,
//! `--metrics ADDR` (the prefill's engine metrics at `http://ADDR/metrics`, for Prometheus),
//! `--hold` (with `--metrics`: keep serving them after the run until stdin closes).

#[path = "common/metrics.rs"]
mod metrics_endpoint;

use std::collections::HashSet;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use ascend::fabric::{
    CompletionQueue, Engine, EngineOptions, Error, LocalBlocks, RemoteBlocks, SegmentRef,
    TransferOp, TransferOptions,
};
use ascend::prelude::*;
use ascend::{Backend, DeviceBuffer, Runtime};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const BLOCKS: usize = 128;
const BLOCK: usize = 256 << 10;
const BATCHES: usize = 500;
const MAX_PAIRS: usize = 4;
const WINDOW: usize = 32;
/// A batch still running this long after its copies were queued fails with `Timeout`.
const DEADLINE: Duration = Duration::from_secs(20);
const NOTIFY: &str = "kv-expect";
/// Checksums per notify (a notify carries at most 1,024 bytes).
const PER_NOTIFY: usize = 64;
const T: Duration = Duration::from_secs(20);

struct Args {
    role: String,
    decode: String,
    seed: usize,
    timeout: Duration,
    metrics: Option<String>,
    hold: bool,
    prefill: String,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        role: "both".into(),
        decode: "127.0.0.1:26110".into(),
        seed: 7,
        timeout: Duration::from_secs(90),
        metrics: None,
        hold: false,
        prefill: "127.0.0.1".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--role" => a.role = v()?,
            "--decode" => a.decode = v()?,
            "--prefill" => a.prefill = v()?,
            "--seed" => a.seed = v()?.parse()?,
            "--timeout" => a.timeout = Duration::from_secs(v()?.parse()?),
            "--metrics" => a.metrics = Some(v()?),
            "--hold" => a.hold = true,
            "-h" | "--help" => {
                println!("usage: kv_service_tokio [--role both|prefill|decode] [--decode ADDR] [--prefill IP] [--seed N] [--timeout SECS] [--metrics ADDR [--hold]]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {k}").into()),
        }
    }
    if a.hold && a.metrics.is_none() {
        return Err("--hold needs --metrics".into());
    }
    if !["both", "prefill", "decode"].contains(&a.role.as_str()) {
        return Err(format!("--role must be both, prefill or decode, not {}", a.role).into());
    }
    Ok(a)
}

fn options() -> Res<EngineOptions> {
    Ok(EngineOptions::builder()
        .task_stream_num(2)
        .pool_capacity(4 << 30)
        .build()?)
}

/// FNV-1a over a block.
fn checksum(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
    })
}

fn checksums(cache: &DeviceBuffer) -> Res<Vec<u32>> {
    let all = cache.to_vec()?;
    Ok(all[..BLOCKS * BLOCK].chunks(BLOCK).map(checksum).collect())
}

/// xorshift: the same pairs for the same seed.
struct Rng(usize);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn decode(a: &Args) -> Res<bool> {
    let rt = Runtime::from_env_or_emulator()?;
    let dev = rt.device(0)?;
    let engine = Engine::new(&dev, &a.decode, options()?)?;
    let kv = engine.alloc_device(BLOCKS * BLOCK)?;
    kv.fill(0)?;
    let _reg = engine.register_named(&kv, "kv")?;
    println!(
        "[decode {}] {}: KV cache of {BLOCKS} x {} KiB registered as \"kv\"",
        std::process::id(),
        a.decode,
        BLOCK >> 10
    );
    // The expected checksums come in notifies of `first:hex,hex,...`.
    let t0 = Instant::now();
    let mut want = vec![None; BLOCKS];
    while want.iter().any(Option::is_none) {
        for (_, m) in engine
            .take_notifies()
            .into_iter()
            .filter(|(n, _)| n == NOTIFY)
        {
            let (first, list) = m
                .split_once(':')
                .ok_or("a notify without its first block")?;
            let first: usize = first.parse()?;
            for (k, h) in list.split(',').enumerate() {
                let slot = want.get_mut(first + k).ok_or("a block past the cache")?;
                *slot = Some(u32::from_str_radix(h, 16)?);
            }
        }
        if t0.elapsed() > a.timeout {
            println!("[decode] no checksums from prefill after {:?}", a.timeout);
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let want: Vec<u32> = want.into_iter().flatten().collect();
    let got = checksums(&kv)?;
    println!(
        "[decode] {} of {BLOCKS} block checksums match what prefill expects",
        want.iter().zip(&got).filter(|(w, g)| w == g).count()
    );
    Ok(want == got)
}

/// Connects (retrying while a decode process starts) and prepares its cache by name: a name
/// the decode process registers after the connect is found by the refresh `prepare_remote`
/// does by itself.
async fn connect_and_prepare(engine: &Engine, a: &Args) -> Res<RemoteBlocks> {
    let t0 = Instant::now();
    loop {
        let err = match engine
            .connect_async(&a.decode, Duration::from_secs(1))
            .await
        {
            Ok(()) | Err(Error::AlreadyConnected { .. }) => {
                match engine.prepare_remote(&a.decode, &[SegmentRef::from("kv")], BLOCK) {
                    Ok(r) => return Ok(r),
                    Err(e) => e.to_string(),
                }
            }
            Err(e) => e.to_string(),
        };
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(format!("cannot reach the decode cache at {}: {err}", a.decode).into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The prefill side's view of the decode cache: which local block each decode block holds,
/// and the decode blocks a batch in flight writes.
struct Model {
    holds: Vec<Option<usize>>,
    busy: HashSet<usize>,
    rng: Rng,
}

impl Model {
    /// Up to [`MAX_PAIRS`] random pairs; decode blocks distinct and not written by a batch in
    /// flight (none when every decode block is).
    fn pairs(&mut self) -> Vec<(usize, usize)> {
        let n = 1 + self.rng.below(MAX_PAIRS);
        let mut pairs = Vec::with_capacity(n);
        for _ in 0..n {
            let free: Vec<usize> = (0..BLOCKS).filter(|j| !self.busy.contains(j)).collect();
            if free.is_empty() {
                break;
            }
            let j = free[self.rng.below(free.len())];
            self.busy.insert(j);
            pairs.push((self.rng.below(BLOCKS), j));
        }
        pairs
    }

    fn done(&mut self, pairs: &[(usize, usize)], written: bool) {
        for &(i, j) in pairs {
            if written {
                self.holds[j] = Some(i);
            }
            self.busy.remove(&j);
        }
    }
}

/// What the batches of one phase came to.
#[derive(Default)]
struct Phase {
    done: usize,
    lost: usize,
    /// Most batches in flight at once.
    most: usize,
}

/// Runs `batches` batches with at most [`WINDOW`] in flight, each posted with `post_prepared`
/// (waiting for a slot) and a stall deadline. With `kill`, once the first window is posted
/// the decode process is killed with those batches in flight: nothing more is posted, and
/// they end with `PeerLost` (or completed just before the kill).
async fn run_batches(
    engine: &Engine,
    (local, remote): (&LocalBlocks, &RemoteBlocks),
    model: &mut Model,
    mut batches: usize,
    mut kill: Option<&mut dyn FnMut() -> Res<()>>,
) -> Res<Phase> {
    let queue: CompletionQueue<Vec<(usize, usize)>> = CompletionQueue::new();
    let opts = TransferOptions::new().stall_timeout(DEADLINE);
    let (mut posted, mut killed, mut ph) = (0, false, Phase::default());
    loop {
        while posted < batches && queue.len() < WINDOW {
            let pairs = model.pairs();
            if pairs.is_empty() {
                break;
            }
            let post = engine.post_prepared(TransferOp::Write, local, remote, &pairs, opts.clone());
            let req = post.await.map_err(|e| format!("batch {posted}: {e}"))?;
            queue.push(req, pairs);
            posted += 1;
        }
        ph.most = ph.most.max(queue.len());
        if let Some(f) = kill.take() {
            println!(
                "[prefill] killing the decode process with {} batches in flight",
                queue.len()
            );
            f()?;
            killed = true;
            batches = posted;
        }
        let Some(c) = queue.next().await else {
            return Ok(ph);
        };
        match c.result {
            Ok(()) => {
                model.done(&c.user_data, true);
                ph.done += 1;
            }
            Err(Error::PeerLost { .. }) if killed => {
                model.done(&c.user_data, false);
                ph.lost += 1;
            }
            Err(e) => return Err(format!("batch {}: {e}", c.id).into()),
        }
    }
}

/// Posts a batch from a scratch buffer, lets go of the buffer, its registration and its list
/// while the copies are queued, and drops the batch's future (a tokio timeout). On the
/// emulator the streams are held, so the copies stay queued until the drop; the engine then
/// lets the scratch memory go by itself.
async fn dropped_batch(engine: &Engine, remote: &RemoteBlocks, emulated: bool) -> Res<()> {
    let scratch = engine.alloc_device(BLOCKS * BLOCK)?;
    scratch.fill(0xEE)?;
    let reg = engine.register(&scratch)?;
    let list = engine.prepare_local(&reg, BLOCK)?;
    let hold = emulated.then(ascend::sim::testing::hold_all_streams);
    let pairs: Vec<(usize, usize)> = (0..BLOCKS).map(|i| (i, i)).collect();
    let opts = TransferOptions::new();
    // Submitted (its copies queued) before anything it uses is let go.
    let req = engine
        .post_prepared(TransferOp::Write, &list, remote, &pairs, opts)
        .await?;
    drop((list, reg, scratch));
    let mappings = || ascend::sim::counters().mappings;
    let before = mappings();
    match tokio::time::timeout(Duration::from_millis(20), req).await {
        Err(_) => println!("[prefill] batch dropped mid-flight (a 20 ms timeout)"),
        Ok(r) => println!("[prefill] batch finished before the drop: {r:?}"),
    }
    let t0 = Instant::now();
    drop(hold);
    if emulated {
        // Released by the engine once the aborted streams are done; nothing waits for it.
        while mappings() >= before {
            if t0.elapsed() > T {
                return Err("the scratch memory is still mapped long after the drop".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        println!("[prefill] the dropped batch's scratch memory is unmapped now");
    }
    Ok(())
}

/// A decode process of this example on `addr`.
fn spawn_decode(a: &Args) -> Res<Child> {
    let exe = std::env::current_exe()?;
    let secs = a.timeout.as_secs().to_string();
    let args = [
        "--role",
        "decode",
        "--decode",
        &a.decode,
        "--timeout",
        &secs,
    ];
    Ok(Command::new(exe).args(args).spawn()?)
}

/// Local cache contents: block `i` holds a pattern of its own.
fn local_bytes() -> Vec<u8> {
    let mut bytes = vec![0u8; BLOCKS * BLOCK];
    for (i, b) in bytes.chunks_mut(BLOCK).enumerate() {
        let mut x = u8::try_from(i % 251).unwrap_or(0) ^ 0x5A;
        for v in b.iter_mut() {
            *v = x;
            x = x.wrapping_mul(31).wrapping_add(7);
        }
    }
    bytes
}

async fn prefill(a: &Args, child: &mut Option<Child>) -> Res<bool> {
    let rt = Runtime::from_env_or_emulator()?;
    let emulated = matches!(rt.backend(), Backend::EmulatorInProcess);
    let dev = rt.device(0)?;
    let engine = Engine::new(&dev, &a.prefill, options()?)?;
    let cache = engine.alloc_device(BLOCKS * BLOCK)?;
    let bytes = local_bytes();
    cache.write_from(&bytes, 0)?;
    let sums: Vec<u32> = bytes.chunks(BLOCK).map(checksum).collect();
    let reg = engine.register(&cache)?;
    let local = engine.prepare_local(&reg, BLOCK)?;
    let mut remote = connect_and_prepare(&engine, a).await?;
    println!(
        "[prefill] connected to {}; {} local and {} decode blocks of {} KiB prepared",
        a.decode,
        local.len(),
        remote.len(),
        BLOCK >> 10
    );
    let mut model = Model {
        holds: vec![None; BLOCKS],
        busy: HashSet::new(),
        rng: Rng(a.seed | 1),
    };
    let t0 = Instant::now();
    let first = run_batches(&engine, (&local, &remote), &mut model, BATCHES / 2, None).await?;
    println!(
        "[prefill] {} batches done in {:?}, up to {} in flight",
        first.done,
        t0.elapsed(),
        first.most
    );
    dropped_batch(&engine, &remote, emulated).await?;

    let mut second = Phase::default();
    if let Some(c) = child.as_mut() {
        // The kill comes with a full window of batches in flight (on the emulator their copies
        // are held queued until the engine has seen the loss).
        let mut hold = emulated.then(ascend::sim::testing::hold_all_streams);
        let (eng, addr) = (&engine, a.decode.clone());
        let mut kill = || -> Res<()> {
            c.kill()?;
            c.wait()?;
            let t0 = Instant::now();
            while eng.is_connected(&addr) {
                if t0.elapsed() > T {
                    return Err("the killed decode process is still connected".into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(hold.take());
            Ok(())
        };
        let ph = run_batches(
            &engine,
            (&local, &remote),
            &mut model,
            BATCHES / 2,
            Some(&mut kill),
        )
        .await?;
        println!(
            "[prefill] decode SIGKILLed: {} batches in flight ended with PeerLost, {} had completed",
            ph.lost, ph.done
        );
        // Its memory went with it.
        model.holds = vec![None; BLOCKS];
        let restarted = spawn_decode(a)?;
        *c = restarted;
        remote = connect_and_prepare(&engine, a).await?;
        println!("[prefill] reconnected to the restarted decode process");
        second.done += ph.done;
        second.lost += ph.lost;
    }
    let left = BATCHES - first.done - second.done - second.lost;
    let rest = run_batches(&engine, (&local, &remote), &mut model, left, None).await?;
    second.done += rest.done;
    println!(
        "[prefill] {} of {BATCHES} batches done, {} lost with the killed process, in {:?}",
        first.done + second.done,
        second.lost,
        t0.elapsed()
    );
    let want: Vec<u32> = model
        .holds
        .iter()
        .map(|h| h.map_or_else(|| checksum(&[0u8; BLOCK]), |i| sums[i]))
        .collect();
    // Read every decode block back into the local cache and compare.
    let all: Vec<(usize, usize)> = (0..BLOCKS).map(|j| (j, j)).collect();
    engine.transfer_prepared_sync(TransferOp::Read, &local, &remote, &all, T)?;
    let ok = checksums(&cache)? == want;
    println!(
        "[prefill] read back: {}",
        if ok {
            "every checksum matches"
        } else {
            "MISMATCH"
        }
    );
    for (k, part) in want.chunks(PER_NOTIFY).enumerate() {
        let hex: Vec<String> = part.iter().map(|c| format!("{c:08x}")).collect();
        let msg = format!("{}:{}", k * PER_NOTIFY, hex.join(","));
        engine.send_notify(&a.decode, NOTIFY, &msg, T)?;
    }
    drop((local, remote));
    engine.disconnect(&a.decode, T)?;
    let decoded = match child.take() {
        Some(mut c) => c.wait()?.success(),
        None => true,
    };
    Ok(ok && decoded)
}

fn run_prefill(a: &Args, child: &mut Option<Child>) -> Res<bool> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()?;
    rt.block_on(prefill(a, child))
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kv_service_tokio: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(addr) = &a.metrics {
        if let Err(e) = metrics_endpoint::serve(addr) {
            eprintln!("kv_service_tokio: {e}");
            return ExitCode::from(2);
        }
    }
    let mut child = None;
    let result = match a.role.as_str() {
        "decode" => decode(&a),
        "prefill" => run_prefill(&a, &mut child),
        _ => spawn_decode(&a).and_then(|c| {
            child = Some(c);
            run_prefill(&a, &mut child)
        }),
    };
    // A decode process left after a failure goes too.
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
    if let (Some(addr), true) = (&a.metrics, a.hold) {
        metrics_endpoint::hold(addr);
    }
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kv_service_tokio: {e}");
            ExitCode::FAILURE
        }
    }
}
