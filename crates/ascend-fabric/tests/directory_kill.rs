//! A killed engine leaves the directory within its lease TTL + 1 s: the test re-executes its
//! own binary as the peer (an engine published as `child`, etcd URL in
//! `ASCEND_FABRIC_TEST_ETCD`), connects to it by name, moves a block both ways, kills it
//! (SIGKILL: no withdrawal, its lease just stops being kept alive) and measures how long until
//! the directory reports it gone.

mod directory_util;
#[path = "engine/util.rs"]
#[allow(dead_code, unused_imports)]
mod engine_util;

use ascend_mem::prelude::*;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ascend_fabric::directory::{EtcdDirectory, EtcdOptions, Member, SegmentInfo};
use ascend_fabric::{Engine, TransferDesc, TransferOp};
use directory_util::*;
use engine_util::*;

const URL_VAR: &str = "ASCEND_FABRIC_TEST_ETCD";
const TEST: &str = "killed_engine_leaves_within_ttl";
const T: Duration = Duration::from_secs(20);
const TTL: Duration = Duration::from_secs(2);
const LEN: usize = 256 << 10;

fn open(url: &str) -> Arc<EtcdDirectory> {
    Arc::new(EtcdDirectory::connect(EtcdOptions::new(url).prefix("/kill").ttl(TTL)).unwrap())
}

fn child(url: &str) {
    let rt = ascend_mem::Runtime::emulated().unwrap();
    let dev = rt.device(0).unwrap();
    let engine = Engine::new(&dev, &listen_addr(), options(1, 2)).unwrap();
    let buf = engine.alloc_device(LEN).unwrap();
    buf.fill(0x11).unwrap();
    let reg = engine.register(&buf).unwrap();
    let seg = SegmentInfo::new("kv", reg.addr(), reg.len());
    let _member = Member::join(&engine, open(url), "child", "emulator", vec![seg]).unwrap();
    println!("ready");
    // Serve until killed.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

#[test]
fn killed_engine_leaves_within_ttl() {
    if let Ok(url) = std::env::var(URL_VAR) {
        child(&url);
        return;
    }
    let rt = ascend_mem::Runtime::emulated().unwrap();
    let dev = rt.device(0).unwrap();
    {
        let etcd = etcd();
        let dir = open(&etcd.url());
        let engine = Engine::new(&dev, &listen_addr(), options(1, 2)).unwrap();
        let member = Member::join(&engine, dir.clone(), "parent", "emulator", vec![]).unwrap();
        let events = member.subscribe();
        let mut peer = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
            .env(URL_VAR, etcd.url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(peer.stdout.take().unwrap());
        let ready = out
            .lines()
            .map_while(Result::ok)
            .any(|l| l.trim_end().ends_with("ready"));
        assert!(ready, "the child engine did not start");

        let entry = member.connect_by_name("child", T).unwrap();
        let seg = entry.segment("kv").unwrap();
        let mine = engine.alloc_host(LEN).unwrap();
        mine.fill(0).unwrap();
        let reg = engine.register(&mine).unwrap();
        let d = [TransferDesc::raw(reg.addr(), seg.addr, LEN)];
        engine
            .transfer_sync(&entry.addr, TransferOp::Read, &d, T)
            .unwrap();
        assert_eq!(mine.to_vec().unwrap()[..LEN], vec![0x11; LEN][..]);

        peer.kill().unwrap();
        let killed = Instant::now();
        peer.wait().unwrap();
        let seen = wait_left(&events, "child", TTL + T).map(|_| killed.elapsed());
        let took = seen.expect("the killed engine never left the directory");
        println!("killed engine left the directory after {took:?} (lease TTL {TTL:?})");
        assert!(
            took <= TTL + Duration::from_secs(1),
            "left after {took:?}, over TTL + 1 s"
        );
        assert!(!engine.is_connected(&entry.addr));
        assert!(member.lookup("child").unwrap().is_none());
        drop((member, reg, mine, engine));
    }
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c:?}");
}
