//! Dropping a reservation, its physical memory and their mapping in every order (and on other
//! threads): the unmap always comes first, nothing is freed twice, nothing leaks. Then the same
//! for the sharing and stream handles: an exported `FabricHandle`, the exported memory imported
//! again and mapped in the same process, and a `Stream` whose async copy between the two
//! mappings is still pending, in all 5040 orders. Plus compile-time Send/Sync assertions on
//! every public handle.

use crate::common::{assert_clean, pattern, setup};
use ascend_mem::prelude::*;
use ascend_mem::{
    Device, DeviceBuffer, Event, ExportFlags, FabricHandle, HostBuffer, Mapping, MappingSlice,
    PhysicalMem, ReservedVa, Runtime, ShareKind, SharedHandle, Stream, StreamLease, StreamPool,
};
use ascend_sim::testing::{hold_stream, Hold};

#[allow(dead_code)] // the fields are only dropped
enum Obj {
    Va(ReservedVa),
    Phys(PhysicalMem),
    Map(Mapping),
}

fn teardown_log() -> Vec<String> {
    ascend_sim::call_log()
        .into_iter()
        .filter(|c| {
            [
                "aclrtUnmapMem",
                "aclrtFreePhysical",
                "aclrtReleaseMemAddress",
            ]
            .iter()
            .any(|n| c.contains(n))
        })
        .collect()
}

fn name(o: &Obj) -> &'static str {
    match o {
        Obj::Va(_) => "va",
        Obj::Phys(_) => "phys",
        Obj::Map(_) => "map",
    }
}

#[test]
fn all_six_drop_orders() {
    let env = setup();
    for order in ascend_testkit::orders::ORDERS_OF_THREE {
        let g = env.dev.granular(2 << 20).unwrap();
        let va = ReservedVa::new(&env.dev, g).unwrap();
        let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
        let map = va.map(&mem, g.zero()).unwrap();
        map.write_from(b"alive", 0).unwrap();
        let mut objs: Vec<Option<Obj>> =
            vec![Some(Obj::Va(va)), Some(Obj::Phys(mem)), Some(Obj::Map(map))];
        ascend_sim::set_call_log(true);
        let mut names = Vec::new();
        for i in order {
            let o = objs[i].take().unwrap();
            names.push(name(&o));
            drop(o);
        }
        let log = teardown_log();
        ascend_sim::set_call_log(false);
        // Exactly one of each: nothing twice, nothing missing.
        assert_eq!(log.len(), 3, "order {names:?}: {log:?}");
        assert!(
            log[0].contains("aclrtUnmapMem"),
            "order {names:?}: unmap first: {log:?}"
        );
        let free = log.iter().position(|c| c.contains("aclrtFreePhysical"));
        let release = log
            .iter()
            .position(|c| c.contains("aclrtReleaseMemAddress"));
        assert!(
            free.is_some() && release.is_some(),
            "order {names:?}: {log:?}"
        );
        // The unmap is always first. Then, when the mapping held the last handles, the memory
        // is freed before the VA is released (R20). A VA handle the user drops before the
        // memory handle (with the mapping not last) is released first: releasing VA after the
        // unmap while the memory lives on (to be mapped elsewhere) is valid.
        let pos = |n: &str| names.iter().position(|x| *x == n).unwrap();
        let release_first = pos("va") < pos("phys") && pos("map") != 2;
        assert_eq!(release < free, release_first, "order {names:?}: {log:?}");
        env.dev.check_sticky().unwrap();
        assert_clean();
    }
    env.finish();
}

/// Every permutation of `0..n`, in lexicographic order.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut p: Vec<usize> = (0..n).collect();
    loop {
        out.push(p.clone());
        // Next permutation (Narayana Pandita).
        let Some(i) = (0..n.saturating_sub(1)).rev().find(|&i| p[i] < p[i + 1]) else {
            return out;
        };
        let j = (i + 1..n).rev().find(|&j| p[j] > p[i]).unwrap();
        p.swap(i, j);
        p[i + 1..].reverse();
    }
}

const VA: usize = 0;
const MEM: usize = 1;
const MAP: usize = 2;
const FH: usize = 3;
const IMP: usize = 4;
const MAP2: usize = 5;
const STREAM: usize = 6;
const SHARE_NAMES: [&str; 7] = ["va", "mem", "map", "fabric", "import", "map2", "stream"];

#[allow(dead_code)] // the fields are only dropped
enum ShareObj {
    Va(ReservedVa),
    Phys(PhysicalMem),
    Map(Mapping),
    Fabric(FabricHandle),
    /// The stream and the hold that keeps its copy pending; the hold goes first.
    Stream(Hold, Stream),
}

/// What the emulator must hold while the objects in `alive` are alive: the counters this
/// crate's ownership promises. A stream keeps both mappings of its pending copy; a mapping
/// keeps its memory and reservation; the fabric handle keeps the exported memory; the
/// exported allocation is counted as exported while its handle lives.
fn expected(alive: &[bool; 7]) -> ascend_sim::Counters {
    let m1 = alive[MAP] || alive[STREAM];
    let m2 = alive[MAP2] || alive[STREAM];
    let phys = alive[MEM] || alive[FH] || m1;
    let imp = alive[IMP] || m2;
    let res = alive[VA] || m1 || m2;
    ascend_sim::Counters {
        reservations: u64::from(res),
        physical: u64::from(phys),
        imports: u64::from(imp),
        mappings: u64::from(m1) + u64::from(m2),
        exports: u64::from(phys),
        streams: u64::from(alive[STREAM]),
        ..Default::default()
    }
}

/// Teardown calls of the log: U(nmap), F(ree), R(elease).
fn teardown_letters() -> String {
    teardown_log()
        .iter()
        .map(|c| {
            if c.contains("Unmap") {
                'U'
            } else if c.contains("FreePhysical") {
                'F'
            } else {
                'R'
            }
        })
        .collect()
}

/// Exported memory, its import mapped in the same reservation, a fabric handle and a stream
/// with a pending copy between the two mappings: dropped in all 7! orders. The emulator lets
/// `aclrtFreePhysical` of a mapped handle succeed (the mapping keeps the memory), so a free
/// that came before its unmap would show as a handle counter dropping while a mapping of it
/// is still counted: after every single drop the counters must equal what the ownership
/// graph promises, the drop's teardown calls must match that change exactly (nothing twice),
/// a release must follow every unmap of its step, no teardown may fail (no sticky error),
/// and the copy must have landed whenever its destination outlives the stream.
#[test]
fn share_and_stream_handles_in_every_order() {
    let env = setup();
    let g = env.dev.granular(2 << 20).unwrap();
    let data = pattern(5, 4096);
    let orders = permutations(7);
    assert_eq!(orders.len(), 5040);
    for order in orders {
        let va = ReservedVa::new(&env.dev, g.checked_mul(2).unwrap()).unwrap();
        let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
        let map = va.map(&mem, g.zero()).unwrap();
        map.fill(0).unwrap();
        map.write_from(&data, 0).unwrap();
        let fh = mem
            .export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)
            .unwrap();
        let imp = fh.shared().import(&env.dev).unwrap();
        let map2 = va.map(&imp, g).unwrap();
        let mut s = Stream::new(&env.dev).unwrap();
        let hold = hold_stream(s.as_raw());
        // Pending: the stream is held, so the copy runs only when the stream is dropped.
        s.copy_async(
            &map.slice(4096..8192).unwrap(),
            &map2.slice(..4096).unwrap(),
        )
        .unwrap();
        let mut objs: Vec<Option<ShareObj>> = vec![
            Some(ShareObj::Va(va)),
            Some(ShareObj::Phys(mem)),
            Some(ShareObj::Map(map)),
            Some(ShareObj::Fabric(fh)),
            Some(ShareObj::Phys(imp)),
            Some(ShareObj::Map(map2)),
            Some(ShareObj::Stream(hold, s)),
        ];
        let names: Vec<&str> = order.iter().map(|&i| SHARE_NAMES[i]).collect();
        let mut alive = [true; 7];
        assert_eq!(ascend_sim::counters(), expected(&alive), "{names:?}: start");
        for &i in &order {
            let before = expected(&alive);
            let obj = objs[i].take().unwrap();
            ascend_sim::set_call_log(true);
            match obj {
                ShareObj::Stream(hold, s) => {
                    drop(hold);
                    drop(s);
                    // The copy ran; check it when its destination is still mapped by us.
                    if let Some(ShareObj::Map(m)) = &objs[MAP] {
                        let mut back = vec![0u8; 4096];
                        m.read_into(&mut back, 4096).unwrap();
                        assert_eq!(back, data, "{names:?}: the pending copy landed");
                    }
                }
                other => drop(other),
            }
            let letters = teardown_letters();
            ascend_sim::set_call_log(false);
            alive[i] = false;
            let after = expected(&alive);
            let ctx = format!("order {names:?}, dropping {}: {letters}", SHARE_NAMES[i]);
            assert_eq!(ascend_sim::counters(), after, "{ctx}");
            let count = |c: char| letters.chars().filter(|x| *x == c).count() as u64;
            assert_eq!(
                count('U'),
                before.mappings - after.mappings,
                "{ctx}: unmaps"
            );
            assert_eq!(
                count('F'),
                before.physical - after.physical + before.imports - after.imports,
                "{ctx}: frees"
            );
            assert_eq!(
                count('R'),
                before.reservations - after.reservations,
                "{ctx}: releases"
            );
            if let (Some(r), Some(u)) = (letters.find('R'), letters.rfind('U')) {
                assert!(u < r, "{ctx}: release before an unmap");
            }
            env.dev
                .check_sticky()
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        }
        assert_clean();
    }
    env.finish();
}

#[test]
fn drop_on_other_threads() {
    let env = setup();
    let g = env.dev.granular(2 << 20).unwrap();
    let va = ReservedVa::new(&env.dev, g).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let map = va.map(&mem, g.zero()).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || drop(va));
        s.spawn(move || {
            map.write_from(&[7; 64], 0).unwrap();
            drop(map)
        });
        s.spawn(move || drop(mem));
    });
    env.dev.check_sticky().unwrap();
    env.finish();
}

#[test]
fn close_reports_busy_and_hands_the_value_back() {
    let env = setup();
    let g = env.dev.granular(2 << 20).unwrap();
    let va = ReservedVa::new(&env.dev, g).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let map = va.map(&mem, g.zero()).unwrap();
    let (e, va) = va.close().unwrap_err().into_parts();
    assert!(
        matches!(
            e,
            ascend_mem::Error::Busy {
                what: "ReservedVa",
                refs: 1
            }
        ),
        "{e:?}"
    );
    let (e, mem) = mem.close().unwrap_err().into_parts();
    assert!(
        matches!(
            e,
            ascend_mem::Error::Busy {
                what: "PhysicalMem",
                ..
            }
        ),
        "{e:?}"
    );
    map.unmap().unwrap();
    mem.close().unwrap();
    va.close().unwrap();
    env.finish();
}

/// Compile-time: these fail to build if a handle loses Send or Sync.
#[test]
fn send_sync_assertions() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Runtime>();
    send_sync::<Device>();
    send_sync::<ReservedVa>();
    send_sync::<PhysicalMem>();
    send_sync::<Mapping>();
    send_sync::<MappingSlice<'static>>();
    send_sync::<FabricHandle>();
    send_sync::<SharedHandle>();
    send_sync::<DeviceBuffer>();
    send_sync::<HostBuffer>();
    send_sync::<StreamPool>();
    send_sync::<ascend_mem::Error>();
    send::<Stream>();
    send::<Event>();
    send::<StreamLease>();
}
