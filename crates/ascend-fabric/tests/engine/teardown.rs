//! Teardown is ordered and complete before anyone can see a peer gone: when a channel is
//! lost (the peer's engine goes away) or disconnected, its requests' streams are aborted and
//! their slots destroyed, and its imports are unmapped with their VA back in the pool, before
//! `is_connected` turns false and before any waiter sees `PeerLost`.
//!
//! The copies are kept queued with the emulator's process-wide stream hold, so the requests
//! really are in flight when the channel goes; each waiter checks the counters the moment its
//! `wait` returns, with no further wait. It holds the test lock: the emulator's counters
//! and the stream hold are process-wide.

use ascend_mem::prelude::*;
use std::sync::Arc;
use std::time::Duration;

use crate::util::*;
use ascend_fabric::{Engine, Error, LostReason, TransferDesc, TransferOp};

const T: Duration = Duration::from_secs(20);
const REQUESTS: usize = 8;
const BLOCK: usize = 64 << 10;

/// What a waiter saw the moment its request ended.
#[derive(Debug)]
struct Seen {
    result: Result<(), String>,
    reason: Option<LostReason>,
    imports: u64,
    streams: u64,
    pool_used: usize,
    connected: bool,
}

#[derive(Copy, Clone, Debug)]
enum How {
    PeerEngineDropped,
    Disconnected,
}

fn scenario(how: How) {
    let env = setup();
    let rt = &env.rt;
    let dev = rt.device(0).unwrap();
    let peer_addr = listen_addr();
    let peer = Engine::new(&dev, &peer_addr, options(2, 16)).unwrap();
    let remote_buf = peer.alloc_device(REQUESTS * BLOCK).unwrap();
    let remote_reg = peer.register(&remote_buf).unwrap();
    let client = Engine::new(&dev, "127.0.0.1", options(2, 16)).unwrap();
    let local = client.alloc_device(REQUESTS * BLOCK).unwrap();
    let reg = client.register(&local).unwrap();
    client.connect(&peer_addr, T).unwrap();
    assert_eq!(ascend_sim::counters().imports, 1);
    assert_eq!(client.pool_usage().0, 1);

    let hold = ascend_sim::testing::hold_all_streams();
    let reqs: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let d = TransferDesc::raw(
                local.addr() + (i * BLOCK),
                remote_buf.addr() + (i * BLOCK),
                BLOCK,
            );
            client
                .transfer_async(&peer_addr, TransferOp::Write, &[d])
                .unwrap()
        })
        .collect();
    assert_eq!(reg.in_flight(), REQUESTS);
    let client = Arc::new(client);
    let waiters: Vec<_> = reqs
        .into_iter()
        .map(|req| {
            let client = client.clone();
            let peer_addr = peer_addr.clone();
            std::thread::spawn(move || {
                let r = req.wait(T);
                let c = ascend_sim::counters();
                Seen {
                    reason: match &r {
                        Err(Error::PeerLost { reason, .. }) => Some(*reason),
                        _ => None,
                    },
                    result: r.map_err(|e| e.to_string()),
                    imports: c.imports,
                    streams: c.streams,
                    pool_used: client.pool_usage().0,
                    connected: client.is_connected(&peer_addr),
                }
            })
        })
        .collect();

    let want = match how {
        How::PeerEngineDropped => {
            // The engine first: its control server closes the sessions as it stops (the
            // registration dropped first would revoke the memory instead, another path,
            // tested in revocation.rs).
            drop(peer);
            drop(remote_reg);
            LostReason::KeepaliveClosed
        }
        How::Disconnected => {
            client.disconnect(&peer_addr, T).unwrap();
            // Returned: everything is torn down already.
            let c = ascend_sim::counters();
            assert_eq!((c.imports, client.pool_usage().0), (0, 0), "{c}");
            assert!(!client.is_connected(&peer_addr));
            drop(remote_reg);
            drop(peer);
            LostReason::Disconnected
        }
    };
    for w in waiters {
        let seen = w.join().unwrap();
        assert_eq!(seen.reason, Some(want), "{how:?}: {seen:?}");
        assert_eq!(seen.imports, 0, "{how:?}: imports unmapped first: {seen:?}");
        assert_eq!(seen.pool_used, 0, "{how:?}: VA back first: {seen:?}");
        assert_eq!(seen.streams, 0, "{how:?}: slots destroyed first: {seen:?}");
        assert!(!seen.connected, "{how:?}: {seen:?}");
        assert!(seen.result.is_err());
    }
    drop(hold);
    assert_eq!(reg.in_flight(), 0);
    let client = Arc::into_inner(client).expect("the waiters are gone");
    drop(reg);
    drop(local);
    drop(client);
    drop(remote_buf);
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{how:?}: leaked {c}");
}

#[test]
fn a_lost_channel_is_torn_down_before_it_is_seen_gone() {
    scenario(How::PeerEngineDropped);
    scenario(How::Disconnected);
}
