//! Deregistration revokes: when memory that connected peers imported is no longer covered by
//! any registration, those peers' sessions are closed and the deregistration returns only
//! once they have torn their channels down (in-flight transfers failed, imports unmapped).
//! Memory still covered, or registered after a peer connected (never offered to it), leaves
//! the peer alone. It holds the test lock: the emulator's counters are process-wide.

use std::time::Duration;

use crate::util::*;
use ascend_fabric::{Engine, Error, LostReason, Side, TransferDesc, TransferOp};

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
    fn write(&self, remote: u64) -> ascend_fabric::Result<()> {
        let d = TransferDesc::new(self.local.as_raw() as u64, remote, 4096);
        self.peer
            .transfer_sync(&self.addr, TransferOp::Write, &[d], T)
    }
}

/// Deregistering (and dropping) imported memory cuts the peer off before returning; an
/// in-flight transfer of the peer fails with PeerLost; a reconnect is offered only what is
/// still registered.
fn imported_memory(dev: &ascend_mem::Device) {
    let p = pair(dev);
    let a = p.owner.alloc_device(LEN).unwrap();
    let b = p.owner.alloc_device(LEN).unwrap();
    let reg_a = p.owner.register(&a).unwrap();
    let reg_b = p.owner.register(&b).unwrap();
    p.peer.connect(&p.addr, T).unwrap();
    assert_eq!(ascend_sim::counters().imports, 2);
    p.write(a.as_raw() as u64).unwrap();

    // A transfer kept in flight while the memory is revoked.
    let hold = ascend_sim::testing::hold_all_streams();
    let d = TransferDesc::new(p.local.as_raw() as u64, a.as_raw() as u64, 4096);
    let req = p
        .peer
        .transfer_async(&p.addr, TransferOp::Write, &[d])
        .unwrap();
    p.owner.deregister(reg_a).unwrap();
    // Returned: the peer's channel is gone, with its imports.
    assert!(!p.peer.is_connected(&p.addr));
    assert_eq!(ascend_sim::counters().imports, 0);
    assert_eq!(p.peer.pool_usage().0, 0);
    match req.wait(T) {
        Err(Error::PeerLost { reason, .. }) => assert_eq!(reason, LostReason::KeepaliveClosed),
        other => panic!("expected PeerLost, got {other:?}"),
    }
    drop(hold);

    // Back again: only `b` is offered; `a` is private.
    p.peer.connect(&p.addr, T).unwrap();
    let segs = p.peer.remote_segments(&p.addr).unwrap();
    assert_eq!(segs, vec![(b.as_raw() as u64, LEN as u64)]);
    match p.write(a.as_raw() as u64) {
        Err(Error::NotRegistered {
            side: Side::Remote, ..
        }) => {}
        other => panic!("expected NotRegistered on the remote side, got {other:?}"),
    }
    p.write(b.as_raw() as u64).unwrap();
    // Dropping the last clone revokes as well.
    drop(reg_b);
    assert!(!p.peer.is_connected(&p.addr));
    assert_eq!(ascend_sim::counters().imports, 0);
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
    let late_buf = p.owner.alloc_device(LEN).unwrap();
    let late = p.owner.register(&late_buf).unwrap();
    p.owner.deregister(late).unwrap();
    assert!(p.peer.is_connected(&p.addr), "never offered: no revocation");
    p.owner.deregister(left).unwrap();
    assert!(
        p.peer.is_connected(&p.addr),
        "the block is still registered"
    );
    p.write(a.as_raw() as u64 + LEN as u64 / 2).unwrap();
    p.owner.deregister(right).unwrap();
    assert!(!p.peer.is_connected(&p.addr), "the block is gone");
}

#[test]
fn deregistering_imported_memory_cuts_its_importers_off_first() {
    let env = setup();
    let rt = &env.rt;
    let dev = rt.device(0).unwrap();
    imported_memory(&dev);
    memory_the_peer_keeps(&dev);
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "leaked {c}");
}
