//! 64 engines in one process against one etcd, each with its own directory client (as 64
//! processes would have): all publish, every engine looks every other up by name (a full mesh
//! of lookups), each connects to the next by name and writes a block, then one engine leaves
//! and every other sees it go (the one connected to it losing its channel). Prints what the
//! crate docs' load estimate is based on: publish and lookup rates, keep-alives per second,
//! watch events per departure, entry size. Timings are printed, never judged.

mod directory_util;
#[path = "engine/util.rs"]
#[allow(dead_code, unused_imports)]
mod engine_util;

use ascend_mem::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ascend_fabric::directory::{
    Directory, DirectoryStats, EtcdDirectory, EtcdOptions, Member, SegmentInfo,
};
use ascend_fabric::{Engine, TransferDesc, TransferOp};
use directory_util::*;
use engine_util::*;

const N: usize = 64;
const T: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(2);
const LEN: usize = 64 << 10;

struct Node {
    dir: Arc<EtcdDirectory>,
    engine: Engine,
    buf: ascend_mem::DeviceBuffer,
    reg: ascend_fabric::Registration,
    member: Option<Member>,
}

fn name(i: usize) -> String {
    format!("engine-{i:02}")
}

fn total(nodes: &[Node]) -> DirectoryStats {
    let mut t = DirectoryStats::default();
    for n in nodes {
        let s = n.dir.stats();
        t.errors += s.errors;
        t.keepalives += s.keepalives;
        t.watch_events += s.watch_events;
        t.malformed += s.malformed;
    }
    t
}

fn member(n: &Node) -> &Member {
    n.member.as_ref().unwrap()
}

#[test]
fn sixty_four_engines() {
    let rt = ascend_mem::Runtime::emulated().unwrap();
    let dev = rt.device(0).unwrap();
    {
        let etcd = etcd();
        let t0 = Instant::now();
        let mut nodes: Vec<Node> = (0..N)
            .map(|i| {
                let opts = EtcdOptions::new(etcd.url()).prefix("/scale").ttl(TTL);
                let dir = Arc::new(EtcdDirectory::connect(opts).unwrap());
                let engine = Engine::new(&dev, &listen_addr(), options(1, 1)).unwrap();
                // First half: what it writes; second half: what its neighbour writes.
                let buf = engine.alloc_device(2 * LEN).unwrap();
                buf.fill(i as u8).unwrap();
                let reg = engine.register(&buf).unwrap();
                let seg = SegmentInfo::new("kv", reg.addr(), reg.len());
                let m = Member::join(&engine, dir.clone(), &name(i), "emulator", vec![seg]);
                Node {
                    dir,
                    engine,
                    buf,
                    reg,
                    member: Some(m.unwrap()),
                }
            })
            .collect();
        let publish = t0.elapsed();

        // Full mesh of lookups, one thread per engine.
        let t1 = Instant::now();
        std::thread::scope(|s| {
            for (i, n) in nodes.iter().enumerate() {
                let nodes = &nodes;
                s.spawn(move || {
                    for (j, o) in nodes.iter().enumerate() {
                        if i != j {
                            let e = member(n).lookup(&name(j)).unwrap().unwrap();
                            assert_eq!(&e, member(o).entry());
                        }
                    }
                    assert_eq!(member(n).list("engine-").unwrap().len(), N);
                });
            }
        });
        let lookups = t1.elapsed();

        // A ring of channels made by name, a block written over each.
        for (i, n) in nodes.iter().enumerate() {
            let next = (i + 1) % N;
            let e = member(n).connect_by_name(&name(next), T).unwrap();
            let to = e.segment("kv").unwrap().addr + LEN;
            let d = TransferDesc::raw(n.reg.addr(), to, LEN);
            n.engine
                .transfer_sync(&e.addr, TransferOp::Write, &[d], T)
                .unwrap();
        }
        for (i, n) in nodes.iter().enumerate() {
            let prev = (i + N - 1) % N;
            let got = n.buf.to_vec().unwrap();
            let wrong = got[LEN..2 * LEN]
                .iter()
                .filter(|&&b| b != prev as u8)
                .count();
            assert_eq!(wrong, 0, "engine {i}: bytes not from engine {prev}");
        }

        // Keep-alive load over a window (measured, not judged).
        let k0 = total(&nodes).keepalives;
        let w0 = Instant::now();
        std::thread::sleep(Duration::from_secs(3));
        let rate = (total(&nodes).keepalives - k0) as f64 / w0.elapsed().as_secs_f64();

        // One departure: engine 0 withdraws; everyone else sees it, engine 63 loses its channel.
        let subs: Vec<_> = nodes[1..].iter().map(|n| member(n).subscribe()).collect();
        let before = total(&nodes).watch_events;
        let addr0 = nodes[0].engine.local_addr().as_str().to_owned();
        assert!(nodes[N - 1].engine.is_connected(&addr0));
        let t2 = Instant::now();
        drop(nodes[0].member.take());
        for rx in &subs {
            assert!(wait_left(rx, &name(0), T).is_some());
        }
        let departure = t2.elapsed();
        assert!(!nodes[N - 1].engine.is_connected(&addr0));
        let events = total(&nodes).watch_events - before;
        let stats = total(&nodes);
        assert_eq!(stats.errors, 0, "{stats:?}");
        assert_eq!(stats.malformed, 0, "{stats:?}");

        let entry = serde_json::to_vec(member(&nodes[1]).entry()).unwrap().len();
        let key = nodes[1].dir.key(&name(1)).len();
        println!("engines: {N}, lease TTL {TTL:?}");
        println!(
            "publish (connect, watch, lease, put) of {N}: {publish:?} ({:.1} ms each)",
            publish.as_secs_f64() * 1e3 / N as f64
        );
        println!(
            "full mesh lookups ({}), one thread per engine: {lookups:?} ({:.0}/s)",
            N * (N - 1),
            (N * (N - 1)) as f64 / lookups.as_secs_f64()
        );
        println!(
            "lease keep-alives: {rate:.1}/s ({:.2}/s per engine)",
            rate / N as f64
        );
        println!(
            "one departure: seen by all {} others in {departure:?}; watch events: {events}",
            N - 1
        );
        println!("entry: key {key} bytes, value {entry} bytes (one segment)");
        drop(subs);
        nodes.clear();
    }
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c:?}");
}
