//! HIXL's client/server C API (HixlCS) between two processes: a tagged server buffer found
//! by the client, a put and an asynchronous get, every byte checked on both sides.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use ascend::cs::{Client, Endpoint, Op, Protocol, Server};
use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::{DeviceBuffer, Runtime};

use crate::ctx::{devices, ensure, pattern, read_line, Ctx, Peer, Res};
use crate::harness::Outcome;
use crate::need;

const LEN: usize = 2 << 20;
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const T: Duration = Duration::from_secs(10);

fn endpoint(device: i32) -> Endpoint {
    Endpoint::new(Protocol::Hccs).on_device(u32::try_from(device).unwrap_or(0))
}

/// The server: a zeroed HBM buffer tagged `kv`; on `check` says whether it holds the pattern.
pub fn server_role() -> Res<()> {
    let rt = Runtime::from_env_or_emulator()?;
    let id = devices(&rt)?[0];
    let dev = rt.device(id)?;
    let buf = Arc::new(DeviceBuffer::new(&dev, LEN)?);
    buf.fill(0)?;
    let port = ascend_testkit::free_port();
    let server = Server::new(&dev, LOCALHOST, port, &[endpoint(id)])?;
    let _reg = server.register("kv", buf.clone())?;
    server.listen(16)?;
    println!("READY {port}");
    while let Some(line) = read_line() {
        if line == "check" {
            let same = buf.to_vec()?[..LEN] == pattern(21, LEN)[..];
            println!("CHECKED {}", if same { "ok" } else { "bad" });
        }
    }
    Ok(())
}

pub fn put_get(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::HixlCs);
    let mut server = Peer::start("hixl-server", &[("ASCEND_TEST_DEVICES", ctx.devices_var())])?;
    let port: u16 = server.expect("READY")?.parse()?;
    let dev = ctx.dev()?;
    let client = Client::new(
        &dev,
        LOCALHOST,
        port,
        &endpoint(dev.id()),
        &endpoint(dev.id()),
    )?;
    client.connect(T)?;
    let list = client.remote_memory(T)?;
    let kv = list.get("kv")?;
    let src = Arc::new(DeviceBuffer::new(&dev, LEN)?);
    let dst = Arc::new(DeviceBuffer::new(&dev, LEN)?);
    let want = pattern(21, LEN);
    src.write_from(&want, 0)?;
    dst.fill(0)?;
    let (src_reg, dst_reg) = (client.register(src)?, client.register(dst.clone())?);
    client.put(&[Op::new(&src_reg, 0, kv, 0, LEN)], T)?;
    let mut done = client.get_async(&[Op::new(&dst_reg, 0, kv, 0, LEN)])?;
    done.wait(T)?;
    drop(done);
    ensure(dst.to_vec()?[..LEN] == want[..], "the bytes got back")?;
    server.say("check")?;
    ensure(
        server.expect("CHECKED")? == "ok",
        "the server's buffer after the put",
    )?;
    drop((src_reg, dst_reg));
    client.close().map_err(|e| e.to_string())?;
    server.finish()?;
    Ok(None)
}
