//! The scenarios of HIXL's own FabricMem system tests, on this engine: a plain round trip,
//! auto-connect, the channel ending when the peer finalizes, two targets in parallel, ten
//! concurrent asynchronous requests, and a disconnect during an asynchronous request. Where
//! HIXL leaves the outcome open (its disconnect-during-async test accepts four), this engine
//! has one per cause, and these tests pin it: a disconnect, a peer loss and a cancel each end
//! the request with a typed error that names the peer, and asking again is `AlreadyReported`.
//!
//! Copies that must still be in flight when something happens to them are held queued with
//! the emulator's stream hold, so no test depends on timing.

use std::time::Duration;

use ascend_fabric::{Engine, Error, LostReason, TransferDesc, TransferOp, TransferStatus};
use ascend_mem::prelude::*;

use crate::async_util::Pair;
use crate::util::{listening, options, pattern, setup};

const T: Duration = Duration::from_secs(20);
/// A whole granule, so a buffer's bytes are exactly what a transfer covers.
const LEN: usize = 2 << 20;

/// `got` equals `want` (without printing megabytes when it does not).
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i}: {} != {}",
            got[i], want[i]
        );
    }
}

fn write_desc(p: &Pair, off: usize, len: usize) -> TransferDesc {
    TransferDesc::raw(p.local_addr(off), p.remote_addr(off), len)
}

/// The request failed with an error `want` accepts that names `peer`; asking again is
/// `AlreadyReported` with the same text, and the request stays known as failed.
fn assert_ended_by(r: ascend_fabric::TransferRequest, peer: &str, want: &dyn Fn(&Error) -> bool) {
    let e = r.wait(T).unwrap_err();
    assert!(want(&e), "{e:?}");
    assert!(
        e.to_string().contains(peer),
        "the error names the peer: {e}"
    );
    let again = r.wait(T).unwrap_err();
    assert!(
        matches!(again, Error::AlreadyReported(ref t) if *t == e.to_string()),
        "{again:?}"
    );
    assert_eq!(
        r.status(),
        TransferStatus::Failed,
        "still known, still failed"
    );
}

#[test]
fn connect_write_read_disconnect() {
    let _env = setup();
    let p = Pair::new(LEN, options(2, 4), true);
    p.local.write_from(&pattern(1, LEN), 0).unwrap();
    p.client
        .transfer_sync(
            &p.peer_addr,
            TransferOp::Write,
            &[write_desc(&p, 0, LEN)],
            T,
        )
        .unwrap();
    same(&p.remote.to_vec().unwrap(), &pattern(1, LEN), "written");
    p.local.fill(0).unwrap();
    p.client
        .transfer_sync(&p.peer_addr, TransferOp::Read, &[write_desc(&p, 0, LEN)], T)
        .unwrap();
    same(&p.local.to_vec().unwrap(), &pattern(1, LEN), "read back");
    p.client.disconnect(&p.peer_addr, T).unwrap();
    assert!(!p.client.is_connected(&p.peer_addr));
    p.close();
}

#[test]
fn auto_connect_serves_sync_and_async_transfers_without_connect() {
    let _env = setup();
    let mut opts = options(2, 4);
    opts.auto_connect = true;
    let p = Pair::new(LEN, opts, false);
    p.local.write_from(&pattern(2, LEN), 0).unwrap();
    let half = LEN / 2;
    p.client
        .transfer_sync(
            &p.peer_addr,
            TransferOp::Write,
            &[write_desc(&p, 0, half)],
            T,
        )
        .unwrap();
    assert!(p.client.is_connected(&p.peer_addr), "connected on demand");
    let w = p
        .client
        .transfer_async(
            &p.peer_addr,
            TransferOp::Write,
            &[write_desc(&p, half, half)],
        )
        .unwrap();
    w.wait(T).unwrap();
    same(&p.remote.to_vec().unwrap(), &pattern(2, LEN), "written");
    p.local.fill(0).unwrap();
    let r = p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Read, &[write_desc(&p, 0, LEN)])
        .unwrap();
    r.wait(T).unwrap();
    same(&p.local.to_vec().unwrap(), &pattern(2, LEN), "read back");
    p.client.disconnect(&p.peer_addr, T).unwrap();
    p.close();
}

/// The peer finalizes with a transfer in flight: the channel ends (the request fails as a
/// lost peer once its streams are aborted and the imports unmapped), and a disconnect then
/// answers not connected. The event is the request's end, not a wall-clock wait.
#[test]
fn peer_finalize_ends_the_channel() {
    let env = setup();
    let (peer, peer_addr) = listening(&env.dev, options(2, 4));
    let remote = peer.alloc_device(LEN).unwrap();
    let remote_reg = peer.register(&remote).unwrap();
    let client = Engine::new(&env.dev, "127.0.0.1", options(2, 4)).unwrap();
    let local = client.alloc_device(LEN).unwrap();
    let local_reg = client.register(&local).unwrap();
    client.connect(&peer_addr, T).unwrap();
    let d = TransferDesc::raw(local.addr(), remote.addr(), LEN);

    let hold = ascend_sim::testing::hold_all_streams();
    let req = client
        .transfer_async(&peer_addr, TransferOp::Write, &[d])
        .unwrap();
    drop(peer); // finalize: its sessions close
    assert_ended_by(req, &peer_addr, &|e| {
        matches!(
            e,
            Error::PeerLost {
                reason: LostReason::KeepaliveClosed,
                ..
            }
        )
    });
    assert!(!client.is_connected(&peer_addr));
    let e = client.disconnect(&peer_addr, T).unwrap_err();
    assert!(
        matches!(e, Error::NotConnected { ref peer } if *peer == peer_addr),
        "{e:?}"
    );
    drop(hold);
    drop((client, local_reg, local, remote_reg, remote));
    env.finish();
}

#[test]
fn two_targets_in_parallel() {
    let env = setup();
    let client = Engine::new(&env.dev, "127.0.0.1", options(2, 8)).unwrap();
    let local = client.alloc_device(2 * LEN).unwrap();
    local.write_from(&pattern(3, 2 * LEN), 0).unwrap();
    let local_reg = client.register(&local).unwrap();
    let targets: Vec<_> = (0..2)
        .map(|_| {
            let (peer, addr) = listening(&env.dev, options(2, 4));
            let remote = peer.alloc_device(LEN).unwrap();
            let reg = peer.register(&remote).unwrap();
            client.connect(&addr, T).unwrap();
            (peer, addr, remote, reg)
        })
        .collect();
    std::thread::scope(|s| {
        for (i, (_, addr, remote, _)) in targets.iter().enumerate() {
            let (client, local) = (&client, &local);
            s.spawn(move || {
                let src = local.addr() + (i * LEN);
                let d = TransferDesc::raw(src, remote.addr(), LEN);
                client
                    .transfer_sync(addr, TransferOp::Write, &[d], T)
                    .unwrap();
            });
        }
    });
    let want = pattern(3, 2 * LEN);
    for (i, (_, addr, remote, _)) in targets.iter().enumerate() {
        assert_eq!(
            remote.to_vec().unwrap(),
            want[i * LEN..(i + 1) * LEN],
            "target {i}"
        );
        client.disconnect(addr, T).unwrap();
    }
    drop((client, local_reg, local, targets));
    env.finish();
}

#[test]
fn ten_concurrent_async_requests() {
    let _env = setup();
    let p = Pair::new(LEN, options(4, 4), true);
    p.local.write_from(&pattern(4, LEN), 0).unwrap();
    let block = LEN / 10;
    let reqs: Vec<_> = (0..10)
        .map(|i| {
            p.client
                .transfer_async(
                    &p.peer_addr,
                    TransferOp::Write,
                    &[write_desc(&p, i * block, block)],
                )
                .unwrap()
        })
        .collect();
    let ids: std::collections::BTreeSet<u64> = reqs.iter().map(|r| r.id()).collect();
    assert_eq!(ids.len(), 10, "every request has its own id");
    for r in &reqs {
        r.wait(T).unwrap();
        assert_eq!(r.status(), TransferStatus::Completed);
    }
    let got = p.remote.to_vec().unwrap();
    same(
        &got[..10 * block],
        &pattern(4, LEN)[..10 * block],
        "ten blocks",
    );
    drop(reqs);
    p.close();
}

#[test]
fn disconnect_during_async_ends_the_request_as_disconnected() {
    let _env = setup();
    let p = Pair::new(LEN, options(2, 4), true);
    p.local.write_from(&pattern(5, LEN), 0).unwrap();
    let hold = ascend_sim::testing::hold_all_streams();
    let req = p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Write, &[write_desc(&p, 0, LEN)])
        .unwrap();
    assert_eq!(req.status(), TransferStatus::Waiting);
    p.client.disconnect(&p.peer_addr, T).unwrap();
    assert_ended_by(req, &p.peer_addr, &|e| {
        matches!(
            e,
            Error::PeerLost {
                reason: LostReason::Disconnected,
                ..
            }
        )
    });
    drop(hold);
    // (After the disconnect the imports are unmapped, so the aborted copy could not land in
    // the peer's memory anyway; this only checks nothing reached it before.)
    assert!(
        p.remote.to_vec().unwrap().iter().all(|&b| b == 0),
        "the held copy was aborted, never run"
    );
    p.close();
}

#[test]
fn cancel_during_async_ends_the_request_as_cancelled() {
    let _env = setup();
    let p = Pair::new(LEN, options(2, 4), true);
    p.local.write_from(&pattern(6, LEN), 0).unwrap();
    let hold = ascend_sim::testing::hold_all_streams();
    let req = p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Write, &[write_desc(&p, 0, LEN)])
        .unwrap();
    let id = req.id();
    assert!(req.cancel(), "it was running");
    assert!(!req.cancel(), "a second cancel finds it ended");
    assert_eq!(req.status(), TransferStatus::Failed);
    assert_ended_by(
        req,
        &p.peer_addr,
        &|e| matches!(e, Error::Cancelled { peer, id: i } if *peer == p.peer_addr && *i == id),
    );
    assert!(
        p.client.is_connected(&p.peer_addr),
        "a cancel keeps the channel"
    );
    drop(hold);
    // The channel still serves; the cancelled copy never ran (its streams were aborted
    // before the cancel returned, and the 4 KiB written since is the only change).
    p.client
        .transfer_sync(
            &p.peer_addr,
            TransferOp::Write,
            &[write_desc(&p, 0, 4096)],
            T,
        )
        .unwrap();
    let remote = p.remote.to_vec().unwrap();
    same(&remote[..4096], &pattern(6, LEN)[..4096], "the later write");
    assert!(
        remote[4096..].iter().all(|&b| b == 0),
        "the cancelled copy wrote"
    );
    p.close();
}

#[test]
fn a_finished_request_keeps_its_outcome_when_cancelled() {
    let _env = setup();
    let p = Pair::new(LEN, options(2, 4), true);
    let req = p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Write, &[write_desc(&p, 0, 4096)])
        .unwrap();
    req.wait(T).unwrap();
    assert!(!req.cancel());
    assert_eq!(req.status(), TransferStatus::Completed);
    drop(req);
    p.close();
}

/// HIXL's notify limits: name and message up to 1,024 bytes each.
#[test]
fn notify_limits() {
    let _env = setup();
    let p = Pair::new(4096, options(1, 4), true);
    let at_limit = "n".repeat(1024);
    p.client
        .send_notify(&p.peer_addr, &at_limit, &at_limit, T)
        .unwrap();
    for (name, msg) in [
        ("n".repeat(1025), "m".to_string()),
        ("n".into(), "m".repeat(1025)),
    ] {
        let e = p
            .client
            .send_notify(&p.peer_addr, &name, &msg, T)
            .unwrap_err();
        assert_eq!(e.status(), ascend_fabric::HixlCode::PARAM_INVALID, "{e:?}");
    }
    p.close();
}

/// HIXL's VA pool rules: every imported block takes whole 1 GiB slots of the pool; a peer
/// offering more than the pool holds is refused as resource exhaustion, with every import
/// of that connect undone and its slots back; once the peer offers less, the connect works.
#[test]
fn a_peer_offering_more_than_the_va_pool_holds_is_refused_whole() {
    let env = setup();
    let (peer, peer_addr) = listening(&env.dev, options(1, 4));
    let a = peer.alloc_device(LEN).unwrap();
    let b = peer.alloc_device(LEN).unwrap();
    let a_reg = peer.register(&a).unwrap();
    let b_reg = peer.register(&b).unwrap();
    let client = Engine::new(&env.dev, "127.0.0.1", options(1, 1)).unwrap();
    let e = client.connect(&peer_addr, T).unwrap_err();
    assert_eq!(
        e.status(),
        ascend_fabric::HixlCode::RESOURCE_EXHAUSTED,
        "{e:?}"
    );
    assert!(!client.is_connected(&peer_addr));
    assert_eq!(client.pool_usage().0, 0, "the first block's slot is back");
    assert_eq!(
        ascend_sim::counters().imports,
        0,
        "the first block's import is undone"
    );
    peer.deregister(b_reg).unwrap();
    client.connect(&peer_addr, T).unwrap();
    assert_eq!(client.pool_usage().0, 1);
    client.disconnect(&peer_addr, T).unwrap();
    drop((client, a_reg, peer, a, b));
    env.finish();
}
