//! The engine directory on a real etcd (started by the test; the test fails, with how to
//! install it, where etcd is missing): bad inputs, connecting by name, an etcd outage while
//! engines run, and a peer removed from the directory with transfers in flight.
//!
//! One test function: the emulator's counters are process-wide, and they are checked to be
//! zero at the end.

mod directory_util;
#[path = "engine/util.rs"]
#[allow(dead_code, unused_imports)]
mod engine_util;

use ascend_mem::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ascend_fabric::directory::{
    Directory, DirectoryError, DirectoryEvent, EtcdDirectory, EtcdOptions, Member, SegmentInfo,
};
use ascend_fabric::{Engine, Error, LostReason, TransferDesc, TransferOp};
use directory_util::*;
use engine_util::*;

const T: Duration = Duration::from_secs(20);
const TTL: Duration = Duration::from_secs(2);
const LEN: usize = 1 << 20;

fn open(url: &str) -> Arc<EtcdDirectory> {
    Arc::new(EtcdDirectory::connect(EtcdOptions::new(url).prefix("/test").ttl(TTL)).unwrap())
}

/// Waits until `cond` (a state reached in the background) holds, bounded by `T`.
fn until(what: &str, cond: impl FnMut() -> bool) {
    ascend_testkit::wait_until(what, T, cond);
}

fn bad_options() {
    let port = free_port();
    let t0 = Instant::now();
    let e = EtcdDirectory::connect(
        EtcdOptions::new(format!("http://127.0.0.1:{port}"))
            .request_timeout(Duration::from_secs(1)),
    )
    .unwrap_err();
    match &e {
        DirectoryError::Unreachable { endpoint, .. } => {
            assert!(endpoint.contains(&port.to_string()), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains(&port.to_string()), "{e}");
    assert!(t0.elapsed() < T, "unreachable etcd took {:?}", t0.elapsed());
    for o in [
        EtcdOptions::new("http://127.0.0.1:1").prefix(""),
        EtcdOptions::new("http://127.0.0.1:1").prefix("/a/"),
        EtcdOptions::new("http://127.0.0.1:1").ttl(Duration::ZERO),
        EtcdOptions::new("http://127.0.0.1:1").ttl(Duration::from_millis(1500)),
        EtcdOptions::new(""),
    ] {
        assert!(
            matches!(
                EtcdDirectory::connect(o.clone()),
                Err(DirectoryError::BadOption { .. })
            ),
            "{o:?}"
        );
    }
}

struct Node {
    engine: Engine,
    buf: ascend_mem::DeviceBuffer,
    _reg: ascend_fabric::Registration,
    member: Member,
}

fn node(dev: &ascend_mem::Device, dir: &Arc<EtcdDirectory>, name: &str) -> Node {
    let engine = Engine::new(dev, &listen_addr(), options(2, 4)).unwrap();
    let buf = engine.alloc_device(LEN).unwrap();
    buf.fill(0).unwrap();
    let reg = engine.register(&buf).unwrap();
    let seg = SegmentInfo::new("kv", reg.addr(), reg.len());
    let member = Member::join(&engine, dir.clone(), name, "emulator", vec![seg]).unwrap();
    Node {
        engine,
        buf,
        _reg: reg,
        member,
    }
}

fn write(from: &Node, to: &Node, byte: u8) -> Result<(), Error> {
    // The entry as published (the directory may be down).
    let kv = to.member.entry();
    let seg = kv.segment("kv").unwrap();
    let src = from.engine.alloc_host(LEN).unwrap();
    src.fill(byte).unwrap();
    let reg = from.engine.register(&src).unwrap();
    let r = from.engine.transfer_sync(
        &kv.addr,
        TransferOp::Write,
        &[TransferDesc::raw(src.addr(), seg.addr, LEN)],
        T,
    );
    drop(reg);
    r
}

fn names_and_malformed(etcd: &LocalEtcd, dir: &Arc<EtcdDirectory>, a: &Node, b: &Node) {
    let dev = a.engine.device().clone();
    let c = Engine::new(&dev, &listen_addr(), options(1, 2)).unwrap();
    match Member::join(&c, dir.clone(), "a", "emulator", vec![]) {
        Err(DirectoryError::NameTaken { name, holder }) => {
            assert_eq!(name, "a");
            assert_eq!(holder, a.engine.local_addr().as_str());
        }
        other => panic!("{other:?}"),
    }
    for bad in ["", "a/b", "x y"] {
        assert!(matches!(
            Member::join(&c, dir.clone(), bad, "emulator", vec![]),
            Err(DirectoryError::BadName { .. })
        ));
    }
    let portless = Engine::new(&dev, "127.0.0.1", options(1, 2)).unwrap();
    assert!(matches!(
        Member::join(&portless, dir.clone(), "p", "emulator", vec![]),
        Err(DirectoryError::BadOption { .. })
    ));
    assert!(matches!(
        a.member.connect_by_name("nobody", T),
        Err(DirectoryError::NotFound { .. })
    ));

    // Entries written by hand that are no valid entry: skipped with a warning, never used.
    let events = a.member.subscribe();
    let before = dir.stats().malformed;
    let k = |n: &str| dir.key(n);
    etcd.put_raw(&k("junk"), b"not json");
    etcd.put_raw(&k("future"), br#"{"format":9,"addr":"127.0.0.1:1"}"#);
    etcd.put_raw(
        &k("noport"),
        br#"{"format":1,"addr":"127.0.0.1","device":0,"product":"x","segments":[],"version":1}"#,
    );
    etcd.put_raw(&k("bad name"), b"{}");
    etcd.put_raw(&k("deeper/x"), b"{}");
    let listed: Vec<String> = dir.list("").unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(listed, ["a", "b"]);
    assert_eq!(dir.lookup("b").unwrap().as_ref(), Some(b.member.entry()));
    for n in ["junk", "future", "noport"] {
        assert!(
            matches!(dir.lookup(n), Err(DirectoryError::Malformed { .. })),
            "{n}"
        );
        assert!(matches!(
            a.member.connect_by_name(n, T),
            Err(DirectoryError::Malformed { .. })
        ));
    }
    // A valid entry (written by hand, with no lease) overwritten with junk is gone for readers.
    let xkey = k("x");
    etcd.put_raw(&xkey, &serde_json::to_vec(b.member.entry()).unwrap());
    until(
        "x listed",
        || matches!(events.try_recv(), Ok(DirectoryEvent::Joined { name, .. }) if name == "x"),
    );
    etcd.put_raw(&xkey, b"[]");
    assert!(wait_left(&events, "x", T).is_some());
    assert!(dir.remove("x").unwrap());
    // Five junk keys, each seen by the list and by the watches, and the overwritten entry.
    let malformed = dir.stats().malformed - before;
    assert!(malformed >= 11, "{malformed}");
    assert!(!a.engine.is_connected(b.engine.local_addr().as_str()));
    drop(portless);
    drop(c);
}

/// etcd stops while engines run: transfers go on, the directory's errors are counted, and it
/// works again once etcd is back.
fn outage(etcd: &mut LocalEtcd, dir: &Arc<EtcdDirectory>, a: &Node, b: &Node) {
    let events = a.member.subscribe();
    let baddr = b.engine.local_addr().as_str().to_owned();
    let errors = dir.stats().errors;
    etcd.stop();
    until("the outage noticed", || dir.stats().errors > errors);
    assert!(matches!(
        dir.lookup("b"),
        Err(DirectoryError::Request { .. })
    ));
    for i in 0..3 {
        write(a, b, 0x30 + i).unwrap();
        assert_eq!(b.buf.to_vec().unwrap()[..LEN], vec![0x30 + i; LEN][..]);
    }
    assert!(a.engine.is_connected(&baddr));
    etcd.restart();
    until("the directory back", || {
        dir.lookup("b").is_ok_and(|e| e.is_some())
    });
    let keepalives = dir.stats().keepalives;
    until("keep-alives again", || {
        dir.stats().keepalives > keepalives + 2
    });
    // The watch is back: an entry put now is reported.
    let probe = serde_json::to_vec(b.member.entry()).unwrap();
    etcd.put_raw(&dir.key("probe"), &probe);
    let mut seen = Vec::new();
    until("the watch back", || {
        seen.extend(events.try_iter());
        seen.iter()
            .any(|e| matches!(e, DirectoryEvent::Joined { name, .. } if name == "probe"))
    });
    // Neither engine left the directory meanwhile.
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, DirectoryEvent::Left { .. })),
        "{seen:?}"
    );
    assert!(dir.remove("probe").unwrap());
    assert!(wait_left(&events, "probe", T).is_some());
    assert!(dir.stats().reconnects > 0);
    write(a, b, 0x41).unwrap();
    assert!(a.engine.is_connected(&baddr));
    assert_eq!(a.member.connected(), [("b".to_string(), baddr.clone())]);
}

/// `b`'s lease is revoked by hand (as if etcd had lost it): `b` leaves, `a`'s channel to it
/// ends, and `b` publishes itself again under a new lease, with its version raised.
fn lease_lost(etcd: &LocalEtcd, dir: &Arc<EtcdDirectory>, a: &Node, b: &Node) {
    let events = a.member.subscribe();
    let baddr = b.engine.local_addr().as_str().to_owned();
    let republished = dir.stats().republished;
    let lease = etcd.lease_of(&dir.key("b"));
    etcd.revoke_lease(&lease);
    assert!(wait_left(&events, "b", T).is_some());
    assert!(!a.engine.is_connected(&baddr));
    let back = loop {
        match events.recv_timeout(T).expect("b published again") {
            DirectoryEvent::Joined { name, entry } if name == "b" => break entry,
            _ => {}
        }
    };
    assert_eq!(back.version, b.member.entry().version + 1);
    assert_eq!(back.addr, baddr);
    // Counted by the publisher once etcd has answered it (after the watchers may have seen it).
    until("the republication counted", || {
        dir.stats().republished > republished
    });
    assert_ne!(etcd.lease_of(&dir.key("b")), lease);
    a.member.connect_by_name("b", T).unwrap();
    write(a, b, 0x42).unwrap();
}

/// `b` is removed from the directory with transfers from `a` in flight: they fail with
/// PeerLost(DirectoryLeft), as for a closed keepalive.
fn removed_in_flight(dir: &Arc<EtcdDirectory>, a: &Node, b: &Node) {
    let events = a.member.subscribe();
    let baddr = b.engine.local_addr().as_str().to_owned();
    let kv = b.member.entry().segment("kv").unwrap().clone();
    let src = a.engine.alloc_device(LEN).unwrap();
    let reg = a.engine.register(&src).unwrap();
    let hold = ascend_sim::testing::hold_all_streams();
    let reqs: Vec<_> = (0..4usize)
        .map(|i| {
            let d = TransferDesc::raw(reg.addr() + i * 4096, kv.addr + i * 4096, 4096);
            a.engine
                .transfer_async(&baddr, TransferOp::Write, &[d])
                .unwrap()
        })
        .collect();
    assert!(dir.remove("b").unwrap());
    assert!(wait_left(&events, "b", T).is_some());
    // The member acted before handing the event on.
    assert!(!a.engine.is_connected(&baddr));
    assert!(a.member.connected().is_empty());
    for r in reqs {
        match r.wait(T) {
            Err(Error::PeerLost { reason, .. }) => assert_eq!(reason, LostReason::DirectoryLeft),
            other => panic!("{other:?}"),
        }
    }
    drop(hold);
    drop(reg);
    assert!(matches!(
        a.member.connect_by_name("b", T),
        Err(DirectoryError::NotFound { .. })
    ));
}

/// The directory's metrics, through a debugging recorder installed while the directory and
/// its members are made (their threads record through the handles made then): `a` sees
/// itself and `b` arrive and `b` depart; every failed etcd call while etcd is stopped is
/// counted as the directory's stats count it.
fn metrics(etcd: &mut LocalEtcd, dev: &ascend_mem::Device) {
    use ascend_fabric::metrics::*;
    use ascend_testkit::metrics::{DebuggingRecorder, Recorded};
    let rec = DebuggingRecorder::new();
    let snap = rec.snapshotter();
    let dir = Arc::new(
        metrics::with_local_recorder(&rec, || {
            EtcdDirectory::connect(EtcdOptions::new(etcd.url()).prefix("/metrics").ttl(TTL))
        })
        .unwrap(),
    );
    let a = metrics::with_local_recorder(&rec, || node(dev, &dir, "a"));
    let events = a.member.subscribe();
    let b = node(dev, &dir, "b");
    until(
        "b joined",
        || matches!(events.try_recv(), Ok(DirectoryEvent::Joined { name, .. }) if name == "b"),
    );
    drop(b);
    assert!(wait_left(&events, "b", T).is_some(), "b left");
    etcd.stop();
    assert!(matches!(
        dir.lookup("a"),
        Err(DirectoryError::Request { .. })
    ));
    etcd.restart();
    until("the directory back", || dir.lookup("a").is_ok());
    let errors = dir.stats().errors;
    // Read after the stats: see `count_error`'s order.
    let got = Recorded::take(&snap);
    assert_eq!(got.counter(DIRECTORY_ARRIVALS, &[("member", "a")]), 2);
    assert_eq!(got.counter(DIRECTORY_DEPARTURES, &[("member", "a")]), 1);
    assert_eq!(got.gauge(DIRECTORY_MEMBERS, &[("member", "a")]), 1.0);
    // The metric counts an error before the stats do: it has every error the stats had
    // before the snapshot (the directory's tasks may count more meanwhile).
    assert!(errors >= 1);
    let counted = got.counter(DIRECTORY_ERRORS, &[]);
    assert!(counted >= errors, "{counted} < {errors}");
    drop(a);
}

#[test]
fn directory_on_etcd() {
    bad_options();
    let rt = ascend_mem::Runtime::emulated().unwrap();
    let dev = rt.device(0).unwrap();
    {
        let mut etcd = etcd();
        metrics(&mut etcd, &dev);
        let dir = open(&etcd.url());
        let a = node(&dev, &dir, "a");
        let b = node(&dev, &dir, "b");
        names_and_malformed(&etcd, &dir, &a, &b);

        let got = a.member.connect_by_name("b", T).unwrap();
        assert_eq!(&got, b.member.entry());
        assert!(matches!(
            a.member.connect_by_name("b", T),
            Err(DirectoryError::Engine(Error::AlreadyConnected { .. }))
        ));
        write(&a, &b, 0x5A).unwrap();
        assert_eq!(b.buf.to_vec().unwrap()[..LEN], vec![0x5A; LEN][..]);

        outage(&mut etcd, &dir, &a, &b);
        lease_lost(&etcd, &dir, &a, &b);
        removed_in_flight(&dir, &a, &b);
        println!("directory stats: {:?}", dir.stats());
        drop((a, b));
    }
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c:?}");
}
