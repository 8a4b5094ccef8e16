//! KV-cache blocks between a prefill engine and a decode engine, driven from tokio: two
//! processes, prepared block lists, a completion queue and one cancelled batch.
//!
//! The decode process registers a 64-block KV cache under the name `kv` and waits. The prefill
//! process fills its own 64-block cache (block `i` holds a pattern of its own), connects
//! (`connect_async`), prepares both caches as lists of blocks once (`prepare_local`,
//! `prepare_remote` by the name `kv`), and then WRITEs 200 batches of random (local block,
//! decode block) pairs as `transfer_prepared_async` requests in a `CompletionQueue`, at most
//! 8 in flight, taking completions with `queue.next().await` from one task: no request waits
//! behind another. Two batches in flight never write the same decode block, so each decode
//! block ends up holding the local block of the last batch that wrote it.
//!
//! Then one more batch is cancelled: its copies are queued from a scratch buffer while the
//! emulator holds the streams, the buffer, its registration and its list are dropped (the
//! mapping stays: the queued copies keep it), and the request is dropped by a tokio timeout.
//! Dropping aborts the copies and returns at once; the engine's progress thread lets the
//! scratch mapping go once the runtime says the aborted streams are done. (On a real NPU the
//! batch is cancelled the same way, without the hold.)
//!
//! Finally the prefill process READs every decode block back and compares checksums, and sends
//! the expected checksums to the decode process as a notify, which compares them with its own
//! memory. Both exit 0 only when every checksum matches.
//!
//! ```text
//! cargo run --example kv_blocks_tokio                    # both roles (spawns decode as a second process)
//! cargo run --example kv_blocks_tokio -- --role decode   # in one terminal
//! cargo run --example kv_blocks_tokio -- --role prefill  # in another
//! ```
//! Options: `--decode ADDR` (default 127.0.0.1:26100), `--seed N`, `--timeout SECS`.

use std::collections::HashSet;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use ascend::fabric::{
    CompletionQueue, Engine, EngineOptions, LocalBlocks, RemoteBlocks, SegmentRef, TransferOp,
};
use ascend::{Backend, DeviceBuffer, Runtime};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const BLOCKS: usize = 64;
const BLOCK: usize = 64 << 10;
const BATCHES: usize = 200;
const MAX_PAIRS: usize = 8;
const WINDOW: usize = 8;
const NOTIFY: &str = "kv-expect";
const T: Duration = Duration::from_secs(20);

struct Args {
    role: String,
    decode: String,
    seed: u64,
    timeout: Duration,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        role: "both".into(),
        decode: "127.0.0.1:26100".into(),
        seed: 7,
        timeout: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--role" => a.role = v()?,
            "--decode" => a.decode = v()?,
            "--seed" => a.seed = v()?.parse()?,
            "--timeout" => a.timeout = Duration::from_secs(v()?.parse()?),
            "-h" | "--help" => {
                println!("usage: kv_blocks_tokio [--role both|prefill|decode] [--decode ADDR] [--seed N] [--timeout SECS]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {k}").into()),
        }
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

/// xorshift64: the same pairs for the same seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
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
        "[decode] {}: KV cache of {BLOCKS} x {} KiB registered as \"kv\"",
        a.decode,
        BLOCK >> 10
    );
    let t0 = Instant::now();
    let expect = loop {
        if let Some((_, m)) = engine
            .take_notifies()
            .into_iter()
            .find(|(n, _)| n == NOTIFY)
        {
            break m;
        }
        if t0.elapsed() > a.timeout {
            println!("[decode] no checksums from prefill after {:?}", a.timeout);
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let want: Vec<u32> = expect
        .split(',')
        .map(|h| u32::from_str_radix(h, 16))
        .collect::<Result<_, _>>()?;
    let got = checksums(&kv)?;
    let ok = want == got;
    println!(
        "[decode] {} of {BLOCKS} block checksums match what prefill expects",
        want.iter().zip(&got).filter(|(w, g)| w == g).count()
    );
    Ok(ok)
}

/// Connects (retrying while decode starts) and prepares the decode cache by its name.
async fn connect_and_prepare(engine: &Engine, a: &Args) -> Res<RemoteBlocks> {
    let t0 = Instant::now();
    loop {
        let err = match engine
            .connect_async(&a.decode, Duration::from_secs(1))
            .await
        {
            Ok(()) => {
                match engine.prepare_remote(&a.decode, &[SegmentRef::from("kv")], BLOCK as u64) {
                    Ok(r) => return Ok(r),
                    Err(e) => {
                        // Connected before decode registered its cache: try again.
                        engine.disconnect(&a.decode, T)?;
                        e.to_string()
                    }
                }
            }
            Err(e) => e.to_string(),
        };
        if t0.elapsed() > Duration::from_secs(15) {
            return Err(format!("cannot reach the decode cache at {}: {err}", a.decode).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The 200 batches through one completion queue; returns the local block each decode block
/// holds now (`None`: never written).
async fn run_batches(
    engine: &Engine,
    local: &LocalBlocks,
    remote: &RemoteBlocks,
    seed: u64,
) -> Res<Vec<Option<usize>>> {
    let queue: CompletionQueue<(usize, Vec<(usize, usize)>)> = CompletionQueue::new();
    let mut rng = Rng(seed | 1);
    let mut holds: Vec<Option<usize>> = vec![None; BLOCKS];
    let mut busy: HashSet<usize> = HashSet::new();
    let (mut posted, mut done) = (0, 0);
    while done < BATCHES {
        while posted < BATCHES && queue.len() < WINDOW {
            // Up to 8 random pairs; decode blocks distinct and not written by a batch in flight.
            let n = 1 + rng.below(MAX_PAIRS);
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                let j = rng.below(BLOCKS);
                if busy.insert(j) {
                    pairs.push((rng.below(BLOCKS), j));
                }
            }
            if pairs.is_empty() {
                break;
            }
            let req = engine.transfer_prepared_async(TransferOp::Write, local, remote, &pairs)?;
            queue.push(req, (posted, pairs));
            posted += 1;
        }
        let c = queue.next().await.ok_or("the queue ran empty")?;
        let (batch, pairs) = c.user_data;
        c.result.map_err(|e| format!("batch {batch}: {e}"))?;
        for (i, j) in pairs {
            holds[j] = Some(i);
            busy.remove(&j);
        }
        done += 1;
    }
    Ok(holds)
}

/// Queues a batch from a scratch buffer, lets go of the buffer, its registration and its list
/// while the copies are queued, and cancels the batch by dropping it (a tokio timeout).
async fn cancelled_batch(engine: &Engine, remote: &RemoteBlocks, emulated: bool) -> Res<()> {
    let scratch = engine.alloc_device(BLOCKS * BLOCK)?;
    scratch.fill(0xEE)?;
    let reg = engine.register(&scratch)?;
    let list = engine.prepare_local(&reg, BLOCK as u64)?;
    // On the emulator the streams are held, so the copies stay queued until the cancel.
    let hold = emulated.then(ascend::sim::testing::hold_all_streams);
    let pairs: Vec<(usize, usize)> = (0..BLOCKS).map(|i| (i, i)).collect();
    let req = engine.transfer_prepared_async(TransferOp::Write, &list, remote, &pairs)?;
    let mappings = || ascend::sim::counters().mappings;
    let before = mappings();
    drop((list, reg, scratch));
    if emulated {
        // The queued copies still hold the scratch memory mapped.
        if mappings() != before {
            return Err("the scratch memory was unmapped under queued copies".into());
        }
        println!("[prefill] scratch buffer dropped with its batch queued: still mapped ({before} mappings)");
    }
    match tokio::time::timeout(Duration::from_millis(50), req).await {
        Err(_) => println!("[prefill] batch cancelled: dropped after 50 ms, its copies aborted"),
        Ok(r) => println!("[prefill] batch finished before the cancel: {r:?}"),
    }
    drop(hold);
    if emulated {
        // Released by the engine once the aborted streams are done; nothing waits for it.
        let t0 = std::time::Instant::now();
        while mappings() >= before {
            if t0.elapsed() > Duration::from_secs(30) {
                return Err("the scratch memory is still mapped long after the cancel".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        println!(
            "[prefill] now the scratch memory is unmapped ({} mappings)",
            mappings()
        );
    }
    Ok(())
}

async fn prefill(a: &Args) -> Res<bool> {
    let rt = Runtime::from_env_or_emulator()?;
    let emulated = matches!(rt.backend(), Backend::EmulatorInProcess);
    let dev = rt.device(0)?;
    let engine = Engine::new(&dev, "127.0.0.1", options()?)?;
    let cache = engine.alloc_device(BLOCKS * BLOCK)?;
    let mut bytes = vec![0u8; BLOCKS * BLOCK];
    for (i, b) in bytes.chunks_mut(BLOCK).enumerate() {
        for (k, x) in b.iter_mut().enumerate() {
            *x = (k as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ (i as u8);
        }
    }
    cache.write_from(&bytes, 0)?;
    let sums: Vec<u32> = bytes.chunks(BLOCK).map(checksum).collect();
    let reg = engine.register(&cache)?;
    let local = engine.prepare_local(&reg, BLOCK as u64)?;
    let remote = connect_and_prepare(&engine, a).await?;
    println!(
        "[prefill] connected to {}; {} local and {} decode blocks of {} KiB prepared",
        a.decode,
        local.len(),
        remote.len(),
        BLOCK >> 10
    );
    let t0 = Instant::now();
    let holds = run_batches(&engine, &local, &remote, a.seed).await?;
    println!(
        "[prefill] {BATCHES} batches done in {:?}, {} decode blocks written",
        t0.elapsed(),
        holds.iter().flatten().count()
    );
    cancelled_batch(&engine, &remote, emulated).await?;
    let want: Vec<u32> = holds
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
    let msg: Vec<String> = want.iter().map(|c| format!("{c:08x}")).collect();
    engine.send_notify(&a.decode, NOTIFY, &msg.join(","), T)?;
    drop((local, remote));
    engine.disconnect(&a.decode, T)?;
    Ok(ok)
}

fn run_prefill(a: &Args) -> Res<bool> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()?;
    rt.block_on(prefill(a))
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kv_blocks_tokio: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match a.role.as_str() {
        "decode" => decode(&a),
        "prefill" => run_prefill(&a),
        _ => (|| -> Res<bool> {
            let exe = std::env::current_exe()?;
            let mut dec = Command::new(exe)
                .args(["--role", "decode", "--decode", &a.decode])
                .args(["--timeout", &a.timeout.as_secs().to_string()])
                .spawn()?;
            let p = run_prefill(&a);
            if p.is_err() {
                let _ = dec.kill();
            }
            let s = dec.wait()?;
            println!("[both] decode exited with {s}");
            Ok(p? && s.success())
        })(),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kv_blocks_tokio ({}): {e}", a.role);
            ExitCode::FAILURE
        }
    }
}
