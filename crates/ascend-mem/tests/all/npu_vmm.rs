//! The same round trip on a real Ascend NPU (ignored by default; needs CANN and a device).

use ascend_mem::prelude::*;
use ascend_mem::{
    DeviceBuffer, ErrorKind, ExportFlags, HostBuffer, PhysicalMem, ReservedVa, Runtime, ShareKind,
    Stream,
};

fn npu_device() -> (Runtime, ascend_mem::Device) {
    let id: i32 = std::env::var("ASCEND_TEST_DEVICE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let rt = Runtime::load().unwrap_or_else(|e| panic!("the CANN runtime did not load:\n{e}"));
    let dev = rt
        .device(id)
        .unwrap_or_else(|e| panic!("device {id} (ASCEND_TEST_DEVICE) will not open: {e}"));
    (rt, dev)
}

#[test]
#[ignore = "needs an Ascend NPU: ASCEND_TEST_DEVICE=0 cargo test -p ascend-mem --test all -- --ignored npu_vmm:: --test-threads=1"]
fn npu_roundtrip_copies_and_drop_order() {
    let (rt, dev) = npu_device();
    println!("backend: {}", rt.backend());
    let len = dev.round_up(4 << 20).unwrap();
    let va = ReservedVa::new(&dev, len.checked_mul(2).unwrap()).unwrap();
    let a = PhysicalMem::hbm(&dev, len).unwrap();
    let b = DeviceBuffer::new(&dev, len.get()).unwrap();
    let h = HostBuffer::new(&dev, len.get()).unwrap();
    let map = va.map(&a, len.zero()).unwrap();
    let data: Vec<u8> = (0..len.get()).map(|i| (i % 253) as u8).collect();
    map.write_from(&data, 0).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    s.copy_async(&b.as_slice(), &map.as_slice()).unwrap();
    s.copy_async(&h.as_slice(), &b.as_slice()).unwrap();
    s.synchronize().unwrap();
    assert_eq!(h.to_vec().unwrap(), data);
    match a.export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION) {
        Ok(fh) => println!("FABRIC export ok ({} bytes)", fh.to_bytes().len()),
        Err(e) if e.kind() == ErrorKind::NotSupported => {
            println!("skipping FABRIC export: {e}")
        }
        Err(e) => panic!("FABRIC export: {e}"),
    }
    drop(va);
    drop(a);
    drop(map);
    drop((s, b, h));
    dev.check_sticky().unwrap();
}
