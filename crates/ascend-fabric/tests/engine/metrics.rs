//! The engine's metrics through a debugging recorder installed for the test's thread (the
//! engines register their handles where they are made, so their own threads record into it
//! too): a known workload gives exact counter values, gauge values and histogram counts per
//! label. The workload: transfers of known sizes to two peers, one cancelled, one failing;
//! a connect to nobody; a connect the peer's allow-list refuses; a disconnect; a shutdown.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ascend_fabric::metrics::*;
use ascend_fabric::{Engine, EngineOptions, Registration, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::DeviceBuffer;
use ascend_testkit::metrics::{DebugValue, DebuggingRecorder, Recorded};

use crate::util::*;

const T: Duration = Duration::from_secs(20);
const MIB: usize = 1 << 20;

/// What the engines' workload names: the client's address, the two peers', the refusing
/// one's, and the address nobody listens on.
struct Names {
    client: String,
    a: String,
    b: String,
    strict: String,
    nobody: String,
}

/// The engines of the workload: two peers `a` and `b` with a registered MiB each, one whose
/// allow-list refuses the client, and the client connected to `a` and `b`.
struct World {
    a: Engine,
    b: Engine,
    strict: Engine,
    c: Engine,
    a_buf: DeviceBuffer,
    b_buf: DeviceBuffer,
    local: DeviceBuffer,
    names: Names,
    _regs: [Registration; 3],
}

fn make(dev: &ascend_mem::Device) -> World {
    let (a, a_addr) = listening(dev, options(2, 16));
    let (b, b_addr) = listening(dev, options(2, 16));
    let only_far = EngineOptions::builder()
        .allowed_peers([IpAddr::V4(Ipv4Addr::new(10, 9, 8, 7))])
        .pool_capacity(16 << 30)
        .build()
        .unwrap();
    let (strict, strict_addr) = listening(dev, only_far);
    let a_buf = a.alloc_device(MIB).unwrap();
    let b_buf = b.alloc_device(MIB).unwrap();
    let c = Engine::new(dev, "127.0.0.1", options(2, 16)).unwrap();
    let local = c.alloc_device(MIB).unwrap();
    let regs = [
        a.register(&a_buf).unwrap(),
        b.register(&b_buf).unwrap(),
        c.register(&local).unwrap(),
    ];
    c.connect(&a_addr, T).unwrap();
    c.connect(&b_addr, T).unwrap();
    let names = Names {
        client: c.channel_id().to_owned(),
        a: a_addr,
        b: b_addr,
        strict: strict_addr,
        nobody: listen_addr(),
    };
    World {
        a,
        b,
        strict,
        c,
        a_buf,
        b_buf,
        local,
        names,
        _regs: regs,
    }
}

/// Transfers of known sizes from the client to `a` and `b`, and the connection events around
/// them: a connect to nobody, one the allow-list refuses, a disconnect from `a`, then every
/// engine dropped (the client first: its channel to `b` ends with its shutdown).
fn drive(w: World) -> Names {
    let (c, n) = (&w.c, &w.names);
    c.connect(&n.nobody, Duration::from_millis(500))
        .unwrap_err();
    c.connect(&n.strict, T).unwrap_err();
    let desc = |off: usize, remote: ascend_mem::Addr, len: usize| {
        TransferDesc::raw(w.local.addr() + off, remote + off, len)
    };
    // To a: three 4 KiB writes, two reads of two 32 KiB descriptors each.
    for i in 0..3 {
        let d = [desc(i * 4096, w.a_buf.addr(), 4096)];
        c.transfer_sync(&n.a, TransferOp::Write, &d, T).unwrap();
    }
    for i in 0..2 {
        let base = MIB / 2 + i * (64 << 10);
        let d = [
            desc(base, w.a_buf.addr(), 32 << 10),
            desc(base + (32 << 10), w.a_buf.addr(), 32 << 10),
        ];
        c.transfer_sync(&n.a, TransferOp::Read, &d, T).unwrap();
    }
    // To b: one 1 MiB write; one cancelled while its copies are held; one whose copy fails.
    let whole = [desc(0, w.b_buf.addr(), MIB)];
    c.transfer_sync(&n.b, TransferOp::Write, &whole, T).unwrap();
    let hold = ascend_sim::testing::hold_all_streams();
    let req = c
        .transfer_async(&n.b, TransferOp::Write, &[desc(0, w.b_buf.addr(), 8192)])
        .unwrap();
    assert!(req.cancel(), "the held transfer is cancelled");
    drop(hold);
    drop(req);
    ascend_sim::testing::fail_next_queued_copy(INTERNAL);
    let d = [desc(0, w.b_buf.addr(), 16384)];
    c.transfer_sync(&n.b, TransferOp::Write, &d, T).unwrap_err();
    ascend_sim::fault::clear();
    c.disconnect(&n.a, T).unwrap();
    let World {
        a,
        b,
        strict,
        c,
        local,
        names,
        _regs,
        ..
    } = w;
    drop((_regs, local, c));
    drop((strict, a, b));
    names
}

#[test]
fn a_known_workload_gives_exact_figures_per_peer_and_operation() {
    let env = setup();
    let rec = DebuggingRecorder::new();
    let snap = rec.snapshotter();
    let n = metrics::with_local_recorder(&rec, || drive(make(&env.rt.device(0).unwrap())));
    let got = Recorded::take(&snap);
    let count = |name: &str, labels: &[(&str, &str)]| got.counter(name, labels);
    let samples = |name: &str, labels: &[(&str, &str)]| got.samples(name, labels);
    let gauge = |name: &str, labels: &[(&str, &str)]| got.gauge(name, labels);
    let c = n.client.as_str();
    let on = |peer: &str, op: &str, outcome: &str| {
        count(
            TRANSFERS,
            &[
                ("engine", c),
                ("peer", peer),
                ("op", op),
                ("outcome", outcome),
            ],
        )
    };
    let (a, b) = (n.a.as_str(), n.b.as_str());
    for (peer, op, outcome, want) in [
        (a, "write", "ok", 3),
        (a, "read", "ok", 2),
        (b, "write", "ok", 1),
        (b, "write", "cancelled", 1),
        (b, "write", "failed", 1),
        (b, "read", "ok", 0),
        (a, "write", "failed", 0),
        (b, "write", "timeout", 0),
        (b, "write", "aborted", 0),
        (b, "write", "peer_lost", 0),
    ] {
        assert_eq!(on(peer, op, outcome), want, "{peer} {op} {outcome}");
    }
    let lab = |peer, op| op_labels(c, peer, op);
    assert_eq!(count(TRANSFER_BYTES, &lab(a, "write")), 3 * 4096);
    assert_eq!(count(TRANSFER_BYTES, &lab(a, "read")), 2 * (64 << 10));
    assert_eq!(count(TRANSFER_BYTES, &lab(b, "write")), MIB as u64);
    assert_eq!(count(TRANSFER_DESCRIPTORS, &lab(a, "write")), 3);
    assert_eq!(count(TRANSFER_DESCRIPTORS, &lab(a, "read")), 4);
    assert_eq!(count(TRANSFER_DESCRIPTORS, &lab(b, "write")), 1);
    assert_eq!(samples(TRANSFER_DURATION, &lab(a, "write")).len(), 3);
    assert_eq!(samples(TRANSFER_DURATION, &lab(a, "read")).len(), 2);
    assert!(samples(TRANSFER_DURATION, &lab(b, "write"))
        .iter()
        .all(|s| *s > 0.0));
    // No submission found every slot busy.
    assert!(samples(SLOT_WAIT, &[("engine", c)]).is_empty());
    let peer = |p| peer_labels(c, p);
    assert_eq!(gauge(IN_FLIGHT, &peer(a)), 0.0);
    assert_eq!(gauge(IN_FLIGHT, &peer(b)), 0.0);
    // Connects: two made, one to nobody, one refused by the allow-list.
    let connects = |p: &str| count(CONNECTS, &[("engine", c), ("peer", p)]);
    assert_eq!((connects(a), connects(b)), (1, 1));
    assert_eq!(count(CONNECT_FAILURES, &[("engine", c)]), 2);
    // A failed connect adds no series of its peer.
    assert!(got
        .named(CONNECTS)
        .all(|s| !s.labels.iter().any(|(_, v)| *v == n.nobody)));
    let rejected = |reason: &str| {
        count(
            CONTROL_REJECTED,
            &[("engine", n.strict.as_str()), ("reason", reason)],
        )
    };
    assert_eq!((rejected("not_allowed"), rejected("over_cap")), (1, 0));
    // a was disconnected by the client; b's channel ended when the client shut down.
    let lost = |p: &str, reason: &str| {
        count(
            DISCONNECTS,
            &[("engine", c), ("peer", p), ("reason", reason)],
        )
    };
    assert_eq!(lost(a, "disconnected"), 1);
    assert_eq!(lost(a, "engine_shutdown"), 0);
    assert_eq!(lost(b, "engine_shutdown"), 1);
    assert_eq!(lost(b, "keepalive_closed"), 0);
    // Sessions at a's server: opened by the connect, closed by the disconnect.
    assert_eq!(gauge(CONTROL_SESSIONS, &[("engine", a)]), 0.0);
    // Every engine reported itself live, and is gone now.
    let info: Vec<_> = got.named(ENGINE_INFO).collect();
    assert_eq!(info.len(), 4, "{info:?}");
    assert!(info
        .iter()
        .all(|s| matches!(s.value, DebugValue::Gauge(g) if g.into_inner() == 0.0)));
    env.finish();
}

/// Engines and channels made without a recorder record nothing, even into one installed
/// later (their handles are no-ops from the start): the same transfers and connection events
/// run with a recorder in scope, and it sees none of them.
#[test]
fn engines_made_without_a_recorder_record_nothing() {
    let env = setup();
    let rec = DebuggingRecorder::new();
    let snap = rec.snapshotter();
    let world = make(&env.rt.device(0).unwrap());
    let _names = metrics::with_local_recorder(&rec, || drive(world));
    let seen = Recorded::take(&snap);
    assert!(seen.is_empty(), "{seen:?}");
    env.finish();
}

/// The labels of one direction of a channel.
fn op_labels<'a>(engine: &'a str, peer: &'a str, op: &'a str) -> [(&'a str, &'a str); 3] {
    [("engine", engine), ("peer", peer), ("op", op)]
}

/// The labels of a channel.
fn peer_labels<'a>(engine: &'a str, peer: &'a str) -> [(&'a str, &'a str); 2] {
    [("engine", engine), ("peer", peer)]
}
