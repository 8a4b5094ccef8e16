//! One set of copy verbs: every byte view of mapped memory (`Mapping`, `MappingSlice`,
//! `DeviceBuffer`, `HostBuffer`, `MappingRef`) is a `MemView` that behaves the same, and the
//! stream's verbs take any of them.

use crate::common::{pattern, setup};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Error, HostBuffer, Stream};

/// Every synchronous verb on `m` (at least 4096 bytes), through the trait alone.
fn exercise(m: &impl MemView) {
    let len = m.len();
    assert!(len >= 4096 && !m.is_empty(), "len {len}");
    m.fill(0xAB).unwrap();
    assert_eq!(m.to_vec().unwrap(), vec![0xAB; len]);
    m.write_from(b"hello", 8).unwrap();
    let mut back = [0u8; 5];
    m.read_into(&mut back, 8).unwrap();
    assert_eq!(&back, b"hello");
    m.write_slice(&[1u32, 2, 3], 4).unwrap(); // bytes 16..28
    let mut three = [0u32; 3];
    m.read_into_slice(&mut three, 4).unwrap();
    assert_eq!(three, [1, 2, 3]);
    assert_eq!(
        m.slice(16..28).unwrap().read_to_vec::<u32>().unwrap(),
        [1, 2, 3]
    );
    assert_eq!(m.typed::<u32>().unwrap().len(), len / 4);
    assert_eq!(m.slice(8..).unwrap().addr(), m.addr() + 8);
    assert_eq!(m.as_slice().len(), len);
    assert!(matches!(
        m.read_into(&mut back, len - 4),
        Err(Error::OutOfBounds {
            what: "read_into",
            ..
        })
    ));
    assert!(matches!(m.slice(..len + 1), Err(Error::OutOfBounds { .. })));
    assert!(matches!(
        m.slice(..10).unwrap().read_to_vec::<u32>(),
        Err(Error::NotWholeElements {
            what: "read_to_vec",
            len: 10,
            elem_size: 4,
            ..
        })
    ));
}

#[test]
fn every_byte_view_has_the_same_verbs() {
    let env = setup();
    let dev_buf = DeviceBuffer::new(&env.dev, 4096).unwrap();
    let host_buf = HostBuffer::new(&env.dev, 4096).unwrap();
    exercise(&dev_buf);
    exercise(&host_buf);
    exercise(dev_buf.mapping());
    exercise(&host_buf.slice(4096..8192).unwrap());
    let held = dev_buf.mapping().hold();
    exercise(&held);
    // A narrower view of a view borrows the buffer, not the middle view.
    let inner = dev_buf.slice(..).unwrap().slice(16..28).unwrap();
    assert_eq!(inner.read_to_vec::<u32>().unwrap(), [1, 2, 3]);
    // Synchronous device-to-device copies between any two views.
    host_buf.copy_from(&inner).unwrap();
    assert_eq!(
        host_buf.slice(..12).unwrap().read_to_vec::<u32>().unwrap(),
        [1, 2, 3]
    );
    assert!(matches!(
        inner.copy_from(&host_buf),
        Err(Error::OutOfBounds {
            what: "copy_from",
            ..
        })
    ));
    drop((held, dev_buf, host_buf));
    env.finish();
}

#[test]
fn stream_verbs_take_any_view() {
    let env = setup();
    let dev_buf = DeviceBuffer::new(&env.dev, 4096).unwrap();
    let host_buf = HostBuffer::new(&env.dev, 4096).unwrap();
    let held = dev_buf.mapping().hold();
    let data = pattern(5, 4096);
    host_buf.write_from(&data, 0).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    s.fill_async(&dev_buf, 0x11).unwrap(); // a buffer
    s.copy_async(&held, &host_buf.slice(..4096).unwrap())
        .unwrap(); // a held mapping, a view
    s.copy_async(host_buf.mapping(), &dev_buf.slice(..16).unwrap())
        .unwrap(); // a mapping
    s.synchronize().unwrap();
    let mut want = data.clone();
    want.resize(dev_buf.len(), 0x11);
    assert_eq!(dev_buf.to_vec().unwrap(), want);
    assert_eq!(host_buf.slice(..4096).unwrap().to_vec().unwrap(), data);
    assert!(matches!(
        s.copy_async(&dev_buf.slice(..8).unwrap(), &host_buf),
        Err(Error::OutOfBounds { .. })
    ));
    let mut out = vec![0u8; 4096];
    // SAFETY: `data` and `out` outlive the synchronize below and are not touched before it.
    unsafe {
        s.write_async_unchecked(&held, data.as_ptr(), 16).unwrap();
        s.read_async_unchecked(out.as_mut_ptr(), out.len(), &dev_buf)
            .unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(out, data);
    drop((s, held, dev_buf, host_buf));
    env.finish();
}
