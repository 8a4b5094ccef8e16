//! How a waiter waits: a synchronous transfer makes one blocking runtime call per stream with
//! the time left (HIXL's wait), not one every few milliseconds, and a thread blocked on a
//! request's streams never holds up its status, its cancellation or the progress thread.

use std::time::Duration;

use ascend_fabric::{Error, TransferDesc, TransferOp, TransferStatus};
use ascend_mem::prelude::*;

use crate::async_util::Pair;
use crate::util::{options, pattern, setup};

const T: Duration = Duration::from_secs(60);
const LEN: usize = 2 << 20;
const STREAMS: u32 = 4;

/// One 4 KiB descriptor per stream, in an order nothing can merge.
fn scattered(p: &Pair) -> Vec<TransferDesc> {
    (0..STREAMS as usize)
        .map(|i| {
            let r = (STREAMS as usize - 1 - i) * 8192;
            TransferDesc::raw(p.local_addr(i * 8192), p.remote_addr(r), 4096)
        })
        .collect()
}

#[test]
fn a_synchronous_wait_makes_one_blocking_call_per_stream() {
    let _env = setup();
    let p = Pair::new(LEN, options(STREAMS, 4), true);
    p.local.write_from(&pattern(3, LEN), 0).unwrap();
    let descs = scattered(&p);
    let hold = ascend_sim::testing::hold_all_streams();
    let before = ascend_sim::fault::calls("aclrtSynchronizeStreamWithTimeout");
    let r = std::thread::scope(|t| {
        let h = t.spawn(|| {
            p.client
                .transfer_sync(&p.peer_addr, TransferOp::Write, &descs, T)
        });
        // Long enough for a waiter that woke every few milliseconds to wake many times; the
        // count below holds however soon the hold ends.
        std::thread::sleep(Duration::from_millis(60));
        drop(hold);
        h.join().unwrap()
    });
    r.unwrap();
    let calls = ascend_sim::fault::calls("aclrtSynchronizeStreamWithTimeout") - before;
    assert!(
        calls <= u64::from(STREAMS),
        "{calls} timed synchronize calls for {STREAMS} streams"
    );
    let (local, remote) = (p.local.to_vec().unwrap(), p.remote.to_vec().unwrap());
    for d in &descs {
        let l = d.local_addr.offset_from(p.local_addr(0)).unwrap();
        let r = d.remote_addr.offset_from(p.remote_addr(0)).unwrap();
        assert_eq!(remote[r..r + 4096], local[l..l + 4096], "descriptor at {l}");
    }
    p.close();
}

#[test]
fn status_and_cancel_go_ahead_of_a_blocked_waiter() {
    let _env = setup();
    let p = Pair::new(LEN, options(STREAMS, 4), true);
    let hold = ascend_sim::testing::hold_all_streams();
    let req = p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Write, &scattered(&p))
        .unwrap();
    let id = req.id();
    let r = std::thread::scope(|t| {
        let h = t.spawn(|| req.wait(T));
        // Time for the waiter to block on the streams first; the calls below go ahead
        // of it either way.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(req.status(), TransferStatus::Waiting);
        assert!(req.cancel(), "it was running");
        h.join().unwrap()
    });
    match r {
        Err(Error::Cancelled { id: i, .. }) => assert_eq!(i, id),
        other => panic!("the waiter saw {other:?}"),
    }
    drop(hold);
    assert_eq!(req.status(), TransferStatus::Failed);
    drop(req);
    assert!(
        p.remote.to_vec().unwrap().iter().all(|&b| b == 0),
        "the cancelled copies never ran"
    );
    p.close();
}
