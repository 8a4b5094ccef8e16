//! `ascend_cs` across two real processes: the test re-executes its own binary as the
//! server (role `hixl-server`, port in `ASCEND_MEM_TEST_HIXL_PORT`),
//! which registers a tagged device buffer and a host buffer and listens; this process is the
//! client: it finds both by tag, puts a pattern sync and async, gets it back and verifies it;
//! the server then verifies its own memory and its counters before exiting 0.

use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::util::*;
use ascend_cs::{Client, Endpoint, Op, Protocol, Server};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, HostBuffer};
use ascend_testkit::{role, test_name, Spawn};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const PORT_VAR: &str = "ASCEND_MEM_TEST_HIXL_PORT";
const LEN: usize = 1 << 20;

fn ep() -> Endpoint {
    Endpoint::new(Protocol::UbMem).on_device(0)
}

fn server_role(port: u16) {
    let env = setup();
    let dev = env.dev.clone();
    {
        let kv = Arc::new(DeviceBuffer::new(&dev, LEN).unwrap());
        kv.fill(0).unwrap();
        let host = Arc::new(HostBuffer::new(&dev, 4096).unwrap());
        let server = Server::new(&dev, LOCALHOST, port, &[ep()]).unwrap();
        let r1 = server.register("kv", kv.clone()).unwrap();
        let r2 = server.register("host", host.clone()).unwrap();
        server.listen(4).unwrap();
        println!("ready");
        // Serve until the client closes our stdin.
        let mut sink = Vec::new();
        std::io::stdin().read_to_end(&mut sink).unwrap();
        assert!(kv.to_vec().unwrap()[..LEN] == pattern(1, LEN)[..], "kv");
        assert_eq!(host.to_vec().unwrap()[..4096], pattern(2, 4096)[..]);
        drop((r1, r2));
        drop(server);
        println!("server verified");
    }
    assert!(ascend_sim::hixl_counters().is_zero());
    env.finish();
}

#[test]
fn roundtrip_across_processes() {
    if let Some(role) = role() {
        assert_eq!(role, "hixl-server");
        server_role(std::env::var(PORT_VAR).unwrap().parse().unwrap());
        return;
    }
    let env = setup();
    let dev = env.dev.clone();
    let port = TcpListener::bind((LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut spawn = Spawn::new(test_name!(roundtrip_across_processes), "hixl-server")
        .env(PORT_VAR, port.to_string());
    spawn.command().stderr(Stdio::piped());
    let mut child = spawn.spawn();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the server exited before it was ready:\n{seen}\n{err}");
        }
        seen.push_str(&line);
        if line.trim_end().ends_with("ready") {
            break;
        }
    }
    {
        let client = Client::new(&dev, LOCALHOST, port, &ep(), &ep()).unwrap();
        client.connect(Duration::from_secs(10)).unwrap();
        let list = client.remote_memory(Duration::from_secs(5)).unwrap();
        let kv = list.get("kv").unwrap();
        let host = list.get("host").unwrap();
        let src = Arc::new(DeviceBuffer::new(&dev, LEN).unwrap());
        let dst = Arc::new(HostBuffer::new(&dev, LEN).unwrap());
        src.write_from(&pattern(1, LEN), 0).unwrap();
        let s = client.register(src.clone()).unwrap();
        let d = client.register(dst.clone()).unwrap();
        // Sync put into the device block, async get back into host memory.
        client
            .put(&[Op::new(&s, 0, kv, 0, LEN)], Duration::from_secs(5))
            .unwrap();
        let mut g = client.get_async(&[Op::new(&d, 0, kv, 0, LEN)]).unwrap();
        g.wait(Duration::from_secs(5)).unwrap();
        drop(g);
        assert!(dst.to_vec().unwrap()[..LEN] == pattern(1, LEN)[..]);
        // Async put into the host block, sync get back.
        dst.write_from(&pattern(2, 4096), 0).unwrap();
        let mut p = client.put_async(&[Op::new(&d, 0, host, 0, 4096)]).unwrap();
        p.wait(Duration::from_secs(5)).unwrap();
        drop(p);
        client
            .get(&[Op::new(&s, 8192, host, 0, 4096)], Duration::from_secs(5))
            .unwrap();
        let mut back = vec![0u8; 4096];
        src.read_into(&mut back, 8192).unwrap();
        assert_eq!(back, pattern(2, 4096));
        drop((s, d));
        client.close().unwrap();
    }
    drop(child.stdin.take()); // the server may check and exit now
    let status = child.wait().unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(
        status.success(),
        "server failed: {status}\n{seen}{rest}\n{err}"
    );
    assert!(
        rest.contains("server verified") && rest.contains("1 passed"),
        "{rest}"
    );
    assert!(ascend_sim::hixl_counters().is_zero());
    env.finish();
}
