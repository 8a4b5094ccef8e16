//! The transfer benchmark: engine WRITE/READ between two processes against `memcpy` between
//! the same mapped buffers (on CANN, the runtime's own copies between them: see
//! [`Ceiling`]), and UCX put.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ascend_fabric::{Engine, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::Addr;
use indicatif::ProgressBar;

use crate::ceiling::{memcpy_run, Bufs, Ceiling};
use crate::peer::{engine_options, start_peer, streams};
use crate::util::{best_of_alternating, gbs, proc_status_bytes, size_name};
use crate::{Args, Res, Results};

/// Block sizes.
pub(crate) const SIZES: [usize; 4] = [4 << 10, 64 << 10, 1 << 20, 64 << 20];
/// Descriptors per transfer for blocks below 1 MiB.
pub(crate) const BATCH: usize = 1024;
const T: Duration = Duration::from_secs(120);
/// Batched transfers in flight at once.
pub(crate) const WINDOW: usize = 4;
/// Single-descriptor transfers (1 MiB, 64 MiB blocks) in flight at once, per copy stream:
/// the memcpy ceiling has a copy in flight on each of its threads (one per stream), so the
/// engine keeps two per stream, the next one queued while one runs (with 2 in flight over 4
/// streams the walk measured the window, 0.77 of the ceiling, rather than the engine).
pub(crate) const WINDOW_1_PER_STREAM: usize = 2;
/// Bytes per transfer in the repeat pattern (at most [`BATCH`] descriptors).
const REPEAT_BATCH_BYTES: usize = 64 << 20;
/// Multiplier of the remote block order in the walk (odd: a permutation of a power of two
/// blocks; no two consecutive descriptors are adjacent on the remote side, so none coalesce).
const STRIDE: usize = 7919;

/// Access pattern.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// The whole region, block by block (remote blocks scattered).
    Walk,
    /// One buffer of the block size, again and again.
    Repeat,
}

impl Pattern {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Pattern::Walk => "walk",
            Pattern::Repeat => "repeat",
        }
    }
}

/// One measurement: the engine and memcpy moving the same blocks.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub(crate) pattern: Pattern,
    pub(crate) op: TransferOp,
    pub(crate) block: usize,
    /// Bytes moved per timed pass.
    pub(crate) bytes: u64,
    /// Descriptors per timed pass.
    pub(crate) descs: u64,
    /// Descriptors per engine transfer.
    pub(crate) batch: usize,
    pub(crate) engine: Duration,
    pub(crate) memcpy: Duration,
    /// UCX put bandwidth in GB/s (WRITE repeat rows only).
    pub(crate) ucx_gbs: Option<f64>,
    /// The local buffer is host DRAM (the engine batches its copies), not HBM.
    pub(crate) local_host: bool,
}

impl Row {
    pub(crate) fn engine_gbs(&self) -> f64 {
        gbs(self.bytes, self.engine)
    }
    pub(crate) fn memcpy_gbs(&self) -> f64 {
        gbs(self.bytes, self.memcpy)
    }
    pub(crate) fn engine_descs_s(&self) -> f64 {
        self.descs as f64 / self.engine.as_secs_f64()
    }
    pub(crate) fn memcpy_descs_s(&self) -> f64 {
        self.descs as f64 / self.memcpy.as_secs_f64()
    }
    /// Engine bandwidth over memcpy's (same bytes, so also the descriptor-rate ratio).
    pub(crate) fn vs_memcpy(&self) -> f64 {
        self.memcpy.as_secs_f64() / self.engine.as_secs_f64()
    }
    pub(crate) fn vs_ucx(&self) -> Option<f64> {
        crate::util::ratio(Some(self.engine_gbs()), self.ucx_gbs)
    }
    /// The pattern's name, marked `/host` for a host-DRAM local buffer.
    pub(crate) fn label(&self) -> String {
        if self.local_host {
            format!("{}/host", self.pattern.name())
        } else {
            self.pattern.name().to_owned()
        }
    }
    pub(crate) fn op_name(&self) -> &'static str {
        match self.op {
            TransferOp::Write => "WRITE",
            TransferOp::Read => "READ",
        }
    }
}

/// Latency of a synchronous 4 KiB WRITE (one descriptor, `TransferSync`), against UCX's
/// typical put latency at 4 KiB.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Latency {
    /// Transfers timed.
    pub(crate) n: usize,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    /// `ucx_perftest -t ucp_put_lat` typical latency.
    pub(crate) ucx_us: Option<f64>,
}

/// The latency case's block.
pub(crate) const LAT_BLOCK: usize = 4 << 10;

/// Peak RSS of the two engine processes against the registered memory they touch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RssReport {
    pub(crate) initiator_hwm: u64,
    pub(crate) initiator_touched: u64,
    pub(crate) peer_hwm: u64,
    pub(crate) peer_touched: u64,
}

impl RssReport {
    /// Sum over both processes of VmHWM minus registered memory touched, in MiB.
    pub(crate) fn over_mib(&self) -> f64 {
        let over = (self.initiator_hwm as f64 - self.initiator_touched as f64)
            + (self.peer_hwm as f64 - self.peer_touched as f64);
        over / f64::from(1 << 20)
    }
}

fn region(args: &Args) -> usize {
    if args.quick {
        256 << 20
    } else {
        1 << 30
    }
}

fn reps(args: &Args) -> usize {
    // Profiling aid: `ASCEND_BENCH_REPS=20` makes the timed passes dominate a profile.
    if let Some(n) = std::env::var("ASCEND_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if args.quick {
        1
    } else {
        3
    }
}

/// Progress steps of [`run`].
pub(crate) fn steps(_args: &Args) -> u64 {
    // setup, 2 patterns x 2 ops x sizes, the host row, latency, check, cancel, UCX sizes and
    // latency
    1 + 4 * SIZES.len() as u64 + 1 + 3 + SIZES.len() as u64 + 1
}

/// (local offset, remote offset) of each block of the walk.
fn walk_pairs(region: usize, block: usize) -> Vec<(usize, usize)> {
    let n = region / block;
    (0..n)
        .map(|i| (i * block, (i * STRIDE) % n * block))
        .collect()
}

struct Bench<'a> {
    eng: &'a Engine,
    ceiling: &'a Ceiling,
    peer: &'a str,
    l0: Addr,
    r0: Addr,
    /// `l0` as mapped here (the same buffer; `bufs.local_host` when it is host DRAM), and
    /// the peer's buffer as mapped here.
    bufs: Bufs,
    region: usize,
    reps: usize,
}

impl Bench<'_> {
    fn measure(&self, pattern: Pattern, op: TransferOp, block: usize) -> Res<Row> {
        let write = op == TransferOp::Write;
        let batch = match pattern {
            // The walk: 4 KiB and 64 KiB blocks in batches, larger ones one by one.
            Pattern::Walk if block < (1 << 20) => BATCH,
            Pattern::Walk => 1,
            // ucx_perftest keeps puts outstanding rather than waiting for each: batches of up
            // to 64 MiB (64 x 1 MiB; 64 MiB blocks one by one).
            Pattern::Repeat => (REPEAT_BATCH_BYTES / block).clamp(1, BATCH),
        };
        let (pairs, rounds) = match pattern {
            Pattern::Walk => (walk_pairs(self.region, block), 1),
            Pattern::Repeat => {
                let total = self.region / block;
                let per = batch.min(total);
                (vec![(0, 0); per], total / per)
            }
        };
        let descs: Vec<TransferDesc> = pairs
            .iter()
            .map(|&(l, r)| TransferDesc::raw(self.l0 + l, self.r0 + r, block))
            .collect();
        // Transfers are pipelined (TransferAsync, WINDOW batches or WINDOW_1_PER_STREAM per
        // stream of single-descriptor transfers in flight), so the copy streams have work
        // while the next transfer is checked and queued, and one transfer's tail overlaps the
        // next one's start.
        let window = if batch > 1 {
            WINDOW
        } else {
            std::env::var("ASCEND_BENCH_WINDOW_1")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(WINDOW_1_PER_STREAM * crate::peer::streams() as usize)
        };
        let pass = || -> Res<()> {
            let mut inflight = std::collections::VecDeque::with_capacity(window);
            for _ in 0..rounds {
                for chunk in descs.chunks(batch) {
                    if window == 1 {
                        self.eng.transfer_sync(self.peer, op, chunk, T)?;
                        continue;
                    }
                    if inflight.len() == window {
                        let r: ascend_fabric::TransferRequest =
                            inflight.pop_front().ok_or("window")?;
                        r.wait(T)?;
                    }
                    inflight.push_back(self.eng.transfer_async(self.peer, op, chunk)?);
                }
            }
            for r in inflight {
                r.wait(T)?;
            }
            Ok(())
        };
        let split = pattern == Pattern::Repeat;
        let mc = || memcpy_run(self.ceiling, self.bufs, write, &pairs, block, rounds, split);
        // Warm-up (slots, streams, caches), then engine and memcpy passes in turn.
        pass()?;
        mc()?;
        let (engine, memcpy) = best_of_alternating(self.reps, pass, mc)?;
        let n = (pairs.len() * rounds) as u64;
        Ok(Row {
            pattern,
            op,
            block,
            bytes: n * block as u64,
            descs: n,
            batch,
            engine,
            memcpy,
            ucx_gbs: None,
            local_host: self.bufs.local_host,
        })
    }

    /// Times `n` synchronous 4 KiB WRITEs one after the other (after `n / 10` untimed).
    fn latency(&self, n: usize) -> Res<Latency> {
        let d = [TransferDesc::raw(self.l0, self.r0, LAT_BLOCK)];
        let one = || self.eng.transfer_sync(self.peer, TransferOp::Write, &d, T);
        for _ in 0..n / 10 {
            one()?;
        }
        let mut us = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            one()?;
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        us.sort_by(f64::total_cmp);
        Ok(Latency {
            n,
            p50_us: us[n / 2],
            p99_us: us[n * 99 / 100],
            ucx_us: None,
        })
    }

    /// Writes `v` everywhere through a 64 KiB walk and reads it back with a READ walk.
    fn check(
        &self,
        local: &ascend_mem::DeviceBuffer,
        peer: &mut crate::peer::ChildProc,
    ) -> Res<()> {
        let pairs = walk_pairs(self.region, 64 << 10);
        let descs: Vec<TransferDesc> = pairs
            .iter()
            .map(|&(l, r)| TransferDesc::raw(self.l0 + l, self.r0 + r, 64 << 10))
            .collect();
        local.fill(0x3c)?;
        for c in descs.chunks(BATCH) {
            self.eng.transfer_sync(self.peer, TransferOp::Write, c, T)?;
        }
        for off in [0, self.region / 3, self.region - 1] {
            let got = peer.ask(&format!("peek {off}"), "PEEK")?;
            if got != "60" {
                return Err(format!("peer byte at {off} is {got} after WRITE, expected 60").into());
            }
        }
        local.fill(0)?;
        for c in descs.chunks(BATCH) {
            self.eng.transfer_sync(self.peer, TransferOp::Read, c, T)?;
        }
        let mut b = [0u8; 1];
        for off in [0, self.region / 2, self.region - 1] {
            local.read_into(&mut b, off)?;
            if b[0] != 0x3c {
                return Err(format!("local byte at {off} is {} after READ", b[0]).into());
            }
        }
        Ok(())
    }
}

/// Runs the transfer benchmark into `res`.
pub(crate) fn run(args: &Args, pb: &ProgressBar, res: &mut Results) -> Res<()> {
    let region = region(args);
    pb.set_message(format!(
        "transfer: starting the peer ({} MiB)",
        region >> 20
    ));
    let (mut peer, peer_addr) = start_peer(1, region, true)?;
    let rt = crate::util::runtime()?;
    let dev = crate::util::device(&rt, crate::util::Side::Bench)?;
    let eng = Engine::new(&dev, "127.0.0.1", engine_options()?)?;
    let ceiling = Ceiling::new(&dev, streams() as usize, streams() as usize)?;
    let local = eng.alloc_device(region)?;
    local.fill(0xa5)?;
    let _reg = eng.register(&local)?;
    let (r0, bufs) = map_peer(&eng, &ceiling, &peer_addr, &local, region)?;
    pb.inc(1);
    let b = Bench {
        eng: &eng,
        ceiling: &ceiling,
        peer: &peer_addr,
        l0: local.addr(),
        r0,
        bufs,
        region,
        reps: reps(args),
    };
    // Profiling aid: `ASCEND_BENCH_FILTER="walk Write 4 KiB"` runs only the matching rows.
    let filter = std::env::var("ASCEND_BENCH_FILTER").ok();
    measure_rows(&b, pb, filter.as_deref(), res)?;
    // Repeated 4 KiB WRITEs from host DRAM: the engine batches them (one batch call per
    // stream per transfer; the runtime batches host-device copies only).
    let host = eng.alloc_host(2 << 20)?;
    host.fill(0x5a)?;
    let _host_reg = eng.register(&host)?;
    let hb = Bench {
        l0: host.addr(),
        bufs: Bufs {
            local: host.addr(),
            remote: bufs.remote,
            local_host: true,
        },
        ..b
    };
    if filter
        .as_deref()
        .map_or(true, |f| "repeat/host Write 4 KiB".contains(f))
    {
        pb.set_message("transfer: repeat Write 4 KiB from host DRAM");
        res.transfer
            .push(hb.measure(Pattern::Repeat, TransferOp::Write, 4 << 10)?);
    }
    pb.inc(1);
    measure_latency(&b, args, pb, filter.as_deref(), res)?;
    pb.set_message("transfer: data check");
    b.check(&local, &mut peer)?;
    pb.inc(1);
    // Peak RSS of both engine processes, now (before anything else runs in this process).
    res.rss = Some(peak_rss(&mut peer, region, rt.backend().is_emulator())?);
    res.ceiling = Some(ceiling.name());
    if filter.as_deref().map_or(true, |f| "cancel".contains(f)) {
        pb.set_message("transfer: dropping 1,000 futures in flight");
        res.cancel = Some(crate::cancel::measure(&crate::cancel::Target {
            eng: &eng,
            peer: &peer_addr,
            reg: &_reg,
            l0: b.l0,
            r0,
            region,
        })?);
    }
    pb.inc(1);
    let _ = b;
    drop(_reg);
    drop(eng);
    peer.finish()?;
    // UCX last, with the engines gone, so nothing else competes for the cores.
    ucx(args, pb, filter.is_some(), res);
    Ok(())
}

/// Connects `eng` to the peer at `peer_addr`, checks that it offers `region` bytes, and touches
/// both mappings in this process; returns the peer's segment address and the raw addresses.
fn map_peer(
    eng: &Engine,
    ceiling: &Ceiling,
    peer_addr: &str,
    local: &ascend_mem::DeviceBuffer,
    region: usize,
) -> Res<(Addr, Bufs)> {
    eng.connect(peer_addr, T)?;
    let segs = eng
        .remote_segments(peer_addr)
        .ok_or("no segments from the peer")?;
    let (r0, rlen) = segs[0];
    if rlen < region {
        return Err(format!("peer offered {rlen} bytes, expected {region}").into());
    }
    let mapped = eng
        .peer_mapped_addr(peer_addr, r0)
        .ok_or("peer segment not mapped")?;
    let bufs = Bufs {
        local: local.addr(),
        remote: mapped,
        local_host: false,
    };
    // Touch both mappings in this process (the peer filled its buffer already).
    memcpy_run(ceiling, bufs, true, &[(0, 0)], region, 1, true)?;
    memcpy_run(ceiling, bufs, false, &[(0, 0)], region, 1, true)?;
    Ok((r0, bufs))
}

/// Measures every pattern, op and block size (those matching `filter`) into `res.transfer`.
fn measure_rows(
    b: &Bench<'_>,
    pb: &ProgressBar,
    filter: Option<&str>,
    res: &mut Results,
) -> Res<()> {
    for pattern in [Pattern::Walk, Pattern::Repeat] {
        for op in [TransferOp::Write, TransferOp::Read] {
            for &block in &SIZES {
                let name = format!("{} {op:?} {}", pattern.name(), size_name(block));
                if filter.is_some_and(|f| !name.contains(f)) {
                    pb.inc(1);
                    continue;
                }
                pb.set_message(format!(
                    "transfer: {} {:?} {}",
                    pattern.name(),
                    op,
                    size_name(block)
                ));
                res.transfer.push(b.measure(pattern, op, block)?);
                pb.inc(1);
            }
        }
    }
    Ok(())
}

/// Measures the synchronous 4 KiB WRITE latency into `res.latency` (unless `filter` excludes it).
fn measure_latency(
    b: &Bench<'_>,
    args: &Args,
    pb: &ProgressBar,
    filter: Option<&str>,
    res: &mut Results,
) -> Res<()> {
    if filter.map_or(true, |f| "latency".contains(f)) {
        pb.set_message("transfer: latency of a synchronous 4 KiB WRITE");
        // Profiling aid: `ASCEND_BENCH_LAT_N=1000000` makes the latency loop dominate.
        let n = std::env::var("ASCEND_BENCH_LAT_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if args.quick { 2_000 } else { 10_000 });
        res.latency = Some(b.latency(n)?);
    }
    pb.inc(1);
    Ok(())
}

/// Peak RSS of this process and of `peer`, against the registered memory each touched (in
/// host memory: on the emulator its buffer and its mapping of the peer's; on CANN, device
/// memory, none).
fn peak_rss(peer: &mut crate::peer::ChildProc, region: usize, emulator: bool) -> Res<RssReport> {
    let initiator_hwm = proc_status_bytes("VmHWM")?;
    let r = peer.ask("rss", "RSS")?;
    let mut w = r.split_whitespace();
    let peer_hwm: u64 = w.next().ok_or("rss reply")?.parse()?;
    let peer_touched: u64 = w.next().ok_or("rss reply")?.parse()?;
    Ok(RssReport {
        initiator_hwm,
        initiator_touched: if emulator { 2 * region as u64 } else { 0 },
        peer_hwm,
        peer_touched,
    })
}

/// Runs UCX put bandwidth and latency if `ucx_perftest` is found and no filter is set;
/// otherwise notes why it was skipped.
fn ucx(args: &Args, pb: &ProgressBar, filtered: bool, res: &mut Results) {
    let ucx = if filtered {
        Err("ASCEND_BENCH_FILTER is set".to_string())
    } else {
        crate::ucx::find()
    };
    match ucx {
        Err(why) => {
            res.ucx_note = Some(format!("UCX skipped: {why}"));
            pb.inc(SIZES.len() as u64 + 1);
        }
        Ok(exe) => ucx_put(exe, args.quick, pb, res),
    }
}

/// UCX put bandwidth into the WRITE repeat rows, put latency into `res.latency`, and
/// `res.ucx_note` (the command, or what failed).
fn ucx_put(exe: PathBuf, quick: bool, pb: &ProgressBar, res: &mut Results) {
    let mut notes = Vec::new();
    for &block in &SIZES {
        pb.set_message(format!("transfer: UCX put {}", size_name(block)));
        match crate::ucx::put_bw(&exe, block, quick) {
            Ok(g) => {
                for row in res.transfer.iter_mut().filter(|r| {
                    r.pattern == Pattern::Repeat && r.op == TransferOp::Write && r.block == block
                }) {
                    row.ucx_gbs = Some(g);
                }
            }
            Err(e) => notes.push(format!("UCX {} failed: {e}", size_name(block))),
        }
        pb.inc(1);
    }
    pb.set_message(format!(
        "transfer: UCX put latency {}",
        size_name(LAT_BLOCK)
    ));
    match crate::ucx::put_lat(&exe, LAT_BLOCK, quick) {
        Ok(us) => {
            if let Some(l) = &mut res.latency {
                l.ucx_us = Some(us);
            }
        }
        Err(e) => notes.push(format!("UCX latency failed: {e}")),
    }
    pb.inc(1);
    res.ucx_note = Some(if notes.is_empty() {
        format!(
            "UCX: {} -t ucp_put_bw and ucp_put_lat, UCX_TLS=posix,cma,self{}",
            exe.display(),
            if quick {
                ", iterations / 8 (--quick)"
            } else {
                ""
            }
        )
    } else {
        notes.join("; ")
    });
}
