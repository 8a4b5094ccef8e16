//! Cancelling transfer futures at random points (never polled, waiting for a stream slot,
//! copies queued, copies done but not yet observed) never leaves a copy that can touch memory
//! once the engine lets the transfer's memory go: the drop returns without waiting, and as
//! soon as the source registration is no longer in use (the engine's progress thread saw the
//! aborted streams done) it can be deregistered and its memory unmapped, the destination no
//! longer changes,
//! and once the streams run again no stream has a failed copy (every slot takes a transfer);
//! the transfers not cancelled complete with their data; the emulator's live-object counters
//! are back at zero after each case.
//!
//! Copies are kept queued with the emulator's process-wide stream hold; one test function.

use std::future::Future;
use std::task::{Context, Waker};
use std::time::Duration;

use crate::async_util::*;
use crate::util::*;
use ascend_fabric::{Engine, TransferDesc, TransferOp, STREAM_BUDGET};
use ascend_mem::prelude::*;
use proptest::prelude::*;

const T: Duration = Duration::from_secs(60);
const BLOCK: usize = 64 << 10;
const STREAMS: u32 = 8;
const SLOTS: usize = STREAM_BUDGET / STREAMS as usize;

#[derive(Debug, Clone)]
struct Plan {
    /// Per transfer: polls before the cancel point, and whether it is cancelled.
    futs: Vec<(u8, bool)>,
    /// Slots left free by blockers (the rest busy until the end): `None`, no blockers.
    free: Option<usize>,
    /// The streams run again before the cancels (copies may be done, unobserved).
    release_first: bool,
}

fn plans() -> impl Strategy<Value = Plan> {
    (
        proptest::collection::vec((0u8..3, any::<bool>()), 1..8),
        proptest::option::of(0usize..4),
        any::<bool>(),
    )
        .prop_map(|(futs, free, release_first)| Plan {
            futs,
            free,
            release_first,
        })
}

/// One source buffer per transfer, registered on its own so it can go right after a cancel.
struct Source {
    buf: ascend_mem::DeviceBuffer,
    reg: ascend_fabric::Registration,
}

fn poll_n(f: &mut ascend_fabric::Transfer, n: u8, waker: &Waker) -> bool {
    let mut cx = Context::from_waker(waker);
    for _ in 0..n {
        if std::pin::Pin::new(&mut *f).poll(&mut cx).is_ready() {
            return true;
        }
    }
    false
}

fn run(plan: &Plan) {
    let n = plan.futs.len();
    let p = Pair::new((n + SLOTS) * BLOCK, options(STREAMS, 4), true);
    let peer = p.peer_addr.clone();
    let sources: Vec<Source> = (0..n)
        .map(|i| {
            let buf = p.client.alloc_device(BLOCK).unwrap();
            buf.write_from(&pattern(i as u8 + 1, BLOCK), 0).unwrap();
            let reg = p.client.register(&buf).unwrap();
            Source { buf, reg }
        })
        .collect();
    let desc = |i: usize| TransferDesc::raw(sources[i].buf.addr(), p.remote_addr(i * BLOCK), BLOCK);

    let hold = ascend_sim::testing::hold_all_streams();
    let blockers: Vec<_> = match plan.free {
        None => Vec::new(),
        Some(free) => (0..SLOTS - free)
            .map(|j| {
                let d =
                    TransferDesc::raw(p.local_addr(j * 4096), p.remote_addr((n + j) * BLOCK), 4096);
                p.client
                    .transfer_async(&peer, TransferOp::Write, &[d])
                    .unwrap()
            })
            .collect(),
    };
    let waker = Waker::from(Flag::new());
    let mut futs: Vec<Option<ascend_fabric::Transfer>> = (0..n)
        .map(|i| Some(p.client.transfer(&peer, TransferOp::Write, &[desc(i)])))
        .collect();
    let mut done_early = vec![false; n];
    for (i, (polls, _)) in plan.futs.iter().enumerate() {
        done_early[i] = poll_n(futs[i].as_mut().unwrap(), *polls, &waker);
    }
    let mut hold = Some(hold);
    if plan.release_first {
        drop(hold.take());
    }
    // Cancel, then at once: the source is free to go, and the destination is what it stays.
    let mut sources: Vec<Option<Source>> = sources.into_iter().map(Some).collect();
    let mut snaps = vec![None; n];
    for (i, (_, cancel)) in plan.futs.iter().enumerate() {
        if !cancel {
            continue;
        }
        drop(futs[i].take());
        let s = sources[i].take().unwrap();
        // The drop returned without waiting; the engine lets the source go once the
        // runtime says the aborted streams are done.
        ascend_testkit::wait_until(&format!("transfer {i}: the source let go"), T, || {
            s.reg.in_flight() == 0
        });
        if let Err(e) = p.client.deregister(s.reg) {
            panic!("transfer {i}: deregistering right after the cancel: {e}");
        }
        drop(s.buf); // unmapped and freed now, streams possibly still held
        let now = p.remote.to_vec().unwrap()[i * BLOCK..(i + 1) * BLOCK].to_vec();
        let want = pattern(i as u8 + 1, BLOCK);
        assert!(
            now.iter().all(|b| *b == 0) || now == want,
            "transfer {i}: a partial copy"
        );
        snaps[i] = Some(now);
    }
    drop(hold.take());
    drop(blockers);
    let rest: Vec<(usize, ascend_fabric::Transfer)> = futs
        .into_iter()
        .enumerate()
        .filter_map(|(i, f)| f.map(|f| (i, f)))
        .collect();
    let (idx, rest): (Vec<usize>, Vec<_>) = rest.into_iter().unzip();
    for (i, r) in idx.iter().zip(join_all(rest, T)) {
        if !done_early[*i] {
            r.unwrap_or_else(|e| panic!("transfer {i}: {e}"));
        }
    }
    let remote = p.remote.to_vec().unwrap();
    for i in 0..n {
        let got = &remote[i * BLOCK..(i + 1) * BLOCK];
        match &snaps[i] {
            Some(s) => assert_eq!(got, &s[..], "transfer {i}: changed after its cancel"),
            None => assert_eq!(got, &pattern(i as u8 + 1, BLOCK)[..], "transfer {i}"),
        }
    }
    // The blockers' slots are free once their aborted streams are done (and their
    // registration let go).
    ascend_testkit::wait_until("the blockers' slots free", T, || {
        p.local_reg.in_flight() == 0
    });
    probe_every_slot(&p.client, &p);
    drop(sources);
    p.close();
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "after {plan:?}: {c}");
}

/// A transfer on every slot at once: a stream left with a failed copy fails one.
fn probe_every_slot(engine: &Engine, p: &Pair) {
    let slots = engine.stream_slots();
    let reqs: Vec<_> = (0..slots)
        .map(|j| {
            let d = TransferDesc::raw(p.local_addr(j * 4096), p.remote_addr(j * 4096), 4096);
            engine
                .transfer_async(&p.peer_addr, TransferOp::Read, &[d])
                .unwrap()
        })
        .collect();
    assert_eq!(engine.stream_slots(), slots);
    for r in reqs {
        r.wait(T).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn cancelling_at_any_point_never_leaves_a_copy_behind(plan in plans()) {
    let _env = setup();
        run(&plan);
    }
}
