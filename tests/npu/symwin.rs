//! HCCL on every listed device, one process per rank: the four collectives on a symmetric
//! window, and one-sided put with signal around a ring.

use std::process::Command;
use std::time::Duration;

use ascend::fabric::Need;
use ascend::hccl::{Comm, CommConfig, ReduceOp, RootInfo, SymWindow};
use ascend::prelude::*;
use ascend::{DeviceBuffer, Feature, Runtime, Stream, WaitCmp};
use ascend_launch::{Launcher, RankEnv, Rendezvous};

use crate::ctx::{devices, ensure, Ctx, Res, ROLE, STEP};
use crate::harness::Outcome;
use crate::need;

/// Elements per rank and block.
const K: usize = 256;

/// Every listed device a rank, running `role`; each rank checks its own results.
fn launch(ctx: &Ctx, role: &str) -> Res<()> {
    let n = u32::try_from(ctx.devices.len())?;
    let exe = std::env::current_exe()?;
    let r = Launcher::new(n).timeout(STEP * 2).run(|_| {
        let mut c = Command::new(&exe);
        c.env(ROLE, role)
            .env("ASCEND_TEST_DEVICES", ctx.devices_var());
        c
    })?;
    ensure(
        r.success(),
        format!("the ranks ended with {:?}", r.statuses),
    )
}

pub fn collectives(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::SymWindows));
    if let Some(s) = ctx.need_devices(2) {
        return Ok(Some(s));
    }
    launch(ctx, "collectives")?;
    Ok(None)
}

pub fn put_signal(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::PeerPointers));
    if let Some(s) = ctx.need_devices(2) {
        return Ok(Some(s));
    }
    launch(ctx, "onesided")?;
    Ok(None)
}

/// A rank's communicator on its device (`LOCAL_RANK`-th listed device).
struct Rank {
    env: RankEnv,
    rdv: Rendezvous,
    comm: Comm,
    stream: Stream,
    dev: ascend::Device,
    _rt: Runtime,
}

fn join(name: &str) -> Res<Rank> {
    let env = RankEnv::from_env()?;
    let mut rdv = Rendezvous::join(&env, STEP)?;
    let rt = Runtime::from_env_or_emulator()?;
    let dev = rt.device(devices(&rt)?[env.local_rank as usize])?;
    let cfg = CommConfig::new()
        .name(name)
        .sym_window_max_per_rank_gb(1)
        .exec_timeout(STEP);
    let mine = match env.rank {
        0 => RootInfo::generate(&dev)?.to_bytes().to_vec(),
        _ => Vec::new(),
    };
    let root = RootInfo::from_bytes(&rdv.broadcast(&mine)?)?;
    let comm = Comm::init(&dev, &root, env.rank, env.world_size, &cfg)?;
    let stream = Stream::new(&dev)?;
    Ok(Rank {
        env,
        rdv,
        comm,
        stream,
        dev,
        _rt: rt,
    })
}

/// AllGather, AllReduce, ReduceScatter and AllToAll of f32 inside one symmetric window.
pub fn collectives_role() -> Res<()> {
    let mut r = join("npu_collectives")?;
    let (me, n) = (r.env.rank as usize, r.env.world_size as usize);
    let buf = DeviceBuffer::new(&r.dev, 2 * n * K * 4)?;
    let win = SymWindow::register_mapping(&r.comm, buf.mapping())?;
    let all = buf.mapping().typed::<f32>()?;
    let (send, recv) = (all.slice(..n * K)?, all.slice(n * K..2 * n * K)?);
    let run =
        |r: &mut Rank, what: &str, f: &dyn Fn(&mut Rank) -> ascend::Result<()>| -> Res<Vec<f32>> {
            recv.fill_zero()?;
            f(r).map_err(|e| format!("{what}: {e}"))?;
            r.stream.synchronize()?;
            Ok(recv.read_to_vec()?)
        };
    // AllGather: rank r's K values land at block r.
    send.write_slice(
        &(0..K).map(|i| (me * 1000 + i) as f32).collect::<Vec<_>>(),
        0,
    )?;
    let s1 = send.slice(..K)?;
    let got = run(&mut r, "AllGather", &|r| {
        r.comm.all_gather(&s1, &recv, &mut r.stream)
    })?;
    let want: Vec<f32> = (0..n * K)
        .map(|j| ((j / K) * 1000 + j % K) as f32)
        .collect();
    ensure(got == want, "AllGather")?;
    // AllReduce (sum) of r + 1 + i.
    send.write_slice(&(0..K).map(|i| (me + 1 + i) as f32).collect::<Vec<_>>(), 0)?;
    let r1 = recv.slice(..K)?;
    let got = run(&mut r, "AllReduce", &|r| {
        r.comm.all_reduce(&s1, &r1, ReduceOp::Sum, &mut r.stream)
    })?;
    let want: Vec<f32> = (0..K).map(|i| (n * (n + 1) / 2 + n * i) as f32).collect();
    ensure(got[..K] == want[..], "AllReduce")?;
    // ReduceScatter (sum) of r + j: this rank gets the sums of block `me`.
    send.write_slice(&(0..n * K).map(|j| (me + j) as f32).collect::<Vec<_>>(), 0)?;
    let got = run(&mut r, "ReduceScatter", &|r| {
        r.comm
            .reduce_scatter(&send, &r1, ReduceOp::Sum, &mut r.stream)
    })?;
    let want: Vec<f32> = (0..K)
        .map(|i| (n * (n - 1) / 2 + n * (me * K + i)) as f32)
        .collect();
    ensure(got[..K] == want[..], "ReduceScatter")?;
    // AllToAll: block `to` of rank r holds r * 100 + to.
    let value = |from: usize, to: usize, i: usize| (from * 100_000 + to * 1000 + i) as f32;
    send.write_slice(
        &(0..n * K)
            .map(|j| value(me, j / K, j % K))
            .collect::<Vec<_>>(),
        0,
    )?;
    let got = run(&mut r, "AllToAll", &|r| {
        r.comm.all_to_all(&send, &recv, &mut r.stream)
    })?;
    let want: Vec<f32> = (0..n * K).map(|j| value(j / K, me, j % K)).collect();
    ensure(got == want, "AllToAll")?;
    r.rdv.barrier()?;
    win.close().map_err(|e| e.to_string())?;
    Ok(())
}

/// Each rank puts K values into the next rank's window with a signal and waits for the
/// previous rank's.
pub fn onesided_role() -> Res<()> {
    let mut r = join("npu_onesided")?;
    let (me, n) = (r.env.rank, r.env.world_size);
    let wbuf = DeviceBuffer::new(&r.dev, 2 * K * 4)?;
    let win = SymWindow::register_mapping(&r.comm, wbuf.mapping())?;
    let src = DeviceBuffer::new(&r.dev, K * 4)?;
    let mine = src.mapping().typed::<u32>()?.slice(..K)?;
    mine.write_slice(&(0..K as u32).map(|i| me << 16 | i).collect::<Vec<_>>(), 0)?;
    r.rdv.barrier()?;
    let next = win.peer::<u32>((me + 1) % n)?;
    r.stream.put_signal(&next, &mine, 0, 1, 1)?;
    r.stream.wait_signal(&win, 1, WaitCmp::Geq, 1)?;
    r.comm
        .synchronize_watched(&mut r.stream, Duration::from_secs(60))?;
    let prev = (me + n - 1) % n;
    let got = win.mapping().typed::<u32>()?.slice(..K)?.read_to_vec()?;
    ensure(
        got == (0..K as u32).map(|i| prev << 16 | i).collect::<Vec<_>>(),
        "the previous rank's put",
    )?;
    r.rdv.barrier()?;
    drop(win);
    Ok(())
}
