//! Stream-ordered values (`aclrtValueWrite`, `aclrtValueWait`) through the loader table. Every
//! test runs in-process (threaded mode) and again in a child process with
//! `ASCEND_SIM_STREAM_MODE=deterministic` (see `deterministic_mode`).

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};

use ascend_sim::fault;
use ascend_sim::testing::hold_stream;
use common::*;

const CHILD: &str = "ASCEND_SIM_VALUES_CHILD";

/// The 64-bit word at `p` (emulated device memory is host memory in this process).
fn word(p: *mut c_void) -> &'static AtomicU64 {
    // SAFETY: `p` is an 8-byte aligned word of a live allocation the test frees only after its
    // last use of the reference; the emulator accesses it atomically too.
    unsafe { AtomicU64::from_ptr(p.cast()) }
}

fn status(s: aclrtStream) -> aclrtStreamStatus {
    let mut st = 99;
    ok!(aclrtStreamQuery(s, &mut st));
    st
}

fn read_dev(d: *mut c_void, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    ok!(aclrtMemcpy(
        out.as_mut_ptr().cast(),
        n,
        d,
        n,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    out
}

#[test]
fn deterministic_mode() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    rerun_deterministic(CHILD);
}

#[test]
fn argument_rules() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let d = dev_buf(4096);
    let mut plain = [0u64; 2];
    let p: *mut c_void = plain.as_mut_ptr().cast();
    let unaligned = d.cast::<u8>().wrapping_add(4).cast::<c_void>();
    for wait in [false, true] {
        let call = |addr: *mut c_void, flag: u32, st: aclrtStream| {
            if wait {
                acl!(aclrtValueWait(addr, 1, flag, st))
            } else {
                acl!(aclrtValueWrite(addr, 1, flag, st))
            }
        };
        assert_eq!(call(null_mut(), 0, s), ACL_ERROR_INVALID_PARAM);
        assert!(last_msg().contains("devAddr is NULL"));
        assert_eq!(call(unaligned, 0, s), ACL_ERROR_RT_ADDR_UNALIGNED);
        assert!(last_msg().contains("not 8-byte aligned"));
        // Plain host memory is not device-accessible.
        assert_eq!(call(p, 0, s), ACL_ERROR_RT_PARAM_INVALID);
        assert!(last_msg().contains("plain host memory"));
        // Past the end of the allocation.
        let past = d.cast::<u8>().wrapping_add(4096).cast::<c_void>();
        assert_ne!(call(past, 0, s), 0);
        // A stale stream handle.
        let mut dead = null_mut();
        ok!(aclrtCreateStream(&mut dead));
        ok!(aclrtDestroyStream(dead));
        assert_eq!(call(d, 0, dead), ACL_ERROR_RT_INVALID_HANDLE);
    }
    expect_code!(ACL_ERROR_INVALID_PARAM, aclrtValueWrite(d, 1, 1, s));
    assert!(last_msg().contains("flag 1 is reserved"));
    expect_code!(ACL_ERROR_INVALID_PARAM, aclrtValueWait(d, 1, 4, s));
    assert!(last_msg().contains("flag 4"));
    // Nothing was queued by the failed calls.
    ok!(aclrtSynchronizeStream(s));
    assert_eq!(word(d).load(Ordering::SeqCst), 0);
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn write_lands_in_stream_order_after_a_copy() {
    let _g = LOCK.lock();
    set_device(0);
    let (s1, s2) = (stream(), stream());
    let buf = dev_buf(1 << 20);
    let flag = dev_buf(4096);
    let src: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut out = vec![0u8; 1 << 20];
    let hold = hold_stream(s1);
    ok!(aclrtMemcpyAsync(
        buf,
        1 << 20,
        src.as_ptr().cast(),
        1 << 20,
        ACL_MEMCPY_HOST_TO_DEVICE,
        s1
    ));
    ok!(aclrtValueWrite(flag, 1, 0, s1));
    // The second stream reads the buffer only once the flag says the copy landed.
    ok!(aclrtValueWait(flag, 1, ACL_STREAM_WAIT_VALUE_EQ, s2));
    ok!(aclrtMemcpyAsync(
        out.as_mut_ptr().cast(),
        1 << 20,
        buf,
        1 << 20,
        ACL_MEMCPY_DEVICE_TO_HOST,
        s2
    ));
    // Held: neither the write nor anything behind the wait has happened.
    assert_eq!(status(s2), ACL_STREAM_STATUS_NOT_READY);
    assert_eq!(word(flag).load(Ordering::SeqCst), 0);
    hold.release();
    ok!(aclrtSynchronizeStream(s2));
    assert_eq!(word(flag).load(Ordering::SeqCst), 1);
    assert!(
        out == src,
        "the copy behind the wait ran before the data landed"
    );
    ok!(aclrtSynchronizeStream(s1));
    ok!(aclrtFree(buf));
    ok!(aclrtFree(flag));
    ok!(aclrtDestroyStream(s1));
    ok!(aclrtDestroyStream(s2));
    reset_device(0);
    assert_clean();
}

#[test]
fn wait_blocks_later_work_until_another_stream_writes() {
    let _g = LOCK.lock();
    set_device(0);
    let (s1, s2) = (stream(), stream());
    let buf = dev_buf(4096);
    let w = dev_buf(4096);
    word(w).store(3, Ordering::SeqCst);
    ok!(aclrtValueWait(w, 5, ACL_STREAM_WAIT_VALUE_GEQ, s1));
    ok!(aclrtMemsetAsync(buf, 64, 0x7, 64, s1));
    assert_eq!(status(s1), ACL_STREAM_STATUS_NOT_READY);
    assert_eq!(read_dev(buf, 64), vec![0u8; 64]);
    // A write of a smaller value does not release it.
    ok!(aclrtValueWrite(w, 4, 0, s2));
    ok!(aclrtSynchronizeStream(s2));
    assert_eq!(status(s1), ACL_STREAM_STATUS_NOT_READY);
    assert_eq!(read_dev(buf, 64), vec![0u8; 64]);
    ok!(aclrtValueWrite(w, 5, 0, s2));
    ok!(aclrtSynchronizeStream(s1));
    assert_eq!(read_dev(buf, 64), vec![7u8; 64]);
    ok!(aclrtSynchronizeStream(s2));
    ok!(aclrtFree(buf));
    ok!(aclrtFree(w));
    ok!(aclrtDestroyStream(s1));
    ok!(aclrtDestroyStream(s2));
    reset_device(0);
    assert_clean();
}

/// Each comparison: a case that holds at once, and one that blocks until the host stores a
/// releasing value to the word directly.
#[test]
fn comparisons_and_host_writes() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let w = dev_buf(4096);
    // (comparison, value, word that holds, word that blocks)
    let cases = [
        (ACL_STREAM_WAIT_VALUE_GEQ, 10, 10, 9),
        (ACL_STREAM_WAIT_VALUE_GEQ, u64::MAX - 1, 1, u64::MAX - 2),
        (ACL_STREAM_WAIT_VALUE_EQ, 42, 42, 41),
        (ACL_STREAM_WAIT_VALUE_AND, 0b0110, 0b0100, 0b1001),
        (ACL_STREAM_WAIT_VALUE_NOR, 0b01, 0b10, !0b01),
    ];
    for (cmp, value, holds, blocks) in cases {
        word(w).store(holds, Ordering::SeqCst);
        ok!(aclrtValueWait(w, value, cmp, s));
        ok!(aclrtSynchronizeStream(s));
        word(w).store(blocks, Ordering::SeqCst);
        ok!(aclrtValueWait(w, value, cmp, s));
        assert_eq!(
            status(s),
            ACL_STREAM_STATUS_NOT_READY,
            "flag {cmp} value {value:#x} word {blocks:#x}"
        );
        word(w).store(holds, Ordering::SeqCst);
        ok!(aclrtSynchronizeStream(s));
    }
    ok!(aclrtFree(w));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn abort_and_destroy_release_a_blocked_wait() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let buf = dev_buf(4096);
    let w = dev_buf(4096);
    ok!(aclrtValueWait(w, 1, ACL_STREAM_WAIT_VALUE_EQ, s));
    ok!(aclrtMemsetAsync(buf, 64, 0x9, 64, s));
    assert_eq!(status(s), ACL_STREAM_STATUS_NOT_READY);
    ok!(aclrtStreamAbort(s));
    expect_code!(ACL_ERROR_RT_STREAM_ABORT, aclrtSynchronizeStream(s));
    // The work behind the wait was discarded; the stream works again.
    assert_eq!(read_dev(buf, 64), vec![0u8; 64]);
    ok!(aclrtValueWrite(w, 2, 0, s));
    ok!(aclrtSynchronizeStream(s));
    assert_eq!(word(w).load(Ordering::SeqCst), 2);
    // Destroying a stream whose wait never holds returns.
    ok!(aclrtValueWait(w, 1, ACL_STREAM_WAIT_VALUE_EQ, s));
    assert_eq!(status(s), ACL_STREAM_STATUS_NOT_READY);
    ok!(aclrtDestroyStream(s));
    ok!(aclrtFree(buf));
    ok!(aclrtFree(w));
    reset_device(0);
    assert_clean();
}

#[test]
fn null_stream_is_the_default_stream() {
    let _g = LOCK.lock();
    set_device(0);
    let w = dev_buf(4096);
    ok!(aclrtValueWrite(w, 77, 0, null_mut()));
    ok!(aclrtValueWait(w, 77, ACL_STREAM_WAIT_VALUE_EQ, null_mut()));
    ok!(aclrtSynchronizeStream(null_mut()));
    assert_eq!(word(w).load(Ordering::SeqCst), 77);
    ok!(aclrtFree(w));
    reset_device(0);
    assert_clean();
}

#[test]
fn counted_and_fault_injectable() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let w = dev_buf(4096);
    let (w0, v0) = (
        fault::calls("aclrtValueWrite"),
        fault::calls("aclrtValueWait"),
    );
    fault::fail_nth("aclrtValueWrite", 1, ACL_ERROR_RT_DEVICE_MEM_ERROR);
    fault::fail_nth("aclrtValueWait", 1, ACL_ERROR_RT_INTERNAL_ERROR);
    expect_code!(ACL_ERROR_RT_DEVICE_MEM_ERROR, aclrtValueWrite(w, 5, 0, s));
    assert!(last_msg().contains("aclrtValueWrite"));
    expect_code!(
        ACL_ERROR_RT_INTERNAL_ERROR,
        aclrtValueWait(w, 5, ACL_STREAM_WAIT_VALUE_EQ, s)
    );
    // The injected failures did nothing: the word is still 0.
    ok!(aclrtSynchronizeStream(s));
    assert_eq!(word(w).load(Ordering::SeqCst), 0);
    ok!(aclrtValueWrite(w, 5, 0, s));
    ok!(aclrtValueWait(w, 5, ACL_STREAM_WAIT_VALUE_EQ, s));
    ok!(aclrtSynchronizeStream(s));
    assert_eq!(fault::calls("aclrtValueWrite") - w0, 2);
    assert_eq!(fault::calls("aclrtValueWait") - v0, 2);
    fault::clear();
    ok!(aclrtFree(w));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn call_log_names_the_calls() {
    let _g = LOCK.lock();
    set_device(0);
    let w = dev_buf(4096);
    ascend_sim::set_call_log(true);
    ok!(aclrtValueWrite(w, 1, 0, null_mut()));
    ok!(aclrtValueWait(w, 1, ACL_STREAM_WAIT_VALUE_EQ, null_mut()));
    let log = ascend_sim::call_log();
    ascend_sim::set_call_log(false);
    assert!(log.iter().any(|l| l.contains("aclrtValueWrite")), "{log:?}");
    assert!(log.iter().any(|l| l.contains("aclrtValueWait")), "{log:?}");
    ok!(aclrtSynchronizeStream(null_mut()));
    ok!(aclrtFree(w));
    reset_device(0);
    assert_clean();
}
