//! The HIXL-shaped table and the wait floor, measured in a client process of their own (so
//! `--call-ns` reaches its emulator alone) against a peer process.
//!
//! *Table*: HIXL's own benchmark shape: per block size (16 KiB to 2 MiB) one synchronous
//! transfer per step of a whole region (128 MiB; 32 MiB with `--quick`) in blocks, device to
//! remote device (D2rD, WRITE), device to remote host DRAM (D2rH, WRITE) and remote host DRAM
//! to device (rH2D, READ), 4 streams. *contig* is HIXL's layout (block i to block i, which the
//! engine merges); *scatter* reverses the remote blocks, so nothing merges and every block is
//! one runtime copy. Each cell is the median of its steps, next to a two-thread `memcpy`
//! between the same mapped buffers (on CANN, where the host cannot address them, the
//! runtime's own copies between them on as many streams as the engine has: see
//! [`Ceiling`]) and the caller's CPU time per step. With
//! `--submit-threads N` every cell is measured with 1 and with N submitting threads, steps
//! alternated; with `--call-ns NS` the client's emulator charges NS of host time per runtime
//! copy call (`ASCEND_SIM_CALL_NS`), the regime where submission is the bound.
//!
//! *Wait floor*: the caller's CPU time per synchronous 1 MiB WRITE (16 scattered 64 KiB
//! descriptors over the 4 streams) against the same copies queued straight through
//! ascend-mem (one table batch per stream) and waited for with one blocking synchronize per
//! stream, alternated, medians.

use std::time::{Duration, Instant};

use ascend_fabric::{Engine, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{Addr, DeviceBuffer, MappingTable, Stream, StreamFlags, TableCopy};
use indicatif::ProgressBar;

use crate::ceiling::{Ceiling, CeilingName};
use crate::peer::{engine_options, start_peer_with_host, ChildProc};
use crate::util::median;
use crate::{Args, Res};

/// Block sizes of the table.
pub(crate) const BLOCKS: [usize; 5] = [16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20];
/// Progress steps of [`run`].
pub(crate) const STEPS: u64 = BLOCKS.len() as u64 + 1;
const T: Duration = Duration::from_secs(300);
/// The wait floor's transfer: this many descriptors of [`WAIT_DESC`].
const WAIT_DESCS: usize = 16;
const WAIT_DESC: usize = 64 << 10;

/// Direction of a cell.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Local HBM to the peer's HBM (WRITE).
    D2rD,
    /// Local HBM to the peer's host DRAM (WRITE).
    D2rH,
    /// The peer's host DRAM to local HBM (READ).
    RH2D,
}

impl Dir {
    pub(crate) const ALL: [Dir; 3] = [Dir::D2rD, Dir::D2rH, Dir::RH2D];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Dir::D2rD => "D2rD",
            Dir::D2rH => "D2rH",
            Dir::RH2D => "rH2D",
        }
    }

    fn parse(s: &str) -> Res<Dir> {
        Dir::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown direction {s:?}").into())
    }
}

/// One cell: a direction, layout, block size and submitter count.
#[derive(Clone, Debug)]
pub(crate) struct Cell {
    pub(crate) dir: Dir,
    pub(crate) scatter: bool,
    pub(crate) block: usize,
    pub(crate) threads: u32,
    /// Median time of a step (one transfer of the whole region).
    pub(crate) step: Duration,
    /// Median caller CPU time per step.
    pub(crate) cpu: Duration,
    /// The ceiling (two-thread memcpy; on CANN the runtime's copies) of the same blocks
    /// between the same mapped buffers.
    pub(crate) memcpy: Duration,
    /// Bytes per step.
    pub(crate) bytes: u64,
}

impl Cell {
    pub(crate) fn gbs(&self) -> f64 {
        crate::util::gbs(self.bytes, self.step)
    }
    pub(crate) fn vs_memcpy(&self) -> f64 {
        self.memcpy.as_secs_f64() / self.step.as_secs_f64()
    }
}

/// What [`run`] measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Report {
    pub(crate) cells: Vec<Cell>,
    /// Caller CPU per synchronous 1 MiB transfer: (engine, floor).
    pub(crate) wait_cpu: Option<(Duration, Duration)>,
    /// `--call-ns` as applied.
    pub(crate) call_ns: u64,
    /// The ceiling (`None`: the client did not say).
    pub(crate) ceiling: Option<CeilingName>,
}

impl Report {
    /// The cell of (`dir`, `scatter`, `block`, `threads`).
    pub(crate) fn cell(
        &self,
        dir: Dir,
        scatter: bool,
        block: usize,
        threads: u32,
    ) -> Option<&Cell> {
        self.cells.iter().find(|c| {
            c.dir == dir && c.scatter == scatter && c.block == block && c.threads == threads
        })
    }

    /// The largest submitter count measured.
    pub(crate) fn max_threads(&self) -> u32 {
        self.cells.iter().map(|c| c.threads).max().unwrap_or(1)
    }
}

fn region(args: &Args) -> usize {
    if args.quick {
        32 << 20
    } else {
        128 << 20
    }
}

/// Runs the client against a peer offering a region of HBM and one of host DRAM.
pub(crate) fn run(args: &Args, pb: &ProgressBar) -> Res<Report> {
    let region = region(args);
    pb.set_message("hixl: starting the peer");
    let (peer, addr, segs) = start_peer_with_host(1, region, true, region)?;
    let [hbm, host] = segs[..] else {
        return Err(format!("the peer printed {segs:?}, not two addresses").into());
    };
    let threads = if args.submit_threads > 1 {
        format!("1,{}", args.submit_threads)
    } else {
        "1".into()
    };
    let mut c = ChildProc::spawn(
        "hixl",
        &[
            ("BENCH_PEER", addr),
            ("BENCH_HBM", hbm.to_string()),
            ("BENCH_HOST", host.to_string()),
            ("BENCH_REGION", region.to_string()),
            ("BENCH_THREADS", threads),
            ("BENCH_STEPS", if args.quick { "3" } else { "5" }.into()),
            ("ASCEND_SIM_CALL_NS", args.call_ns.to_string()),
        ],
    )?;
    let mut rep = Report {
        call_ns: args.call_ns,
        ..Report::default()
    };
    loop {
        let line = c.expect("")?;
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.first().copied() {
            Some("CELL") if w.len() == 9 => rep.cells.push(Cell {
                dir: Dir::parse(w[1])?,
                scatter: w[2] == "scatter",
                block: w[3].parse()?,
                threads: w[4].parse()?,
                step: Duration::from_nanos(w[5].parse()?),
                cpu: Duration::from_nanos(w[6].parse()?),
                memcpy: Duration::from_nanos(w[7].parse()?),
                bytes: w[8].parse()?,
            }),
            Some("CEILING") => rep.ceiling = Some(CeilingName::parse(&w[1..])?),
            Some("BLOCK") => {
                pb.set_message(format!("hixl: {} done", w.get(1).unwrap_or(&"")));
                pb.inc(1);
            }
            Some("WAITCPU") if w.len() == 3 => {
                let ns = |s: &str| s.parse::<u64>().map(Duration::from_nanos);
                rep.wait_cpu = Some((ns(w[1])?, ns(w[2])?));
                pb.inc(1);
                break;
            }
            _ => {}
        }
    }
    c.finish()?;
    peer.finish()?;
    Ok(rep)
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_THREAD_CPUTIME_ID needs no other argument.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn env<T: std::str::FromStr>(k: &str) -> Res<T>
where
    T::Err: std::fmt::Display,
{
    let v = std::env::var(k).map_err(|_| format!("{k} is not set"))?;
    v.parse().map_err(|e| format!("{k}={v:?}: {e}").into())
}

/// The client's buffers: the local HBM region, the peer's two segments (as the peer names
/// them, and as mapped in this process).
struct Side {
    local: Addr,
    hbm: (Addr, Addr),
    host: (Addr, Addr),
    region: usize,
}

impl Side {
    /// (local, remote, remote as mapped here, op) of `dir`.
    fn of(&self, dir: Dir) -> (Addr, Addr, Addr, TransferOp) {
        match dir {
            Dir::D2rD => (self.local, self.hbm.0, self.hbm.1, TransferOp::Write),
            Dir::D2rH => (self.local, self.host.0, self.host.1, TransferOp::Write),
            Dir::RH2D => (self.local, self.host.0, self.host.1, TransferOp::Read),
        }
    }

    /// The descriptors of one step, and the (source, destination) pairs memcpy copies.
    fn step(
        &self,
        dir: Dir,
        scatter: bool,
        block: usize,
    ) -> (Vec<TransferDesc>, Vec<(Addr, Addr)>) {
        let (l, r, mapped, op) = self.of(dir);
        let n = self.region / block;
        let at = |i: usize| if scatter { n - 1 - i } else { i } * block;
        let descs = (0..n)
            .map(|i| TransferDesc::raw(l + i * block, r + at(i), block))
            .collect();
        let pairs = (0..n)
            .map(|i| match op {
                TransferOp::Write => (l + i * block, mapped + at(i)),
                TransferOp::Read => (mapped + at(i), l + i * block),
            })
            .collect();
        (descs, pairs)
    }
}

/// The ceiling copying `pairs` (`block` bytes each): on the emulator two threads, the pairs
/// dealt alternately; on CANN the runtime's copies on the engine's number of streams.
fn memcpy2(c: &Ceiling, pairs: &[(Addr, Addr)], block: usize) -> Res<Duration> {
    let t = Instant::now();
    if let Ceiling::Runtime { .. } = c {
        c.runtime_copies(pairs.iter().map(|&(src, dst)| (src, dst, block)))?;
        return Ok(t.elapsed());
    }
    std::thread::scope(|s| {
        for k in 0..2 {
            s.spawn(move || {
                for &(src, dst) in pairs.iter().skip(k).step_by(2) {
                    // SAFETY: every pair lies inside the local region or this process's
                    // mapping of a peer segment, both mapped for the whole client run; the
                    // destinations are disjoint blocks, and no transfer runs meanwhile.
                    unsafe { crate::ceiling::copy(src, dst, block) };
                }
            });
        }
    });
    Ok(t.elapsed())
}

/// The client role: prints `CEILING <name> <lanes> <threads|streams>` first, then a `CELL <dir>
/// <contig|scatter> <block> <threads> <step ns> <cpu ns> <memcpy ns> <bytes>` line per cell,
/// `BLOCK <size>` after each block size, and last `WAITCPU <engine ns> <floor ns>`.
pub(crate) fn client_main() -> Res<()> {
    let peer: String = env("BENCH_PEER")?;
    let region: usize = env("BENCH_REGION")?;
    let steps: usize = env("BENCH_STEPS")?;
    let threads: Vec<u32> = env::<String>("BENCH_THREADS")?
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let rt = crate::util::runtime()?;
    let dev = crate::util::device(&rt, crate::util::Side::Bench)?;
    let mut engines = Vec::new();
    for &t in &threads {
        let mut o = engine_options()?;
        o.submit_threads = t;
        o.validate()?;
        let e = Engine::new(&dev, "127.0.0.1", o)?;
        e.connect(&peer, T)?;
        engines.push(e);
    }
    let local = engines[0].alloc_device(region)?;
    local.fill(0xa5)?;
    let regs = engines
        .iter()
        .map(|e| e.register(&local))
        .collect::<Result<Vec<_>, _>>()?;
    let mapped = |a: u64| {
        engines[0]
            .peer_mapped_addr(&peer, Addr::new(a))
            .ok_or(format!("the peer's segment at {a:#x} is not mapped"))
    };
    let (hbm, host) = (env::<u64>("BENCH_HBM")?, env::<u64>("BENCH_HOST")?);
    let side = Side {
        local: local.addr(),
        hbm: (Addr::new(hbm), mapped(hbm)?),
        host: (Addr::new(host), mapped(host)?),
        region,
    };
    let ceiling = Ceiling::new(&dev, 2, crate::peer::streams() as usize)?;
    let mut out = std::io::stdout().lock();
    use std::io::Write as _;
    writeln!(out, "CEILING {}", ceiling.name().words())?;
    // Profiling aid: `ASCEND_BENCH_FILTER="D2rD scatter 16 KiB"` measures only matching cells.
    let filter = std::env::var("ASCEND_BENCH_FILTER").ok();
    for &block in &BLOCKS {
        for dir in Dir::ALL {
            for scatter in [false, true] {
                let layout = if scatter { "scatter" } else { "contig" };
                let name = format!("{} {layout} {}", dir.name(), crate::util::size_name(block));
                if filter.as_deref().is_some_and(|f| !name.contains(f)) {
                    continue;
                }
                let (descs, pairs) = side.step(dir, scatter, block);
                memcpy2(&ceiling, &pairs, block)?; // touch both sides
                let mut times = vec![Vec::new(); engines.len()];
                let mut cpus = vec![Vec::new(); engines.len()];
                let mut mem = Vec::new();
                for _ in 0..steps {
                    mem.push(memcpy2(&ceiling, &pairs, block)?);
                    for (k, e) in engines.iter().enumerate() {
                        let (c0, t0) = (thread_cpu(), Instant::now());
                        e.transfer_sync(&peer, side.of(dir).3, &descs, T)?;
                        times[k].push(t0.elapsed());
                        cpus[k].push(thread_cpu().saturating_sub(c0));
                    }
                }
                let m = median(mem);
                for (k, &t) in threads.iter().enumerate() {
                    writeln!(
                        out,
                        "CELL {} {layout} {block} {t} {} {} {} {}",
                        dir.name(),
                        median(std::mem::take(&mut times[k])).as_nanos(),
                        median(std::mem::take(&mut cpus[k])).as_nanos(),
                        m.as_nanos(),
                        descs.len() * block
                    )?;
                }
            }
        }
        writeln!(out, "BLOCK {}", crate::util::size_name(block))?;
        out.flush()?;
    }
    let (e, f) = wait_cpu(&engines[0], &peer, &side, &dev)?;
    writeln!(out, "WAITCPU {} {}", e.as_nanos(), f.as_nanos())?;
    out.flush()?;
    drop(regs);
    drop(engines);
    Ok(())
}

/// Caller CPU per synchronous 1 MiB WRITE through the engine and through the floor, medians
/// of alternated runs.
fn wait_cpu(
    eng: &Engine,
    peer: &str,
    side: &Side,
    dev: &ascend_mem::Device,
) -> Res<(Duration, Duration)> {
    // Descriptor i: local block i to remote block (WAIT_DESCS - 1 - i): nothing merges.
    let descs: Vec<TransferDesc> = (0..WAIT_DESCS)
        .map(|i| {
            let r = (WAIT_DESCS - 1 - i) * WAIT_DESC;
            TransferDesc::raw(side.local + i * WAIT_DESC, side.hbm.0 + r, WAIT_DESC)
        })
        .collect();
    // The floor: the same copies to a stand-in of the remote block range in this process.
    let src = DeviceBuffer::new(dev, WAIT_DESCS * WAIT_DESC)?;
    let standin = DeviceBuffer::new(dev, WAIT_DESCS * WAIT_DESC)?;
    src.fill(1)?;
    let table = MappingTable::new(dev, [src.as_slice(), standin.as_slice()])?;
    let k = crate::peer::streams() as usize;
    let mut per: Vec<Vec<TableCopy>> = vec![Vec::new(); k];
    for i in 0..WAIT_DESCS {
        per[i % k].push(TableCopy {
            dst: 1,
            dst_offset: (WAIT_DESCS - 1 - i) * WAIT_DESC,
            src: 0,
            src_offset: i * WAIT_DESC,
            len: WAIT_DESC,
        });
    }
    let flags = StreamFlags::FAST_LAUNCH | StreamFlags::FAST_SYNC;
    let mut streams = (0..k)
        .map(|_| Stream::with_config(dev, 0, flags))
        .collect::<ascend_mem::Result<Vec<_>>>()?;
    let (mut eng_cpu, mut floor_cpu) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let c0 = thread_cpu();
        eng.transfer_sync(peer, TransferOp::Write, &descs, T)?;
        eng_cpu.push(thread_cpu().saturating_sub(c0));
        let c0 = thread_cpu();
        for (s, c) in streams.iter_mut().zip(&per) {
            s.copy_table_async(&table, &table, c)?;
        }
        for s in &mut streams {
            s.synchronize()?;
        }
        floor_cpu.push(thread_cpu().saturating_sub(c0));
    }
    Ok((median(eng_cpu), median(floor_cpu)))
}
