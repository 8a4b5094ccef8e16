//! The Fabric Mem engine between two processes: this one's engine connects to a peer
//! process that offers HBM (`dev`) and host DRAM (`host`). Each direction (D2rD, D2rH, rH2D)
//! is checked on the side that receives; then prepared block lists, cancellation, and a
//! peer killed under the engine.

use std::time::Duration;

use ascend::fabric::{
    Engine, EngineOptions, Error, LocalBlocks, Need, Registration, RemoteBlocks, SegmentRef,
    TransferDesc, TransferOp, TransferStatus,
};
use ascend::prelude::*;
use ascend::{Device, DeviceBuffer};
use ascend_testkit::pattern;

use crate::ctx::{
    child_device, ensure, same_bytes, say, serve, Commands, Ctx, Peer, Res, DEVICE, STEP,
};
use crate::harness::Outcome;
use crate::skip_if;

/// Bytes of each side's buffers.
const LEN: usize = 8 << 20;
/// Block size of the prepared lists.
const BLOCK: usize = 256 << 10;
/// A transfer's timeout.
const T: Duration = Duration::from_secs(30);

/// An engine listening on a free loopback port (another port if that one was taken meanwhile).
fn listening(dev: &Device) -> Res<Engine> {
    let mut last = None;
    for _ in 0..5 {
        let addr = format!("127.0.0.1:{}", ascend_launch::free_port()?);
        match Engine::new(dev, &addr, EngineOptions::default()) {
            Err(e @ Error::Listen { .. }) => last = Some(e),
            r => return Ok(r?),
        }
    }
    Err(last.map_or_else(|| "no port".into(), |e| e.into()))
}

/// The peer: HBM registered as `dev`, host DRAM as `host`, both zeroed; `FILL <name> <seed>`
/// writes pattern `seed` over one, `CHECK <name> <seed>` says whether it holds it.
pub fn peer_role() -> Res<()> {
    let dev = child_device()?;
    let engine = listening(&dev)?;
    let (hbm, host) = (engine.alloc_device(LEN)?, engine.alloc_host(LEN)?);
    hbm.fill(0)?;
    host.fill(0)?;
    let _regs = (
        engine.register_named(&hbm, "dev")?,
        engine.register_named(&host, "host")?,
    );
    let commands = Commands::open();
    say(&format!("READY {}", engine.local_addr()));
    while let Some(line) = commands.next()? {
        let answer = serve(
            &line,
            &[("dev", hbm.slice(..LEN)?), ("host", host.slice(..LEN)?)],
        )?;
        say(&answer);
    }
    Ok(())
}

/// Our side: an engine connected to a new peer process, with two HBM buffers registered.
struct Side {
    peer: Peer,
    addr: String,
    engine: Engine,
    src: DeviceBuffer,
    dst: DeviceBuffer,
    src_reg: Registration,
    dst_reg: Registration,
}

impl Side {
    fn open(ctx: &Ctx) -> Res<Side> {
        let mut peer = Peer::start("engine-peer", &[(DEVICE, ctx.other_device().to_string())])?;
        let addr = peer.expect("READY")?;
        let engine = Engine::new(&ctx.device()?, "127.0.0.1", EngineOptions::default())?;
        let (src, dst) = (engine.alloc_device(LEN)?, engine.alloc_device(LEN)?);
        let (src_reg, dst_reg) = (engine.register(&src)?, engine.register(&dst)?);
        engine.connect(&addr, T)?;
        Ok(Side {
            peer,
            addr,
            engine,
            src,
            dst,
            src_reg,
            dst_reg,
        })
    }

    /// One descriptor over all of the peer's segment `name`, from `reg`.
    fn whole(&self, reg: &Registration, name: &str) -> Res<TransferDesc> {
        let seg = self.engine.remote_segment(&self.addr, name)?;
        Ok(TransferDesc::between(reg, 0, &seg, 0, LEN)?)
    }

    /// Writes pattern `seed` from our HBM into the peer's `name`; the peer checks it.
    fn write(&mut self, name: &str, seed: u8) -> Res<()> {
        self.src.write_from(&pattern(seed, LEN), 0)?;
        let d = self.whole(&self.src_reg, name)?;
        self.engine
            .transfer_sync(&self.addr, TransferOp::Write, &[d], T)?;
        let answer = self.peer.ask(&format!("CHECK {name} {seed}"), "SAME")?;
        ensure(
            answer == "yes",
            format!("after a write into the peer's {name}: {answer}"),
        )
    }

    /// The peer fills its `name` with pattern `seed`; we read it into our HBM and check it.
    fn read(&mut self, name: &str, seed: u8) -> Res<()> {
        self.peer.ask(&format!("FILL {name} {seed}"), "FILLED")?;
        self.dst.fill(0)?;
        let d = self.whole(&self.dst_reg, name)?;
        self.engine
            .transfer_sync(&self.addr, TransferOp::Read, &[d], T)?;
        same_bytes(
            &self.dst.to_vec()?,
            &pattern(seed, LEN),
            &format!("read from the peer's {name}"),
        )
    }

    /// Disconnects and lets the peer exit.
    fn close(self) -> Res<()> {
        self.engine.disconnect(&self.addr, T)?;
        self.peer.finish()
    }
}

/// HBM to the peer's HBM, checked by the peer; and read back the other way.
pub fn d2rd(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::FabricMem));
    let mut s = Side::open(ctx)?;
    s.write("dev", 1)?;
    s.read("dev", 2)?;
    s.close()?;
    Ok(Outcome::Pass)
}

/// HBM to the peer's host DRAM, checked by the peer.
pub fn d2rh(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::FabricMem));
    let mut s = Side::open(ctx)?;
    s.write("host", 3)?;
    s.close()?;
    Ok(Outcome::Pass)
}

/// The peer's host DRAM read into our HBM.
pub fn rh2d(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::FabricMem));
    let mut s = Side::open(ctx)?;
    s.read("host", 4)?;
    s.close()?;
    Ok(Outcome::Pass)
}

/// Our source and the peer's HBM as prepared block lists.
fn lists(s: &Side) -> Res<(LocalBlocks, LocalBlocks, RemoteBlocks)> {
    let src = s.engine.prepare_local(&s.src_reg, BLOCK)?;
    let dst = s.engine.prepare_local(&s.dst_reg, BLOCK)?;
    let remote = s
        .engine
        .prepare_remote(&s.addr, &[SegmentRef::from("dev")], BLOCK)?;
    Ok((src, dst, remote))
}

/// Every block written to the peer in reverse order, read back in order, each block checked
/// where it should be; a pair past the end of a list is refused naming it.
pub fn prepared_lists(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::FabricMem));
    let s = Side::open(ctx)?;
    let (src, dst, remote) = lists(&s)?;
    let n = LEN / BLOCK;
    ensure(
        src.len() == n && remote.len() == n,
        format!("{} and {} blocks", src.len(), remote.len()),
    )?;
    let data = pattern(5, LEN);
    s.src.write_from(&data, 0)?;
    s.dst.fill(0)?;
    let reversed: Vec<(usize, usize)> = (0..n).map(|i| (i, n - 1 - i)).collect();
    s.engine
        .transfer_prepared_sync(TransferOp::Write, &src, &remote, &reversed, T)?;
    let straight: Vec<(usize, usize)> = (0..n).map(|i| (i, i)).collect();
    s.engine
        .transfer_prepared_sync(TransferOp::Read, &dst, &remote, &straight, T)?;
    let got = s.dst.to_vec()?;
    for i in 0..n {
        let j = n - 1 - i;
        same_bytes(
            &got[j * BLOCK..(j + 1) * BLOCK],
            &data[i * BLOCK..(i + 1) * BLOCK],
            &format!("block {i}"),
        )?;
    }
    match s
        .engine
        .transfer_prepared_sync(TransferOp::Write, &src, &remote, &[(0, 0), (0, n)], T)
    {
        Err(Error::BlockIndex { index: 1, .. }) => {}
        other => return Err(format!("a pair past the remote list: {other:?}").into()),
    }
    s.close()?;
    Ok(Outcome::Pass)
}

/// Descriptors of 4 KiB covering all of our source, into the peer's HBM.
fn small_pieces(s: &Side) -> Res<Vec<TransferDesc>> {
    let seg = s.engine.remote_segment(&s.addr, "dev")?;
    (0..LEN / 4096)
        .map(|i| {
            Ok(TransferDesc::between(
                &s.src_reg,
                i * 4096,
                &seg,
                i * 4096,
                4096,
            )?)
        })
        .collect()
}

/// A transfer of many small copies cancelled as soon as it is posted: it either was still
/// running and then reports `Cancelled`, or had finished and keeps its success (its bytes
/// all there). A finished transfer cannot be cancelled. The channel works afterwards.
pub fn cancellation(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::FabricMem));
    let mut s = Side::open(ctx)?;
    let descs = small_pieces(&s)?;
    s.src.write_from(&pattern(6, LEN), 0)?;
    let req = s
        .engine
        .transfer_async(&s.addr, TransferOp::Write, &descs)?;
    let was_running = req.cancel();
    match (was_running, req.wait(T)) {
        (true, Err(Error::Cancelled { .. })) => {}
        (false, Ok(())) => {
            let answer = s.peer.ask("CHECK dev 6", "SAME")?;
            ensure(
                answer == "yes",
                format!("an uncancelled transfer: {answer}"),
            )?;
        }
        (running, r) => return Err(format!("cancel() said {running}, then wait gave {r:?}").into()),
    }
    ensure(
        req.status() != TransferStatus::Waiting,
        "a cancelled transfer is still waiting",
    )?;
    drop(req);
    let done = s
        .engine
        .transfer_async(&s.addr, TransferOp::Write, &descs)?;
    done.wait(T)?;
    ensure(!done.cancel(), "a finished transfer was cancelled")?;
    ensure(
        done.status() == TransferStatus::Completed,
        "a finished transfer's status",
    )?;
    s.write("dev", 7)?;
    s.close()?;
    Ok(Outcome::Pass)
}

/// The peer SIGKILLed with a transfer in flight: that transfer completes or ends with
/// `PeerLost`; the engine drops the peer; a prepared list of it then ends with `PeerLost`
/// and a plain transfer finds no channel.
pub fn killed_peer(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::FabricMem));
    let mut s = Side::open(ctx)?;
    s.write("dev", 8)?;
    let (src, _, remote) = lists(&s)?;
    let descs = small_pieces(&s)?;
    let in_flight = s
        .engine
        .transfer_async(&s.addr, TransferOp::Write, &descs)?;
    s.peer.kill()?;
    match in_flight.wait(T) {
        Ok(()) | Err(Error::PeerLost { .. }) => {}
        Err(e) => return Err(format!("the transfer in flight at the kill ended with {e}").into()),
    }
    // The loss is found in the background; nothing to wait on but its result.
    ascend_testkit::wait_until("the killed peer's channel to end", STEP, || {
        !s.engine.is_connected(&s.addr)
    });
    ensure(
        !s.engine.peers().contains(&s.addr),
        "the killed peer is still listed",
    )?;
    match s
        .engine
        .transfer_prepared_sync(TransferOp::Write, &src, &remote, &[(0, 0)], T)
    {
        Err(Error::PeerLost { .. }) => {}
        other => return Err(format!("a prepared transfer to the killed peer: {other:?}").into()),
    }
    let d = TransferDesc::raw(
        s.src_reg.addr(),
        remote.block_addr(0).ok_or("no block 0")?,
        BLOCK,
    );
    match s.engine.transfer_sync(&s.addr, TransferOp::Write, &[d], T) {
        Err(Error::NotConnected { .. } | Error::PeerLost { .. }) => {}
        other => return Err(format!("a transfer to the killed peer: {other:?}").into()),
    }
    Ok(Outcome::Pass)
}
