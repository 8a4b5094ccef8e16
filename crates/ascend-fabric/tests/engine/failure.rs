//! Peer failure: a client with 64 async transfers in flight loses its peer (SIGKILL). Every
//! request must end with a peer-lost error, its streams aborted, the peer's imports unmapped
//! and freed with their VA returned, the client's own registrations intact; after the peer
//! restarts on the same address the client reconnects and transfers again; all emulator
//! counters are back to zero at the end.
//!
//! Teardown is ordered: by the time the client's engine no longer lists the peer, every
//! request has failed and every import is unmapped, so the counters are checked the moment
//! the peer is gone, with no further wait.
//!
//! The client runs in a child process that holds every stream (the emulator's test hold)
//! while its requests are queued, so the requests really are in flight when the peer dies;
//! the loss aborts the held streams.

use std::time::{Duration, Instant};

use crate::peer::*;
use crate::util::*;
use ascend_fabric::{Engine, LostReason, TransferDesc, TransferOp, TransferStatus};
use ascend_mem::prelude::*;
use ascend_testkit::role::read_stdin_line;
use ascend_testkit::{role, test_name, Spawn};

const T: Duration = Duration::from_secs(10);
const IN_FLIGHT: usize = 64;

/// The child side of the test here, by role.
fn child_main(role: &str) {
    let rt = ascend_mem::Runtime::emulated().unwrap();
    match role {
        "peer" => peer_role(&rt),
        "client" => client_role(&rt),
        r => panic!("unknown role {r}"),
    }
}

fn wait_until(what: &str, f: impl FnMut() -> bool) {
    ascend_testkit::wait_until(what, T, f);
}

fn client_role(rt: &ascend_mem::Runtime) {
    let dev = rt.device(0).unwrap();
    let peer = std::env::var(PEER_VAR).unwrap();
    let engine = Engine::new(&dev, "127.0.0.1", test_options(1)).unwrap();
    let local = engine.alloc_device(REGION).unwrap();
    local.write_from(&pattern(7, REGION), 0).unwrap();
    let reg = engine.register(&local).unwrap();
    engine.connect(&peer, T).unwrap();
    let remote_dev = engine.remote_segments(&peer).unwrap()[0].0;
    let segs = engine.remote_segments(&peer).unwrap();
    let remote = parse_ready(&read_stdin_line().unwrap());
    assert!(segs.iter().any(|s| s.0 == remote["dev"]));
    let _ = remote_dev;
    let base = ascend_sim::counters();
    assert_eq!(base.imports, 4, "{base}");

    // 64 async WRITEs of 64 KiB each, all queued and none run yet: every stream is held
    // (the engine's progress thread observes the requests, so the copies would run).
    let hold = ascend_sim::testing::hold_all_streams();
    let chunk = 64 << 10;
    let reqs: Vec<_> = (0..IN_FLIGHT)
        .map(|i| {
            let d = TransferDesc::raw(
                local.addr() + (i * chunk),
                remote["dev"] + (i * chunk),
                chunk,
            );
            engine
                .transfer_async(&peer, TransferOp::Write, &[d])
                .unwrap()
        })
        .collect();
    assert_eq!(
        engine.peer_stats(&peer).unwrap().in_flight,
        IN_FLIGHT as u64
    );
    assert_eq!(reg.in_flight(), IN_FLIGHT);
    println!("INFLIGHT {}", reqs.len());

    // The parent kills the peer now; the keepalive socket closes.
    assert_eq!(read_stdin_line().as_deref(), Some("KILLED"));
    let t0 = Instant::now();
    wait_until("peer loss", || !engine.is_connected(&peer));
    let detect = t0.elapsed();
    // Teardown is complete by the time the peer is gone from the map: checked at once, with
    // the requests not yet looked at. Imports gone, VA back, the failed slots' streams
    // destroyed; local memory intact.
    let c = ascend_sim::counters();
    assert_eq!(c.imports, 0, "{c}");
    assert_eq!(engine.pool_usage().0, 0);
    assert_eq!(c.streams, 0, "failed slots are destroyed: {c}");
    assert_eq!(c.mappings, 1, "only the local buffer stays mapped: {c}");
    assert_eq!(reg.in_flight(), 0);
    assert_eq!(engine.registrations(), 1);
    for r in &reqs {
        assert_eq!(r.status(), TransferStatus::Failed);
        match r.wait(T) {
            Err(ascend_fabric::Error::PeerLost { reason, .. }) => {
                assert_eq!(reason, LostReason::KeepaliveClosed)
            }
            other => panic!("expected peer lost, got {other:?}"),
        }
    }
    drop(reqs);
    drop(hold);
    let mut back = vec![0u8; REGION];
    local.read_into(&mut back, 0).unwrap();
    assert!(back == pattern(7, REGION), "local data intact");
    println!("LOST {} in {detect:?}", IN_FLIGHT);

    // The peer restarts at the same address: reconnect and transfer.
    let remote = parse_ready(&read_stdin_line().unwrap());
    let t0 = Instant::now();
    loop {
        match engine.connect(&peer, Duration::from_millis(500)) {
            Ok(()) => break,
            Err(e) if t0.elapsed() < T => {
                eprintln!("reconnect: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("reconnect failed: {e}"),
        }
    }
    let d = TransferDesc::raw(local.addr(), remote["host"] + 100, 1 << 20);
    engine
        .transfer_sync(&peer, TransferOp::Write, &[d], T)
        .unwrap();
    println!("REWROTE");
    engine.disconnect(&peer, T).unwrap();
    drop(reg);
    drop(local);
    drop(engine);
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "client leaked: {c}");
    println!("RESULT ok");
}

#[test]
fn killed_peer_fails_in_flight_requests_and_reconnect_works() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let name = test_name!(killed_peer_fails_in_flight_requests_and_reconnect_works);
    let env = setup();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut peer = Spawn::new(name, "peer").env(ADDR_VAR, &addr).start();
    let ready = peer.expect_line("READY");
    let mut client = Spawn::new(name, "client").env(PEER_VAR, &addr).start();
    client.send(&ready);
    assert_eq!(client.expect_line("INFLIGHT"), IN_FLIGHT.to_string());
    peer.child.kill().unwrap();
    peer.child.wait().unwrap();
    client.send("KILLED");
    let lost = client.expect_line("LOST");
    eprintln!("peer loss detected and {lost}");

    let mut peer2 = Spawn::new(name, "peer").env(ADDR_VAR, &addr).start();
    let ready = peer2.expect_line("READY");
    client.send(&ready);
    client.expect_line("REWROTE");
    // The restarted peer got the data: pattern(7) from offset 0, written at host+100.
    let want_seed_ok = peer2.ask("CHECK host 0 100 2", "");
    assert_eq!(want_seed_ok, "OK", "bytes before the write are untouched");
    client.finish();
    peer2.send("QUIT");
    peer2.finish();
    env.finish();
}
