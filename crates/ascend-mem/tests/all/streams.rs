//! Streams, events, the stream pool and async copies: ordering, timeouts, abort, and that a
//! stream keeps the memory of its pending copies mapped until it is synchronized.

use std::time::Duration;

use crate::common::{pattern, setup};
use ascend_mem::prelude::*;
use ascend_mem::{
    DeviceBuffer, ErrorKind, Event, EventFlags, FailureMode, HostBuffer, Stream, StreamFlags,
    StreamPool,
};
use ascend_sim::testing::hold_stream;

const MIB2: usize = 2 << 20;

#[test]
fn async_copy_chain_device_host_device() {
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let data = pattern(9, MIB2);
    a.write_from(&data, 0).unwrap();
    let mut s = Stream::with_config(
        &env.dev,
        0,
        StreamFlags::FAST_LAUNCH | StreamFlags::FAST_SYNC,
    )
    .unwrap();
    s.set_failure_mode(FailureMode::Stop).unwrap();
    s.copy_async(&h.as_slice(), &a.as_slice()).unwrap();
    s.copy_async(&b.as_slice(), &h.as_slice()).unwrap();
    s.fill_async(&a.slice(0..4096).unwrap(), 0xEE).unwrap();
    s.synchronize().unwrap();
    assert_eq!(b.to_vec().unwrap(), data);
    assert_eq!(h.to_vec().unwrap(), data);
    let mut head = [0u8; 4097];
    a.read_into(&mut head, 0).unwrap();
    assert!(head[..4096].iter().all(|x| *x == 0xEE));
    assert_eq!(head[4096], data[4096]);
    assert!(s.is_complete().unwrap());
    drop((a, h, b, s));
    env.finish();
}

#[test]
fn pending_copy_keeps_memory_mapped_until_sync() {
    let env = setup();
    let src = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let dst = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    src.write_from(&pattern(1, MIB2), 0).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    s.copy_async(&dst.as_slice(), &src.as_slice()).unwrap();
    // Not done while held: query says so, a short wait times out with the timeout code.
    assert!(!s.is_complete().unwrap());
    let e = s
        .synchronize_timeout(Duration::from_millis(20))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(e.code().unwrap().0, acl::ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
    // Drop both buffers while the copy is queued: the stream holds their mappings.
    drop(src);
    drop(dst);
    assert_eq!(
        ascend_sim::counters().mappings,
        2,
        "mappings kept alive by the stream"
    );
    drop(hold);
    s.synchronize().unwrap();
    assert_eq!(
        ascend_sim::counters().mappings,
        0,
        "released after synchronize"
    );
    drop(s);
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn dropping_a_stream_with_pending_work_waits() {
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    a.fill(3).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    s.copy_async(&b.as_slice(), &a.as_slice()).unwrap();
    drop(s); // synchronizes, destroys, then releases its keepalives
    assert!(b.to_vec().unwrap().iter().all(|x| *x == 3));
    drop((a, b));
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn events_record_wait_query_and_time() {
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    a.write_from(&pattern(4, MIB2), 0).unwrap();
    let mut s1 = Stream::new(&env.dev).unwrap();
    let mut s2 = Stream::new(&env.dev).unwrap();
    let start = Event::with_flags(&env.dev, EventFlags::TIME_LINE).unwrap();
    let end = Event::with_flags(&env.dev, EventFlags::TIME_LINE).unwrap();
    let hold = hold_stream(s1.as_raw());
    start.record(&mut s1).unwrap();
    s1.copy_async(&b.as_slice(), &a.as_slice()).unwrap();
    end.record(&mut s1).unwrap();
    // s2 waits for s1's copy before its own fill of the first page of b.
    s2.wait_event(&end).unwrap();
    s2.fill_async(&b.slice(0..4096).unwrap(), 0x77).unwrap();
    assert!(!end.is_complete().unwrap());
    let e = end
        .synchronize_timeout(Duration::from_millis(10))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    drop(hold);
    end.synchronize().unwrap();
    s2.synchronize().unwrap();
    assert!(end.is_complete().unwrap());
    let ms = end.elapsed_since(&start).unwrap();
    assert!(ms >= 0.0, "elapsed {ms}");
    let v = b.to_vec().unwrap();
    assert!(
        v[..4096].iter().all(|x| *x == 0x77),
        "fill ran after the copy"
    );
    assert_eq!(&v[4096..], &pattern(4, MIB2)[4096..]);
    let plain = Event::new(&env.dev).unwrap();
    plain.record(&mut s1).unwrap();
    plain.synchronize().unwrap();
    drop((start, end, plain, s1, s2, a, b));
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn abort_discards_queued_work_without_crashing() {
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    a.fill(1).unwrap();
    b.fill(2).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    s.copy_async(&b.as_slice(), &a.as_slice()).unwrap();
    s.abort().unwrap();
    drop(hold);
    // The first synchronize after an abort may report it; the next is clean.
    if let Err(e) = s.synchronize() {
        assert_eq!(e.code().unwrap().0, acl::ACL_ERROR_RT_STREAM_ABORT, "{e}");
    }
    s.synchronize().unwrap();
    assert!(
        b.to_vec().unwrap().iter().all(|x| *x == 2),
        "aborted copy did not run"
    );
    drop((s, a, b));
    let _ = env.dev.check_sticky();
    env.finish();
}

#[test]
fn stream_pool_leases_round_robin() {
    let env = setup();
    let pool = StreamPool::new(&env.dev, 3, StreamFlags::empty()).unwrap();
    assert_eq!(pool.len(), 3);
    let l1 = pool.lease();
    let l2 = pool.lease();
    let l3 = pool.lease();
    let raws = [l1.as_raw(), l2.as_raw(), l3.as_raw()];
    assert!(raws[0] != raws[1] && raws[1] != raws[2] && raws[0] != raws[2]);
    assert!(pool.try_lease().is_none());
    assert!(pool.lease_timeout(Duration::from_millis(5)).is_none());
    drop(l2);
    let again = pool.lease();
    assert_eq!(again.as_raw(), raws[1]);
    drop((l1, l3, again));
    // Round robin: returned in order 1, 3, 2.
    let order: Vec<_> = (0..3).map(|_| pool.lease()).collect();
    assert_eq!(
        order.iter().map(|l| l.as_raw()).collect::<Vec<_>>(),
        vec![raws[0], raws[2], raws[1]]
    );
    // A lease is a stream: copy through it, from another thread.
    drop(order);
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    a.fill(5).unwrap();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut l = pool.lease();
            l.copy_async(&b.as_slice(), &a.as_slice()).unwrap();
            l.synchronize().unwrap();
        });
    });
    assert!(b.to_vec().unwrap().iter().all(|x| *x == 5));
    let e = StreamPool::new(&env.dev, 0, StreamFlags::empty()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    drop((pool, a, b));
    env.finish();
}

#[test]
fn unsafe_host_async_copies() {
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let src = pattern(8, 4096);
    let mut dst = vec![0u8; 4096];
    let mut s = Stream::new(&env.dev).unwrap();
    // SAFETY: `src` and `dst` outlive the synchronize below and are not touched before it.
    unsafe {
        s.write_async_unchecked(&buf.as_slice(), src.as_ptr(), src.len())
            .unwrap();
        s.read_async_unchecked(dst.as_mut_ptr(), dst.len(), &buf.as_slice())
            .unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(dst, src);
    drop((s, buf));
    env.finish();
}
