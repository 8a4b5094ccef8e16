//! Streams and events. Every test runs in-process (threaded mode, the default) and again in a
//! child process with `ASCEND_SIM_STREAM_MODE=deterministic` (see `deterministic_mode`).

#[macro_use]
mod common;

use std::ptr::null_mut;
use std::time::{Duration, Instant};

use ascend_sim::testing::hold_stream;
use common::*;

const CHILD: &str = "ASCEND_SIM_STREAMS_CHILD";

fn event() -> aclrtEvent {
    let mut e = null_mut();
    ok!(aclrtCreateEvent(&mut e));
    e
}

#[test]
fn deterministic_mode() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    rerun_deterministic(CHILD);
}

#[test]
fn async_copy_and_sync() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let d = dev_buf(1 << 20);
    let src = vec![0x11u8; 1 << 20];
    let mut dst = vec![0u8; 1 << 20];
    ok!(aclrtMemcpyAsync(
        d,
        1 << 20,
        src.as_ptr().cast(),
        1 << 20,
        ACL_MEMCPY_HOST_TO_DEVICE,
        s
    ));
    ok!(aclrtMemsetAsync(d, 1 << 20, 0x22, 16, s));
    ok!(aclrtMemcpyAsync(
        dst.as_mut_ptr().cast(),
        1 << 20,
        d,
        1 << 20,
        ACL_MEMCPY_DEVICE_TO_HOST,
        s
    ));
    ok!(aclrtSynchronizeStream(s));
    assert_eq!(&dst[..16], &[0x22; 16]);
    assert_eq!(&dst[16..], &src[16..]);
    let mut st = 99;
    ok!(aclrtStreamQuery(s, &mut st));
    assert_eq!(st, ACL_STREAM_STATUS_COMPLETE);
    // NULL stream = the default stream of the current context.
    ok!(aclrtMemsetAsync(d, 16, 0x33, 16, null_mut()));
    ok!(aclrtSynchronizeStream(null_mut()));
    ok!(aclrtMemcpy(
        dst.as_mut_ptr().cast(),
        16,
        d,
        16,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    assert_eq!(&dst[..16], &[0x33; 16]);
    assert_eq!(counters().streams, 1);
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn stream_config_and_failure_mode_arguments() {
    let _g = LOCK.lock();
    set_device(0);
    let mut s = null_mut();
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtCreateStreamWithConfig(&mut s, 0, 0x1000)
    );
    expect_code!(ACL_ERROR_INVALID_PARAM, aclrtCreateStream(null_mut()));
    ok!(aclrtCreateStreamWithConfig(
        &mut s,
        0,
        ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC
    ));
    expect_code!(ACL_ERROR_INVALID_PARAM, aclrtSetStreamFailureMode(s, 2));
    ok!(aclrtSetStreamFailureMode(s, u64::from(ACL_STOP_ON_FAILURE)));
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtSynchronizeStreamWithTimeout(s, -2)
    );
    ok!(aclrtDestroyStream(s));
    expect_code!(ACL_ERROR_RT_INVALID_HANDLE, aclrtSynchronizeStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn timeout_with_hold() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let hold = hold_stream(s);
    let mut st = 0;
    ok!(aclrtStreamQuery(s, &mut st));
    assert_eq!(st, ACL_STREAM_STATUS_NOT_READY);
    expect_code!(
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
        aclrtSynchronizeStreamWithTimeout(s, 0)
    );
    let t0 = Instant::now();
    expect_code!(
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
        aclrtSynchronizeStreamWithTimeout(s, 30)
    );
    assert!(t0.elapsed() >= Duration::from_millis(25));
    let e = event();
    ok!(aclrtRecordEvent(e, s));
    expect_code!(
        ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
        aclrtSynchronizeEventWithTimeout(e, 10)
    );
    let mut es = 9;
    ok!(aclrtQueryEventStatus(e, &mut es));
    assert_eq!(es, ACL_EVENT_RECORDED_STATUS_NOT_READY);
    ok!(aclrtQueryEvent(e, &mut es));
    assert_eq!(es, ACL_EVENT_STATUS_NOT_READY);
    hold.release();
    ok!(aclrtSynchronizeStreamWithTimeout(s, -1));
    ok!(aclrtSynchronizeEventWithTimeout(e, 1000));
    ok!(aclrtQueryEventStatus(e, &mut es));
    assert_eq!(es, ACL_EVENT_RECORDED_STATUS_COMPLETE);
    ok!(aclrtQueryEvent(e, &mut es));
    assert_eq!(es, ACL_EVENT_STATUS_COMPLETE);
    ok!(aclrtDestroyEvent(e));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn abort_discards_then_reports_once() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let d = dev_buf(4096);
    ok!(aclrtMemset(d, 4096, 0, 4096));
    let hold = hold_stream(s);
    ok!(aclrtMemsetAsync(d, 4096, 0x77, 4096, s));
    ok!(aclrtStreamAbort(s));
    expect_code!(ACL_ERROR_RT_STREAM_ABORT, aclrtSynchronizeStream(s));
    ok!(aclrtSynchronizeStream(s));
    let mut b = [1u8; 16];
    ok!(aclrtMemcpy(
        b.as_mut_ptr().cast(),
        16,
        d,
        16,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    assert_eq!(b, [0u8; 16], "aborted work ran");
    // The stream is usable again.
    ok!(aclrtMemsetAsync(d, 4096, 0x78, 16, s));
    ok!(aclrtSynchronizeStream(s));
    ok!(aclrtMemcpy(
        b.as_mut_ptr().cast(),
        16,
        d,
        16,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    assert_eq!(b, [0x78u8; 16]);
    drop(hold);
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

/// A copy whose target is unmapped between submission and execution fails at execution and is
/// reported by the next synchronize; STOP_ON_FAILURE discards the rest, CONTINUE keeps going.
fn failing_task(mode: u32) {
    let s = stream();
    ok!(aclrtSetStreamFailureMode(s, u64::from(mode)));
    let (va, h) = mapped(MIB2, &dev_prop(0));
    let d = dev_buf(4096);
    ok!(aclrtMemset(d, 4096, 0, 4096));
    let hold = hold_stream(s);
    let src = [5u8; 64];
    ok!(aclrtMemcpyAsync(
        va,
        64,
        src.as_ptr().cast(),
        64,
        ACL_MEMCPY_HOST_TO_DEVICE,
        s
    ));
    ok!(aclrtMemsetAsync(d, 4096, 0x44, 16, s));
    ok!(aclrtUnmapMem(va));
    drop(hold);
    expect_code!(ACL_ERROR_RT_DEVICE_MEM_ERROR, aclrtSynchronizeStream(s));
    ok!(aclrtSynchronizeStream(s));
    let mut b = [9u8; 16];
    ok!(aclrtMemcpy(
        b.as_mut_ptr().cast(),
        16,
        d,
        16,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    let want = if mode == ACL_STOP_ON_FAILURE { 0 } else { 0x44 };
    assert_eq!(b, [want; 16]);
    ok!(aclrtFreePhysical(h));
    ok!(aclrtReleaseMemAddress(va));
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(s));
}

#[test]
fn stop_on_failure_discards_the_rest() {
    let _g = LOCK.lock();
    set_device(0);
    failing_task(ACL_STOP_ON_FAILURE);
    reset_device(0);
    assert_clean();
}

#[test]
fn continue_on_failure_keeps_going() {
    let _g = LOCK.lock();
    set_device(0);
    failing_task(ACL_CONTINUE_ON_FAILURE);
    reset_device(0);
    assert_clean();
}

#[test]
fn events_across_streams() {
    let _g = LOCK.lock();
    set_device(0);
    let (a, b) = (stream(), stream());
    let (e, start, end) = (event(), event(), event());
    let d = dev_buf(4096);
    let mut out = [0u8; 16];
    let hold = hold_stream(a);
    ok!(aclrtRecordEvent(start, a));
    ok!(aclrtMemsetAsync(d, 4096, 0x66, 16, a));
    ok!(aclrtRecordEvent(e, a));
    ok!(aclrtRecordEvent(end, a));
    ok!(aclrtStreamWaitEvent(b, e));
    ok!(aclrtMemcpyAsync(
        out.as_mut_ptr().cast(),
        16,
        d,
        16,
        ACL_MEMCPY_DEVICE_TO_HOST,
        b
    ));
    expect_code!(
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
        aclrtSynchronizeStreamWithTimeout(b, 20)
    );
    let mut ms = 0f32;
    expect_code!(
        ACL_ERROR_RT_EVENT_NOT_COMPLETE,
        aclrtEventElapsedTime(&mut ms, start, end)
    );
    drop(hold);
    ok!(aclrtSynchronizeStream(b));
    assert_eq!(out, [0x66; 16]);
    ok!(aclrtSynchronizeEvent(end));
    ok!(aclrtEventElapsedTime(&mut ms, start, end));
    assert!(ms >= 0.0);
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtEventElapsedTime(null_mut(), start, end)
    );
    ok!(aclrtResetEvent(e, a));
    ok!(aclrtSynchronizeStream(a));
    let mut es = 9;
    ok!(aclrtQueryEvent(e, &mut es));
    assert_eq!(es, ACL_EVENT_STATUS_COMPLETE);
    let mut f = null_mut();
    expect_code!(
        ACL_ERROR_INVALID_PARAM,
        aclrtCreateEventWithFlag(&mut f, 0x4)
    );
    ok!(aclrtCreateEventExWithFlag(
        &mut f,
        ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE
    ));
    expect_code!(ACL_ERROR_RT_INVALID_HANDLE, aclrtRecordEvent(a, a));
    for x in [e, start, end, f] {
        ok!(aclrtDestroyEvent(x));
    }
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(a));
    ok!(aclrtDestroyStream(b));
    reset_device(0);
    assert_clean();
}

#[test]
fn unmap_racing_async_copies_never_faults() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let host = vec![1u8; MIB2];
    for _ in 0..20 {
        let (va, h) = mapped(MIB2, &dev_prop(0));
        for _ in 0..8 {
            ok!(aclrtMemcpyAsync(
                va,
                MIB2,
                host.as_ptr().cast(),
                MIB2,
                ACL_MEMCPY_HOST_TO_DEVICE,
                s
            ));
        }
        ok!(aclrtUnmapMem(va));
        let r = acl!(aclrtSynchronizeStream(s));
        assert!(r == 0 || r == ACL_ERROR_RT_DEVICE_MEM_ERROR, "got {r}");
        ok!(aclrtFreePhysical(h));
        ok!(aclrtReleaseMemAddress(va));
    }
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

/// A queued copy that fails when it runs (`testing::fail_next_queued_copy`) is reported by the
/// next synchronize, once; a stream that stops on failure discards the work behind it, one
/// that continues runs it.
#[test]
fn a_failed_queued_copy_stops_only_a_stopping_stream() {
    let _g = LOCK.lock();
    set_device(0);
    let d = dev_buf(8192);
    for (mode, runs) in [
        (ACL_STOP_ON_FAILURE, false),
        (ACL_CONTINUE_ON_FAILURE, true),
    ] {
        let s = stream();
        ok!(aclrtSetStreamFailureMode(s, u64::from(mode)));
        ok!(aclrtMemset(d, 8192, 0, 8192));
        ascend_sim::testing::fail_next_queued_copy(ACL_ERROR_RT_DEVICE_MEM_ERROR);
        let dst = (d as usize + 4096) as *mut std::ffi::c_void;
        // Both queued before either runs (the worker could otherwise fail the copy before
        // the memset is queued behind it).
        let hold = ascend_sim::testing::hold_stream(s);
        ok!(aclrtMemcpyAsync(
            dst,
            16,
            d,
            16,
            ACL_MEMCPY_DEVICE_TO_DEVICE,
            s
        ));
        ok!(aclrtMemsetAsync(d, 16, 0x5A, 16, s));
        drop(hold);
        expect_code!(ACL_ERROR_RT_DEVICE_MEM_ERROR, aclrtSynchronizeStream(s));
        ok!(aclrtSynchronizeStream(s));
        let mut b = [0u8; 16];
        ok!(aclrtMemcpy(
            b.as_mut_ptr().cast(),
            16,
            d,
            16,
            ACL_MEMCPY_DEVICE_TO_HOST
        ));
        assert_eq!(
            b == [0x5A; 16],
            runs,
            "failure mode {mode}: the memset behind the copy"
        );
        // Fired once: the next copy runs.
        ok!(aclrtMemcpyAsync(
            dst,
            16,
            d,
            16,
            ACL_MEMCPY_DEVICE_TO_DEVICE,
            s
        ));
        ok!(aclrtSynchronizeStream(s));
        ok!(aclrtDestroyStream(s));
    }
    ok!(aclrtFree(d));
    reset_device(0);
    assert_clean();
}

/// A copy that has started runs to its end even when its stream is aborted
/// (`testing::hold_running_copies`): the abort returns while the copy waits at the hold, the
/// stream stays busy, and once the hold is released the copy lands, the work queued behind it
/// is discarded, and the next synchronize reports the abort. Threaded mode only: a
/// deterministic stream's copy runs on the caller's thread and is not held.
#[test]
fn an_aborted_stream_finishes_its_running_copy() {
    if std::env::var("ASCEND_SIM_STREAM_MODE").as_deref() == Ok("deterministic") {
        return;
    }
    let _g = LOCK.lock();
    set_device(0);
    let d = dev_buf(8192);
    ok!(aclrtMemset(d, 4096, 0x11, 4096));
    let dst = (d as usize + 4096) as *mut std::ffi::c_void;
    ok!(aclrtMemset(dst, 4096, 0, 4096));
    let s = stream();
    let hold = ascend_sim::testing::hold_running_copies();
    ok!(aclrtMemcpyAsync(
        dst,
        16,
        d,
        16,
        ACL_MEMCPY_DEVICE_TO_DEVICE,
        s
    ));
    let behind = (dst as usize + 16) as *mut std::ffi::c_void;
    ok!(aclrtMemsetAsync(behind, 16, 0x22, 16, s));
    let t0 = Instant::now();
    while ascend_sim::testing::held_copies() != 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the copy never started"
        );
        std::thread::yield_now();
    }
    ok!(aclrtStreamAbort(s));
    let mut st = 99;
    ok!(aclrtStreamQuery(s, &mut st));
    assert_eq!(
        st, ACL_STREAM_STATUS_NOT_READY,
        "the running copy keeps it busy"
    );
    assert_eq!(ascend_sim::testing::held_copies(), 1);
    drop(hold);
    expect_code!(ACL_ERROR_RT_STREAM_ABORT, aclrtSynchronizeStream(s));
    ok!(aclrtSynchronizeStream(s));
    let mut b = [0u8; 32];
    ok!(aclrtMemcpy(
        b.as_mut_ptr().cast(),
        32,
        dst,
        32,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    assert_eq!(&b[..16], &[0x11; 16], "the running copy landed");
    assert_eq!(&b[16..], &[0; 16], "the memset behind it was discarded");
    assert_eq!(ascend_sim::testing::held_copies(), 0);
    ok!(aclrtDestroyStream(s));
    ok!(aclrtFree(d));
    reset_device(0);
    assert_clean();
}
