//! A peer's registrations made after the connect become reachable without a reconnect, while
//! other transfers are in flight: `prepare_remote` by a name the peer gave since, and a raw
//! descriptor into memory it registered since, each refresh the peer's segments by
//! themselves; the transfers in flight complete, a list prepared before the refresh still
//! works, and the peer saw no new session.

use ascend_fabric::Addr;
use std::time::Duration;

use crate::util::*;
use ascend_fabric::{SegmentRef, TransferDesc, TransferOp};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(30);
const BLOCK: usize = 64 << 10;
const BLOCKS: usize = 8;

#[test]
fn segments_registered_after_the_connect_are_used_without_reconnecting() {
    let _env = setup();
    let rt = ascend_mem::Runtime::emulated().unwrap();
    let dev = rt.device(0).unwrap();
    let (peer_engine, peer) = listening(&dev, options(2, 8));
    // Made first, registered last: the late segment lies below the first one, so its place
    // in the peer's address order comes before it (lists name table slots, which stay).
    let a = peer_engine.alloc_device(BLOCKS * BLOCK).unwrap();
    let b = peer_engine.alloc_device(BLOCKS * BLOCK).unwrap();
    let (named, remote) = if a.as_raw() < b.as_raw() {
        (a, b)
    } else {
        (b, a)
    };
    let remote_reg = peer_engine.register(&remote).unwrap();
    let client = ascend_fabric::Engine::new(&dev, "127.0.0.1", options(2, 8)).unwrap();
    let local_buf = client.alloc_device(BLOCKS * BLOCK).unwrap();
    let local_reg = client.register(&local_buf).unwrap();
    client.connect(&peer, T).unwrap();
    let p = Sides {
        client,
        peer: peer_engine,
        local: local_buf,
        remote,
        local_reg,
    };
    p.local.write_from(&pattern(3, BLOCKS * BLOCK), 0).unwrap();
    let early = p
        .client
        .prepare_remote(&peer, &[SegmentRef::Index(0)], BLOCK)
        .unwrap();
    let local = p.client.prepare_local(&p.local_reg, BLOCK).unwrap();
    let sessions = p.peer.sessions();
    assert_eq!(sessions.len(), 1);
    assert_eq!(p.client.peer_stats(&peer).unwrap().segments, 1);

    // Transfers in flight on the old imports while the peer's segments grow.
    let hold = ascend_sim::testing::hold_all_streams();
    let in_flight: Vec<_> = (0..6)
        .map(|i| {
            let d = TransferDesc::raw(p.local_addr(i * BLOCK), p.remote_addr(i * BLOCK), BLOCK);
            p.client
                .transfer_async(&peer, TransferOp::Write, &[d])
                .unwrap()
        })
        .collect();

    let named_reg = p.peer.register_named(&named, "late").unwrap();
    let late = p
        .client
        .prepare_remote(&peer, &[SegmentRef::Name("late".into())], BLOCK)
        .unwrap();
    assert_eq!(p.client.peer_stats(&peer).unwrap().segments, 2);
    // Listed in the order they became known: the late one after, though it lies below.
    let segs = p.client.remote_segments(&peer).unwrap();
    assert_eq!(segs[0].0, p.remote_addr(0));
    assert_eq!(segs[1].0, named.addr());
    let by_index = p
        .client
        .prepare_remote(&peer, &[SegmentRef::Index(1)], BLOCK)
        .unwrap();
    assert_eq!(by_index.len(), late.len());
    let to_late = p
        .client
        .transfer_prepared_async(TransferOp::Write, &local, &late, &[(1, 0), (2, 5)])
        .unwrap();

    let raw = p.peer.alloc_device(BLOCK).unwrap();
    let raw_reg = p.peer.register(&raw).unwrap();
    let d = TransferDesc::raw(p.local_addr(4 * BLOCK), raw.addr(), BLOCK);
    let to_raw = p
        .client
        .transfer_async(&peer, TransferOp::Write, &[d])
        .unwrap();
    assert_eq!(p.client.peer_stats(&peer).unwrap().segments, 3);
    // Nothing new since: a refresh adds nothing.
    assert_eq!(p.client.refresh_segments(&peer, T).unwrap(), 0);

    // A list prepared before the growth names the same memory.
    let early_req = p
        .client
        .transfer_prepared_async(TransferOp::Write, &local, &early, &[(7, 6)])
        .unwrap();
    drop(hold);
    for (i, r) in in_flight.into_iter().enumerate() {
        r.wait(T)
            .unwrap_or_else(|e| panic!("in-flight transfer {i}: {e}"));
    }
    to_late.wait(T).unwrap();
    to_raw.wait(T).unwrap();
    early_req.wait(T).unwrap();

    let want = pattern(3, BLOCKS * BLOCK);
    let block = |b: usize| &want[b * BLOCK..(b + 1) * BLOCK];
    let remote = p.remote.to_vec().unwrap();
    for i in 0..BLOCKS {
        let got = &remote[i * BLOCK..(i + 1) * BLOCK];
        match i {
            6 => assert!(got == block(7), "remote block 6 (the early list)"),
            7 => assert!(got.iter().all(|b| *b == 0), "remote block 7"),
            _ => assert!(got == block(i), "remote block {i}"),
        }
    }
    let named_now = named.to_vec().unwrap();
    assert!(&named_now[..BLOCK] == block(1), "late block 0");
    assert!(&named_now[5 * BLOCK..6 * BLOCK] == block(2), "late block 5");
    assert!(
        &raw.to_vec().unwrap()[..BLOCK] == block(4),
        "the raw late segment"
    );
    assert!(p.client.is_connected(&peer));
    assert_eq!(p.peer.sessions(), sessions, "no reconnect");

    drop((early, late, local));
    let Sides {
        client,
        peer: peer_engine,
        local,
        remote,
        local_reg,
    } = p;
    drop(client);
    drop((local_reg, local));
    drop(peer_engine);
    drop((named_reg, raw_reg, remote_reg));
    drop((named, raw, remote, dev, rt));
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c}");
}

/// The two engines and their buffers.
struct Sides {
    client: ascend_fabric::Engine,
    peer: ascend_fabric::Engine,
    local: ascend_mem::DeviceBuffer,
    remote: ascend_mem::DeviceBuffer,
    local_reg: ascend_fabric::Registration,
}

impl Sides {
    fn local_addr(&self, off: usize) -> Addr {
        self.local.addr() + off
    }

    fn remote_addr(&self, off: usize) -> Addr {
        self.remote.addr() + off
    }
}
