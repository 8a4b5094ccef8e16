//! Host-side cost of a descriptor (checks against the local registrations and the peer's
//! segments, translation, one `aclrtMemcpyAsync` submission), with 1 and with 10,000 segments
//! offered by the peer; and the cost of the same copies posted as (local block, remote block)
//! index pairs of prepared lists (the local registration and every peer segment in 4 KiB
//! blocks), whose translation happened when the lists were made.
//!
//! The client runs in its own process with `ASCEND_SIM_STREAM_MODE=deterministic`: queued
//! copies run only when the request is waited for, so the time `transfer_async` takes is
//! host-side work alone (on CANN the variable does nothing: the device runs the copies while
//! the client queues more, and the time is still the submitting thread's). Descriptors are
//! 4 KiB, local blocks in order, remote blocks at random 4 KiB offsets of random segments
//! (every segment 2 MiB, its own allocation), 1,024 per batch.
//!
//! HIXL's control plane sends a peer's whole share-handle list in one response frame of at
//! most 1 MiB (about 0.3–0.5 KiB of JSON per segment), so one peer can offer only a few
//! thousand segments: the 10,000 segments are offered by 5 peers of 2,000 each, all imported
//! into this engine's VA pool (one emulator reservation holding 10,000 mappings); batches go to
//! the peers in turn, each descriptor to a random segment of that peer.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ascend_fabric::{Engine, SegmentRef, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{
    Addr, Device, Mapping, MappingTable, PhysicalMem, ReservedVa, Runtime, Stream, StreamFlags,
    TableCopy,
};
use indicatif::ProgressBar;

use crate::peer::{engine_options, start_peer, ChildProc};
use crate::{Args, Res};

/// Segment counts measured.
pub(crate) const SEGMENTS: [usize; 2] = [1, 10_000];
/// The configurations measured: (segments, local memory is host DRAM). With a host-DRAM local
/// registration, each stream's copies of a batch go to the runtime as one
/// `aclrtMemcpyBatchAsync` (the runtime batches host-device copies only); with HBM, one
/// `aclrtMemcpyAsync` per copy.
const CONFIGS: [(usize, bool); 3] = [(1, false), (10_000, false), (1, true)];
/// Most segments one peer offers (the 1 MiB response frame).
const PER_PEER: usize = 2_000;
/// Progress steps (rounds; at most 3).
pub(crate) const STEPS: u64 = 3;
const SEG_BYTES: usize = 2 << 20;
const LOCAL_BYTES: usize = 64 << 20;
const DESC: usize = 4096;
const T: Duration = Duration::from_secs(120);

/// One measurement.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub(crate) segments: usize,
    /// The local registration is host DRAM (copies batched), not HBM.
    pub(crate) host: bool,
    /// Submission (`transfer_async`) per descriptor.
    pub(crate) submit_ns: f64,
    /// Submission plus the copies and completion, per descriptor.
    pub(crate) total_ns: f64,
    /// Submission of the same copies as (local block, remote block) pairs of prepared lists
    /// (`transfer_prepared_async`), per descriptor.
    pub(crate) prepared_ns: Option<f64>,
    /// The runtime floor: the same copies queued straight through ascend-mem's stream calls
    /// (one `copy_table_async` per stream per batch, dealt as the engine deals them), per
    /// descriptor.
    pub(crate) floor_ns: f64,
    /// Descriptors per timed pass.
    pub(crate) descs: u64,
    /// Time to connect (import and map every segment).
    pub(crate) connect: Duration,
}

/// Rounds: the two configurations' clients run alternately, and each figure is the best of
/// its rounds, so a change in the machine's load between them does not decide the ratio.
fn rounds(args: &Args) -> usize {
    if args.quick {
        2
    } else {
        3
    }
}

/// Runs both measurements.
pub(crate) fn run(args: &Args, pb: &ProgressBar) -> Res<Vec<Row>> {
    let batches = std::env::var("ASCEND_BENCH_TRANSLATE_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if args.quick { 16 } else { 64 });
    // The peers of both configurations stay up for all rounds.
    let mut peers = Vec::new();
    let mut addrs: Vec<String> = Vec::new();
    for &segs in &SEGMENTS {
        pb.set_message(format!(
            "translate: starting peers offering {segs} segment(s)"
        ));
        let mut a = Vec::new();
        for i in 0..segs.div_ceil(PER_PEER) {
            let n = (segs - i * PER_PEER).min(PER_PEER);
            let (p, addr) = start_peer(n, SEG_BYTES, false)?;
            peers.push(p);
            a.push(addr);
        }
        addrs.push(a.join(","));
    }
    let mut best: Vec<Option<Row>> = vec![None; CONFIGS.len()];
    for _ in 0..rounds(args) {
        for (k, &(segs, host)) in CONFIGS.iter().enumerate() {
            pb.set_message(format!(
                "translate: {segs} remote segment(s), local {}",
                if host { "host DRAM" } else { "HBM" }
            ));
            let peers = SEGMENTS.iter().position(|&s| s == segs).ok_or("segments")?;
            let mut c = ChildProc::spawn(
                "translate",
                &[
                    ("ASCEND_SIM_STREAM_MODE", "deterministic".into()),
                    ("BENCH_LOCAL_HOST", u8::from(host).to_string()),
                    ("BENCH_PEERS", addrs[peers].clone()),
                    ("BENCH_BATCHES", batches.to_string()),
                    ("BENCH_REPS", "2".into()),
                ],
            )?;
            let r = c.expect("TRANSLATE")?;
            c.finish()?;
            let v: Vec<f64> = r
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()?;
            if v.len() != 6 {
                return Err(format!("bad TRANSLATE line {r:?}").into());
            }
            let row = Row {
                segments: segs,
                host,
                submit_ns: v[0],
                total_ns: v[1],
                prepared_ns: Some(v[4]),
                floor_ns: v[5],
                descs: v[2] as u64,
                connect: Duration::from_secs_f64(v[3]),
            };
            let b = &mut best[k];
            match b {
                Some(x) => {
                    x.submit_ns = x.submit_ns.min(row.submit_ns);
                    x.total_ns = x.total_ns.min(row.total_ns);
                    x.prepared_ns = match (x.prepared_ns, row.prepared_ns) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    x.connect = x.connect.min(row.connect);
                    x.floor_ns = x.floor_ns.min(row.floor_ns);
                }
                None => *b = Some(row),
            }
        }
        pb.inc(1);
    }
    pb.inc(STEPS.saturating_sub(rounds(args) as u64));
    for p in peers {
        p.finish()?;
    }
    Ok(best.into_iter().flatten().collect())
}

/// Profiling aid (valgrind has no `pidfd_open`): the client with `$BENCH_SEGS` segments
/// offered by peer engines in this same process (on the peers' device, the client on its
/// own, as in the processes of [`run`]). Run as
/// `ASCEND_BENCH_ROLE=inproc BENCH_SEGS=1 BENCH_BATCHES=16 BENCH_REPS=1 ASCEND_BENCH_POOL_GIB=8
/// valgrind --tool=callgrind ascend-bench`.
pub(crate) fn inproc_main() -> Res<()> {
    let segs: usize = std::env::var("BENCH_SEGS")?.parse()?;
    let rt = crate::util::runtime()?;
    let dev = crate::util::device(&rt, crate::util::Side::Peer)?;
    let mut engines = Vec::new();
    let mut addrs = Vec::new();
    let mut keep = Vec::new();
    for i in 0..segs.div_ceil(PER_PEER) {
        let port = crate::util::free_port()?;
        let a = format!("127.0.0.1:{port}");
        let e = Engine::new(&dev, &a, engine_options()?)?;
        for _ in 0..(segs - i * PER_PEER).min(PER_PEER) {
            let b = e.alloc_device(SEG_BYTES)?;
            keep.push(e.register(&b)?);
            keep_buf(b);
        }
        engines.push(e);
        addrs.push(a);
    }
    let r = client(&rt, &addrs.iter().map(String::as_str).collect::<Vec<_>>());
    drop(keep);
    r
}

fn keep_buf(b: ascend_mem::DeviceBuffer) {
    // Registrations keep the memory mapped; the buffer handle itself may go.
    drop(b);
}

/// The client role: prints `TRANSLATE <submit ns/desc> <total ns/desc> <descs> <connect s>
/// <prepared submit ns/desc> <runtime floor ns/desc>`.
pub(crate) fn client_main() -> Res<()> {
    let peers_var: String = std::env::var("BENCH_PEERS")?;
    let peers: Vec<&str> = peers_var.split(',').collect();
    let rt = crate::util::runtime()?;
    client(&rt, &peers)
}

fn client(rt: &Runtime, peers: &[&str]) -> Res<()> {
    let batches: usize = std::env::var("BENCH_BATCHES")?.parse()?;
    let reps: usize = std::env::var("BENCH_REPS")?.parse()?;
    let dev = crate::util::device(rt, crate::util::Side::Bench)?;
    let eng = Engine::new(&dev, "127.0.0.1", engine_options()?)?;
    let host = std::env::var("BENCH_LOCAL_HOST").is_ok_and(|v| v == "1");
    let local = if host {
        eng.alloc_host(LOCAL_BYTES)?.into_mapping()
    } else {
        eng.alloc_device(LOCAL_BYTES)?.into_mapping()
    };
    local.slice(..)?.fill(1)?;
    let _reg = eng.register_slice(&local.slice(..)?)?;
    let t = Instant::now();
    let mut segs = Vec::new();
    for p in peers {
        eng.connect(p, T)?;
        segs.push(eng.remote_segments(p).ok_or("no remote segments")?);
    }
    let connect = t.elapsed();
    let l0 = local.addr();
    let per_seg = SEG_BYTES / DESC;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Experiment aid: BENCH_ONE_SEGMENT=1 aims every descriptor at the first segment of each
    // peer (same tables, no spread).
    let spread = std::env::var_os("BENCH_ONE_SEGMENT").is_none();
    let mut descs = Vec::with_capacity(batches * crate::transfer::BATCH);
    // The same copies as (local block, remote block) pairs of prepared lists.
    let mut pairs = Vec::with_capacity(descs.capacity());
    // (local offset, (peer, segment), offset in the segment) of each descriptor, for the floor.
    let mut offsets = Vec::with_capacity(descs.capacity());
    let mut prev = None;
    for k in 0..batches * crate::transfer::BATCH {
        let peer = (k / crate::transfer::BATCH) % peers.len();
        let segs = &segs[peer];
        let pick = if spread {
            (rnd() % segs.len() as u64) as usize
        } else {
            0
        };
        let (base, _) = segs[pick];
        // Offsets in the segment and in the local buffer.
        let mut r = (rnd() % per_seg as u64) as usize * DESC;
        if prev.and_then(|p: ascend_fabric::Addr| p.checked_add(DESC)) == Some(base + r) {
            // Never contiguous with the previous descriptor on both sides: no coalescing.
            r = (r + 2 * DESC) % (per_seg * DESC);
        }
        prev = Some(base + r);
        let l = (k * DESC) % LOCAL_BYTES;
        descs.push(TransferDesc::raw(l0 + l, base + r, DESC));
        pairs.push((l / DESC, pick * per_seg + r / DESC));
        offsets.push((l, (peer, pick), r));
    }
    let mut floor = Floor::new(&dev, &local, &offsets, |(p, i)| {
        alias(&eng, &dev, peers[p], segs[p][i].0)
    })?;
    let local_list = eng.prepare_local(&_reg, DESC)?;
    let mut remote_lists = Vec::new();
    for (p, s) in peers.iter().zip(&segs) {
        let all: Vec<SegmentRef> = (0..s.len()).map(SegmentRef::Index).collect();
        remote_lists.push(eng.prepare_remote(p, &all, DESC)?);
    }
    let mut best = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    let n = descs.len() as f64;
    for _ in 0..reps.max(1) + 1 {
        // Batch by batch, the floor, the prepared lists and the raw descriptors in turn: a
        // spell of a slower machine (another tenant, a frequency step) falls on all three
        // alike rather than on whichever pass it met.
        let (mut fl, mut prep, mut raw, mut total) = (
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
        );
        let batches = pairs
            .chunks(crate::transfer::BATCH)
            .zip(descs.chunks(crate::transfer::BATCH));
        for (i, (pc, dc)) in batches.enumerate() {
            fl += floor.submit_batch(i)?;
            let remote = &remote_lists[i % peers.len()];
            let s = Instant::now();
            let req = eng.transfer_prepared_async(TransferOp::Write, &local_list, remote, pc)?;
            prep += s.elapsed();
            req.wait(T)?;
            let peer = peers[i % peers.len()];
            let s = Instant::now();
            let req = eng.transfer_async(peer, TransferOp::Write, dc)?;
            raw += s.elapsed();
            req.wait(T)?;
            total += s.elapsed();
        }
        let per = |d: Duration| d.as_nanos() as f64 / n;
        best.0 = best.0.min(per(raw));
        best.1 = best.1.min(per(total));
        best.2 = best.2.min(per(prep));
        best.3 = best.3.min(per(fl));
    }
    println!(
        "TRANSLATE {:.1} {:.1} {} {:.3} {:.1} {:.1}",
        best.0,
        best.1,
        descs.len(),
        connect.as_secs_f64(),
        best.2,
        best.3
    );
    drop(floor);
    drop((local_list, remote_lists));
    drop(_reg);
    drop(eng);
    Ok(())
}

/// The runtime floor of the submission: the descriptors' copies, from the local buffer to
/// the very memory the engine copies into (a second mapping, made here, of each imported
/// segment's allocation, at the same offsets), queued straight through ascend-mem: one
/// [`copy_table_async`](ascend_mem::Stream::copy_table_async) per stream per batch of
/// [`BATCH`](crate::transfer::BATCH), copy `i` of a batch on stream `i % streams` as the engine
/// deals them. It runs in the client's process, so the emulator's address lookup at each copy
/// call sees the engine's mappings too.
struct Floor {
    table: MappingTable,
    /// Per batch, per stream: its copies.
    batches: Vec<Vec<Vec<TableCopy>>>,
    streams: Vec<Stream>,
}

/// The allocation the engine imported for the segment at `base` of `peer`, held again here,
/// its size and the segment's offset in it.
fn alias(eng: &Engine, dev: &Device, peer: &str, base: Addr) -> Res<(PhysicalMem, usize, usize)> {
    let mapped = eng
        .peer_mapped_addr(peer, base)
        .ok_or_else(|| format!("segment {base} of {peer} is not mapped"))?;
    let (block, size) = dev.address_range(mapped)?;
    let phys = PhysicalMem::retain(dev, block)?;
    let off = mapped.offset_from(block).ok_or("mapped below its block")?;
    Ok((phys, size, off))
}

/// A segment: (peer, index in its list).
type SegKey = (usize, usize);

impl Floor {
    /// The floor of the copies `offsets` ((local offset, segment, offset in it) each), with
    /// `alias` mapping each segment used.
    fn new(
        dev: &Device,
        local: &Mapping,
        offsets: &[(usize, SegKey, usize)],
        mut alias: impl FnMut(SegKey) -> Res<(PhysicalMem, usize, usize)>,
    ) -> Res<Floor> {
        let mut entry: HashMap<SegKey, usize> = HashMap::new();
        let mut held = Vec::new();
        for &(_, seg, _) in offsets {
            if let std::collections::hash_map::Entry::Vacant(v) = entry.entry(seg) {
                v.insert(held.len() + 1);
                held.push(alias(seg)?);
            }
        }
        // One reservation for them all, as the engine's VA pool holds its imports.
        let total = held.iter().map(|(_, size, _)| size).sum();
        let va = ReservedVa::new(dev, dev.granular(total)?)?;
        let mut maps = Vec::with_capacity(held.len());
        let mut at = 0;
        for (phys, size, off) in &held {
            maps.push((va.map(phys, dev.granular(at)?)?, *off));
            at += size;
        }
        let mut slices = vec![local.slice(..)?];
        for (m, off) in &maps {
            slices.push(m.slice(*off..*off + SEG_BYTES)?);
        }
        let table = MappingTable::new(dev, slices)?;
        let k = crate::peer::streams() as usize;
        let batches = offsets
            .chunks(crate::transfer::BATCH)
            .map(|c| {
                let mut per: Vec<Vec<TableCopy>> = vec![Vec::new(); k];
                for (i, &(l, seg, r)) in c.iter().enumerate() {
                    per[i % k].push(TableCopy {
                        dst: entry[&seg],
                        dst_offset: r,
                        src: 0,
                        src_offset: l,
                        len: DESC,
                    });
                }
                per
            })
            .collect();
        let flags = StreamFlags::FAST_LAUNCH | StreamFlags::FAST_SYNC;
        let streams = (0..k)
            .map(|_| Stream::with_config(dev, 0, flags))
            .collect::<ascend_mem::Result<_>>()?;
        // The table holds the mappings (and they their reservation and allocations).
        drop((maps, held, va));
        Ok(Floor {
            table,
            batches,
            streams,
        })
    }

    /// Batch `i`'s submission time (its copies then run, untimed, before anything else is
    /// queued, as the engine's pass waits for each transfer).
    fn submit_batch(&mut self, i: usize) -> Res<Duration> {
        let t = Instant::now();
        for (s, copies) in self.streams.iter_mut().zip(&self.batches[i]) {
            s.copy_table_async(&self.table, &self.table, copies)?;
        }
        let d = t.elapsed();
        for s in &mut self.streams {
            s.synchronize()?;
        }
        Ok(d)
    }
}
