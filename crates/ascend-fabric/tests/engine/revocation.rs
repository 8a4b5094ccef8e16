//! Deregistration revokes: when memory that connected peers imported is no longer covered by
//! any registration, the deregistration returns only once each of those peers (engines of
//! this crate, which take revocations of single segments) has failed its in-flight transfers
//! into that memory with `Revoked` and dropped its import of it; their channels stay for the
//! rest. Memory still covered, or registered after a peer connected (never offered to it),
//! leaves the peer alone. (A client that does not take single revocations, as a C++ HIXL
//! engine, has its session closed instead: see the control tests.) It holds the test lock: the emulator's counters are process-wide.

use ascend_fabric::Addr;
use std::time::Duration;

use crate::util::*;
use ascend_fabric::{Engine, Error, Side, TransferDesc, TransferOp};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(20);
const LEN: usize = 2 << 20;

struct Pair {
    owner: Engine,
    addr: String,
    peer: Engine,
    local: ascend_mem::DeviceBuffer,
    _local_reg: ascend_fabric::Registration,
}

fn pair(dev: &ascend_mem::Device) -> Pair {
    let addr = listen_addr();
    let owner = Engine::new(dev, &addr, options(1, 16)).unwrap();
    let peer = Engine::new(dev, "127.0.0.1", options(1, 16)).unwrap();
    let local = peer.alloc_device(LEN).unwrap();
    let _local_reg = peer.register(&local).unwrap();
    Pair {
        owner,
        addr,
        peer,
        local,
        _local_reg,
    }
}

impl Pair {
    fn write(&self, remote: Addr) -> ascend_fabric::Result<()> {
        let d = TransferDesc::raw(self.local.addr(), remote, 4096);
        self.peer
            .transfer_sync(&self.addr, TransferOp::Write, &[d], T)
    }
}

/// Deregistering (and dropping) imported memory revokes it at the peer before returning: the
/// peer's in-flight transfer into it fails with `Revoked`, one into other memory of the owner
/// completes, the channel stays, the import goes once no stream holds it, and a list prepared
/// over the revoked memory is refused with `Revoked`.
fn imported_memory(dev: &ascend_mem::Device) {
    let p = pair(dev);
    let a = p.owner.alloc_device(LEN).unwrap();
    let b = p.owner.alloc_device(LEN).unwrap();
    let reg_a = p.owner.register(&a).unwrap();
    let reg_b = p.owner.register(&b).unwrap();
    p.peer.connect(&p.addr, T).unwrap();
    assert_eq!(ascend_sim::counters().imports, 2);
    p.write(a.addr()).unwrap();
    let sessions = p.owner.sessions();
    let seg_a = p
        .peer
        .remote_segments(&p.addr)
        .unwrap()
        .iter()
        .position(|s| s.0 == a.addr())
        .unwrap();
    let list_a = p
        .peer
        .prepare_remote(&p.addr, &[ascend_fabric::SegmentRef::Index(seg_a)], 4096)
        .unwrap();
    let local_list = p.peer.prepare_local(&p._local_reg, 4096).unwrap();

    // Transfers kept in flight while `a` is revoked: one into `a`, one into `b`.
    let hold = ascend_sim::testing::hold_all_streams();
    let into = |addr: Addr| {
        let d = TransferDesc::raw(p.local.addr(), addr, 4096);
        p.peer
            .transfer_async(&p.addr, TransferOp::Write, &[d])
            .unwrap()
    };
    let (req_a, req_b) = (into(a.addr()), into(b.addr()));
    p.owner.deregister(reg_a).unwrap();
    // Returned: the peer has let go of `a`; the channel and `b` stay.
    assert!(p.peer.is_connected(&p.addr));
    assert_eq!(p.owner.sessions(), sessions, "the session stays");
    match req_a.wait(T) {
        Err(Error::Revoked { addr, len, .. }) => {
            assert_eq!((addr, len), (a.addr(), LEN))
        }
        other => panic!("expected Revoked, got {other:?}"),
    }
    assert_eq!(req_a.status(), ascend_fabric::TransferStatus::Failed);
    drop(hold);
    req_b.wait(T).unwrap();
    ascend_testkit::wait_until("the revoked import unmapped", T, || {
        ascend_sim::counters().imports == 1
    });
    let segs = p.peer.remote_segments(&p.addr).unwrap();
    assert_eq!(segs, vec![(b.addr(), LEN)]);
    match p.write(a.addr()) {
        Err(Error::NotRegistered {
            side: Side::Remote, ..
        }) => {}
        other => panic!("expected NotRegistered on the remote side, got {other:?}"),
    }
    match p
        .peer
        .transfer_prepared_sync(TransferOp::Write, &local_list, &list_a, &[(0, 0)], T)
    {
        Err(e @ Error::Revoked { .. }) => assert_eq!(e.status(), ascend_fabric::HixlCode::FAILED),
        other => panic!("expected Revoked for the list over `a`, got {other:?}"),
    }
    p.write(b.addr()).unwrap();
    // Dropping the last clone revokes as well.
    drop(reg_b);
    assert!(p.peer.is_connected(&p.addr));
    assert_eq!(ascend_sim::counters().imports, 0);
    assert_eq!(p.peer.pool_usage().0, 0);
    drop((list_a, local_list));
}

/// A block still covered by another registration, or memory registered after the peer
/// connected, is not revoked.
fn memory_the_peer_keeps(dev: &ascend_mem::Device) {
    let p = pair(dev);
    let a = p.owner.alloc_device(LEN).unwrap();
    // Two registrations over one allocation: one block, offered once.
    let left = p
        .owner
        .register_slice(&a.as_slice().slice(0..LEN / 2).unwrap())
        .unwrap();
    let right = p
        .owner
        .register_slice(&a.as_slice().slice(LEN / 2..LEN).unwrap())
        .unwrap();
    p.peer.connect(&p.addr, T).unwrap();
    let offered = || p.peer.remote_segments(&p.addr).unwrap().len();
    let late_buf = p.owner.alloc_device(LEN).unwrap();
    let late = p.owner.register(&late_buf).unwrap();
    p.owner.deregister(late).unwrap();
    assert_eq!(offered(), 1, "never offered: no revocation");
    p.owner.deregister(left).unwrap();
    assert_eq!(offered(), 1, "the block is still registered");
    p.write(a.addr() + LEN / 2).unwrap();
    p.owner.deregister(right).unwrap();
    assert_eq!(offered(), 0, "the block is gone");
    assert!(p.peer.is_connected(&p.addr));
    assert_eq!(ascend_sim::counters().imports, 0);
}

#[test]
fn deregistering_imported_memory_revokes_it_at_its_importers_first() {
    let env = setup();
    let rt = &env.rt;
    let dev = rt.device(0).unwrap();
    imported_memory(&dev);
    memory_the_peer_keeps(&dev);
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "leaked {c}");
}
