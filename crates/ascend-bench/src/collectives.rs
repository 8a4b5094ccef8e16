//! AllGather and AllReduce (sum), 4 ranks as threads of this process (one emulated device
//! each, one communicator, one stream per rank), 8 MiB of fp32 per rank, with symmetric
//! windows (both buffers in one registered window per rank) and staged (no window): time per
//! collective (slowest rank) and bytes copied ([`ascend_sim::hccl_stats`]). Then AllToAll of
//! the same 8 MiB per rank (2 MiB to each rank): the staged `HcclAlltoAll` against one-sided
//! puts straight into each peer's window with one signal per peer (`Stream::put_signal`, then
//! a `Stream::wait_signal` per sender).
//!
//! AllGather and AllReduce call HCCL through the emulator's in-process table (the C API);
//! AllToAll goes through ascend-mem's safe API; memory and streams come from ascend-mem.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use ascend_mem::hccl::{Comm, CommConfig, RootInfo, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Runtime, Stream, WaitCmp};
use hccl_sys::{HcclComm, HcclCommSymWindow, HcclRootInfo, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM};
use indicatif::ProgressBar;

use crate::{Args, Res};

/// Ranks.
pub(crate) const RANKS: usize = 4;
/// Bytes per rank.
pub(crate) const BYTES: usize = 8 << 20;
/// Progress steps.
pub(crate) const STEPS: u64 = 6;

/// A collective.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // HCCL's names
pub(crate) enum Coll {
    AllGather,
    AllReduce,
    /// Measured staged (`HcclAlltoAll`) and one-sided (puts and signals, `symmetric`).
    AllToAll,
}

impl Coll {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Coll::AllGather => "AllGather",
            Coll::AllReduce => "AllReduce",
            Coll::AllToAll => "AllToAll",
        }
    }
}

/// One measurement.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub(crate) coll: Coll,
    pub(crate) symmetric: bool,
    /// Per collective, slowest rank.
    pub(crate) time: Duration,
    /// Bytes copied per collective, all ranks.
    pub(crate) bytes_copied: u64,
    /// Collectives that took the path asked for, of those timed.
    pub(crate) ops_on_path: u64,
    pub(crate) iters: u32,
}

impl Row {
    /// The path's name: staged, symmetric (windows), or one-sided (AllToAll by puts).
    pub(crate) fn path(&self) -> &'static str {
        match (self.coll, self.symmetric) {
            (_, false) => "staged",
            (Coll::AllToAll, true) => "one-sided",
            (_, true) => "symmetric",
        }
    }
}

fn hccl(what: &str, r: u32) -> Res<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "{what} returned {r}: {}",
            ascend_sim::hccl_last_error_message().unwrap_or_default()
        )
        .into())
    }
}

/// Calls an HCCL export of the in-process emulator.
macro_rules! hc {
    ($f:ident($($a:expr),* $(,)?)) => {{
        // SAFETY: the arguments are live handles and buffers of the calling rank, as the C
        // contract requires; the emulator's table checks the rest.
        let r = unsafe { ascend_sim::hccl_table().$f($($a),*) }
            .map_err(|e| format!("{}: {e}", stringify!($f)))?;
        hccl(stringify!($f), r)
    }};
}

struct SendPtr(*mut c_void);
// SAFETY: the pointer is only an address handed to HCCL by the thread that owns the buffer.
unsafe impl Send for SendPtr {}

/// Queues one run of `coll` (the all-to-all case is measured elsewhere; here it stands for an
/// all-reduce of the same bytes).
fn launch(
    coll: Coll,
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    comm: HcclComm,
    s: *mut c_void,
) -> Res<()> {
    match coll {
        Coll::AllGather => hc!(HcclAllGather(
            send,
            recv,
            count,
            HCCL_DATA_TYPE_FP32,
            comm,
            s
        )),
        Coll::AllReduce | Coll::AllToAll => hc!(HcclAllReduce(
            send,
            recv,
            count,
            HCCL_DATA_TYPE_FP32,
            HCCL_REDUCE_SUM,
            comm,
            s
        )),
    }
}

/// Checks one element of `coll`'s result in `buf` (the receive half starts at `BYTES`).
fn check(coll: Coll, rank: usize, buf: &DeviceBuffer) -> Res<()> {
    let mut b = [0u8; 4];
    let expect = match coll {
        Coll::AllGather => ((RANKS - 1) * 1000 + 7) as f32,
        Coll::AllReduce | Coll::AllToAll => (0..RANKS).map(|r| (r * 1000 + 7) as f32).sum(),
    };
    let at = match coll {
        Coll::AllGather => BYTES + (RANKS - 1) * BYTES + 7 * 4,
        Coll::AllReduce | Coll::AllToAll => BYTES + 7 * 4,
    };
    buf.read_into(&mut b, at)?;
    let got = f32::from_le_bytes(b);
    if got != expect {
        return Err(format!("{} rank {rank}: got {got}, expected {expect}", coll.name()).into());
    }
    Ok(())
}

fn rank_body(
    rt: &Runtime,
    root: &HcclRootInfo,
    rank: usize,
    coll: Coll,
    sym: bool,
    iters: u32,
    gate: &Barrier,
) -> Res<Duration> {
    let dev = rt.device(rank as i32)?;
    dev.bind()?;
    let mut stream = Stream::new(&dev)?;
    let mut comm: HcclComm = null_mut();
    hc!(HcclCommInitRootInfo(
        RANKS as u32,
        root,
        rank as u32,
        &mut comm
    ))?;
    let result = (|| -> Res<Duration> {
        let buf = DeviceBuffer::new(&dev, (RANKS + 1) * BYTES)?;
        let ones: Vec<u8> = (0..BYTES / 4)
            .flat_map(|i| ((rank * 1000 + i % 1000) as f32).to_le_bytes())
            .collect();
        buf.write_from(&ones, 0)?;
        buf.fill(0)?;
        buf.write_from(&ones, 0)?;
        let base = SendPtr(buf.as_raw());
        let mut win: HcclCommSymWindow = null_mut();
        if sym {
            hc!(HcclCommSymWinRegister(
                comm,
                base.0,
                buf.len() as u64,
                &mut win,
                1
            ))?;
        }
        let send = base.0;
        // SAFETY: BYTES is inside the buffer of (RANKS + 1) * BYTES bytes.
        let recv = unsafe { send.cast::<u8>().add(BYTES) }.cast::<c_void>();
        let count = (BYTES / 4) as u64;
        let s = stream.as_raw();
        let mut once = || -> Res<()> {
            launch(coll, send, recv, count, comm, s)?;
            stream.synchronize()?;
            Ok(())
        };
        once()?;
        once()?;
        gate.wait();
        if rank == 0 {
            ascend_sim::reset_hccl_stats();
        }
        gate.wait();
        let t = Instant::now();
        for _ in 0..iters {
            once()?;
        }
        let dt = t.elapsed();
        gate.wait();
        check(coll, rank, &buf)?;
        if sym {
            hc!(HcclCommSymWinDeregister(win))?;
        }
        drop(buf);
        Ok(dt)
    })();
    let d = hc!(HcclCommDestroy(comm));
    let dt = result?;
    d?;
    Ok(dt)
}

fn measure(rt: &Runtime, coll: Coll, sym: bool, iters: u32) -> Res<Row> {
    if coll == Coll::AllToAll {
        return measure_all_to_all(rt, sym, iters);
    }
    let mut root = HcclRootInfo::default();
    hc!(HcclGetRootInfo(&mut root))?;
    let gate = Barrier::new(RANKS);
    let times: Vec<Res<Duration>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..RANKS)
            .map(|rank| {
                let (root, gate) = (&root, &gate);
                s.spawn(move || rank_body(rt, root, rank, coll, sym, iters, gate))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("rank panicked".into())))
            .collect()
    });
    let mut worst = Duration::ZERO;
    for t in times {
        worst = worst.max(t?);
    }
    let st = ascend_sim::hccl_stats();
    let (bytes, ops) = if sym {
        (st.symmetric_bytes_copied, st.symmetric_ops)
    } else {
        (st.staged_bytes_copied, st.staged_ops)
    };
    // hccl_stats counts each rank's collective once per rank.
    let per_coll = ops / RANKS as u64;
    Ok(Row {
        coll,
        symmetric: sym,
        time: worst / iters,
        bytes_copied: bytes / per_coll.max(1),
        ops_on_path: per_coll,
        iters,
    })
}

/// Bytes each rank sends to each rank in the AllToAll.
const BLOCK: usize = BYTES / RANKS;

/// The fp32 value rank `from` sends to rank `to` at element `i` of the block (exact).
fn a2a_value(from: usize, to: usize, i: usize) -> f32 {
    ((from * RANKS + to) * 1000 + i % 1000) as f32
}

/// One AllToAll iteration, one-sided: the block for each rank put into its window at our
/// block's place with a signal (`round` in our slot), then a wait for every sender's signal.
fn one_sided_round(
    comm: &Comm,
    win: &SymWindow,
    stream: &mut Stream,
    send: &ascend_mem::TypedSlice<'_, f32>,
    round: u64,
) -> Res<()> {
    let (rank, blk) = (comm.rank() as usize, BLOCK / 4);
    for to in 0..RANKS {
        let peer = win.peer::<f32>(to as u32)?;
        let part = send.slice(to * blk..(to + 1) * blk)?;
        stream.put_signal(&peer, &part, rank * blk, rank, round)?;
    }
    for from in 0..RANKS {
        stream.wait_signal(win, from, WaitCmp::Geq, round)?;
    }
    comm.synchronize_watched(stream, Duration::from_secs(60))?;
    Ok(())
}

/// One rank of the AllToAll measurement: returns its time for `iters` rounds.
fn a2a_rank(
    rt: &Runtime,
    root: &RootInfo,
    rank: usize,
    one_sided: bool,
    iters: u32,
    gate: &Barrier,
) -> Res<Duration> {
    let dev = rt.device(rank as i32)?;
    let cfg = CommConfig::new()
        .sym_window_max_per_rank_gb(1)
        .exec_timeout(Duration::from_secs(60));
    let comm = Comm::init(&dev, root, rank as u32, RANKS as u32, &cfg)?;
    let mut stream = Stream::new(&dev)?;
    let send_buf = DeviceBuffer::new(&dev, BYTES)?;
    let send = send_buf.slice(..BYTES)?.typed::<f32>()?;
    for to in 0..RANKS {
        let block: Vec<f32> = (0..BLOCK / 4).map(|i| a2a_value(rank, to, i)).collect();
        send.write_slice(&block, to * BLOCK / 4)?;
    }
    // The receive side: in a window (one-sided; its tail holds the signal words) or plain.
    let recv_buf = DeviceBuffer::new(&dev, BYTES + ascend_mem::hccl::SIGNAL_AREA_BYTES)?;
    let recv = recv_buf.slice(..BYTES)?.typed::<f32>()?;
    let win = if one_sided {
        Some(SymWindow::register_mapping(&comm, recv_buf.mapping())?)
    } else {
        None
    };
    let mut round = 0u64;
    let mut once = |stream: &mut Stream| -> Res<()> {
        round += 1;
        match &win {
            Some(w) => one_sided_round(&comm, w, stream, &send, round),
            None => {
                comm.all_to_all(&send, &recv, stream)?;
                Ok(stream.synchronize()?)
            }
        }
    };
    once(&mut stream)?;
    once(&mut stream)?;
    gate.wait();
    let t = Instant::now();
    for _ in 0..iters {
        once(&mut stream)?;
    }
    let dt = t.elapsed();
    gate.wait();
    let from = RANKS - 1;
    let got = recv
        .slice(from * BLOCK / 4..from * BLOCK / 4 + 8)?
        .read_to_vec()?;
    let want: Vec<f32> = (0..8).map(|i| a2a_value(from, rank, i)).collect();
    if got != want {
        return Err(format!("AllToAll rank {rank}: got {got:?}, expected {want:?}").into());
    }
    if let Some(w) = win {
        w.close().map_err(|e| e.to_string())?;
    }
    drop(stream);
    comm.close().map_err(|e| e.to_string())?;
    Ok(dt)
}

/// AllToAll, staged or one-sided (`one_sided`), slowest rank.
fn measure_all_to_all(rt: &Runtime, one_sided: bool, iters: u32) -> Res<Row> {
    let root = RootInfo::generate(&rt.device(0)?)?;
    let gate = Barrier::new(RANKS);
    ascend_sim::reset_hccl_stats();
    let times: Vec<Res<Duration>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..RANKS)
            .map(|rank| {
                let (root, gate) = (&root, &gate);
                s.spawn(move || a2a_rank(rt, root, rank, one_sided, iters, gate))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("rank panicked".into())))
            .collect()
    });
    let mut worst = Duration::ZERO;
    for t in times {
        worst = worst.max(t?);
    }
    let rounds = u64::from(iters) + 2;
    let (bytes, on_path) = if one_sided {
        // Every rank puts its BYTES each round; no HCCL collective runs.
        ((RANKS * BYTES) as u64, u64::from(iters))
    } else {
        let st = ascend_sim::hccl_stats();
        let per_round = st.staged_ops / RANKS as u64;
        (
            st.staged_bytes_copied / per_round.max(1),
            per_round * u64::from(iters) / rounds,
        )
    };
    Ok(Row {
        coll: Coll::AllToAll,
        symmetric: one_sided,
        time: worst / iters,
        bytes_copied: bytes,
        ops_on_path: on_path,
        iters,
    })
}

/// Runs the six measurements.
pub(crate) fn run(args: &Args, pb: &ProgressBar) -> Res<Vec<Row>> {
    let rt = Runtime::emulated()?;
    let iters = if args.quick { 5 } else { 20 };
    let mut rows = Vec::new();
    for coll in [Coll::AllGather, Coll::AllReduce, Coll::AllToAll] {
        for sym in [false, true] {
            pb.set_message(format!(
                "collectives: {} {}",
                coll.name(),
                match (coll, sym) {
                    (_, false) => "staged",
                    (Coll::AllToAll, true) => "one-sided",
                    (_, true) => "symmetric",
                }
            ));
            rows.push(measure(&rt, coll, sym, iters)?);
            pb.inc(1);
        }
    }
    Ok(rows)
}
