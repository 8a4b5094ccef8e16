//! Registrations that span several mappings of one reservation (a KV cache mapped piece by
//! piece), adjacent registrations of one allocation, and the typed errors for parts that do
//! not form one range. It holds the test lock: the emulator's counters are process-wide.

use std::time::Duration;

use crate::util::*;
use ascend_fabric::{Engine, Error, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{Device, HostBuffer, Mapping, PhysicalMem, ReservedVa};

const T: Duration = Duration::from_secs(20);
const PIECE: usize = 2 << 20;

/// `n` HBM allocations mapped back to back into one reservation.
fn pieces(dev: &Device, n: usize) -> (ReservedVa, Vec<Mapping>) {
    let va = ReservedVa::new(dev, dev.granular(n * PIECE).unwrap()).unwrap();
    let maps = (0..n)
        .map(|i| {
            let mem = PhysicalMem::hbm(dev, dev.granular(PIECE).unwrap()).unwrap();
            va.map(&mem, dev.granular(i * PIECE).unwrap()).unwrap()
        })
        .collect();
    (va, maps)
}

/// One registration over three mappings; a peer writes one descriptor across all three.
fn three_mappings_as_one(dev: &Device) {
    let addr = listen_addr();
    let owner = Engine::new(dev, &addr, options(2, 16)).unwrap();
    let (_va, maps) = pieces(dev, 3);
    let reg = owner.register(&maps).unwrap();
    assert_eq!(reg.addr(), maps[0].addr());
    assert_eq!(reg.len(), 3 * PIECE);
    // The same range again, given as a slice of mappings, is the same registration.
    assert_eq!(owner.register(&maps[..]).unwrap(), reg);

    let peer = Engine::new(dev, "127.0.0.1", options(2, 16)).unwrap();
    let src = peer.alloc_device(3 * PIECE).unwrap();
    let data = pattern(5, 3 * PIECE);
    src.write_from(&data, 0).unwrap();
    let _src_reg = peer.register(&src).unwrap();
    peer.connect(&addr, T).unwrap();
    assert_eq!(
        peer.remote_segments(&addr).unwrap().len(),
        3,
        "one per mapping"
    );
    let d = TransferDesc::raw(src.addr(), reg.addr(), 3 * PIECE);
    peer.transfer_sync(&addr, TransferOp::Write, &[d], T)
        .unwrap();
    for (i, m) in maps.iter().enumerate() {
        let mut got = vec![0u8; PIECE];
        m.read_into(&mut got, 0).unwrap();
        assert!(got == data[i * PIECE..(i + 1) * PIECE], "piece {i}");
    }
    peer.disconnect(&addr, T).unwrap();
}

/// Adjacent registrations of one allocation both succeed (one export, shared), whether
/// both are views or one is made by address.
fn adjacent_registrations(dev: &Device) {
    let engine = Engine::new(dev, "127.0.0.1", options(2, 16)).unwrap();
    let buf = engine.alloc_device(2 * PIECE).unwrap();
    let left = engine
        .register_slice(&buf.as_slice().slice(..PIECE).unwrap())
        .unwrap();
    let right = engine.register_raw(buf.addr() + PIECE, PIECE).unwrap();
    assert_ne!(left, right);
    assert_eq!(engine.registrations(), 2);
    drop((left, right));
    // Again, the other way round.
    let right = engine
        .register_slice(&buf.as_slice().slice(PIECE..).unwrap())
        .unwrap();
    let left = engine
        .register_slice(&buf.as_slice().slice(..PIECE).unwrap())
        .unwrap();
    assert_eq!(engine.registrations(), 2);
    drop((left, right));
}

/// Parts that are not one contiguous range of one reservation and one kind are refused,
/// naming the part.
fn bad_spans(dev: &Device) {
    let engine = Engine::new(dev, "127.0.0.1", options(2, 16)).unwrap();
    let (_va, maps) = pieces(dev, 3);
    let (_va2, other) = pieces(dev, 1);
    let host = HostBuffer::new(dev, PIECE).unwrap();
    let span = |e: Result<ascend_fabric::Registration, Error>| match e {
        Err(Error::BadSpan { index, reason, .. }) => (index, reason),
        other => panic!("expected BadSpan, got {other:?}"),
    };
    let none: [Mapping; 0] = [];
    assert_eq!(span(engine.register(&none)).0, 0);
    let (i, why) = span(engine.register(&[maps[0].as_slice(), maps[2].as_slice()]));
    assert_eq!(i, 1, "{why}");
    assert!(why.contains("previous part"), "{why}");
    let (i, why) = span(engine.register(&[maps[1].as_slice(), maps[0].as_slice()]));
    assert_eq!(i, 1, "{why}");
    let (i, why) = span(engine.register(&[maps[2].as_slice(), other[0].as_slice()]));
    assert_eq!(i, 1, "{why}");
    assert!(why.contains("another reservation"), "{why}");
    let (i, why) = span(engine.register(&[maps[2].as_slice(), host.as_slice()]));
    assert_eq!(i, 1, "{why}");
    assert!(
        why.contains("another reservation") || why.contains("memory kind"),
        "{why}"
    );
    assert_eq!(engine.registrations(), 0);
}

#[test]
fn spans_adjacent_registrations_and_bad_spans() {
    let env = setup();
    let rt = &env.rt;
    let dev = rt.device(0).unwrap();
    three_mappings_as_one(&dev);
    adjacent_registrations(&dev);
    bad_spans(&dev);
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "leaked {c}");
}
