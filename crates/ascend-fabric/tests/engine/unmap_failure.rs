//! An unmap that fails during a disconnect is retried once; one that fails again never hands
//! its VA slot out again (the range may still be mapped): the slot is quarantined and counted, and the engine goes on connecting, to the
//! same peer and to others, and transferring. It holds the test lock: faults and counters
//! are process-wide.

use ascend_fabric::Addr;
use std::time::Duration;

use crate::util::*;
use ascend_fabric::{Engine, TransferDesc, TransferOp};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(20);
const LEN: usize = 2 << 20;

/// Writes `seed`-derived bytes to `peer` through `client` and reads them back.
fn round_trip(
    client: &Engine,
    peer: &str,
    local: &ascend_mem::DeviceBuffer,
    remote: Addr,
    seed: u8,
) {
    let data: Vec<u8> = (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect();
    local.write_from(&data, 0).unwrap();
    let d = TransferDesc::raw(local.addr(), remote, LEN);
    client
        .transfer_sync(peer, TransferOp::Write, &[d], T)
        .unwrap();
    local.fill(0).unwrap();
    client
        .transfer_sync(peer, TransferOp::Read, &[d], T)
        .unwrap();
    let mut back = vec![0u8; LEN];
    local.read_into(&mut back, 0).unwrap();
    assert!(back == data, "the bytes came back");
}

#[test]
fn a_failed_unmap_quarantines_its_slot_and_the_engine_goes_on() {
    let env = setup();
    let rt = &env.rt;
    let dev = rt.device(0).unwrap();
    let peers: Vec<(
        String,
        Engine,
        ascend_mem::DeviceBuffer,
        ascend_fabric::Registration,
    )> = (0..2)
        .map(|_| {
            let addr = listen_addr();
            let e = Engine::new(&dev, &addr, options(1, 8)).unwrap();
            let buf = e.alloc_device(LEN).unwrap();
            let reg = e.register(&buf).unwrap();
            (addr, e, buf, reg)
        })
        .collect();
    let client = Engine::new(&dev, "127.0.0.1", options(1, 8)).unwrap();
    let local = client.alloc_device(LEN).unwrap();
    let _reg = client.register(&local).unwrap();
    let (a, _, abuf, _) = &peers[0];
    let (b, _, bbuf, _) = &peers[1];

    // One failure is retried at once: the slot goes back.
    client.connect(a, T).unwrap();
    ascend_sim::fault::fail_nth("aclrtUnmapMem", 1, INTERNAL);
    client.disconnect(a, T).unwrap();
    ascend_sim::fault::clear();
    assert_eq!(client.pool_quarantined(), 0);
    assert_eq!(client.pool_usage().0, 0);

    // Two in a row: the slot is quarantined.
    client.connect(a, T).unwrap();
    assert_eq!(client.pool_usage().0, 1);
    ascend_sim::fault::fail_nth("aclrtUnmapMem", 1, INTERNAL);
    ascend_sim::fault::fail_nth("aclrtUnmapMem", 2, INTERNAL);
    client.disconnect(a, T).unwrap();
    ascend_sim::fault::clear();
    assert_eq!(client.pool_quarantined(), 1, "the failed slot is counted");
    assert_eq!(client.pool_usage().0, 1, "and stays out of service");

    // The same peer again, and another one: each gets a fresh slot.
    client.connect(a, T).unwrap();
    round_trip(&client, a, &local, abuf.addr(), 1);
    client.connect(b, T).unwrap();
    round_trip(&client, b, &local, bbuf.addr(), 2);
    assert_eq!(client.pool_usage().0, 3);
    client.disconnect(a, T).unwrap();
    client.disconnect(b, T).unwrap();
    assert_eq!(
        client.pool_usage().0,
        1,
        "only the quarantined slot stays used"
    );
    assert_eq!(client.pool_quarantined(), 1);

    // The mapping's own drop tried a third time, which went through, so nothing leaked but
    // the quarantined VA.
    drop((client, local, _reg, peers));
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "leaked {c}");
}
