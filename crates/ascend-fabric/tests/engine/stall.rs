//! The stall deadline: a request whose copies do not finish within it is aborted and ends
//! with a typed timeout, whoever observes it (the future's progress thread, a wait, a status
//! call); the peer stays connected and the next transfer works; nothing leaks. The copies are
//! kept queued with the emulator's process-wide stream hold, so one test function.

use std::time::Duration;

use crate::async_util::*;
use crate::util::*;
use ascend_fabric::{Error, TransferDesc, TransferOp, TransferOptions, TransferStatus};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(30);
const STALL: Duration = Duration::from_millis(50);

fn is_stall(r: &ascend_fabric::Result<()>) -> bool {
    matches!(r, Err(Error::Timeout { what, after }) if what.contains("stall") && *after == STALL)
}

#[test]
fn a_stalled_request_ends_with_a_timeout_and_releases_everything() {
    let _env = setup();
    let p = Pair::new(1 << 20, options(2, 4), true);
    let d = TransferDesc::raw(p.local_addr(0), p.remote_addr(0), 4096);
    let opts = TransferOptions::new().stall_timeout(STALL);

    let hold = ascend_sim::testing::hold_all_streams();
    // A future: woken by the progress thread when the deadline passes.
    let run = block_on(
        p.client
            .transfer_with(&p.peer_addr, TransferOp::Write, &[d], opts.clone()),
        T,
    );
    assert!(is_stall(&run.output), "{:?}", run.output);
    // A synchronous wait longer than the deadline.
    let req = p
        .client
        .transfer_async_with(&p.peer_addr, TransferOp::Write, &[d], &opts)
        .unwrap();
    let r = req.wait(T);
    assert!(is_stall(&r), "{r:?}");
    // Status calls. Held copies with no deadline: waiting, whatever the time.
    let req = p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Write, &[d])
        .unwrap();
    assert_eq!(req.status(), TransferStatus::Waiting);
    drop(req);
    // With the deadline: waiting (if observed in time) until the deadline fails it.
    let req = p
        .client
        .transfer_async_with(&p.peer_addr, TransferOp::Write, &[d], &opts)
        .unwrap();
    let t0 = std::time::Instant::now();
    while req.status() == TransferStatus::Waiting {
        assert!(
            t0.elapsed() < T,
            "the stall deadline never ended the request"
        );
        std::thread::yield_now();
    }
    assert_eq!(req.status(), TransferStatus::Failed);
    let r = req.wait(T);
    assert!(is_stall(&r), "{r:?}");
    assert!(matches!(req.wait(T), Err(Error::AlreadyReported(_))));
    drop(req);
    // Stalled requests were aborted: their slots are destroyed, no stream left but the hold's.
    assert_eq!(p.client.peer_stats(&p.peer_addr).unwrap().in_flight, 0);
    assert_eq!(p.local_reg.in_flight(), 0);
    hold.release();

    // Without a deadline the same transfer completes; the peer is still connected.
    assert!(p.client.is_connected(&p.peer_addr));
    let data = pattern(1, 4096);
    p.local.write_from(&data, 0).unwrap();
    let generous = TransferOptions::new().stall_timeout(T);
    block_on(
        p.client
            .transfer_with(&p.peer_addr, TransferOp::Write, &[d], generous),
        T,
    )
    .output
    .unwrap();
    assert_eq!(p.remote.to_vec().unwrap()[..4096], data[..]);
    p.close();
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{c}");
}
