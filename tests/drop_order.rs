//! Dropping a reservation, its physical memory and their mapping in every order (and on other
//! threads): the unmap always comes first, nothing is freed twice, nothing leaks. Plus
//! compile-time Send/Sync assertions on every public handle.

mod common;

use ascend_mem::{
    Device, DeviceBuffer, Event, FabricHandle, HostBuffer, Mapping, MappingSlice, PhysicalMem,
    ReservedVa, Runtime, SharedHandle, Stream, StreamLease, StreamPool,
};
use common::{assert_clean, setup};

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
    let orders: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
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
    let (e, va) = va.close().unwrap_err();
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
    let (e, mem) = mem.close().unwrap_err();
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
