//! The Fabric Mem seed flow: two engines, `127.0.0.1:26000` (server) and `127.0.0.1:26001`
//! (client), both started from HIXL's option map with `EnableUseFabricMem=1`.
//!
//! The server registers device memory (zeroed) and waits. The client registers a host buffer
//! filled with 0xAA and a zeroed device buffer, connects, `transfer_sync` WRITEs the host
//! buffer into the server's device memory, READs it back into its device buffer and verifies
//! it. After the client disconnects, the server checks its own device memory too.
//!
//! ```text
//! cargo run --example fabric_transfer                   # --role both: spawns the server as a second process
//! cargo run --example fabric_transfer -- --role server  # in one terminal
//! cargo run --example fabric_transfer -- --role client  # in another (retries connecting for a while)
//! ```
//! Options: `--server ADDR`, `--client ADDR`, `--size BYTES` (default 8 MiB), `--timeout SECS`
//! (server: how long to wait for a client; default 60). Exits 0 only when verified.

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use ascend::fabric::{Engine, SegmentRef, TransferDesc, TransferOp};
use ascend::prelude::*;
use ascend::Runtime;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Args {
    role: String,
    server: String,
    client: String,
    size: usize,
    timeout: Duration,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        role: "both".into(),
        server: "127.0.0.1:26000".into(),
        client: "127.0.0.1:26001".into(),
        size: 8 << 20,
        timeout: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--role" => a.role = v()?,
            "--server" => a.server = v()?,
            "--client" => a.client = v()?,
            "--size" => a.size = v()?.parse()?,
            "--timeout" => a.timeout = Duration::from_secs(v()?.parse()?),
            "-h" | "--help" => {
                println!("usage: fabric_transfer [--role both|server|client] [--server ADDR] [--client ADDR] [--size BYTES] [--timeout SECS]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {k}").into()),
        }
    }
    if a.size == 0 {
        return Err("--size must be at least 1".into());
    }
    if !["both", "server", "client"].contains(&a.role.as_str()) {
        return Err(format!("--role must be both, server or client, not {}", a.role).into());
    }
    Ok(a)
}

fn hixl_options() -> BTreeMap<String, String> {
    [
        ("EnableUseFabricMem", "1"),
        (
            "GlobalResourceConfig",
            // HIXL's host path with 4 streams (more than one needs AICPU unfold off, in
            // HIXL and here alike), in a 1 TB VA pool.
            r#"{"fabric_memory.task_stream_num": 4, "fabric_memory.max_capacity": 1, "fabric_memory.enable_aicpu_unfold": false}"#,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn server(a: &Args) -> Res<bool> {
    let rt = Runtime::from_env_or_emulator()?;
    let dev = rt.device(0)?;
    let engine = Engine::from_hixl(&dev, &a.server, &hixl_options())?;
    let mem = engine.alloc_device(a.size)?;
    mem.fill(0)?;
    let reg = engine.register(&mem)?;
    println!(
        "[server] {} on {}: device memory {:#x} ({} bytes) registered; waiting for a client",
        engine.local_addr(),
        rt.backend(),
        reg.addr(),
        reg.len()
    );
    // A client that connected before the registration saw no memory and retries; so a
    // session ending is not enough: exit once no client is connected and the memory holds what
    // a client wrote (with no session, no client is writing). A session may come and go
    // between two looks, so the memory is looked at whenever none is open: its last byte
    // first, the whole of it once that byte is written.
    let t0 = Instant::now();
    let mut was = 0;
    loop {
        let n = engine.sessions().len();
        if n > was {
            println!("[server] client connected: {:?}", engine.sessions());
        }
        if n == 0 {
            let mut last = [0u8];
            mem.read_into(&mut last, a.size - 1)?;
            if last[0] == 0xAA {
                println!("[server] client disconnected");
                let got = mem.to_vec()?;
                if got[..a.size].iter().all(|&b| b == 0xAA) {
                    println!("[server] own device memory holds 0xAA: verified");
                    return Ok(true);
                }
                println!("[server] memory only partly written; waiting for another client");
                mem.fill(0)?;
            }
        }
        was = n;
        if t0.elapsed() > a.timeout {
            println!("[server] timed out after {:?}", a.timeout);
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn client(a: &Args) -> Res<bool> {
    let rt = Runtime::from_env_or_emulator()?;
    let dev = rt.device(0)?;
    let engine = Engine::from_hixl(&dev, &a.client, &hixl_options())?;
    let host = engine.alloc_host(a.size)?;
    host.fill(0xAA)?;
    let back = engine.alloc_device(a.size)?;
    back.fill(0)?;
    let host_reg = engine.register(&host)?;
    let back_reg = engine.register(&back)?;
    println!(
        "[client] {}: host buffer {:p} filled with 0xAA, device buffer {:p} zeroed",
        engine.local_addr(),
        host.as_raw(),
        back.as_raw()
    );
    // Retry for a while: the server may not be up yet, or not have registered its memory.
    let t0 = Instant::now();
    let remote = loop {
        let err = match engine.connect(&a.server, Duration::from_secs(1)) {
            Ok(()) => {
                let segs = engine.remote_segments(&a.server).unwrap_or_default();
                println!("[client] connected to {}; it offers {segs:x?}", a.server);
                if let Ok(s) = engine.remote_segment(&a.server, SegmentRef::Index(0)) {
                    break s;
                }
                engine.disconnect(&a.server, Duration::from_secs(1))?;
                "the server offers no memory yet".to_string()
            }
            Err(e) => e.to_string(),
        };
        if t0.elapsed() > Duration::from_secs(15) {
            return Err(format!("cannot get memory from {}: {err}", a.server).into());
        }
        println!("[client] waiting for {} ({err})", a.server);
        std::thread::sleep(Duration::from_millis(200));
    };
    // Descriptors made from the registrations and the peer's segment, each range checked.
    let n = a.size;
    let write = TransferDesc::between(&host_reg, 0, &remote, 0, n)?;
    let read = TransferDesc::between(&back_reg, 0, &remote, 0, n)?;
    let t = Duration::from_secs(10);
    let t1 = Instant::now();
    engine.transfer_sync(&a.server, TransferOp::Write, &[write], t)?;
    let tw = t1.elapsed();
    let t2 = Instant::now();
    engine.transfer_sync(&a.server, TransferOp::Read, &[read], t)?;
    let tr = t2.elapsed();
    let got = back.to_vec()?;
    let ok = got[..a.size].iter().all(|&b| b == 0xAA);
    let gbs = |d: Duration| n as f64 / d.as_secs_f64() / 1e9;
    println!(
        "[client] WRITE {n} bytes in {tw:?} ({:.2} GB/s), READ back in {tr:?} ({:.2} GB/s): {}",
        gbs(tw),
        gbs(tr),
        if ok { "verified 0xAA" } else { "MISMATCH" }
    );
    println!("[client] stats: {:?}", engine.peer_stats(&a.server));
    engine.disconnect(&a.server, t)?;
    println!("[client] disconnected");
    Ok(ok)
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fabric_transfer: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match a.role.as_str() {
        "server" => server(&a),
        "client" => client(&a),
        _ => (|| -> Res<bool> {
            let exe = std::env::current_exe()?;
            let mut srv = Command::new(exe)
                .args(["--role", "server", "--server", &a.server])
                .args(["--size", &a.size.to_string()])
                .args(["--timeout", &a.timeout.as_secs().to_string()])
                .spawn()?;
            let c = client(&a);
            if c.is_err() {
                let _ = srv.kill();
            }
            let s = srv.wait()?;
            println!("[both] server exited with {s}");
            Ok(c? && s.success())
        })(),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fabric_transfer ({}): {e}", a.role);
            ExitCode::FAILURE
        }
    }
}
