//! `MappingTable` and `Stream::copy_table_async`: copies land where their (entry, offset)
//! says, bad copies are refused before anything is queued, the stream keeps the tables'
//! memory mapped until it is synchronized, and tables of two runtimes do not mix.

use crate::common::{pattern, run_child, setup, sim_library};
use ascend_mem::prelude::*;
use ascend_mem::{
    CopySide, DeviceBuffer, Error, ErrorKind, MappingSlice, MappingTable, Runtime, Stream,
    TableCopy,
};
use ascend_sim::testing::hold_stream;
use ascend_testkit::{assert_ok, role, test_name};

const MIB2: usize = 2 << 20;

fn tc(dst: usize, dst_offset: usize, src: usize, src_offset: usize, len: usize) -> TableCopy {
    TableCopy {
        dst,
        dst_offset,
        src,
        src_offset,
        len,
    }
}

fn bad_offset(c: &TableCopy, side: CopySide) -> usize {
    match side {
        CopySide::Dst => c.dst_offset,
        CopySide::Src => c.src_offset,
    }
}

/// Reads a whole buffer.
fn contents(b: &DeviceBuffer) -> Vec<u8> {
    b.to_vec().unwrap()
}

#[test]
fn batch_copies_land_where_addressed() {
    let env = setup();
    let bufs: Vec<DeviceBuffer> = (0..3)
        .map(|i| {
            let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
            b.write_from(&pattern(i as u8 * 40 + 1, MIB2), 0).unwrap();
            b
        })
        .collect();
    // Entries: views of different sizes and starts, one mapping appearing twice.
    let views = [
        (0, 0, MIB2),
        (1, 4096, 64 << 10),
        (0, MIB2 / 2, MIB2 / 2),
        (2, 100, 5000),
    ];
    let slices: Vec<MappingSlice<'_>> = views
        .iter()
        .map(|&(b, at, len)| bufs[b].slice(at..at + len).unwrap())
        .collect();
    let t = MappingTable::new(&env.dev, slices.iter().copied()).unwrap();
    assert_eq!(t.len(), 4);
    assert!(!t.is_empty());
    assert!(t.get(4).is_none());
    for (i, &(b, at, len)) in views.iter().enumerate() {
        let e = t.get(i).unwrap();
        assert_eq!(e.len(), len);
        assert_eq!(e.addr(), bufs[b].addr() + at);
    }
    // A host model of the three buffers, updated copy by copy in queue order.
    let mut model: Vec<Vec<u8>> = bufs.iter().map(contents).collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let mut copies = Vec::new();
    for _ in 0..200 {
        let (d, s) = (rnd(4), rnd(4));
        let len = rnd(views[d].2.min(views[s].2).min(9000)) + usize::from(rnd(8) == 0);
        let len = len.min(views[d].2).min(views[s].2);
        let c = tc(
            d,
            rnd(views[d].2 - len + 1),
            s,
            rnd(views[s].2 - len + 1),
            len,
        );
        copies.push(c);
    }
    let mut s = Stream::new(&env.dev).unwrap();
    for chunk in copies.chunks(50) {
        s.copy_table_async(&t, &t, chunk).unwrap();
    }
    s.synchronize().unwrap();
    for c in &copies {
        let (db, dat, _) = views[c.dst];
        let (sb, sat, _) = views[c.src];
        let tmp = model[sb][sat + c.src_offset..sat + c.src_offset + c.len].to_vec();
        model[db][dat + c.dst_offset..dat + c.dst_offset + c.len].copy_from_slice(&tmp);
    }
    for (i, b) in bufs.iter().enumerate() {
        assert!(contents(b) == model[i], "buffer {i} differs from the model");
    }
    drop((t, slices));
    drop((bufs, s));
    env.finish();
}

#[test]
fn bad_copies_are_refused_before_any_is_queued() {
    let env = setup();
    let a = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let b = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    a.write_from(&pattern(3, MIB2), 0).unwrap();
    b.write_from(&pattern(4, MIB2), 0).unwrap();
    let src = MappingTable::new(&env.dev, [a.as_slice()]).unwrap();
    let dst = MappingTable::new(&env.dev, [b.slice(4096..8192).unwrap()]).unwrap();
    let good = tc(0, 0, 0, 0, 4096);
    let mut s = Stream::new(&env.dev).unwrap();
    // (copy, side, entry, size): `size` None = no such entry.
    let cases: [(TableCopy, CopySide, usize, Option<usize>); 5] = [
        (tc(1, 0, 0, 0, 16), CopySide::Dst, 1, None),
        (tc(0, 0, 7, 0, 16), CopySide::Src, 7, None),
        (tc(0, 1, 0, 0, 4096), CopySide::Dst, 0, Some(4096)),
        (tc(0, 0, 0, MIB2 - 8, 16), CopySide::Src, 0, Some(MIB2)),
        (tc(0, usize::MAX, 0, 0, 2), CopySide::Dst, 0, Some(4096)),
    ];
    for (bad, side, entry, size) in cases {
        let e = s.copy_table_async(&dst, &src, &[good, bad]).unwrap_err();
        match (&e, size) {
            (
                Error::NoTableEntry {
                    copy,
                    side: sd,
                    entry: en,
                    entries,
                },
                None,
            ) => assert_eq!((*copy, *sd, *en, *entries), (1, side, entry, 1)),
            (
                Error::TableRange {
                    copy,
                    side: sd,
                    entry: en,
                    offset,
                    len,
                    size: sz,
                },
                Some(size),
            ) => assert_eq!(
                (*copy, *sd, *en, *offset, *len, *sz),
                (1, side, entry, bad_offset(&bad, side), bad.len, size)
            ),
            (other, _) => panic!("expected a table error for {bad:?}, got {other:?}"),
        }
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let msg = e.to_string();
        assert!(
            msg.contains("copy 1") && msg.contains(&format!("{side} entry {entry}")),
            "{msg}"
        );
    }
    s.synchronize().unwrap();
    // The good copy ahead of each bad one was not queued either.
    assert!(contents(&b) == pattern(4, MIB2));
    // Empty batches and zero-length copies queue nothing and succeed.
    s.copy_table_async(&dst, &src, &[]).unwrap();
    s.copy_table_async(&dst, &src, &[tc(0, 4096, 0, 0, 0)])
        .unwrap();
    // An empty table is valid; any copy into it names no entry.
    let none = MappingTable::new(&env.dev, std::iter::empty()).unwrap();
    assert!(none.is_empty());
    let e = s.copy_table_async(&none, &src, &[good]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NoTableEntry {
                entries: 0,
                side: CopySide::Dst,
                ..
            }
        ),
        "{e:?}"
    );
    drop((a, b, src, dst, none, s));
    env.finish();
}

#[test]
fn stream_keeps_table_memory_mapped_until_sync() {
    let env = setup();
    let dst = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let src = DeviceBuffer::new(&env.dev, MIB2).unwrap();
    let data = pattern(11, MIB2);
    src.write_from(&data, 0).unwrap();
    let dt = MappingTable::new(&env.dev, [dst.as_slice()]).unwrap();
    let st = MappingTable::new(&env.dev, [src.as_slice()]).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    s.copy_table_async(&dt, &st, &[tc(0, 0, 0, 0, MIB2)])
        .unwrap();
    let mapped = ascend_sim::counters().mappings;
    // The source's buffer and table go while the copy waits: its mapping must stay.
    drop((st, src));
    assert_eq!(ascend_sim::counters().mappings, mapped);
    drop(hold);
    s.synchronize().unwrap();
    assert!(contents(&dst) == data);
    assert_eq!(ascend_sim::counters().mappings, mapped - 1);
    drop((dt, dst, s));
    env.finish();
}

/// Tables and streams of two runtimes (the linked-in emulator and the emulator's shared
/// library opened with dlopen, two separate instances in one process) are refused.
#[test]
fn tables_of_another_runtime_are_refused() {
    let name = test_name!(tables_of_another_runtime_are_refused);
    match role().as_deref() {
        Some("two-runtimes") => {
            let dl = Runtime::load().unwrap();
            let emu = Runtime::emulated().unwrap();
            let (ddev, edev) = (dl.device(0).unwrap(), emu.device(0).unwrap());
            let db = DeviceBuffer::new(&ddev, MIB2).unwrap();
            let eb = DeviceBuffer::new(&edev, MIB2).unwrap();
            let e = MappingTable::new(&edev, [eb.as_slice(), db.as_slice()]).unwrap_err();
            assert!(
                matches!(e, Error::WrongDevice { what, .. } if what.starts_with("MappingTable::new")),
                "{e:?}"
            );
            let dt = MappingTable::new(&ddev, [db.as_slice()]).unwrap();
            let et = MappingTable::new(&edev, [eb.as_slice()]).unwrap();
            let mut es = Stream::new(&edev).unwrap();
            let c = [tc(0, 0, 0, 0, 64)];
            for (d, s, side) in [(&dt, &et, "dst"), (&et, &dt, "src")] {
                let e = es.copy_table_async(d, s, &c).unwrap_err();
                assert!(
                    matches!(e, Error::WrongDevice { what, .. } if what.ends_with(side)),
                    "{e:?}"
                );
                assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            }
            es.copy_table_async(&et, &et, &c).unwrap();
            es.synchronize().unwrap();
            println!("RESULT ok");
        }
        Some(other) => panic!("unknown role {other}"),
        None => {
            let lib = sim_library().expect("libascend_sim.so built next to the test binary");
            let lib = lib.to_string_lossy().into_owned();
            let out = run_child(name, "two-runtimes", &[("ASCEND_ACL_LIB", lib.as_str())]);
            assert_ok(&out);
        }
    }
}
