//! HIXL client/server (HixlCS C API) round trip.
//!
//! A server registers a device buffer under the tag `kv` and listens on loopback; a client
//! connects, finds the buffer by tag, puts a pattern into it (one-sided), gets it back into a
//! second local buffer and verifies it. The server then checks its own buffer holds the pattern.
//!
//! By default the server is a second process (this example re-run with the argument `server`);
//! `--threads` runs both sides in one process. Exits 0 only when every byte matches.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ascend_cs::{Client, Endpoint, Op, Protocol, Server};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Runtime};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const LEN: usize = 2 << 20;
const TAG: &str = "kv";
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn pattern() -> Vec<u8> {
    (0..LEN)
        .map(|i| (i.wrapping_mul(131) >> 3) as u8 ^ 0x5a)
        .collect()
}

fn endpoint() -> Endpoint {
    Endpoint::new(Protocol::Hccs).on_device(0)
}

fn free_port() -> Res<u16> {
    Ok(TcpListener::bind((LOCALHOST, 0))?.local_addr()?.port())
}

fn open(role: &str) -> Res<Runtime> {
    let rt = Runtime::from_env_or_emulator()?;
    let hixl = ascend_cs::table(&rt)?;
    println!(
        "[{role}] ACL backend: {}; HIXL: {}",
        rt.backend(),
        hixl.source().describe()
    );
    Ok(rt)
}

/// Serves `port` until `done` says the client finished; returns whether the server buffer
/// holds the pattern.
fn serve(rt: &Runtime, port: u16, ready: impl FnOnce(), done: impl FnOnce()) -> Res<bool> {
    let dev = rt.device(0)?;
    let buf = Arc::new(DeviceBuffer::new(&dev, LEN)?);
    buf.fill(0)?;
    let server = Server::new(&dev, LOCALHOST, port, &[endpoint()])?;
    let reg = server.register(TAG, buf.clone())?;
    server.listen(16)?;
    println!(
        "[server] listening on {LOCALHOST}:{port}; \"{TAG}\" = {} bytes of device memory",
        reg.len()
    );
    ready();
    done();
    let ok = buf.to_vec()? == pattern();
    println!("[server] my buffer holds the client's pattern: {ok}");
    drop(reg);
    drop(server);
    Ok(ok)
}

fn client(rt: &Runtime, port: u16) -> Res<bool> {
    let dev = rt.device(0)?;
    let client = Client::new(&dev, LOCALHOST, port, &endpoint(), &endpoint())?;
    client.connect(Duration::from_secs(10))?;
    let list = client.remote_memory(Duration::from_secs(5))?;
    let tags: Vec<&str> = list.iter().map(|m| m.tag()).collect();
    let kv = list.get(TAG)?;
    println!(
        "[client] connected; server memory {tags:?}; \"{TAG}\" at {:#x}, {} bytes",
        kv.addr(),
        kv.len()
    );
    let src = Arc::new(DeviceBuffer::new(&dev, LEN)?);
    let dst = Arc::new(DeviceBuffer::new(&dev, LEN)?);
    let want = pattern();
    src.write_from(&want, 0)?;
    dst.fill(0)?;
    let src_reg = client.register(src)?;
    let dst_reg = client.register(dst.clone())?;

    // Put in two halves (one batch, two descriptors), then get it back asynchronously.
    let half = LEN / 2;
    client.put(
        &[
            Op::new(&src_reg, 0, kv, 0, half),
            Op::new(&src_reg, half, kv, half, half),
        ],
        Duration::from_secs(5),
    )?;
    let mut done = client.get_async(&[Op::new(&dst_reg, 0, kv, 0, LEN)])?;
    done.wait(Duration::from_secs(5))?;
    drop(done);
    let got = dst.to_vec()?;
    let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    println!("[client] put {LEN} bytes, got them back: {bad} mismatches");
    drop((src_reg, dst_reg));
    client.close()?;
    Ok(bad == 0)
}

/// Child process: serve until the parent closes our stdin.
fn server_process(port: u16) -> Res<bool> {
    let rt = open("server")?;
    serve(
        &rt,
        port,
        || {
            println!("ready");
            let _ = std::io::stdout().flush();
        },
        || {
            let mut s = String::new();
            let _ = std::io::stdin().lock().read_line(&mut s);
        },
    )
}

fn two_processes() -> Res<bool> {
    let rt = open("client")?;
    let port = free_port()?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["server", &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(child.stdout.take().ok_or("no child stdout")?);
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            return Err("the server process exited before it was ready".into());
        }
        if line.trim() == "ready" {
            break;
        }
        print!("{line}");
    }
    println!("[client] server process {} is ready", child.id());
    let ok = client(&rt, port);
    drop(child.stdin.take()); // tells the server we are done
    for l in out.lines() {
        println!("{}", l?);
    }
    let status = child.wait()?;
    println!("[client] server process exited: {status}");
    Ok(ok? && status.success())
}

fn threads() -> Res<bool> {
    let rt = open("both")?;
    let port = free_port()?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let srt = rt.clone();
    let server = std::thread::spawn(move || {
        serve(
            &srt,
            port,
            move || {
                let _ = ready_tx.send(());
            },
            move || {
                let _ = done_rx.recv();
            },
        )
        .map_err(|e| e.to_string())
    });
    ready_rx.recv()?;
    let ok = client(&rt, port);
    drop(done_tx);
    let served = server.join().map_err(|_| "server thread panicked")??;
    Ok(ok? && served)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let who = if args.first().map(String::as_str) == Some("server") {
        "[server] "
    } else {
        ""
    };
    let r = match args.first().map(String::as_str) {
        Some("server") => match args.get(1).and_then(|p| p.parse().ok()) {
            Some(port) => server_process(port),
            None => Err("usage: hixl_cs_roundtrip server <port>".into()),
        },
        Some("--threads") => threads(),
        _ => two_processes(),
    };
    match r {
        Ok(true) => {
            println!("{who}hixl_cs_roundtrip: OK");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("{who}hixl_cs_roundtrip: MISMATCH");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{who}hixl_cs_roundtrip: {e}");
            ExitCode::FAILURE
        }
    }
}
