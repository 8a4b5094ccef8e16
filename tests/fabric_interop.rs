//! Interoperability: a FabricMem control-plane client written only from the wire-format facts
//! (`tests/wire/fabricmem_client.py`, no shared code) connects to our engine, both in-process
//! and to the `fabric_transfer` example started with `--role server`, and receives the
//! share-handle list.

use ascend_mem::prelude::*;
use std::process::Command;
use std::time::{Duration, Instant};

use ascend_fabric::Engine;
use ascend_fabric::EngineOptions;
use ascend_testkit::emulator::setup;

const MIB2: usize = 2 << 20;

use ascend_testkit::free_port;

fn python_client(port: u16, channel: &str) -> Option<(bool, String)> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/wire/fabricmem_client.py"
    );
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not installed");
        return None;
    }
    let out = Command::new("python3")
        .args([script, "127.0.0.1", &port.to_string(), channel])
        .output()
        .expect("run python client");
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    ))
}

#[test]
fn independent_client_receives_the_engine_share_list() {
    let env = setup();
    let port = free_port();
    {
        let e = Engine::new(
            &env.dev,
            &format!("127.0.0.1:{port}"),
            EngineOptions::builder()
                .pool_capacity(64 << 30)
                .build()
                .unwrap(),
        )
        .unwrap();
        let d = e.alloc_device(MIB2).unwrap();
        let h = e.alloc_host(2 * MIB2).unwrap();
        let _r = (e.register(&d).unwrap(), e.register(&h).unwrap());
        if let Some((ok, out)) = python_client(port, "127.0.0.1:1") {
            assert!(ok, "python client failed:\n{out}");
            assert!(out.contains("status 0 entries=2"), "{out}");
            for (addr, len) in [(d.addr(), MIB2), (h.addr(), 2 * MIB2)] {
                assert!(
                    out.contains(&format!(
                        "entry va_addr={} len={len} handle_bytes=128",
                        addr.get()
                    )),
                    "{out}"
                );
            }
        }
        // Its session ends when the script exits.
        let t0 = Instant::now();
        while !e.sessions().is_empty() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(e.sessions().is_empty());
    }
    env.finish();
}

#[test]
fn independent_client_reads_the_example_server() {
    let _env = setup();
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("examples").join("fabric_transfer"));
    let Some(example) = example.filter(|p| p.exists()) else {
        eprintln!("skipped: the fabric_transfer example is not built next to this test");
        return;
    };
    let port = free_port();
    let mut server = Command::new(example)
        .args(["--role", "server", "--server", &format!("127.0.0.1:{port}")])
        .args(["--size", &MIB2.to_string(), "--timeout", "30"])
        .env("ASCEND_MEM_BACKEND", "sim")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut result = None;
    while t0.elapsed() < Duration::from_secs(20) {
        match python_client(port, "python-client") {
            None => break,
            Some((true, out)) if out.contains("entries=1") => {
                result = Some(out);
                break;
            }
            Some(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    if let Some(out) = result {
        assert!(
            out.contains(&format!("len={MIB2} handle_bytes=128")),
            "{out}"
        );
    } else if Command::new("python3").arg("--version").output().is_ok() {
        panic!("the python client never received the example server's share list");
    }
}
