//! HIXL's client/server C API (HixlCS) between two processes: a server process offers a
//! tagged HBM buffer; this process's client finds it by tag, puts into it (checked by the
//! server), gets from it asynchronously (checked here), and is refused an unknown tag and a
//! range past the buffer.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use ascend::cs::{Client, Endpoint, Error, HixlCode, Op, Protocol, Server};
use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::DeviceBuffer;
use ascend_testkit::pattern;

use crate::ctx::{child_device, ensure, same_bytes, say, serve, Commands, Ctx, Peer, Res, DEVICE};
use crate::harness::Outcome;
use crate::skip_if;

const LEN: usize = 2 << 20;
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const T: Duration = Duration::from_secs(30);
/// How many free ports the server tries: another process may bind the one it picked before
/// the server listens on it.
const PORT_ATTEMPTS: u32 = 5;

/// An HCCS endpoint on `device`.
fn endpoint(device: i32) -> Res<Endpoint> {
    Ok(Endpoint::new(Protocol::Hccs).on_device(u32::try_from(device)?))
}

/// Whether `e` is how listening on a port another process holds fails: `HIXL_FAILED` from
/// `HixlCSServerListen`. That is also HIXL's generic failure, so a failure of another cause
/// is tried again too, and reported after the last attempt.
fn port_taken(e: &Error) -> bool {
    matches!(e, Error::Hixl { api: "HixlCSServerListen", code, .. } if *code == HixlCode::FAILED)
}

/// The server: a zeroed HBM buffer tagged `kv`, listening on a free loopback port (another
/// one when the port was taken meanwhile, up to [`PORT_ATTEMPTS`]); serves `FILL kv <seed>`
/// and `CHECK kv <seed>` until its stdin ends.
pub fn server_role() -> Res<()> {
    let dev = child_device()?;
    let buf = Arc::new(DeviceBuffer::new(&dev, LEN)?);
    buf.fill(0)?;
    let mut attempt = 1;
    loop {
        let port = ascend_launch::free_port()?;
        let server = Server::new(&dev, LOCALHOST, port, &[endpoint(dev.id())?])?;
        let reg = server.register("kv", buf.clone())?;
        match server.listen(16) {
            Err(e) if port_taken(&e) && attempt < PORT_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e.into()),
            Ok(()) => {
                serve_kv(port, &buf)?;
                drop(reg);
                server.close()?;
                return Ok(());
            }
        }
    }
}

/// Says `READY <port>`, then answers the parent's commands on `buf` (as `kv`) until its
/// stdin ends.
fn serve_kv(port: u16, buf: &DeviceBuffer) -> Res<()> {
    let commands = Commands::open();
    say(&format!("READY {port}"));
    while let Some(line) = commands.next()? {
        say(&serve(&line, &[("kv", buf.slice(..LEN)?)])?);
    }
    Ok(())
}

/// Put in two halves, checked by the server; the server refills; an asynchronous get of all
/// of it, checked here.
pub fn put_get(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::HixlCs));
    let far = ctx.other_device();
    let mut server = Peer::start("hixl-server", &[(DEVICE, far.to_string())])?;
    let port: u16 = server.expect("READY")?.parse()?;
    let dev = ctx.device()?;
    let client = Client::new(&dev, LOCALHOST, port, &endpoint(dev.id())?, &endpoint(far)?)?;
    client.connect(T)?;
    let list = client.remote_memory(T)?;
    let kv = list.get("kv")?;
    ensure(
        kv.len() >= LEN,
        format!("the server's kv is {} bytes", kv.len()),
    )?;
    match list.get("nothing") {
        Err(Error::UnknownTag { .. }) => {}
        other => return Err(format!("an unknown tag: {other:?}").into()),
    }
    let (src, dst) = (
        Arc::new(DeviceBuffer::new(&dev, LEN)?),
        Arc::new(DeviceBuffer::new(&dev, LEN)?),
    );
    src.write_from(&pattern(21, LEN), 0)?;
    dst.fill(0)?;
    let (src_reg, dst_reg) = (client.register(src.clone())?, client.register(dst.clone())?);
    let half = LEN / 2;
    let halves = [
        Op::new(&src_reg, 0, kv, 0, half),
        Op::new(&src_reg, half, kv, half, half),
    ];
    client.put(&halves, T)?;
    let answer = server.ask("CHECK kv 21", "SAME")?;
    ensure(
        answer == "yes",
        format!("the server's buffer after the put: {answer}"),
    )?;
    server.ask("FILL kv 22", "FILLED")?;
    let mut done = client.get_async(&[Op::new(&dst_reg, 0, kv, 0, LEN)])?;
    done.wait(T)?;
    drop(done);
    same_bytes(&dst.to_vec()?[..LEN], &pattern(22, LEN), "the get")?;
    match client.put(&[Op::new(&src_reg, 0, kv, kv.len() - 8, 16)], T) {
        Err(Error::RemoteOutOfBounds { index: 0, .. }) => {}
        other => return Err(format!("a put past the server's buffer: {other:?}").into()),
    }
    drop((src_reg, dst_reg));
    client.close()?;
    server.finish()?;
    Ok(Outcome::Pass)
}
