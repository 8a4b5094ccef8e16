//! Typed views and copies ([`TypedSlice`], `write_slice`, `read_into_slice`, `read_to_vec`):
//! round trips for every kind of element (integers, floats, f16, a `#[repr(C)]` struct) on
//! device and host memory, sub-views addressed in elements, each error path with its typed
//! error, a typed async copy that keeps its memory alive until the stream is synchronized,
//! the unsafe typed host copies on a stream, and collectives on typed views. Every test ends with the emulator's counters at zero.

use std::fmt::Debug;
use std::mem::size_of;

use crate::common::setup;
use crate::hccl_util::{ranks, test_config};
use ascend_mem::hccl::{half, ReduceOp, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Error, ErrorKind, HostBuffer, MappingSlice, Stream, TypedSlice};
use ascend_sim::testing::hold_stream;
use bytemuck::{Pod, Zeroable};

const MIB2: usize = 2 << 20;

/// A plain-old-data record: `repr(C)`, fields laid out without padding (8 + 4 + 2 + 2).
#[derive(Copy, Clone, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
struct Sample {
    t: u64,
    value: f32,
    channel: u16,
    flags: u16,
}

/// Writes `v` at element 3 of a typed view of `s` and reads it back three ways: the whole
/// sub-view, into a slice at an element offset, and through the byte view.
fn round_trip<T: Pod + PartialEq + Debug>(s: MappingSlice<'_>, v: &[T]) {
    let all = s.typed::<T>().unwrap();
    assert_eq!(all.len(), s.len() / size_of::<T>());
    all.fill_zero().unwrap();
    all.write_slice(v, 3).unwrap();
    let sub = all.slice(3..3 + v.len()).unwrap();
    assert_eq!(sub.len(), v.len());
    assert_eq!(sub.addr(), s.addr() + 3 * size_of::<T>());
    assert_eq!(sub.read_to_vec().unwrap(), v);
    // Element 1 onwards, into a slice.
    let mut tail = vec![T::zeroed(); v.len() - 1];
    sub.read_into_slice(&mut tail, 1).unwrap();
    assert_eq!(tail, v[1..]);
    // The elements around the sub-view are untouched zeros.
    let around = all.slice(..3).unwrap().read_to_vec().unwrap();
    assert!(around.iter().all(|x| *x == T::zeroed()));
    // The byte view holds the native-order bytes of `v`.
    let bytes = sub.as_bytes();
    assert_eq!(bytes.len(), std::mem::size_of_val(v));
    let mut raw = vec![0u8; bytes.len()];
    bytes.read_into(&mut raw, 0).unwrap();
    assert_eq!(raw, bytemuck::cast_slice::<T, u8>(v));
    // The byte-level typed copies agree.
    assert_eq!(bytes.read_to_vec::<T>().unwrap(), v);
}

#[test]
fn round_trips_of_every_element_kind_on_device_and_host() {
    let env = setup();
    let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let h = HostBuffer::new(&env.dev, MIB2).unwrap();
    let samples = [
        Sample {
            t: 1,
            value: -0.5,
            channel: 7,
            flags: 0xA5A5,
        },
        Sample {
            t: u64::MAX,
            value: 1e30,
            channel: 0,
            flags: 1,
        },
        Sample {
            t: 42,
            value: f32::MIN_POSITIVE,
            channel: 65535,
            flags: 0,
        },
    ];
    for s in [d.slice(4096..8192).unwrap(), h.slice(..4096).unwrap()] {
        round_trip::<u8>(s, &[1, 2, 3, 255, 0, 9]);
        round_trip::<u16>(s, &[1, 0xFFFF, 0x1234, 7]);
        round_trip::<u32>(s, &[0xDEAD_BEEF, 0, 1, u32::MAX, 17]);
        round_trip::<f32>(s, &[1.5, -0.0, f32::MAX, f32::EPSILON]);
        round_trip::<f64>(s, &[std::f64::consts::PI, -1e300, 0.25]);
        round_trip::<half::f16>(
            s,
            &[
                half::f16::from_f32(0.5),
                half::f16::MAX,
                half::f16::from_f32(-3.0),
            ],
        );
        round_trip::<Sample>(s, &samples);
    }
    // The same calls on the mapping and on the buffers themselves.
    d.write_slice(&[10u32, 20, 30], 5).unwrap();
    let mut back = [0u32; 3];
    d.mapping().read_into_slice(&mut back, 5).unwrap();
    assert_eq!(back, [10, 20, 30]);
    assert_eq!(d.mapping().read_to_vec::<u32>().unwrap().len(), d.len() / 4);
    h.mapping().write_slice(&[1.25f64], 0).unwrap();
    let mut one = [0f64; 1];
    h.read_into_slice(&mut one, 0).unwrap();
    assert_eq!(one, [1.25]);
    assert_eq!(h.read_to_vec::<f64>().unwrap()[0], 1.25);
    assert_eq!(h.typed::<f64>().unwrap().len(), h.len() / 8);
    drop((d, h));
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn sub_views_address_elements() {
    let env = setup();
    let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let all = d.typed::<u32>().unwrap();
    let v: Vec<u32> = (0..1000).collect();
    all.write_slice(&v, 0).unwrap();
    // A view of a view: elements 100..900, then 50..=60 of that, then the rest of that.
    let mid = all.slice(100..900).unwrap();
    assert_eq!(mid.len(), 800);
    let inner = mid.slice(50..=60).unwrap();
    assert_eq!(
        inner.read_to_vec().unwrap(),
        (150..=160).collect::<Vec<_>>()
    );
    let rest = inner.slice(4..).unwrap();
    assert_eq!(rest.len(), 7);
    assert_eq!(rest.read_to_vec().unwrap(), (154..=160).collect::<Vec<_>>());
    assert_eq!(rest.mapping().as_raw(), d.as_raw());
    assert_eq!(rest.as_bytes().offset(), 154 * 4);
    // A synchronous device-to-device copy between typed views.
    all.slice(2000..2011).unwrap().copy_from(&inner).unwrap();
    assert_eq!(
        all.slice(2000..2011).unwrap().read_to_vec().unwrap(),
        (150..=160).collect::<Vec<_>>()
    );
    // Writing at an element offset inside a sub-view lands at the right place.
    mid.write_slice(&[7, 8], 798).unwrap();
    assert_eq!(all.slice(898..900).unwrap().read_to_vec().unwrap(), [7, 8]);
    // Empty views and empty copies are fine.
    let empty = all.slice(5..5).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.read_to_vec().unwrap(), Vec::<u32>::new());
    empty.write_slice(&[], 0).unwrap();
    all.write_slice(&[], all.len()).unwrap();
    let z: TypedSlice<'_, f64> = d.slice(8..8).unwrap().typed().unwrap();
    assert_eq!(z.len(), 0);
    drop(d);
    env.finish();
}

#[test]
fn every_error_path_is_typed_and_names_the_call() {
    let env = setup();
    let d = DeviceBuffer::new(&env.dev, MIB2).unwrap();

    // Misaligned start: one byte in, for u32 (alignment 4).
    let e = d.slice(1..9).unwrap().typed::<u32>().unwrap_err();
    match &e {
        Error::MisalignedElements {
            what, addr, align, ..
        } => {
            assert_eq!(*what, "MappingSlice::typed");
            assert_eq!(*addr, d.addr() + 1);
            assert_eq!(*align, 4);
        }
        other => panic!("expected MisalignedElements, got {other:?}"),
    }
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("u32"), "{e}");
    // The same for a struct (alignment 8) at a 4-byte-aligned address of a whole length.
    assert!(matches!(
        d.slice(4..20).unwrap().typed::<Sample>(),
        Err(Error::MisalignedElements { align: 8, .. })
    ));

    // Length not a whole number of elements: for a view, and for read_to_vec.
    let e = d.slice(..6).unwrap().typed::<u32>().unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotWholeElements {
                what: "MappingSlice::typed",
                len: 6,
                elem_size: 4,
                elem: "u32",
            }
        ),
        "{e:?}"
    );
    let e = d.slice(..10).unwrap().read_to_vec::<f64>().unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotWholeElements {
                what: "read_to_vec",
                len: 10,
                elem_size: 8,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("read_to_vec"), "{e}");
    assert!(matches!(
        d.slice(..12).unwrap().read_to_vec::<Sample>(),
        Err(Error::NotWholeElements { elem_size: 16, .. })
    ));

    // Out of bounds, in each typed call; ranges reported in bytes.
    let v = d.slice(..64).unwrap().typed::<u32>().unwrap(); // 16 elements
    let e = v.write_slice(&[1, 2, 3], 14).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfBounds {
                what: "write_slice",
                offset: 56,
                len: 12,
                size: 64,
            }
        ),
        "{e:?}"
    );
    let mut dst = [0u32; 17];
    assert!(matches!(
        v.read_into_slice(&mut dst, 0),
        Err(Error::OutOfBounds {
            what: "read_into_slice",
            len: 68,
            ..
        })
    ));
    assert!(matches!(
        v.read_into_slice(&mut dst[..1], usize::MAX),
        Err(Error::OutOfBounds {
            what: "read_into_slice",
            ..
        })
    ));
    assert!(matches!(
        v.slice(10..17),
        Err(Error::OutOfBounds {
            what: "TypedSlice::slice",
            offset: 40,
            len: 28,
            size: 64,
        })
    ));
    let (start, end) = (9, 8);
    assert!(matches!(
        v.slice(start..end),
        Err(Error::OutOfBounds {
            what: "TypedSlice::slice",
            ..
        })
    ));
    assert!(matches!(
        d.write_slice(&[0u64; 2], d.len() / 8 - 1),
        Err(Error::OutOfBounds {
            what: "write_slice",
            ..
        })
    ));
    let big = d.slice(..128).unwrap().typed::<u32>().unwrap();
    assert!(matches!(v.copy_from(&big), Err(Error::OutOfBounds { .. })));

    // Zero-sized element types have no length in elements: refused, never a division by 0.
    for e in [
        d.as_slice().typed::<()>().unwrap_err(),
        d.as_slice().read_to_vec::<()>().unwrap_err(),
        d.as_slice().write_slice::<()>(&[(), ()], 0).unwrap_err(),
    ] {
        assert!(
            matches!(e, Error::InvalidArgument { value: 0, .. }),
            "{e:?}"
        );
    }
    // Nothing failed in ACL: no sticky error, nothing leaked.
    drop(d);
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn typed_async_copy_keeps_its_memory_until_synchronized() {
    let env = setup();
    let src = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let host = HostBuffer::new(&env.dev, MIB2).unwrap();
    let dst = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let v: Vec<f32> = (0..4096).map(|i| i as f32 * 0.5).collect();
    src.write_slice(&v, 0).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    {
        let (a, h, b) = (
            src.typed::<f32>().unwrap(),
            host.typed::<f32>().unwrap(),
            dst.typed::<f32>().unwrap(),
        );
        // Device -> host -> device, at element offsets.
        s.copy_typed_async(
            &h.slice(100..100 + v.len()).unwrap(),
            &a.slice(..v.len()).unwrap(),
        )
        .unwrap();
        s.copy_typed_async(
            &b.slice(7..).unwrap(),
            &h.slice(100..100 + v.len()).unwrap(),
        )
        .unwrap();
        // Too many elements for the destination: typed error, nothing queued.
        let e = s
            .copy_typed_async(&b.slice(..3).unwrap(), &a.slice(..4).unwrap())
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::OutOfBounds {
                    what: "Stream::copy_typed_async: destination",
                    len: 16,
                    size: 12,
                    ..
                }
            ),
            "{e:?}"
        );
    }
    // Drop every buffer while the copies are queued: the stream holds their mappings.
    let dst_keep = dst.into_mapping();
    drop(src);
    drop(host);
    assert_eq!(
        ascend_sim::counters().mappings,
        3,
        "mappings kept alive by the stream"
    );
    drop(hold);
    s.synchronize().unwrap();
    assert_eq!(
        ascend_sim::counters().mappings,
        1,
        "only the mapping still owned here is left"
    );
    let got = dst_keep
        .typed::<f32>()
        .unwrap()
        .slice(7..7 + v.len())
        .unwrap();
    assert_eq!(got.read_to_vec().unwrap(), v);
    drop(s);
    drop(dst_keep);
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn typed_host_async_copies_unchecked() {
    let env = setup();
    let buf = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let view = buf.typed::<u16>().unwrap().slice(10..1010).unwrap();
    let src: Vec<u16> = (0..1000).map(|i| i * 3).collect();
    let mut dst = vec![0u16; 1000];
    let mut s = Stream::new(&env.dev).unwrap();
    // SAFETY: `src` and `dst` outlive the synchronize below and are not touched before it.
    unsafe {
        s.write_slice_async_unchecked(&view, src.as_ptr(), src.len())
            .unwrap();
        s.read_slice_async_unchecked(dst.as_mut_ptr(), dst.len(), &view)
            .unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(dst, src);
    assert_eq!(view.read_to_vec().unwrap(), src);
    // Too many elements, or a length whose byte count overflows: typed errors, nothing queued.
    // SAFETY: both calls fail their checks before queuing anything.
    let (e1, e2) = unsafe {
        (
            s.write_slice_async_unchecked(&view, src.as_ptr(), 1001)
                .unwrap_err(),
            s.read_slice_async_unchecked(dst.as_mut_ptr(), usize::MAX, &view)
                .unwrap_err(),
        )
    };
    assert!(
        matches!(
            e1,
            Error::OutOfBounds {
                what: "Stream::write_slice_async_unchecked: destination",
                len: 2002,
                size: 2000,
                ..
            }
        ),
        "{e1:?}"
    );
    assert!(
        matches!(
            e2,
            Error::OutOfBounds {
                what: "Stream::read_slice_async_unchecked: source",
                ..
            }
        ),
        "{e2:?}"
    );
    drop((s, buf));
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn collectives_on_typed_views() {
    let env = setup();
    let n = 2u32;
    const COUNT: usize = 300;
    ranks(&env.rt, n, &test_config(), |r| {
        let me = r.rank;
        // Staged: a plain buffer. AllReduce of f16 and AllGather of a typed sub-view.
        let buf = DeviceBuffer::new(&r.dev, MIB2).unwrap();
        let all = buf.typed::<half::f16>().unwrap();
        let (send, recv) = (
            all.slice(..COUNT).unwrap(),
            all.slice(COUNT..2 * COUNT).unwrap(),
        );
        let mine: Vec<half::f16> = (0..COUNT)
            .map(|i| half::f16::from_f32((i % 7) as f32 + me as f32))
            .collect();
        send.write_slice(&mine, 0).unwrap();
        r.comm
            .all_reduce(&send, &recv, ReduceOp::Sum, &mut r.stream)
            .unwrap();
        r.stream.synchronize().unwrap();
        let want: Vec<half::f16> = (0..COUNT)
            .map(|i| half::f16::from_f32(2.0 * (i % 7) as f32 + 1.0))
            .collect();
        assert_eq!(recv.read_to_vec().unwrap(), want, "rank {me}");

        // Symmetric: a window over the buffer; AllGather of u64, inferred from the views.
        let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
        let words = buf.typed::<u64>().unwrap();
        let (send, recv) = (
            words.slice(..COUNT).unwrap(),
            words.slice(COUNT..COUNT + n as usize * COUNT).unwrap(),
        );
        let mine: Vec<u64> = (0..COUNT as u64)
            .map(|i| (i << 8) | u64::from(me))
            .collect();
        send.write_slice(&mine, 0).unwrap();
        r.comm.all_gather(&send, &recv, &mut r.stream).unwrap();
        r.stream.synchronize().unwrap();
        let want: Vec<u64> = (0..n)
            .flat_map(|q| (0..COUNT as u64).map(move |i| (i << 8) | u64::from(q)))
            .collect();
        assert_eq!(recv.read_to_vec().unwrap(), want, "rank {me}");
        // A receive view of the wrong element count is refused before any C call.
        let e = r
            .comm
            .all_gather(&send, &words.slice(..COUNT).unwrap(), &mut r.stream)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        win.close().unwrap();
    });
    env.finish();
}
