//! Drop never panics: a teardown failing inside `Drop` is logged, recorded on the device and
//! returned (as `Error::Sticky`) by the next fallible call on that device. A failed unmap
//! deliberately leaks the memory and VA (never freed under a possibly live mapping), so this
//! file does not assert zero counters; it asserts exactly that leak instead.

// Its own binary: the leak it asserts would fail every later test's zero-counter check.
use ascend_mem::{DeviceBuffer, Error, PhysicalMem, ReservedVa};
use ascend_testkit::emulator::setup;

#[test]
fn failed_unmap_in_drop_is_sticky_and_frees_nothing_under_it() {
    let env = setup();
    let before = ascend_sim::counters();
    let buf = DeviceBuffer::new(&env.dev, 2 << 20).unwrap();
    ascend_sim::fault::fail_nth("aclrtUnmapMem", 1, acl::ACL_ERROR_RT_DRV_INTERNAL_ERROR);
    let frees = ascend_sim::fault::calls("aclrtFreePhysical");
    let releases = ascend_sim::fault::calls("aclrtReleaseMemAddress");
    drop(buf); // no panic
    ascend_sim::fault::clear();
    assert_eq!(
        ascend_sim::fault::calls("aclrtFreePhysical"),
        frees,
        "nothing freed under the mapping"
    );
    assert_eq!(ascend_sim::fault::calls("aclrtReleaseMemAddress"), releases);
    // The next fallible call on the device returns the recorded error, once.
    let g = env.dev.granular(2 << 20).unwrap();
    let e = ReservedVa::new(&env.dev, g).unwrap_err();
    match &e {
        Error::Sticky { device: 0, source } => {
            assert_eq!(source.api(), Some("aclrtUnmapMem"));
            assert_eq!(
                source.code().unwrap().0,
                acl::ACL_ERROR_RT_DRV_INTERNAL_ERROR
            );
        }
        other => panic!("expected a sticky error, got {other:?}"),
    }
    assert_eq!(e.code().unwrap().0, acl::ACL_ERROR_RT_DRV_INTERNAL_ERROR);
    drop(ReservedVa::new(&env.dev, g).unwrap());
    let after = ascend_sim::counters();
    assert_eq!(
        after.mappings,
        before.mappings + 1,
        "the mapping is leaked on purpose"
    );
    assert_eq!(after.physical, before.physical + 1);
    assert_eq!(after.reservations, before.reservations + 1);
}

#[test]
fn failed_free_in_drop_is_sticky() {
    let env = setup();
    let g = env.dev.granular(2 << 20).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    ascend_sim::fault::fail_nth("aclrtFreePhysical", 1, acl::ACL_ERROR_RT_DRV_INTERNAL_ERROR);
    drop(mem);
    ascend_sim::fault::clear();
    let e = env.dev.check_sticky().unwrap_err();
    assert_eq!(e.api(), Some("aclrtFreePhysical"));
    env.dev.check_sticky().unwrap();
}
