//! The Fabric Mem engine over two processes: each direction, prepared lists, cancellation,
//! and a peer killed under it.

use std::time::{Duration, Instant};

use ascend::fabric::{Engine, EngineOptions, Error, Need, SegmentRef, TransferDesc, TransferOp};
use ascend::prelude::*;
use ascend::Runtime;

use crate::ctx::{devices, ensure, pattern, read_line, Ctx, Peer, Res};
use crate::harness::Outcome;
use crate::need;

const LEN: usize = 8 << 20;
const BLOCK: usize = 256 << 10;
const T: Duration = Duration::from_secs(30);

fn options() -> Res<EngineOptions> {
    Ok(EngineOptions::builder()
        .task_stream_num(2)
        .pool_capacity(4 << 30)
        .build()?)
}

/// The peer: an engine with `LEN` bytes of HBM named `dev` and of host DRAM named `host`,
/// until its stdin ends.
pub fn peer_role() -> Res<()> {
    let rt = Runtime::from_env_or_emulator()?;
    let list = devices(&rt)?;
    let dev = rt.device(*list.get(1).unwrap_or(&list[0]))?;
    let port = ascend_testkit::free_port();
    let engine = Engine::new(&dev, &format!("127.0.0.1:{port}"), options()?)?;
    let (d, h) = (engine.alloc_device(LEN)?, engine.alloc_host(LEN)?);
    d.fill(0)?;
    h.fill(0)?;
    let _rd = engine.register_named(&d, "dev")?;
    let _rh = engine.register_named(&h, "host")?;
    println!("READY 127.0.0.1:{port}");
    read_line();
    Ok(())
}

/// Our side: an engine connected to a new peer, with local HBM and host DRAM registered.
struct Side {
    peer: Peer,
    addr: String,
    engine: Engine,
    local: ascend::DeviceBuffer,
    back: ascend::DeviceBuffer,
    reg: ascend::fabric::Registration,
    back_reg: ascend::fabric::Registration,
}

fn side(ctx: &Ctx) -> Res<Side> {
    let peer = Peer::start("engine-peer", &[("ASCEND_TEST_DEVICES", ctx.devices_var())])?;
    let addr = peer.expect("READY")?;
    let engine = Engine::new(&ctx.dev()?, "127.0.0.1", options()?)?;
    let (local, back) = (engine.alloc_device(LEN)?, engine.alloc_device(LEN)?);
    let (reg, back_reg) = (engine.register(&local)?, engine.register(&back)?);
    engine.connect(&addr, T)?;
    Ok(Side {
        peer,
        addr,
        engine,
        local,
        back,
        reg,
        back_reg,
    })
}

impl Side {
    /// Writes `data` from local HBM into the peer's segment `name`, reads it back into the
    /// second local buffer, and checks it.
    fn write_and_read(&self, name: &str, seed: u8) -> Res<()> {
        let seg = self
            .engine
            .remote_segment(&self.addr, SegmentRef::from(name))?;
        let data = pattern(seed, LEN);
        self.local.write_from(&data, 0)?;
        self.back.fill(0)?;
        let w = TransferDesc::between(&self.reg, 0, &seg, 0, LEN)?;
        let r = TransferDesc::between(&self.back_reg, 0, &seg, 0, LEN)?;
        self.engine
            .transfer_sync(&self.addr, TransferOp::Write, &[w], T)?;
        self.engine
            .transfer_sync(&self.addr, TransferOp::Read, &[r], T)?;
        ensure(
            self.back.to_vec()?[..LEN] == data[..],
            format!("{name}: the bytes read back"),
        )
    }
}

/// D2rD (write to the peer's HBM), D2rH (to its host DRAM) and rH2D (a read of its host
/// DRAM into our HBM), every byte checked.
pub fn directions(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::FabricMem);
    let s = side(ctx)?;
    s.write_and_read("dev", 1)?;
    s.write_and_read("host", 2)?;
    s.engine.disconnect(&s.addr, T)?;
    s.peer.finish()?;
    Ok(None)
}

/// Both sides as prepared block lists; a reversed write of every block, read back straight.
pub fn prepared_lists(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::FabricMem);
    let s = side(ctx)?;
    let local = s.engine.prepare_local(&s.reg, BLOCK)?;
    let back = s.engine.prepare_local(&s.back_reg, BLOCK)?;
    let remote = s
        .engine
        .prepare_remote(&s.addr, &[SegmentRef::from("dev")], BLOCK)?;
    let n = LEN / BLOCK;
    let data = pattern(3, LEN);
    s.local.write_from(&data, 0)?;
    s.back.fill(0)?;
    let rev: Vec<(usize, usize)> = (0..n).map(|i| (i, n - 1 - i)).collect();
    s.engine
        .transfer_prepared_sync(TransferOp::Write, &local, &remote, &rev, T)?;
    let straight: Vec<(usize, usize)> = (0..n).map(|i| (i, i)).collect();
    s.engine
        .transfer_prepared_sync(TransferOp::Read, &back, &remote, &straight, T)?;
    let got = s.back.to_vec()?;
    for i in 0..n {
        let (want, at) = (&data[i * BLOCK..(i + 1) * BLOCK], n - 1 - i);
        ensure(
            &got[at * BLOCK..(at + 1) * BLOCK] == want,
            format!("block {i}"),
        )?;
    }
    s.engine.disconnect(&s.addr, T)?;
    s.peer.finish()?;
    Ok(None)
}

/// A transfer cancelled right after it is posted: either it was still running and ends as
/// `Cancelled`, or it had finished and its bytes are all there.
pub fn cancellation(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::FabricMem);
    let s = side(ctx)?;
    let seg = s.engine.remote_segment(&s.addr, SegmentRef::from("dev"))?;
    let descs: Vec<TransferDesc> = (0..LEN / 4096)
        .map(|i| TransferDesc::between(&s.reg, i * 4096, &seg, i * 4096, 4096))
        .collect::<Result<_, _>>()?;
    let req = s
        .engine
        .transfer_async(&s.addr, TransferOp::Write, &descs)?;
    let was_running = req.cancel();
    match (was_running, req.wait(T)) {
        (true, Err(Error::Cancelled { .. })) => {}
        (false, Ok(())) => {}
        (running, r) => {
            return Err(format!("cancel said {running}, then the wait gave {r:?}").into())
        }
    }
    drop(req);
    // The channel still works after a cancellation.
    s.write_and_read("dev", 4)?;
    s.engine.disconnect(&s.addr, T)?;
    s.peer.finish()?;
    Ok(None)
}

/// The peer SIGKILLed after a verified transfer: transfers to it fail with `PeerLost` (or,
/// once the engine has dropped the channel, `NotConnected`), within the heartbeat's bound.
pub fn killed_peer(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::FabricMem);
    let mut s = side(ctx)?;
    s.write_and_read("dev", 5)?;
    let seg = s.engine.remote_segment(&s.addr, SegmentRef::from("dev"))?;
    let w = TransferDesc::between(&s.reg, 0, &seg, 0, LEN)?;
    s.peer.kill()?;
    let t0 = Instant::now();
    loop {
        match s.engine.transfer_sync(&s.addr, TransferOp::Write, &[w], T) {
            Err(Error::PeerLost { .. } | Error::NotConnected { .. }) => return Ok(None),
            Err(e) => return Err(format!("a transfer to the killed peer failed with {e}").into()),
            Ok(()) if t0.elapsed() < Duration::from_secs(60) => continue,
            Ok(()) => return Err("transfers to the killed peer kept succeeding for 60 s".into()),
        }
    }
}
