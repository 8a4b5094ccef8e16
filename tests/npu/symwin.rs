//! The collectives on an HCCL symmetric window, one rank process per device: AllGather,
//! ReduceScatter, AllReduce and AllToAll of f32, each on two devices and on every listed
//! device, every rank checking every element it receives.

use ascend::fabric::Need;
use ascend::hccl::{ReduceOp, SymWindow};
use ascend::prelude::*;
use ascend::{DeviceBuffer, Feature, TypedSlice};

use crate::ctx::{ensure, run_ranks, Ctx, Rank, Res, STEP};
use crate::harness::Outcome;
use crate::skip_if;

/// Elements each rank contributes (per block).
const K: usize = 256;

/// The rank counts a collective runs with: 2 and every listed device.
fn rank_counts(listed: usize) -> Vec<usize> {
    if listed > 2 {
        vec![2, listed]
    } else {
        vec![listed]
    }
}

/// Runs collective `which` as rank jobs of each count.
fn collective(ctx: &Ctx, which: &str) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Hccl)));
    skip_if!(ctx.lacks(Need::Mem(Feature::SymWindows)));
    skip_if!(ctx.lacks_devices(2));
    for n in rank_counts(ctx.devices.len()) {
        run_ranks(&format!("collective-{which}"), &ctx.devices[..n])
            .map_err(|e| format!("{which} on {n} ranks: {e}"))?;
    }
    Ok(Outcome::Pass)
}

pub fn all_gather(ctx: &Ctx) -> Res<Outcome> {
    collective(ctx, "all_gather")
}

pub fn reduce_scatter(ctx: &Ctx) -> Res<Outcome> {
    collective(ctx, "reduce_scatter")
}

pub fn all_reduce(ctx: &Ctx) -> Res<Outcome> {
    collective(ctx, "all_reduce")
}

pub fn all_to_all(ctx: &Ctx) -> Res<Outcome> {
    collective(ctx, "all_to_all")
}

/// Both halves of one window: what a rank sends, where it receives (`n` blocks each).
struct Halves<'a> {
    send: TypedSlice<'a, f32>,
    recv: TypedSlice<'a, f32>,
}

/// `want` against what `recv` holds after the stream's work.
fn check(r: &mut Rank, recv: &TypedSlice<'_, f32>, want: &[f32], what: &str) -> Res<()> {
    r.stream.synchronize_timeout(STEP)?;
    let got = recv.read_to_vec()?;
    let bad = got.iter().zip(want).position(|(g, w)| g != w);
    ensure(
        got.len() >= want.len() && bad.is_none(),
        format!(
            "rank {} of {}: {what}: element {:?} is {:?}, expected {:?}",
            r.rank,
            r.size,
            bad,
            bad.map(|i| got[i]),
            bad.map(|i| want[i])
        ),
    )
}

/// Rank `r`'s block of `K` for AllGather: `r * 1000 + i`.
fn gather(r: &mut Rank, h: &Halves<'_>) -> Res<()> {
    let (me, n) = (r.rank as usize, r.size as usize);
    let mine: Vec<f32> = (0..K).map(|i| (me * 1000 + i) as f32).collect();
    h.send.write_slice(&mine, 0)?;
    let part = h.send.slice(..K)?;
    r.comm.all_gather(&part, &h.recv, &mut r.stream)?;
    let want: Vec<f32> = (0..n * K).map(|j| (j / K * 1000 + j % K) as f32).collect();
    check(r, &h.recv, &want, "AllGather")
}

/// Sums of `(rank + 1) * (j + 1)` over ranks; each rank receives its block.
fn scatter(r: &mut Rank, h: &Halves<'_>) -> Res<()> {
    let (me, n) = (r.rank as usize, r.size as usize);
    let mine: Vec<f32> = (0..n * K).map(|j| ((me + 1) * (j + 1)) as f32).collect();
    h.send.write_slice(&mine, 0)?;
    let out = h.recv.slice(..K)?;
    r.comm
        .reduce_scatter(&h.send, &out, ReduceOp::Sum, &mut r.stream)?;
    let ranks = n * (n + 1) / 2;
    let want: Vec<f32> = (0..K).map(|i| (ranks * (me * K + i + 1)) as f32).collect();
    check(r, &out, &want, "ReduceScatter")
}

/// Sums of `(rank + 1) * (i + 1)` over ranks, on every rank.
fn reduce(r: &mut Rank, h: &Halves<'_>) -> Res<()> {
    let (me, n) = (r.rank as usize, r.size as usize);
    let mine: Vec<f32> = (0..K).map(|i| ((me + 1) * (i + 1)) as f32).collect();
    h.send.write_slice(&mine, 0)?;
    let (part, out) = (h.send.slice(..K)?, h.recv.slice(..K)?);
    r.comm
        .all_reduce(&part, &out, ReduceOp::Sum, &mut r.stream)?;
    let ranks = n * (n + 1) / 2;
    let want: Vec<f32> = (0..K).map(|i| (ranks * (i + 1)) as f32).collect();
    check(r, &out, &want, "AllReduce")
}

/// Element `i` of the block rank `from` sends rank `to`.
fn block_value(from: usize, to: usize, i: usize) -> f32 {
    (from * 100_000 + to * 1000 + i) as f32
}

/// Block `to` of each rank's send goes to rank `to`.
fn exchange(r: &mut Rank, h: &Halves<'_>) -> Res<()> {
    let (me, n) = (r.rank as usize, r.size as usize);
    let mine: Vec<f32> = (0..n * K).map(|j| block_value(me, j / K, j % K)).collect();
    h.send.write_slice(&mine, 0)?;
    r.comm.all_to_all(&h.send, &h.recv, &mut r.stream)?;
    let want: Vec<f32> = (0..n * K).map(|j| block_value(j / K, me, j % K)).collect();
    check(r, &h.recv, &want, "AllToAll")
}

/// A rank of collective `which`: one window holds both halves; the window is closed once
/// every rank is done.
pub fn rank_role(which: &str) -> Res<()> {
    let mut r = Rank::join(&format!("npu_{which}"))?;
    let n = r.size as usize;
    let buf = DeviceBuffer::new(&r.dev, 2 * n * K * 4)?;
    let win = SymWindow::register_mapping(&r.comm, buf.mapping())?;
    let all = buf.mapping().typed::<f32>()?;
    let h = Halves {
        send: all.slice(..n * K)?,
        recv: all.slice(n * K..2 * n * K)?,
    };
    h.recv.fill_zero()?;
    match which {
        "all_gather" => gather(&mut r, &h)?,
        "reduce_scatter" => scatter(&mut r, &h)?,
        "all_reduce" => reduce(&mut r, &h)?,
        "all_to_all" => exchange(&mut r, &h)?,
        other => return Err(format!("no collective {other:?}").into()),
    }
    r.rdv.barrier()?;
    ensure(win.is_registered()?, "the window is no longer registered")?;
    win.close()?;
    r.finish()
}
