//! Dropping 1,000 transfer futures in flight returns while the runtime is still running their
//! copies, and nothing those copies touch is unmapped or freed until the runtime says their
//! streams are done.
//!
//! The emulator's running-copy hold keeps the first copy each stream starts running (an abort
//! does not stop a copy that has started). Every slot takes one transfer; the rest of the
//! futures wait for a slot. Then the futures, the source's registration and the source buffer
//! itself are dropped. While the copies are held, the emulator's counters show the source
//! still allocated and mapped and the slots' streams alive. Once the hold is released, the
//! held copies land in the peer's memory (so their source was still there), and the engine
//! on its own destroys the streams and frees the source. No timing: the drop's cost is a
//! bench figure.

use std::future::Future;
use std::task::{Context, Waker};
use std::time::Duration;

use crate::async_util::*;
use crate::util::*;
use ascend_fabric::{TransferDesc, TransferOp, STREAM_BUDGET};
use ascend_mem::prelude::*;
use ascend_testkit::wait_until;

const T: Duration = Duration::from_secs(60);
const FUTURES: usize = 1000;
const BLOCK: usize = 4096;
const STREAMS: u32 = 8;
const SLOTS: usize = STREAM_BUDGET / STREAMS as usize;

fn live() -> (u64, u64, u64) {
    let c = ascend_sim::counters();
    (c.physical, c.mappings, c.streams)
}

#[test]
fn dropping_futures_in_flight_never_waits_and_frees_nothing_under_a_copy() {
    let _env = setup();
    let p = Pair::new(FUTURES * BLOCK, options(STREAMS, 4), true);
    let peer = p.peer_addr.clone();
    let base = live();
    let src = p.client.alloc_device(FUTURES * BLOCK).unwrap();
    src.write_from(&pattern(7, FUTURES * BLOCK), 0).unwrap();
    let reg = p.client.register(&src).unwrap();
    let desc =
        |i: usize| TransferDesc::raw(src.addr() + (i * BLOCK), p.remote_addr(i * BLOCK), BLOCK);

    let hold = ascend_sim::testing::hold_running_copies();
    let waker = Waker::from(Flag::new());
    let mut cx = Context::from_waker(&waker);
    let mut futs: Vec<_> = (0..FUTURES)
        .map(|i| p.client.transfer(&peer, TransferOp::Write, &[desc(i)]))
        .collect();
    for f in &mut futs {
        assert!(std::pin::Pin::new(f).poll(&mut cx).is_pending());
    }
    let in_flight = p.client.peer_stats(&peer).unwrap().in_flight;
    assert_eq!(in_flight, SLOTS as u64, "every slot took a transfer");
    wait_until("every slot's copy running", T, || {
        ascend_sim::testing::held_copies() == SLOTS
    });
    let full = live();

    // Dropped on another thread only so that a drop that waited for the copies would fail
    // the test instead of hanging it (the bound only ends such a hang).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(futs);
        let _ = tx.send(());
    });
    rx.recv_timeout(T)
        .expect("dropping the futures waited for the running copies");
    // Returned with every copy still running on its aborted stream.
    assert_eq!(ascend_sim::testing::held_copies(), SLOTS);
    // Out of the in-flight table at once, or (one the progress thread was waiting on) as soon
    // as that thread lets go of it.
    wait_until(
        "the dropped transfers out of the in-flight table",
        T,
        || p.client.peer_stats(&peer).unwrap().in_flight == 0,
    );
    assert_eq!(
        reg.in_flight(),
        SLOTS,
        "the dropped transfers keep the source"
    );
    drop(reg);
    drop(src);
    assert_eq!(
        live(),
        full,
        "(physical, mappings, streams) changed under running copies"
    );

    drop(hold);
    wait_until(
        "the aborted streams destroyed and the source freed",
        T,
        || live() == base,
    );
    let remote = p.remote.to_vec().unwrap();
    let want = pattern(7, FUTURES * BLOCK);
    for i in 0..FUTURES {
        let got = &remote[i * BLOCK..(i + 1) * BLOCK];
        if i < SLOTS {
            // Its copy was running when the future was dropped: it landed.
            assert_eq!(got, &want[i * BLOCK..(i + 1) * BLOCK], "block {i}");
        } else {
            // It waited for a slot: never submitted.
            assert!(got.iter().all(|b| *b == 0), "block {i} changed");
        }
    }
    // Every slot is free again.
    let reqs: Vec<_> = (0..SLOTS)
        .map(|i| {
            let d = TransferDesc::raw(p.local_addr(i * BLOCK), p.remote_addr(i * BLOCK), 4096);
            p.client
                .transfer_async(&peer, TransferOp::Read, &[d])
                .unwrap()
        })
        .collect();
    for r in reqs {
        r.wait(T).unwrap();
    }
    p.close();
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c}");
}

/// A disconnect right after such a drop settles the aborted streams before it unmaps the
/// peer's memory and returns with the teardown complete: the held copies land in the peer's
/// buffer once released, and when the disconnect returns no import is left (nothing waits
/// for the progress thread to get to the dropped transfers).
#[test]
fn a_disconnect_after_a_drop_waits_for_the_aborted_streams() {
    let _env = setup();
    let p = Pair::new(SLOTS * BLOCK, options(STREAMS, 4), true);
    let peer = p.peer_addr.clone();
    p.local.write_from(&pattern(9, SLOTS * BLOCK), 0).unwrap();
    let hold = ascend_sim::testing::hold_running_copies();
    let reqs: Vec<_> = (0..SLOTS)
        .map(|i| {
            let d = TransferDesc::raw(p.local_addr(i * BLOCK), p.remote_addr(i * BLOCK), 4096);
            p.client
                .transfer_async(&peer, TransferOp::Write, &[d])
                .unwrap()
        })
        .collect();
    wait_until("every slot's copy running", T, || {
        ascend_sim::testing::held_copies() == SLOTS
    });
    drop(reqs);
    assert!(ascend_sim::counters().imports > 0);
    std::thread::scope(|s| {
        let d = s.spawn(|| p.client.disconnect(&peer, T));
        drop(hold);
        d.join().unwrap().unwrap();
    });
    let c = ascend_sim::counters();
    assert_eq!(c.imports, 0, "left after the disconnect: {c}");
    assert!(!p.client.is_connected(&peer));
    let remote = p.remote.to_vec().unwrap();
    let want = pattern(9, SLOTS * BLOCK);
    let missing: Vec<usize> = (0..SLOTS)
        .filter(|i| remote[i * BLOCK..(i + 1) * BLOCK] != want[i * BLOCK..(i + 1) * BLOCK])
        .collect();
    assert!(
        missing.is_empty(),
        "held copies that did not land in the peer's mapped memory: blocks {missing:?}"
    );
    p.close();
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c}");
}
