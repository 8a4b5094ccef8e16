//! The completion queue under 8 threads: 8 producers post transfers with user data into one
//! queue while 8 consumers take completions (blocking `wait`, `completed` polling, and the
//! `next` future), each transfer reported exactly once with its own data and outcome; the
//! queue's status listing, cancellation and drop.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::async_util::*;
use crate::util::*;
use ascend_fabric::{
    CompletionQueue, Error, LostReason, TransferDesc, TransferOp, TransferOptions, TransferStatus,
};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(60);
const THREADS: usize = 8;
const PER_THREAD: usize = 250;
const BLOCK: usize = 4096;

#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
struct Tag {
    producer: usize,
    block: usize,
}

#[test]
fn eight_producers_and_eight_consumers_share_one_queue() {
    let _env = setup();
    let n = THREADS * PER_THREAD;
    let p = Pair::new(n * BLOCK, options(2, 4), true);
    let data = pattern(11, n * BLOCK);
    p.local.write_from(&data, 0).unwrap();
    let queue: CompletionQueue<Tag> = CompletionQueue::new();
    let posted = AtomicUsize::new(0);
    let taken = AtomicUsize::new(0);
    let seen = Mutex::new(HashSet::new());
    let ids = Mutex::new(HashSet::new());

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (p, queue, posted) = (&p, &queue, &posted);
            s.spawn(move || {
                for k in 0..PER_THREAD {
                    let block = t * PER_THREAD + k;
                    let d = TransferDesc::raw(
                        p.local_addr(block * BLOCK),
                        p.remote_addr(block * BLOCK),
                        BLOCK,
                    );
                    // Back-pressure through the async submission: waits for a free slot.
                    let post = p.client.post(
                        &p.peer_addr,
                        TransferOp::Write,
                        &[d],
                        TransferOptions::new(),
                    );
                    let req = block_on(post, T).output.unwrap();
                    queue.push(req, Tag { producer: t, block });
                    posted.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        for c in 0..THREADS {
            let (queue, taken, seen, ids, data) = (&queue, &taken, &seen, &ids, &data);
            let p = &p;
            s.spawn(move || {
                let mut mine = 0usize;
                while taken.load(Ordering::SeqCst) < n {
                    let got = match c % 3 {
                        0 => queue.wait(16, Duration::from_millis(20)),
                        1 => queue.completed(7),
                        _ => match block_on(queue.next(), T).output {
                            Some(x) => vec![x],
                            None => Vec::new(),
                        },
                    };
                    if got.is_empty() {
                        std::thread::yield_now();
                    }
                    for x in got {
                        x.result
                            .as_ref()
                            .unwrap_or_else(|e| panic!("{:?}: {e}", x.user_data));
                        assert_eq!(x.status(), TransferStatus::Completed);
                        assert_eq!(x.peer, p.peer_addr);
                        let b = x.user_data.block;
                        assert_eq!(b / PER_THREAD, x.user_data.producer);
                        let mut got = vec![0u8; BLOCK];
                        p.remote.read_into(&mut got, b * BLOCK).unwrap();
                        assert_eq!(
                            got[..],
                            data[b * BLOCK..(b + 1) * BLOCK],
                            "{:?}",
                            x.user_data
                        );
                        assert!(
                            seen.lock().unwrap().insert(x.user_data),
                            "twice: {:?}",
                            x.user_data
                        );
                        assert!(ids.lock().unwrap().insert(x.id), "id twice: {}", x.id);
                        taken.fetch_add(1, Ordering::SeqCst);
                        mine += 1;
                    }
                }
                mine
            });
        }
    });
    assert_eq!(posted.load(Ordering::SeqCst), n);
    assert_eq!(seen.lock().unwrap().len(), n);
    assert!(queue.is_empty());
    assert_eq!(queue.ready(), 0);
    assert!(queue.completed(10).is_empty());
    assert!(block_on(queue.next(), T).output.is_none());
    p.close();
}

#[test]
fn listing_cancel_and_failures() {
    let _env = setup();
    let p = Pair::new(1 << 20, options(2, 4), true);
    let queue: CompletionQueue<&'static str> = CompletionQueue::new();
    let d = TransferDesc::raw(p.local_addr(0), p.remote_addr(0), BLOCK);
    let a = queue.push(
        p.client
            .transfer_async(&p.peer_addr, TransferOp::Write, &[d])
            .unwrap(),
        "a",
    );
    let b = queue.push(
        p.client
            .transfer_async(&p.peer_addr, TransferOp::Read, &[d])
            .unwrap(),
        "b",
    );
    assert_ne!(a, b);
    assert_eq!(queue.len(), 2);
    // Cancel one: its data back, never reported.
    let back = queue.cancel(b);
    assert_eq!(back, Some("b"));
    assert_eq!(queue.cancel(b), None);
    let got = queue.wait(10, T);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].id, got[0].user_data), (a, "a"));
    got.into_iter().for_each(|c| c.result.unwrap());

    // The listing shows ended ones with their status, running ones as waiting.
    let c = queue.push(
        p.client
            .transfer_async(&p.peer_addr, TransferOp::Write, &[d])
            .unwrap(),
        "c",
    );
    while queue.ready() == 0 {
        std::thread::yield_now();
    }
    let mut listed = Vec::new();
    queue.for_each(|id, st, data| listed.push((id, st, *data)));
    assert_eq!(listed, vec![(c, TransferStatus::Completed, "c")]);
    queue
        .completed(1)
        .into_iter()
        .for_each(|c| c.result.unwrap());

    // Running requests are listed as waiting; a lost peer fails them, reported with their
    // data. (The stream hold is process-wide; `setup` runs one test at a time.)
    let hold = ascend_sim::testing::hold_all_streams();
    let queue2: CompletionQueue<u32> = CompletionQueue::new();
    let id = queue2.push(
        p.client
            .transfer_async(&p.peer_addr, TransferOp::Write, &[d])
            .unwrap(),
        42,
    );
    let mut listed = Vec::new();
    queue2.for_each(|id, st, data| listed.push((id, st, *data)));
    assert_eq!(listed, vec![(id, TransferStatus::Waiting, 42)]);
    assert!(queue2.completed(1).is_empty());
    p.client.disconnect(&p.peer_addr, T).unwrap();
    let got = queue2.wait(1, T);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].id, got[0].user_data, got[0].status()),
        (id, 42, TransferStatus::Failed)
    );
    assert!(
        matches!(
            got[0].result,
            Err(Error::PeerLost {
                reason: LostReason::Disconnected,
                ..
            })
        ),
        "{:?}",
        got[0].result
    );
    drop(got);

    // Dropping a queue cancels what it holds.
    p.client.connect(&p.peer_addr, T).unwrap();
    let q3 = CompletionQueue::new();
    q3.push(
        p.client
            .transfer_async(&p.peer_addr, TransferOp::Write, &[d])
            .unwrap(),
        (),
    );
    assert_eq!(p.client.peer_stats(&p.peer_addr).unwrap().in_flight, 1);
    drop(q3);
    // Out of the in-flight table at once, or (the progress thread waiting on it) as soon as
    // that thread lets go; its registration once the aborted streams are done.
    ascend_testkit::wait_until("the dropped request out of the in-flight table", T, || {
        p.client.peer_stats(&p.peer_addr).unwrap().in_flight == 0
    });
    ascend_testkit::wait_until("the dropped request's registration let go", T, || {
        p.local_reg.in_flight() == 0
    });
    drop(hold);
    p.close();
}

/// Requests of two engines in one queue: their ids differ (ids are unique in the process,
/// not per engine), so both are kept and each is reported with its own data. With ids per
/// engine the second push replaced the first entry, whose drop cancelled it and called back
/// into the queue under its own lock (a deadlock, caught here by the push thread never
/// answering).
#[test]
fn two_engines_share_one_queue() {
    let _env = setup();
    let a = Pair::new(1 << 20, options(2, 4), true);
    let b = Pair::new(1 << 20, options(2, 4), true);
    let da = TransferDesc::raw(a.local_addr(0), a.remote_addr(0), BLOCK);
    let db = TransferDesc::raw(b.local_addr(0), b.remote_addr(0), BLOCK);
    // Both pending while pushed: a replaced entry would be cancelled.
    let hold = ascend_sim::testing::hold_all_streams();
    let ra = a
        .client
        .transfer_async(&a.peer_addr, TransferOp::Write, &[da])
        .unwrap();
    let rb = b
        .client
        .transfer_async(&b.peer_addr, TransferOp::Write, &[db])
        .unwrap();
    let (ia, ib) = (ra.id(), rb.id());
    assert_ne!(ia, ib);
    let queue: std::sync::Arc<CompletionQueue<&'static str>> =
        std::sync::Arc::new(CompletionQueue::new());
    let (tx, rx) = std::sync::mpsc::channel();
    let q = queue.clone();
    std::thread::spawn(move || {
        let ids = (q.push(ra, "a"), q.push(rb, "b"));
        tx.send(ids).unwrap();
    });
    let ids = rx.recv_timeout(T).expect("push deadlocked");
    assert_eq!(ids, (ia, ib));
    assert_eq!(queue.len(), 2);
    drop(hold);
    let mut got = Vec::new();
    while got.len() < 2 {
        got.extend(queue.wait(2, T));
    }
    let mut seen: Vec<_> = got.iter().map(|c| (c.id, c.user_data)).collect();
    seen.sort();
    let mut want = vec![(ia, "a"), (ib, "b")];
    want.sort();
    assert_eq!(seen, want);
    got.into_iter().for_each(|c| c.result.unwrap());
    assert!(queue.is_empty());
    drop(queue);
    a.close();
    b.close();
}
