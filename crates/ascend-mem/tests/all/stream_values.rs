//! Stream-ordered values through ascend-mem: `ValueWord`, `Stream::value_write`,
//! `Stream::value_wait` with each `WaitCmp`, what the stream keeps alive, and the typed errors.

use crate::common::{pattern, setup};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Error, ErrorKind, HostBuffer, Stream, ValueWord, WaitCmp};
use ascend_sim::{fault, testing::hold_stream};
use ascend_testkit::emulator::runtime_without;

const MIB2: usize = 2 << 20;

#[test]
fn a_wait_orders_work_behind_another_streams_write() {
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let flags = HostBuffer::new(&env.dev, MIB2).unwrap();
    let ready = ValueWord::at(flags.mapping(), 0).unwrap();
    let data = pattern(3, MIB2);
    let mut producer = Stream::new(&env.dev).unwrap();
    let mut consumer = Stream::new(&env.dev).unwrap();
    // The consumer copies a -> b only once the producer says a is filled.
    consumer.value_wait(&ready, WaitCmp::Geq, 1).unwrap();
    consumer.copy_async(&b.as_slice(), &a.as_slice()).unwrap();
    assert!(
        !consumer.is_complete().unwrap(),
        "the wait holds with the flag at 0"
    );
    let staging = HostBuffer::new(&env.dev, MIB2).unwrap();
    staging.write_from(&data, 0).unwrap();
    let hold = hold_stream(producer.as_raw());
    producer
        .copy_async(&a.as_slice(), &staging.as_slice())
        .unwrap();
    producer.value_write(&ready, 1).unwrap();
    assert_eq!(ready.load().unwrap(), 0, "held: the write has not landed");
    hold.release();
    consumer.synchronize().unwrap();
    assert_eq!(b.to_vec().unwrap(), data);
    producer.synchronize().unwrap();
    assert_eq!(ready.load().unwrap(), 1);
    drop((producer, consumer, a, b, staging, flags));
    env.finish();
}

/// Each comparison holds at once for one word and blocks for another until the host stores
/// a releasing value.
#[test]
fn every_comparison_and_host_stores() {
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let w = ValueWord::new(buf.slice(8..16).unwrap()).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    let cases = [
        (WaitCmp::Geq, 10, 11, 9),
        (WaitCmp::Geq, u64::MAX, 0, u64::MAX - 1),
        (WaitCmp::Eq, 7, 7, 6),
        (WaitCmp::And, 0b1010, 0b1000, 0b0101),
        (WaitCmp::Nor, 0b01, 0b10, !0b01),
    ];
    for (cmp, value, holds, blocks) in cases {
        assert!(cmp.holds(holds, value) && !cmp.holds(blocks, value));
        w.store(holds).unwrap();
        s.value_wait(&w, cmp, value).unwrap();
        s.synchronize().unwrap();
        w.store(blocks).unwrap();
        s.value_wait(&w, cmp, value).unwrap();
        assert!(
            !s.is_complete().unwrap(),
            "{cmp:?} {value:#x} on {blocks:#x}"
        );
        w.store(holds).unwrap();
        s.synchronize().unwrap();
    }
    drop((s, buf));
    env.finish();
}

#[test]
fn the_stream_keeps_the_words_mapping_alive() {
    let env = setup();
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    {
        let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
        let w = ValueWord::at(buf.mapping(), 64).unwrap();
        s.value_write(&w, 42).unwrap();
        s.value_wait(&w, WaitCmp::Eq, 42).unwrap();
        // Dropped with the write and the wait still queued: the mapping stays.
    }
    assert_eq!(ascend_sim::counters().mappings, 1);
    hold.release();
    s.synchronize().unwrap();
    assert_eq!(ascend_sim::counters().mappings, 0);
    drop(s);
    env.finish();
}

#[test]
fn abort_ends_a_blocked_wait() {
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let w = ValueWord::at(buf.mapping(), 0).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    s.value_wait(&w, WaitCmp::Eq, 1).unwrap();
    s.fill_async(&buf.slice(8..16).unwrap(), 0xAB).unwrap();
    assert!(!s.is_complete().unwrap());
    s.abort().unwrap();
    let e = s.synchronize().unwrap_err();
    assert_eq!(
        e.code().map(|c| c.0),
        Some(acl::ACL_ERROR_RT_STREAM_ABORT),
        "{e}"
    );
    s.synchronize().unwrap();
    let mut tail = [0u8; 8];
    buf.read_into(&mut tail, 8).unwrap();
    assert_eq!(tail, [0; 8], "the fill behind the wait was discarded");
    drop((s, buf));
    env.finish();
}

#[test]
fn bad_words_are_typed_errors() {
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let e = ValueWord::new(buf.slice(0..16).unwrap()).unwrap_err();
    assert!(matches!(e, Error::BadValueWord { len: 16, .. }), "{e:?}");
    let e = ValueWord::new(buf.slice(4..12).unwrap()).unwrap_err();
    let addr = buf.addr() + 4;
    assert!(
        matches!(e, Error::BadValueWord { len: 8, addr: a, .. } if a == addr),
        "{e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("ValueWord::new"), "{e}");
    let e = ValueWord::at(buf.mapping(), MIB2 - 4).unwrap_err();
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e:?}");
    let e = ValueWord::at(buf.mapping(), usize::MAX - 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfBounds {
                what: "ValueWord::at",
                ..
            }
        ),
        "{e:?}"
    );
    // A runtime refusal names the call and the code.
    fault::fail_nth("aclrtValueWrite", 1, acl::ACL_ERROR_RT_ADDR_UNALIGNED);
    let w = ValueWord::at(buf.mapping(), 0).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    let e = s.value_write(&w, 1).unwrap_err();
    assert_eq!(e.api(), Some("aclrtValueWrite"));
    assert_eq!(
        e.code().map(|c| c.0),
        Some(acl::ACL_ERROR_RT_ADDR_UNALIGNED)
    );
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    fault::clear();
    drop((s, buf));
    env.finish();
}

#[test]
fn a_runtime_without_the_calls_reports_missing_symbols() {
    let env = setup();
    let rt = runtime_without(&["aclrtValueWrite", "aclrtValueWait"]);
    let dev = rt.device(0).unwrap();
    let buf = DeviceBuffer::new(&dev, MIB2).unwrap();
    let w = ValueWord::at(buf.mapping(), 0).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let e = s.value_write(&w, 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MissingSymbol {
                symbol: "aclrtValueWrite",
                ..
            }
        ),
        "{e:?}"
    );
    let e = s.value_wait(&w, WaitCmp::Eq, 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MissingSymbol {
                symbol: "aclrtValueWait",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::NotSupported);
    fault::clear();
    drop((s, buf, dev, rt));
    env.finish();
}
