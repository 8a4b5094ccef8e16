//! Waiting on a stream from a thread that does not own it ([`StreamWaiter`]): the wait ends
//! with the work, releases nothing the work keeps alive, ends with the abort's report when the
//! owner aborts, and fails typed once the owner destroyed the stream.

use std::time::Duration;

use crate::common::{pattern, setup};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Error, ErrorKind, Stream, StreamWaiter};
use ascend_sim::testing::{hold_all_streams, hold_stream};

const MIB2: usize = 2 << 20;

fn send_sync<T: Send + Sync + Clone>() {}

#[test]
fn a_waiter_waits_in_another_thread_and_releases_nothing() {
    send_sync::<StreamWaiter>();
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    a.write_from(&pattern(7, MIB2), 0).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    s.copy_async(&b, &a).unwrap();
    let w = s.waiter();
    let short = std::thread::scope(|t| {
        t.spawn(|| w.synchronize_timeout(Duration::from_millis(5)))
            .join()
            .unwrap()
    });
    let e = short.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    drop(hold);
    std::thread::scope(|t| t.spawn(|| w.synchronize()).join().unwrap()).unwrap();
    assert_eq!(b.to_vec().unwrap(), pattern(7, MIB2));
    // The waiter released nothing: the stream still keeps both mappings, so dropping the
    // buffers leaves them mapped until the owner synchronizes.
    let before = ascend_sim::counters().mappings;
    drop((a, b));
    assert_eq!(
        ascend_sim::counters().mappings,
        before,
        "mappings kept by the stream"
    );
    s.synchronize().unwrap();
    assert_eq!(
        ascend_sim::counters().mappings,
        before - 2,
        "released by the owner"
    );
    drop(s);
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn the_owners_abort_ends_a_waiters_wait_with_its_report() {
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    // Queued, none of it running: the abort leaves nothing for the waiter to wait on.
    let hold = hold_all_streams();
    s.copy_async(&b, &a).unwrap();
    s.copy_async(&a, &b).unwrap();
    let w = s.waiter();
    let r = std::thread::scope(|t| {
        let h = t.spawn(|| w.synchronize_timeout(Duration::from_secs(60)));
        // Time for the waiter to block before the abort, so the abort has to wake it; the
        // outcome is the same when the abort comes first.
        std::thread::sleep(Duration::from_millis(20));
        s.abort().unwrap();
        h.join().unwrap()
    });
    let e = r.unwrap_err();
    assert_eq!(e.code().unwrap().0, acl::ACL_ERROR_RT_STREAM_ABORT, "{e}");
    drop(hold);
    // The report went to the waiter: the owner's next synchronize is clean.
    s.synchronize().unwrap();
    drop((s, a, b));
    let _ = env.dev.check_sticky();
    env.finish();
}

/// The abort lands at varied points: copies queued and none picked up yet, some running,
/// all done. The waiter's unbounded wait always ends: with the abort's report, or done
/// before it. A waiter still blocked 10 s after the abort fails the test (unstuck first by
/// one more copy, whose end wakes it).
#[test]
fn an_abort_ends_a_waiter_blocked_behind_queued_copies() {
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let copy = |s: &mut Stream, o: usize| {
        let (dst, src) = (b.slice(o..o + 4096).unwrap(), a.slice(o..o + 4096).unwrap());
        s.copy_async(&dst, &src).unwrap();
    };
    for it in 0..200u64 {
        let mut s = Stream::new(&env.dev).unwrap();
        for i in 0..600usize {
            copy(&mut s, (i % 256) * 4096);
        }
        let w = s.waiter();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || tx.send(w.synchronize()).unwrap());
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_micros((it * 7) % 300) {
            std::hint::spin_loop();
        }
        s.abort().unwrap();
        let r = rx.recv_timeout(Duration::from_secs(10));
        if r.is_err() {
            copy(&mut s, 0);
        }
        h.join().unwrap();
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => assert_eq!(
                e.code().map(|c| c.0),
                Some(acl::ACL_ERROR_RT_STREAM_ABORT),
                "iteration {it}: {e}"
            ),
            Err(_) => panic!("iteration {it}: the waiter was still blocked 10 s after the abort"),
        }
        let _ = s.synchronize();
    }
    drop((a, b));
    let _ = env.dev.check_sticky();
    env.finish();
}

#[test]
fn a_waiter_of_a_destroyed_stream_fails_typed() {
    let env = setup();
    let s = Stream::new(&env.dev).unwrap();
    let w = s.waiter();
    w.synchronize_timeout(Duration::ZERO).unwrap();
    drop(s);
    for (r, api) in [
        (w.synchronize(), "aclrtSynchronizeStream"),
        (
            w.synchronize_timeout(Duration::from_secs(1)),
            "aclrtSynchronizeStreamWithTimeout",
        ),
    ] {
        match r {
            Err(Error::InvalidArgument { api: a, what, .. }) => {
                assert_eq!(a, api);
                assert!(what.contains("destroyed"), "{what}");
            }
            other => panic!("{api} on a destroyed stream: {other:?}"),
        }
    }
    drop(w);
    env.finish();
}
