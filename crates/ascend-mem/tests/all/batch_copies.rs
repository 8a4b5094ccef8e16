//! Batched async copies through ascend-mem: `Stream::copy_batch_async` over host and device
//! mappings, the host-side checks (each naming the copy), the runtime's `failIndex` mapped
//! back to the caller's index, the fallback to one `aclrtMemcpyAsync` per copy on a runtime
//! without the batch call, and what the stream keeps alive.

use crate::common::{
    assert_batch_refused, device1_as_device0, pattern, runtime_without_batch_call, setup,
};
use ascend_mem::prelude::*;
use ascend_mem::{BatchCopy, DeviceBuffer, Error, ErrorKind, HostBuffer, Stream};
use ascend_sim::{fault, testing::hold_stream};

const MIB2: usize = 2 << 20;
const CHUNK: usize = 64 << 10;

/// Scatters `host` into `dev` in 8 chunks (in reverse order, with zero-length copies between),
/// gathers them back into `back`, and checks the bytes.
fn round_trip(dev_id: &ascend_mem::Device, s: &mut Stream) {
    let host = HostBuffer::new(dev_id, MIB2).unwrap();
    let back = HostBuffer::new(dev_id, MIB2).unwrap();
    let dev = DeviceBuffer::new(dev_id, MIB2).unwrap();
    let data = pattern(11, 8 * CHUNK);
    host.write_from(&data, 0).unwrap();
    fn chunk(b: &ascend_mem::Mapping, k: usize) -> ascend_mem::MappingSlice<'_> {
        b.slice(k * CHUNK..(k + 1) * CHUNK).unwrap()
    }
    let mut up = Vec::new();
    for k in (0..8).rev() {
        up.push(BatchCopy::new(
            chunk(dev.mapping(), k),
            chunk(host.mapping(), k),
        ));
        up.push(BatchCopy::new(
            dev.slice(0..0).unwrap(),
            host.slice(0..0).unwrap(),
        ));
    }
    let down: Vec<BatchCopy<'_>> = (0..8)
        .map(|k| BatchCopy::new(chunk(back.mapping(), k), chunk(dev.mapping(), k)))
        .collect();
    s.copy_batch_async(&up).unwrap();
    s.copy_batch_async(&down).unwrap();
    s.synchronize().unwrap();
    assert_eq!(
        back.slice(..8 * CHUNK)
            .unwrap()
            .read_to_vec::<u8>()
            .unwrap(),
        data
    );
}

#[test]
fn one_batch_call_per_batch() {
    let env = setup();
    let mut s = Stream::new(&env.dev).unwrap();
    let (b0, c0) = (
        fault::calls("aclrtMemcpyBatchAsync"),
        fault::calls("aclrtMemcpyAsync"),
    );
    round_trip(&env.dev, &mut s);
    assert_eq!(fault::calls("aclrtMemcpyBatchAsync") - b0, 2);
    assert_eq!(fault::calls("aclrtMemcpyAsync") - c0, 0);
    // Empty batches, and batches of empty copies, call nothing.
    let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    s.copy_batch_async(&[]).unwrap();
    s.copy_batch_async(&[BatchCopy::new(d.slice(..0).unwrap(), h.slice(..0).unwrap())])
        .unwrap();
    assert_eq!(fault::calls("aclrtMemcpyBatchAsync") - b0, 2);
    drop((s, d, h));
    env.finish();
}

#[test]
fn falls_back_to_one_copy_per_entry_without_the_batch_call() {
    let env = setup();
    // A fresh table, so the hidden symbol resolves (as absent) on first use.
    let rt = runtime_without_batch_call();
    let dev = rt.device(0).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let (b0, c0) = (
        fault::calls("aclrtMemcpyBatchAsync"),
        fault::calls("aclrtMemcpyAsync"),
    );
    round_trip(&dev, &mut s);
    assert_eq!(fault::calls("aclrtMemcpyBatchAsync") - b0, 0);
    assert_eq!(
        fault::calls("aclrtMemcpyAsync") - c0,
        16,
        "one per non-empty copy"
    );
    fault::clear();
    drop((s, dev, rt));
    env.finish();
}

#[test]
fn host_checks_name_the_copy_and_queue_nothing() {
    let env = setup();
    let mut s = Stream::new(&env.dev).unwrap();
    let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let d2 = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    fn sl(b: &ascend_mem::Mapping, r: std::ops::Range<usize>) -> ascend_mem::MappingSlice<'_> {
        b.slice(r).unwrap()
    }
    let good = BatchCopy::new(sl(d.mapping(), 0..64), sl(h.mapping(), 0..64));
    let before = fault::calls("aclrtMemcpyBatchAsync");
    // Copy 2's source is longer than its destination.
    let e = s
        .copy_batch_async(&[
            good,
            good,
            BatchCopy::new(sl(d.mapping(), 0..8), sl(h.mapping(), 0..9)),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, Error::BatchCopy { api: "aclrtMemcpyBatchAsync", copy: 2, source }
            if matches!(**source, Error::OutOfBounds { len: 9, size: 8, .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains("copy 2"), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // Copy 1 is device to device.
    let e = s
        .copy_batch_async(&[
            good,
            BatchCopy::new(sl(d2.mapping(), 0..64), sl(d.mapping(), 0..64)),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, Error::BatchCopy { copy: 1, source, .. }
            if matches!(**source, Error::InvalidArgument { value, .. } if value == i128::from(acl::ACL_MEMCPY_DEVICE_TO_DEVICE))),
        "{e:?}"
    );
    // Copy 1 goes the other way from copy 0.
    let e = s
        .copy_batch_async(&[
            good,
            BatchCopy::new(sl(h.mapping(), 0..64), sl(d.mapping(), 0..64)),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, Error::BatchCopy { copy: 1, source, .. }
            if matches!(**source, Error::InvalidArgument { what, .. } if what.contains("differs from copy 0"))),
        "{e:?}"
    );
    assert_eq!(fault::calls("aclrtMemcpyBatchAsync"), before, "no C call");
    drop((s, d, d2, h));
    env.finish();
}

/// The runtime refuses one copy that the host cannot check (memory of device 1 adopted as
/// device 0's: its DEVICE location names device 0, the runtime knows better): its `failIndex`
/// indexes the arrays passed, which skip zero-length copies, and comes back as the index in
/// the caller's slice.
#[test]
fn fail_index_maps_back_to_the_callers_index() {
    let env = setup();
    let mut s = Stream::new(&env.dev).unwrap();
    let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    let (mem, va, other) = device1_as_device0(&env.dev, MIB2);
    let copies = [
        BatchCopy::new(h.slice(0..64).unwrap(), d.slice(0..64).unwrap()),
        BatchCopy::new(h.slice(64..64).unwrap(), d.slice(0..0).unwrap()),
        BatchCopy::new(h.slice(64..128).unwrap(), d.slice(64..128).unwrap()),
        BatchCopy::new(h.slice(128..192).unwrap(), other.slice(0..64).unwrap()),
    ];
    let e = s.copy_batch_async(&copies).unwrap_err();
    assert_batch_refused(&e, 3);
    assert!(e.to_string().contains("copy 3"), "{e}");
    s.synchronize().unwrap();
    drop((s, other, va, mem, d, h));
    env.finish();
}

#[test]
fn the_stream_keeps_the_batchs_mappings_alive() {
    let env = setup();
    let mut s = Stream::new(&env.dev).unwrap();
    let out = HostBuffer::new(&env.dev, MIB2).unwrap();
    let hold = hold_stream(s.as_raw());
    {
        let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();
        d.fill(0x5C).unwrap();
        s.copy_batch_async(&[BatchCopy::new(
            out.slice(..4096).unwrap(),
            d.slice(..4096).unwrap(),
        )])
        .unwrap();
        // Dropped with the copy queued: its mapping stays until the stream is synchronized.
    }
    assert_eq!(ascend_sim::counters().mappings, 2);
    hold.release();
    s.synchronize().unwrap();
    assert_eq!(ascend_sim::counters().mappings, 1);
    assert!(out
        .slice(..4096)
        .unwrap()
        .read_to_vec::<u8>()
        .unwrap()
        .iter()
        .all(|&b| b == 0x5C));
    drop((s, out));
    env.finish();
}
