//! One-sided puts, gets and signals through an HCCL symmetric window's peer pointers, one
//! rank process per listed device.

use ascend::fabric::Need;
use ascend::hccl::SymWindow;
use ascend::prelude::*;
use ascend::{DeviceBuffer, Feature, WaitCmp};

use crate::ctx::{ensure, run_ranks, Ctx, Rank, Res, STEP};
use crate::harness::Outcome;
use crate::skip_if;

/// Elements of each put or get.
const K: usize = 512;
/// Bytes of each rank's window (its tail holds the signal words).
const WINDOW: usize = 2 << 20;

/// What rank `rank` puts in round `round`.
fn values(rank: u32, round: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| rank << 24 | round << 16 | i)
        .collect()
}

fn onesided(ctx: &Ctx, role: &str) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Hccl)));
    skip_if!(ctx.lacks(Need::Mem(Feature::PeerPointers)));
    skip_if!(ctx.lacks_devices(2));
    run_ranks(role, &ctx.devices)?;
    Ok(Outcome::Pass)
}

/// Around a ring of every listed device: each rank puts into the next rank's window with a
/// signal, and waits for the previous rank's; then a put and a separate signal with a value
/// waited for exactly.
pub fn put_signal(ctx: &Ctx) -> Res<Outcome> {
    onesided(ctx, "put-signal")
}

/// Each rank reads the previous rank's window with a one-sided get.
pub fn get(ctx: &Ctx) -> Res<Outcome> {
    onesided(ctx, "get")
}

/// A rank's window with its signals cleared on every rank before anyone signals.
fn window(r: &mut Rank) -> Res<(DeviceBuffer, SymWindow)> {
    let buf = DeviceBuffer::new(&r.dev, WINDOW)?;
    let win = SymWindow::register_mapping(&r.comm, buf.mapping())?;
    win.reset_signals()?;
    ensure(
        win.data_len() >= 2 * K * 4,
        "the window's data area is too small",
    )?;
    r.rdv.barrier()?;
    Ok((buf, win))
}

/// The data area's first `2 K` elements, read by the host.
fn received(win: &SymWindow) -> Res<Vec<u32>> {
    let map = win.mapping();
    let v = map.typed::<u32>()?.slice(..2 * K)?.read_to_vec()?;
    Ok(v)
}

pub fn put_signal_role() -> Res<()> {
    let mut r = Rank::join("npu_put_signal")?;
    let (me, n) = (r.rank, r.size);
    let (prev, next) = ((me + n - 1) % n, (me + 1) % n);
    let (_buf, win) = window(&mut r)?;
    let src = DeviceBuffer::new(&r.dev, 2 * K * 4)?;
    let all = src.mapping().typed::<u32>()?;
    let (first, second) = (all.slice(..K)?, all.slice(K..2 * K)?);
    first.write_slice(&values(me, 1, K), 0)?;
    second.write_slice(&values(me, 2, K), 0)?;
    let to = win.peer::<u32>(next)?;
    r.stream.put_signal(&to, &first, 0, 0, 1)?;
    r.stream.wait_signal(&win, 0, WaitCmp::Geq, 1)?;
    r.comm.synchronize_watched(&mut r.stream, STEP)?;
    let got = received(&win)?;
    ensure(
        got[..K] == values(prev, 1, K)[..],
        format!("rank {me}: the put of rank {prev}"),
    )?;
    ensure(win.signal_value(0)? == 1, format!("rank {me}: signal 0"))?;
    r.stream.put(&to, &second, K)?;
    r.stream.signal(&to, 1, 7)?;
    r.stream.wait_signal(&win, 1, WaitCmp::Eq, 7)?;
    r.comm.synchronize_watched(&mut r.stream, STEP)?;
    let got = received(&win)?;
    ensure(
        got[K..] == values(prev, 2, K)[..],
        format!("rank {me}: the second put of rank {prev}"),
    )?;
    r.rdv.barrier()?;
    drop(to); // a peer view holds the window
    win.close()?;
    r.finish()
}

pub fn get_role() -> Res<()> {
    let mut r = Rank::join("npu_get")?;
    let (me, n) = (r.rank, r.size);
    let prev = (me + n - 1) % n;
    let (_buf, win) = window(&mut r)?;
    let map = win.mapping();
    map.typed::<u32>()?
        .slice(..K)?
        .write_slice(&values(me, 3, K), 0)?;
    r.rdv.barrier()?;
    let dst = DeviceBuffer::new(&r.dev, 2 * K * 4)?;
    let all = dst.mapping().typed::<u32>()?;
    let (theirs, own) = (all.slice(..K)?, all.slice(K..2 * K)?);
    r.stream.get(&win.peer::<u32>(prev)?, 0, &theirs)?;
    r.stream.get(&win.peer::<u32>(me)?, 0, &own)?;
    r.stream.synchronize_timeout(STEP)?;
    ensure(
        theirs.read_to_vec()? == values(prev, 3, K),
        format!("rank {me}: the get from rank {prev}"),
    )?;
    ensure(
        own.read_to_vec()? == values(me, 3, K),
        format!("rank {me}: the get from itself"),
    )?;
    r.rdv.barrier()?;
    win.close()?;
    r.finish()
}
