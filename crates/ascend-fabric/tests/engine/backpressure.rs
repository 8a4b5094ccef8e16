//! Back-pressure: 10,000 transfer futures on an engine with 128 stream slots (4 streams each,
//! the 512-stream budget) all wait their turn and complete with their data, while the
//! synchronous API keeps failing at once with `stream slots exhausted` when every slot is
//! busy. The first 128 are kept in flight with the emulator's process-wide stream hold, so
//! the slots really are all busy; one test function. Each of the others waited for its slot,
//! and the slot-wait metric has exactly one sample for each.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::async_util::*;
use crate::util::*;
use ascend_fabric::metrics::SLOT_WAIT;
use ascend_fabric::{Error, TransferDesc, TransferOp, STREAM_BUDGET};
use ascend_mem::prelude::*;
use ascend_testkit::metrics::{DebuggingRecorder, Recorded};

const T: Duration = Duration::from_secs(120);
const N: usize = 10_000;
const BLOCK: usize = 4096;
const STREAMS: u32 = 4;
const SLOTS: usize = STREAM_BUDGET / STREAMS as usize;

/// Waits until `cond` holds (bounded by `T`).
fn until(what: &str, cond: impl FnMut() -> bool) {
    ascend_testkit::wait_until(what, T, cond);
}

#[test]
fn ten_thousand_transfers_wait_for_128_slots() {
    let _env = setup();
    assert_eq!(SLOTS, 128);
    let rec = DebuggingRecorder::new();
    let snap = rec.snapshotter();
    let p = metrics::with_local_recorder(&rec, || Pair::new(N * BLOCK, options(STREAMS, 4), true));
    let data = pattern(5, N * BLOCK);
    p.local.write_from(&data, 0).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();

    let hold = ascend_sim::testing::hold_all_streams();
    // Counts the transfers polled once: each then holds a slot (its copies held) or waits
    // in the slots' queue.
    let polled = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let (e, peer) = (p.client.clone(), p.peer_addr.clone());
            let d = TransferDesc::raw(p.local_addr(i * BLOCK), p.remote_addr(i * BLOCK), BLOCK);
            let polled = polled.clone();
            rt.spawn(async move {
                let mut f = std::pin::pin!(e.transfer(&peer, TransferOp::Write, &[d]));
                let mut first = true;
                std::future::poll_fn(|cx| {
                    let r = f.as_mut().poll(cx);
                    if std::mem::take(&mut first) {
                        polled.fetch_add(1, Ordering::SeqCst);
                    }
                    r
                })
                .await
            })
        })
        .collect();
    // Every slot is taken by a transfer whose copies are held; the others wait.
    let stats = || p.client.peer_stats(&p.peer_addr).unwrap();
    until("128 transfers in flight", || {
        stats().in_flight == SLOTS as u64
    });
    until("every transfer polled", || {
        polled.load(Ordering::SeqCst) == N
    });
    assert_eq!(p.client.stream_slots(), SLOTS);
    assert_eq!(stats().writes, 0);
    // The synchronous API fails at once, as before.
    let d = TransferDesc::raw(p.local_addr(0), p.remote_addr(0), BLOCK);
    match p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Write, &[d])
    {
        Err(Error::ResourceExhausted { what, .. }) => assert_eq!(what, "stream slots"),
        other => panic!("expected stream slots exhausted, got {other:?}"),
    }
    assert!(tasks.iter().all(|t| !t.is_finished()));
    hold.release();

    let results = rt.block_on(async {
        let mut out = Vec::with_capacity(N);
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for (i, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("transfer {i}: {e}"));
    }
    assert_eq!(p.remote.to_vec().unwrap()[..N * BLOCK], data[..]);
    let s = stats();
    assert_eq!((s.writes, s.in_flight, s.errors), (N as u64, 0, 0));
    assert!(p.client.stream_slots() <= SLOTS);
    let waits = Recorded::take(&snap).samples(SLOT_WAIT, &[("engine", p.client.channel_id())]);
    assert_eq!(waits.len(), N - SLOTS);
    assert!(waits.iter().all(|w| *w > 0.0));
    drop(rt);
    p.close();
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c}");
}

/// Requests held and not looked at still give their slots back once their copies end (the
/// progress thread watches every request from its submission): posting twice as many
/// transfers as there are slots before awaiting any gets a slot for each, and a synchronous
/// transfer behind a full set of finished, never-observed asynchronous ones gets a slot too.
#[test]
fn held_requests_give_their_slots_back_unobserved() {
    let _env = setup();
    const STREAMS: u32 = 8;
    const SLOTS: usize = STREAM_BUDGET / STREAMS as usize;
    let n = 2 * SLOTS;
    let p = Pair::new(n * BLOCK, options(STREAMS, 4), true);
    let data = pattern(9, n * BLOCK);
    p.local.write_from(&data, 0).unwrap();
    let desc =
        |i: usize| TransferDesc::raw(p.local_addr(i * BLOCK), p.remote_addr(i * BLOCK), BLOCK);

    // Every `post` resolves (a lost wake-up or a slot never given back fails `block_on`);
    // no request is polled or awaited meanwhile.
    let mut reqs = Vec::with_capacity(n);
    for i in 0..n {
        let post = p.client.post(
            &p.peer_addr,
            TransferOp::Write,
            &[desc(i)],
            ascend_fabric::TransferOptions::new(),
        );
        reqs.push(block_on(post, T).output.unwrap());
    }
    for (i, r) in reqs.into_iter().enumerate() {
        block_on(r, T)
            .output
            .unwrap_or_else(|e| panic!("transfer {i}: {e}"));
    }
    assert_eq!(p.remote.to_vec().unwrap()[..n * BLOCK], data[..]);

    // A slot's worth of asynchronous requests, held and never looked at: the synchronous
    // transfer waits for a slot one of them gives back.
    let held: Vec<_> = (0..SLOTS)
        .map(|i| {
            p.client
                .transfer_async(&p.peer_addr, TransferOp::Write, &[desc(i)])
                .unwrap()
        })
        .collect();
    p.client
        .transfer_sync(&p.peer_addr, TransferOp::Write, &[desc(SLOTS)], T)
        .unwrap();
    for r in held {
        r.wait(T).unwrap();
    }
    let s = p.client.peer_stats(&p.peer_addr).unwrap();
    assert_eq!((s.in_flight, s.errors), (0, 0));
    assert!(p.client.stream_slots() <= SLOTS);
    p.close();
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c}");
}

/// Prepared lists have the same forms: with every slot held busy, `transfer_prepared_async`
/// fails at once while `transfer_prepared` futures (and `post_prepared`) wait their turn and
/// complete with their data once the slots come back; a per-request stall deadline on a
/// prepared transfer ends it with `Timeout` while its copies are held.
#[test]
fn prepared_lists_wait_for_slots_and_take_per_request_options() {
    let _env = setup();
    const STREAMS: u32 = 8;
    const SLOTS: usize = STREAM_BUDGET / STREAMS as usize;
    let n = 3 * SLOTS;
    let p = Pair::new(n * BLOCK, options(STREAMS, 4), true);
    let data = pattern(11, n * BLOCK);
    p.local.write_from(&data, 0).unwrap();
    let local = p.client.prepare_local(&p.local_reg, BLOCK).unwrap();
    let remote = p
        .client
        .prepare_remote(&p.peer_addr, &[ascend_fabric::SegmentRef::Index(0)], BLOCK)
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();

    let hold = ascend_sim::testing::hold_all_streams();
    // One stall-bounded transfer first: it takes a slot and its copies are held.
    let stalled = p
        .client
        .transfer_prepared_async_with(
            TransferOp::Write,
            &local,
            &remote,
            &[(0, 0)],
            &ascend_fabric::TransferOptions::new().stall_timeout(Duration::from_millis(1)),
        )
        .unwrap();
    let tasks: Vec<_> = (1..n)
        .map(|i| {
            let (e, l, r) = (p.client.clone(), local.clone(), remote.clone());
            rt.spawn(async move {
                e.transfer_prepared(TransferOp::Write, &l, &r, &[(i, i)])
                    .await
            })
        })
        .collect();
    let stats = || p.client.peer_stats(&p.peer_addr).unwrap();
    until("every slot in flight", || stats().in_flight == SLOTS as u64);
    match p
        .client
        .transfer_prepared_async(TransferOp::Write, &local, &remote, &[(0, 0)])
    {
        Err(Error::ResourceExhausted { what, .. }) => assert_eq!(what, "stream slots"),
        other => panic!("expected stream slots exhausted, got {other:?}"),
    }
    match stalled.wait(T) {
        Err(Error::Timeout { what, .. }) => assert_eq!(what, "transfer (stall deadline)"),
        other => panic!("expected the stall deadline, got {other:?}"),
    }
    hold.release();
    let results = rt.block_on(async {
        let mut out = Vec::with_capacity(n);
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for (i, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("transfer {}: {e}", i + 1));
    }
    // `post_prepared` resolves to the running request.
    let req = block_on(
        p.client.post_prepared(
            TransferOp::Write,
            &local,
            &remote,
            &[(0, 0)],
            ascend_fabric::TransferOptions::new(),
        ),
        T,
    )
    .output
    .unwrap();
    req.wait(T).unwrap();
    assert!(p.remote.to_vec().unwrap()[..n * BLOCK] == data[..]);
    drop((local, remote, rt));
    p.close();
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c}");
}
