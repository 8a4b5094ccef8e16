//! AllGather and AllReduce (sum), 4 ranks as threads of this process (one emulated device
//! each, one communicator, one stream per rank), 8 MiB of fp32 per rank, with symmetric
//! windows (both buffers in one registered window per rank) and staged (no window): time per
//! collective (slowest rank) and bytes copied ([`ascend_sim::hccl_stats`]).
//!
//! HCCL is called through the emulator's in-process table (the C API); memory and streams
//! come from ascend-mem.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use ascend_mem::{DeviceBuffer, Runtime, Stream};
use hccl_sys::{HcclComm, HcclCommSymWindow, HcclRootInfo, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM};
use indicatif::ProgressBar;

use crate::{Args, Res};

/// Ranks.
pub(crate) const RANKS: usize = 4;
/// Bytes per rank.
pub(crate) const BYTES: usize = 8 << 20;
/// Progress steps.
pub(crate) const STEPS: u64 = 4;

/// A collective.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Coll {
    AllGather,
    AllReduce,
}

impl Coll {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Coll::AllGather => "AllGather",
            Coll::AllReduce => "AllReduce",
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
            match coll {
                Coll::AllGather => hc!(HcclAllGather(
                    send,
                    recv,
                    count,
                    HCCL_DATA_TYPE_FP32,
                    comm,
                    s
                ))?,
                Coll::AllReduce => hc!(HcclAllReduce(
                    send,
                    recv,
                    count,
                    HCCL_DATA_TYPE_FP32,
                    HCCL_REDUCE_SUM,
                    comm,
                    s
                ))?,
            }
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
        // Check one element of the result.
        let mut b = [0u8; 4];
        let expect = match coll {
            Coll::AllGather => ((RANKS - 1) * 1000 + 7) as f32,
            Coll::AllReduce => (0..RANKS).map(|r| (r * 1000 + 7) as f32).sum(),
        };
        let at = match coll {
            Coll::AllGather => BYTES + (RANKS - 1) * BYTES + 7 * 4,
            Coll::AllReduce => BYTES + 7 * 4,
        };
        buf.read_into(&mut b, at)?;
        let got = f32::from_le_bytes(b);
        if got != expect {
            return Err(
                format!("{} rank {rank}: got {got}, expected {expect}", coll.name()).into(),
            );
        }
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

/// Runs the four measurements.
pub(crate) fn run(args: &Args, pb: &ProgressBar) -> Res<Vec<Row>> {
    let rt = Runtime::emulated()?;
    let iters = if args.quick { 5 } else { 20 };
    let mut rows = Vec::new();
    for coll in [Coll::AllGather, Coll::AllReduce] {
        for sym in [false, true] {
            pb.set_message(format!(
                "collectives: {} {}",
                coll.name(),
                if sym { "symmetric" } else { "staged" }
            ));
            rows.push(measure(&rt, coll, sym, iters)?);
            pb.inc(1);
        }
    }
    Ok(rows)
}
