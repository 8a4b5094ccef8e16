//! Prepared block lists: a local registration and a peer's segments (found by index and by
//! the name the peer gave a registration) described as blocks once, then transfers of
//! (local block, remote block) index pairs, blocks crossing allocation boundaries on both
//! sides included; the typed errors of making and using lists. It holds the test lock: the
//! emulator's counters are process-wide.

use std::time::Duration;

use crate::util::*;
use ascend_fabric::{Engine, Error, SegmentRef, Side, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{Device, Mapping, PhysicalMem, ReservedVa};

const T: Duration = Duration::from_secs(20);
const PIECE: usize = 2 << 20;
/// Not a divisor of `PIECE`: some blocks cross from one allocation into the next.
const BLOCK: usize = 192 << 10;

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

fn write_all(maps: &[Mapping], data: &[u8]) {
    for (i, m) in maps.iter().enumerate() {
        m.write_from(&data[i * PIECE..(i + 1) * PIECE], 0).unwrap();
    }
}

fn read_all(maps: &[Mapping]) -> Vec<u8> {
    let mut out = vec![0u8; maps.len() * PIECE];
    for (i, m) in maps.iter().enumerate() {
        m.read_into(&mut out[i * PIECE..(i + 1) * PIECE], 0)
            .unwrap();
    }
    out
}

fn block(data: &[u8], i: usize) -> &[u8] {
    let b = BLOCK;
    &data[i * b..(i + 1) * b]
}

/// Blocks move by index, both ways, on a named range and on a segment by index; blocks
/// that cross an allocation boundary on either side arrive whole.
fn moves_blocks_by_index(dev: &Device) {
    let addr = listen_addr();
    let owner = Engine::new(dev, &addr, options(2, 16)).unwrap();
    let (_rva, rmaps) = pieces(dev, 2);
    let kv = owner.register_named(&rmaps, "kv").unwrap();
    let plain = owner.alloc_device(PIECE).unwrap();
    let _plain_reg = owner.register(&plain).unwrap();

    let user = Engine::new(dev, "127.0.0.1", options(2, 16)).unwrap();
    let (_lva, lmaps) = pieces(dev, 2);
    let lreg = user.register(&lmaps).unwrap();
    let local = user.prepare_local(&lreg, BLOCK).unwrap();
    let n = 2 * PIECE / BLOCK;
    assert_eq!(local.len(), n);
    assert_eq!(local.block_addr(1), Some(lreg.addr() + BLOCK));
    assert_eq!(local.block_addr(n), None);

    user.connect(&addr, T).unwrap();
    let remote = user
        .prepare_remote(&addr, &[SegmentRef::from("kv")], BLOCK)
        .unwrap();
    assert_eq!((remote.len(), remote.block_addr(0)), (n, Some(kv.addr())));

    // WRITE block i to block (5 i + 3) mod n: a permutation (5 and 21 are coprime), scattered.
    let data = pattern(1, 2 * PIECE);
    write_all(&lmaps, &data);
    let pairs: Vec<(usize, usize)> = (0..n).map(|i| (i, (5 * i + 3) % n)).collect();
    user.transfer_prepared_sync(TransferOp::Write, &local, &remote, &pairs, T)
        .unwrap();
    let got = read_all(&rmaps);
    for &(i, j) in &pairs {
        assert!(block(&got, j) == block(&data, i), "block {i} -> {j}");
    }

    // READ them back into other local blocks, asynchronously.
    write_all(&lmaps, &vec![0u8; 2 * PIECE]);
    let back: Vec<(usize, usize)> = pairs.iter().map(|&(i, j)| ((i + 1) % n, j)).collect();
    let req = user
        .transfer_prepared_async(TransferOp::Read, &local, &remote, &back)
        .unwrap();
    req.wait(T).unwrap();
    let mine = read_all(&lmaps);
    for &(i, _) in &pairs {
        assert!(
            block(&mine, (i + 1) % n) == block(&data, i),
            "block {i} back"
        );
    }

    // By index: the plain buffer is one of the peer's segments.
    let segs = user.remote_segments(&addr).unwrap();
    let at = segs.iter().position(|s| s.0 == plain.addr()).unwrap();
    let both = user
        .prepare_remote(&addr, &[SegmentRef::Index(at), "kv".into()], BLOCK)
        .unwrap();
    let per = PIECE / BLOCK;
    assert_eq!((both.len(), both.first_block(1)), (per + n, Some(per)));
    // `Duration::MAX` is "no limit" (it used to overflow the deadline and panic).
    let pairs = [(0, 0), (5, per - 1)];
    user.transfer_prepared_sync(TransferOp::Write, &local, &both, &pairs, Duration::MAX)
        .unwrap();
    let mut got = vec![0u8; PIECE];
    plain.read_into(&mut got, 0).unwrap();
    assert!(block(&got, 0) == block(&mine, 0));
    assert!(block(&got, per - 1) == block(&mine, 5));
    prepared_errors(&user, &owner, &addr, &lreg, &local, &remote);

    // A list of a deregistered registration, or of a lost channel, fails by name.
    let spare = user.alloc_device(PIECE).unwrap();
    let spare_reg = user.register(&spare).unwrap();
    let spare_list = user.prepare_local(&spare_reg, BLOCK).unwrap();
    user.deregister(spare_reg).unwrap();
    let e = user
        .transfer_prepared_sync(TransferOp::Write, &spare_list, &remote, &[(0, 0)], T)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Prepare { reason, .. } if reason.contains("deregistered")),
        "{e}"
    );
    user.disconnect(&addr, T).unwrap();
    let e = user
        .transfer_prepared_sync(TransferOp::Write, &local, &remote, &[(0, 0)], T)
        .unwrap_err();
    assert!(e.is_peer_lost(), "{e}");
    drop((local, remote, both, spare_list));
    drop((kv, lreg));
}

/// Every misuse is a typed error naming the call and the value.
fn prepared_errors(
    user: &Engine,
    owner: &Engine,
    addr: &str,
    lreg: &ascend_fabric::Registration,
    local: &ascend_fabric::LocalBlocks,
    remote: &ascend_fabric::RemoteBlocks,
) {
    let prep = |e: Error| match e {
        Error::Prepare { call, reason } => format!("{call}: {reason}"),
        other => panic!("expected Prepare, got {other:?}"),
    };
    let w = TransferOp::Write;
    let n = local.len();
    match user.transfer_prepared_async(w, local, remote, &[(0, 0), (1, n)]) {
        Err(Error::BlockIndex {
            index,
            side,
            block,
            blocks,
        }) => assert_eq!((index, side, block, blocks), (1, Side::Remote, n, n)),
        other => panic!("expected BlockIndex, got {other:?}"),
    }
    assert!(matches!(
        user.transfer_prepared_async(w, local, remote, &[(n + 4, 0)]),
        Err(Error::BlockIndex {
            index: 0,
            side: Side::Local,
            ..
        })
    ));
    assert!(matches!(
        user.transfer_prepared_async(w, local, remote, &[]),
        Err(Error::EmptyBatch)
    ));
    let small = user.prepare_local(lreg, 4096).unwrap();
    let why = prep(
        user.transfer_prepared_async(w, &small, remote, &[(0, 0)])
            .unwrap_err(),
    );
    assert!(why.contains("block sizes differ: local 4096"), "{why}");
    let why = prep(user.prepare_local(lreg, 0).unwrap_err());
    assert!(why.starts_with("prepare_local: block_len is 0"), "{why}");
    let why = prep(user.prepare_local(lreg, 8 * PIECE).unwrap_err());
    assert!(why.contains("longer than the registration"), "{why}");
    let why = prep(owner.prepare_local(lreg, 4096).unwrap_err());
    assert!(why.contains("not registered with this engine"), "{why}");
    let why = prep(
        user.prepare_remote(addr, &["nope".into()], 4096)
            .unwrap_err(),
    );
    assert!(why.contains("no segment named \"nope\""), "{why}");
    let why = prep(
        user.prepare_remote(addr, &[SegmentRef::Index(99)], 4096)
            .unwrap_err(),
    );
    assert!(why.contains("segment index 99 is out of range"), "{why}");
    let why = prep(user.prepare_remote(addr, &[], 4096).unwrap_err());
    assert!(why.contains("empty"), "{why}");
    assert!(matches!(
        user.prepare_remote("127.0.0.1:1", &[SegmentRef::Index(0)], 4096),
        Err(Error::NotConnected { .. })
    ));
    // Lists belong to their engine.
    let why = prep(
        owner
            .transfer_prepared_async(w, local, remote, &[(0, 0)])
            .unwrap_err(),
    );
    assert!(why.contains("another engine"), "{why}");
    // Names: taken, empty, too long.
    let other = owner.alloc_device(PIECE).unwrap();
    for bad in ["kv", "", &"x".repeat(300), "a\nb"] {
        assert!(
            matches!(
                owner.register_named(&other, bad),
                Err(Error::BadName { .. })
            ),
            "{bad:?}"
        );
    }
    assert_eq!(owner.registrations(), 2, "a refused name registers nothing");
}

#[test]
fn prepared_lists_move_blocks_by_index() {
    let env = setup();
    let dev = env.rt.device(0).unwrap();
    moves_blocks_by_index(&dev);
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "leaked {c}");
}

/// A remote list prepared before a reconnect is stale, and says so (not "peer lost" while the
/// engine is connected); a list prepared again works.
#[test]
fn a_remote_list_from_before_a_reconnect_is_stale() {
    let _env = crate::util::setup();
    let p = crate::async_util::Pair::new(2 << 20, crate::util::options(1, 4), true);
    let local = p.client.prepare_local(&p.local_reg, 4096).unwrap();
    let old = p
        .client
        .prepare_remote(&p.peer_addr, &[SegmentRef::Index(0)], 4096)
        .unwrap();
    let t = std::time::Duration::from_secs(20);
    let w = ascend_fabric::TransferOp::Write;
    p.client
        .transfer_prepared_sync(w, &local, &old, &[(0, 0)], t)
        .unwrap();
    p.client.disconnect(&p.peer_addr, t).unwrap();
    // Disconnected: the list's channel is gone, and that is what it says.
    let e = p
        .client
        .transfer_prepared_sync(w, &local, &old, &[(0, 0)], t)
        .unwrap_err();
    assert!(e.is_peer_lost(), "{e:?}");
    p.client.connect(&p.peer_addr, t).unwrap();
    let e = p
        .client
        .transfer_prepared_sync(w, &local, &old, &[(0, 0)], t)
        .unwrap_err();
    assert!(
        matches!(e, Error::StalePrepared { ref peer } if *peer == p.peer_addr),
        "{e:?}"
    );
    assert_eq!(e.status(), ascend_fabric::HixlCode::PARAM_INVALID);
    assert!(
        p.client.is_connected(&p.peer_addr),
        "a stale list leaves the channel alone"
    );
    let fresh = p
        .client
        .prepare_remote(&p.peer_addr, &[SegmentRef::Index(0)], 4096)
        .unwrap();
    p.client
        .transfer_prepared_sync(w, &local, &fresh, &[(0, 0)], t)
        .unwrap();
    drop((local, old, fresh));
    p.close();
}

/// Lists of one allocation each (the path with no lookup per pair): scattered and adjacent
/// pairs (adjacent ones merge into one copy) arrive in place both ways, and a block past
/// either list is named, the local side first when both are.
#[test]
fn lists_of_one_allocation_move_blocks_and_name_bad_indices() {
    let _env = crate::util::setup();
    const B: usize = 4096;
    let p = crate::async_util::Pair::new(2 << 20, crate::util::options(4, 4), true);
    let local = p.client.prepare_local(&p.local_reg, B).unwrap();
    let remote = p
        .client
        .prepare_remote(&p.peer_addr, &[SegmentRef::Index(0)], B)
        .unwrap();
    let n = local.len();
    assert_eq!((n, remote.len()), (p.local.len() / B, p.remote.len() / B));
    let data = pattern(7, n * B);
    p.local.write_from(&data, 0).unwrap();
    // Blocks 0..8 to 40..48 (adjacent: one copy), the rest scattered (17 is coprime to 64).
    let pairs: Vec<(usize, usize)> = (0..8)
        .map(|i| (i, 40 + i))
        .chain((8..40).map(|i| (i, (17 * i) % 40)))
        .collect();
    let w = TransferOp::Write;
    p.client
        .transfer_prepared_sync(w, &local, &remote, &pairs, T)
        .unwrap();
    let mut got = vec![0u8; n * B];
    p.remote.read_into(&mut got, 0).unwrap();
    for &(i, j) in &pairs {
        assert!(
            got[j * B..(j + 1) * B] == data[i * B..(i + 1) * B],
            "{i} -> {j}"
        );
    }
    // READ every remote block written back into block n - 1 - i.
    p.local.write_from(&vec![0u8; n * B], 0).unwrap();
    let back: Vec<(usize, usize)> = pairs.iter().map(|&(i, j)| (n - 1 - i, j)).collect();
    p.client
        .transfer_prepared_sync(TransferOp::Read, &local, &remote, &back, T)
        .unwrap();
    let mut mine = vec![0u8; n * B];
    p.local.read_into(&mut mine, 0).unwrap();
    for &(i, _) in &pairs {
        let k = n - 1 - i;
        assert!(
            mine[k * B..(k + 1) * B] == data[i * B..(i + 1) * B],
            "{i} back"
        );
    }
    for (bad, want) in [
        ((n, 0), (Side::Local, n)),
        ((0, n + 1), (Side::Remote, n + 1)),
        ((n + 2, n), (Side::Local, n + 2)),
    ] {
        match p
            .client
            .transfer_prepared_async(w, &local, &remote, &[(1, 1), bad])
        {
            Err(Error::BlockIndex {
                index,
                side,
                block,
                blocks,
            }) => assert_eq!((index, side, block, blocks), (1, want.0, want.1, n)),
            other => panic!("{bad:?}: expected BlockIndex, got {other:?}"),
        }
    }
    drop((local, remote));
    p.close();
}
