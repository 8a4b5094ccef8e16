//! `Stream::copy_table_async` batching: runs of host-to-device or device-to-host copies go to
//! the runtime as one `aclrtMemcpyBatchAsync` each, device-to-device copies and lone copies
//! as one `aclrtMemcpyAsync` each, in the caller's order; every copy one call on a runtime
//! without the batch call; and the batch's `failIndex`, or a single copy's failure, comes back
//! as the caller's index.

use crate::common::{
    assert_batch_refused, device1_as_device0, pattern, runtime_without_batch_call, setup,
};
use ascend_mem::prelude::*;
use ascend_mem::{Device, DeviceBuffer, Error, HostBuffer, MappingTable, Stream, TableCopy};
use ascend_sim::fault;
use ascend_testkit::emulator::copy_calls;

const MIB2: usize = 2 << 20;
const K: usize = 64 << 10;

fn tc(dst: usize, dst_offset: usize, src: usize, src_offset: usize, len: usize) -> TableCopy {
    TableCopy {
        dst,
        dst_offset,
        src,
        src_offset,
        len,
    }
}

/// One table of a host buffer (entry 0) and two device buffers (entries 1, 2), used as both
/// sides: 8 host-to-device copies (with a zero-length one among them), 2 device-to-device, 4
/// device-to-host, then one lone host-to-device copy. Returns the calls (batch, single) and
/// checks every byte.
fn mixed_run(dev: &Device, batch: bool) -> (u64, u64) {
    let h = HostBuffer::new(dev, MIB2).unwrap();
    let d1 = DeviceBuffer::new(dev, MIB2).unwrap();
    let d2 = DeviceBuffer::new(dev, MIB2).unwrap();
    let data = pattern(7, 8 * K);
    h.write_from(&data, 0).unwrap();
    let t = MappingTable::new(
        dev,
        [
            h.slice(..).unwrap(),
            d1.slice(..).unwrap(),
            d2.slice(..).unwrap(),
        ],
    )
    .unwrap();
    let mut copies: Vec<TableCopy> = (0..8).rev().map(|k| tc(1, k * K, 0, k * K, K)).collect();
    copies.insert(3, tc(1, 0, 0, 0, 0));
    // d1 -> d2 in two halves, then d2 back into the host buffer's second half, in four.
    copies.push(tc(2, 0, 1, 0, 4 * K));
    copies.push(tc(2, 4 * K, 1, 4 * K, 4 * K));
    copies.extend((0..4).map(|k| tc(0, MIB2 / 2 + 2 * k * K, 2, 2 * k * K, 2 * K)));
    // A lone host-to-device copy: the first 64 KiB of the host buffer to the end of d2.
    copies.push(tc(2, MIB2 - K, 0, 0, K));
    let mut s = Stream::new(dev).unwrap();
    let n = copy_calls(|| {
        if batch {
            s.copy_table_async(&t, &t, &copies).unwrap()
        } else {
            s.copy_table_each_async(&t, &t, &copies).unwrap()
        }
    });
    s.synchronize().unwrap();
    assert_eq!(
        d1.slice(..8 * K).unwrap().read_to_vec::<u8>().unwrap(),
        data
    );
    assert_eq!(
        d2.slice(..8 * K).unwrap().read_to_vec::<u8>().unwrap(),
        data
    );
    let back = h.slice(MIB2 / 2..MIB2 / 2 + 8 * K).unwrap();
    assert_eq!(back.read_to_vec::<u8>().unwrap(), data);
    let tail = d2.slice(MIB2 - K..).unwrap().read_to_vec::<u8>().unwrap();
    assert_eq!(tail, data[..K]);
    drop((s, t, h, d1, d2));
    n
}

#[test]
fn host_device_runs_are_one_batch_call_each() {
    let env = setup();
    assert_eq!(
        mixed_run(&env.dev, true),
        (2, 3),
        "(batch calls, single copies)"
    );
    // Asked for one call per copy: never a batch.
    assert_eq!(
        mixed_run(&env.dev, false),
        (0, 15),
        "(batch calls, single copies)"
    );
    env.finish();
}

#[test]
fn every_copy_is_one_call_without_the_batch_call() {
    let env = setup();
    let rt = runtime_without_batch_call();
    let dev = rt.device(0).unwrap();
    let n = mixed_run(&dev, true);
    fault::clear();
    // The batch call is looked up, found absent, and never reached.
    assert_eq!(n, (0, 15), "(batch calls, single copies)");
    drop((dev, rt));
    env.finish();
}

/// Device 1's memory adopted as device 0's (the host cannot tell; the runtime refuses it as
/// the DEVICE location of device 0): its copy's `failIndex` comes back as its index in the
/// caller's slice, which counts the zero-length copy the batch call never saw.
#[test]
fn the_batch_calls_fail_index_names_the_callers_copy() {
    let env = setup();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let (mem, va, other) = device1_as_device0(&env.dev, MIB2);
    let dst =
        MappingTable::new(&env.dev, [d.slice(..).unwrap(), other.slice(..).unwrap()]).unwrap();
    let src = MappingTable::new(&env.dev, [h.slice(..).unwrap()]).unwrap();
    let copies = [
        tc(0, 0, 0, 0, K),
        tc(0, K, 0, K, 0),
        tc(0, K, 0, K, K),
        tc(1, 0, 0, 0, K),
    ];
    let mut s = Stream::new(&env.dev).unwrap();
    let e = s.copy_table_async(&dst, &src, &copies).unwrap_err();
    assert_batch_refused(&e, 3);
    s.synchronize().unwrap();
    drop((s, dst, src, other, va, mem, d, h));
    env.finish();
}

/// A batch refused as a whole (no `failIndex`: here an injected failure, on hardware a
/// runtime that does not batch these copies) is queued again one copy at a time, and the
/// copies land.
#[test]
fn a_batch_refused_as_a_whole_is_copied_one_by_one() {
    let env = setup();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let data = pattern(9, 4 * K);
    h.write_from(&data, 0).unwrap();
    let (dt, ht) = (
        MappingTable::new(&env.dev, [d.slice(..).unwrap()]).unwrap(),
        MappingTable::new(&env.dev, [h.slice(..).unwrap()]).unwrap(),
    );
    let copies: Vec<TableCopy> = (0..4).map(|k| tc(0, k * K, 0, k * K, K)).collect();
    let mut s = Stream::new(&env.dev).unwrap();
    fault::fail_nth(
        "aclrtMemcpyBatchAsync",
        1,
        acl::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    );
    let n = copy_calls(|| s.copy_table_async(&dt, &ht, &copies).unwrap());
    fault::clear();
    assert_eq!(n, (1, 4), "(batch calls, single copies)");
    s.synchronize().unwrap();
    assert_eq!(d.slice(..4 * K).unwrap().read_to_vec::<u8>().unwrap(), data);
    drop((s, dt, ht, h, d));
    env.finish();
}

/// A copy whose own `aclrtMemcpyAsync` fails comes back as its index in the caller's slice
/// (past a zero-length copy the runtime never saw), for a device-to-device copy and for a copy
/// of a run the batch call refused as a whole; the copy queued before it lands.
#[test]
fn a_single_copys_failure_names_the_callers_copy() {
    let env = setup();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    let (d1, d2) = (
        DeviceBuffer::new(&env.dev, MIB2).unwrap(),
        DeviceBuffer::new(&env.dev, MIB2).unwrap(),
    );
    let data = pattern(11, 4 * K);
    h.write_from(&data, 0).unwrap();
    d1.write_from(&data, 0).unwrap();
    let t = MappingTable::new(
        &env.dev,
        [
            h.slice(..).unwrap(),
            d1.slice(..).unwrap(),
            d2.slice(..).unwrap(),
        ],
    )
    .unwrap();
    // (destination entry, source entry, whether the batch call refuses the whole run)
    for (dst, src, refuse_batch) in [(2, 1, false), (1, 0, true)] {
        let copies: Vec<TableCopy> = [(0, K), (K, 0), (K, K), (2 * K, K)]
            .into_iter()
            .map(|(at, len)| tc(dst, at + 8 * K, src, at, len))
            .collect();
        let mut s = Stream::new(&env.dev).unwrap();
        if refuse_batch {
            fault::fail_nth(
                "aclrtMemcpyBatchAsync",
                1,
                acl::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            );
        }
        fault::fail_nth("aclrtMemcpyAsync", 2, acl::ACL_ERROR_RT_INTERNAL_ERROR);
        let e = s.copy_table_async(&t, &t, &copies).unwrap_err();
        fault::clear();
        assert!(
            matches!(&e, Error::BatchCopy { api: "aclrtMemcpyAsync", copy: 2, source }
                if source.api() == Some("aclrtMemcpyAsync")),
            "{e:?}"
        );
        assert_eq!(
            e.code().map(|c| c.0),
            Some(acl::ACL_ERROR_RT_INTERNAL_ERROR)
        );
        s.synchronize().unwrap();
        let landed = if dst == 1 { &d1 } else { &d2 };
        let landed = landed
            .slice(8 * K..9 * K)
            .unwrap()
            .read_to_vec::<u8>()
            .unwrap();
        assert_eq!(landed, data[..K]);
    }
    drop((t, h, d1, d2));
    env.finish();
}

/// A run's DEVICE location is its device-side entries' device: a table made on device 0
/// holding memory of device 1 batches the copies to each device apart, each naming its own.
#[test]
fn runs_name_the_device_of_their_device_side() {
    let env = setup();
    let dev1 = env.rt.device(1).unwrap();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    let (d0, d1) = (
        DeviceBuffer::new(&env.dev, MIB2).unwrap(),
        DeviceBuffer::new(&dev1, MIB2).unwrap(),
    );
    let data = pattern(3, 4 * K);
    h.write_from(&data, 0).unwrap();
    let t = MappingTable::new(
        &env.dev,
        [
            h.slice(..).unwrap(),
            d0.slice(..).unwrap(),
            d1.slice(..).unwrap(),
        ],
    )
    .unwrap();
    // Host -> device 0 (2), host -> device 1 (2), device 1 -> host (2).
    let copies = [
        tc(1, 0, 0, 0, 2 * K),
        tc(1, 2 * K, 0, 2 * K, 2 * K),
        tc(2, 0, 0, 0, 2 * K),
        tc(2, 2 * K, 0, 2 * K, 2 * K),
        tc(0, MIB2 / 2, 2, 0, 2 * K),
        tc(0, MIB2 / 2 + 2 * K, 2, 2 * K, 2 * K),
    ];
    let mut s = Stream::new(&env.dev).unwrap();
    let n = copy_calls(|| s.copy_table_async(&t, &t, &copies).unwrap());
    assert_eq!(n, (3, 0), "(batch calls, single copies)");
    s.synchronize().unwrap();
    assert_eq!(
        d0.slice(..4 * K).unwrap().read_to_vec::<u8>().unwrap(),
        data
    );
    assert_eq!(
        d1.slice(..4 * K).unwrap().read_to_vec::<u8>().unwrap(),
        data
    );
    let back = h.slice(MIB2 / 2..MIB2 / 2 + 4 * K).unwrap();
    assert_eq!(back.read_to_vec::<u8>().unwrap(), data);
    drop((s, t, h, d0, d1, dev1));
    env.finish();
}

/// Memory retained by address from another device's mapping (`PhysicalMem::retain`, as the
/// engine registers foreign memory) is that device's: a run into it names its device, though
/// the new mapping's address range is this device's.
#[test]
fn retained_memory_names_its_own_device() {
    let env = setup();
    let dev1 = env.rt.device(1).unwrap();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    let d1 = DeviceBuffer::new(&dev1, MIB2).unwrap();
    let mem = ascend_mem::PhysicalMem::retain(&env.dev, d1.addr()).unwrap();
    let size = env.dev.round_up(MIB2).unwrap();
    let va = ascend_mem::ReservedVa::new(&env.dev, size).unwrap();
    let alias = va.map(&mem, size.zero()).unwrap();
    let data = pattern(4, 2 * K);
    h.write_from(&data, 0).unwrap();
    let (dt, ht) = (
        MappingTable::new(&env.dev, [alias.slice(..).unwrap()]).unwrap(),
        MappingTable::new(&env.dev, [h.slice(..).unwrap()]).unwrap(),
    );
    let copies = [tc(0, 0, 0, 0, K), tc(0, K, 0, K, K)];
    let mut s = Stream::new(&env.dev).unwrap();
    let n = copy_calls(|| s.copy_table_async(&dt, &ht, &copies).unwrap());
    assert_eq!(n, (1, 0), "(batch calls, single copies)");
    s.synchronize().unwrap();
    assert_eq!(
        d1.slice(..2 * K).unwrap().read_to_vec::<u8>().unwrap(),
        data
    );
    drop((s, dt, ht, alias, va, mem, d1, h, dev1));
    env.finish();
}
