//! Each VMM rule through ascend-mem, as a typed error: the safe API's own variant where it
//! checks on the host, and the runtime's code (the `Error`'s API name, `AclCode` and
//! `ErrorKind` asserted) where the rule is the runtime's, driven through `ascend_mem::ffi` when
//! the safe API cannot express the bad input. The labels R1-R20 are those of the rule table in
//! ascend-mem's crate docs; each test states its rule in words.

use std::ffi::c_void;

use crate::common::{assert_acl, setup};
use ascend_mem::prelude::*;
use ascend_mem::{
    ffi, AclCode, Addr, Error, ErrorKind, ExportFlags, Location, MemAttr, MemSpec, PhysicalMem,
    ReservedVa, ShareKind, SharedHandle,
};
use ascend_testkit::{assert_ok, role, test_name, Spawn};

const MIB2: usize = 2 << 20;

fn prop(dev: i32) -> acl::aclrtPhysicalMemProp {
    MemSpec::DEVICE_HBM.to_prop(dev)
}

/// A raw FABRIC export (flags 0) of `handle` through `ffi`, which the caller expects to fail.
fn raw_fabric_export(lib: &acl::AclLib, handle: acl::aclrtDrvMemHandle) -> Error {
    // SAFETY: `handle` is null (refused before use) or a live handle; the call fails before
    // exporting anything.
    unsafe { ffi::share::export_v2(lib, handle, 0, acl::ACL_MEM_SHARE_HANDLE_TYPE_FABRIC) }
        .unwrap_err()
}

/// Asserts `e` is `aclrtMemExportToShareableHandleV2` refusing its arguments with `code`.
fn assert_export_refused(e: &Error, code: i32) {
    assert_acl(
        e,
        "aclrtMemExportToShareableHandleV2",
        code,
        ErrorKind::InvalidArgument,
    );
}

#[test]
fn r1_reserve_size_and_flags() {
    let env = setup();
    let lib = env.rt.acl();
    // Safe API: zero size is our own typed error, before any C call.
    let zero = env.dev.granular(0).unwrap();
    let e = ReservedVa::new(&env.dev, zero).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                what: "size",
                value: 0,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // SAFETY: plain values; failures allocate nothing.
    let e = unsafe { ffi::va::reserve(lib, 0, 0) }.unwrap_err();
    assert_acl(
        &e,
        "aclrtReserveMemAddress",
        acl::ACL_ERROR_INVALID_PARAM,
        ErrorKind::InvalidArgument,
    );
    assert!(!e.to_string().is_empty());
    // SAFETY: as above.
    let e = unsafe { ffi::va::reserve(lib, MIB2, 2) }.unwrap_err();
    assert_acl(
        &e,
        "aclrtReserveMemAddress",
        acl::ACL_ERROR_INVALID_PARAM,
        ErrorKind::InvalidArgument,
    );
    // The error text comes from aclGetRecentErrMsg, read on this thread right after the call.
    if let Error::Acl { msg, .. } = &e {
        assert!(msg.contains("flags"), "message names the argument: {msg}");
    }
    env.finish();
}

/// R2: `alignment` of `aclrtReserveMemAddress` is reserved and must be 0. R3: `expectPtr` is
/// NULL or a fixed address inside the product's window ([16 TiB, 24 TiB) on the emulator's
/// A3), aligned. `ffi::va::reserve` always passes 0 and NULL; `reserve_raw` passes them as given.
#[test]
fn r2_r3_reserved_alignment_and_expect_ptr() {
    let env = setup();
    let lib = env.rt.acl();
    // R2: a non-zero alignment.
    // SAFETY: plain values; the call fails and reserves nothing.
    let e = unsafe { ffi::va::reserve_raw(lib, MIB2, 4096, std::ptr::null_mut(), 0) }.unwrap_err();
    assert_acl(
        &e,
        "aclrtReserveMemAddress",
        acl::ACL_ERROR_RT_PARAM_INVALID,
        ErrorKind::InvalidArgument,
    );
    assert_eq!(e.code(), Some(AclCode::RT_PARAM_INVALID));
    // R3: an expectPtr outside the window, and one inside it but misaligned.
    for (what, at) in [
        ("expectPtr 0x1000", 0x1000usize),
        ("expectPtr 16 TiB + 4 KiB", (16usize << 40) + 4096),
    ] {
        // SAFETY: as above.
        let e =
            unsafe { ffi::va::reserve_raw(lib, MIB2, 0, at as *mut c_void, 0) }.expect_err(what);
        assert_acl(
            &e,
            "aclrtReserveMemAddress",
            acl::ACL_ERROR_RT_PARAM_INVALID,
            ErrorKind::InvalidArgument,
        );
    }
    // R3: an aligned address inside the window is honoured.
    let at = ((16usize << 40) + (64 << 30)) as *mut c_void;
    // SAFETY: a fixed address in the emulator's window that nothing in this process uses.
    let va = unsafe { ffi::va::reserve_raw(lib, MIB2, 0, at, 0) }.unwrap();
    assert_eq!(va, at);
    // SAFETY: reserved just above, nothing mapped in it.
    unsafe { ffi::va::release(lib, va) }.unwrap();
    env.finish();
}

const GIB: usize = 1 << 30;

/// R4: `aclrtReserveMemAddressNoUCMemory` exists on A3 only; a NULL `expectPtr` is "not
/// supported" (207000, the header's words, on which HIXL falls back); `expectPtr` is 1 GiB
/// aligned; `size` is a non-zero multiple of 1 GiB. (The product half, 207000 on A2, runs in
/// a child process: the emulator reads its product once per process.)
#[test]
fn r4_no_uc_reservation() {
    let env = setup();
    let lib = env.rt.acl();
    let base = (41usize << 40) as *mut c_void;
    for (what, size, at) in [
        ("expectPtr NULL", GIB, std::ptr::null_mut()),
        ("size 2 MiB", MIB2, base),
        ("size 1 GiB + 2 MiB", GIB + MIB2, base),
        ("size 0", 0, base),
        (
            "expectPtr not 1 GiB aligned",
            GIB,
            (base as usize + MIB2) as *mut c_void,
        ),
    ] {
        // SAFETY: plain values; every call fails and reserves nothing.
        let e = unsafe { ffi::va::reserve_no_uc(lib, size, at, 1) }.expect_err(what);
        let (code, kind) = if size == 0 {
            // R1's non-zero size check comes first
            (acl::ACL_ERROR_INVALID_PARAM, ErrorKind::InvalidArgument)
        } else if at.is_null() {
            (
                acl::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                ErrorKind::NotSupported,
            )
        } else {
            (acl::ACL_ERROR_RT_PARAM_INVALID, ErrorKind::InvalidArgument)
        };
        assert_acl(&e, "aclrtReserveMemAddressNoUCMemory", code, kind);
    }
    // A valid one: 2 GiB at 41 TiB.
    // SAFETY: a fixed, 1 GiB aligned address nothing in this process uses.
    let va = unsafe { ffi::va::reserve_no_uc(lib, 2 * GIB, base, 1) }.unwrap();
    assert_eq!(va, base);
    assert_eq!(ascend_sim::counters().reservations, 1);
    // SAFETY: reserved just above, nothing mapped in it.
    unsafe { ffi::va::release(lib, va) }.unwrap();

    // The safe constructor checks R4's shape on the host, with typed errors.
    let g = |n| env.dev.granular(n).unwrap();
    let at = Addr::from_ptr(base);
    for (what, len, at, field) in [
        ("size 1 GiB + 2 MiB", g(GIB + MIB2), at, "size"),
        ("expectPtr + 2 MiB", g(GIB), at + MIB2, "expectPtr"),
    ] {
        match ReservedVa::new_no_uc(&env.dev, len, at).expect_err(what) {
            Error::Misaligned {
                what: w,
                value,
                granule,
            } => {
                assert!(w.ends_with(field), "{what}: {w}");
                assert_eq!((value % GIB != 0, granule), (true, GIB), "{what}");
            }
            e => panic!("{what}: {e:?}"),
        }
    }
    for (what, len, at) in [("size 0", g(0), at), ("expectPtr 0", g(GIB), Addr::NULL)] {
        let e = ReservedVa::new_no_uc(&env.dev, len, at).expect_err(what);
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    api: "aclrtReserveMemAddressNoUCMemory",
                    ..
                }
            ),
            "{what}: {e:?}"
        );
    }
    let va = ReservedVa::new_no_uc(&env.dev, g(2 * GIB), at).unwrap();
    assert_eq!(va.addr(), at);
    assert_eq!(va.len(), 2 * GIB);
    // The same range again: the runtime refuses it.
    let e = ReservedVa::new_no_uc(&env.dev, g(GIB), at).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Acl {
                api: "aclrtReserveMemAddressNoUCMemory",
                ..
            }
        ),
        "{e:?}"
    );
    drop(va);
    env.finish();
}

#[test]
fn r4_no_uc_reservation_is_not_supported_on_a2() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let out = Spawn::new(
        test_name!(r4_no_uc_reservation_is_not_supported_on_a2),
        "no-uc-on-a2",
    )
    .env("ASCEND_SIM_SOC", "A2")
    .output();
    assert_ok(&out);
}

/// The child side of the tests here that spawn themselves, by role.
fn child_main(role: &str) {
    match role {
        "no-uc-on-a2" => {
            let rt = ascend_mem::Runtime::emulated().unwrap();
            let dev = rt.device(0).unwrap();
            // SAFETY: plain values; the call fails and reserves nothing.
            let e =
                unsafe { ffi::va::reserve_no_uc(rt.acl(), GIB, (41usize << 40) as *mut c_void, 1) }
                    .unwrap_err();
            assert_acl(
                &e,
                "aclrtReserveMemAddressNoUCMemory",
                acl::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                ErrorKind::NotSupported,
            );
            assert_eq!(e.code(), Some(AclCode::RT_FEATURE_NOT_SUPPORT));
            let g = dev.granular(GIB).unwrap();
            let e = ReservedVa::new_no_uc(&dev, g, Addr::new(41 << 40)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotSupported, "{e:?}");
            assert!(ascend_sim::counters().is_zero());
            println!("RESULT ok");
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn r5_malloc_flags_handle_and_allocation_type() {
    let env = setup();
    let lib = env.rt.acl();
    let p = prop(0);
    for (what, size, prop, flags) in [
        ("size 0", 0, p, 0u64),
        ("flags 1", MIB2, p, 1),
        (
            "handleType POSIX",
            MIB2,
            acl::aclrtPhysicalMemProp {
                handleType: acl::ACL_MEM_HANDLE_TYPE_POSIX,
                ..p
            },
            0,
        ),
        (
            "allocationType 1",
            MIB2,
            acl::aclrtPhysicalMemProp {
                allocationType: 1,
                ..p
            },
            0,
        ),
    ] {
        // SAFETY: valid prop; the call must fail and allocate nothing.
        let e = unsafe { ffi::phys::malloc_flags(lib, size, &prop, flags) }.expect_err(what);
        assert_acl(
            &e,
            "aclrtMallocPhysical",
            acl::ACL_ERROR_INVALID_PARAM,
            ErrorKind::InvalidArgument,
        );
    }
    // Safe API: zero size is ours.
    let zero = env.dev.granular(0).unwrap();
    let e = PhysicalMem::hbm(&env.dev, zero).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                api: "aclrtMallocPhysical",
                ..
            }
        ),
        "{e:?}"
    );
    env.finish();
}

#[test]
fn r6_r7_locations_and_attributes() {
    let env = setup();
    let lib = env.rt.acl();
    // Safe API: a DDR attribute on the device is refused on the host side.
    let g = env.dev.granular(MIB2).unwrap();
    let spec = MemSpec {
        location: Location::Device,
        attr: MemAttr::DdrHuge,
    };
    let e = PhysicalMem::alloc(&env.dev, g, spec).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // The runtime's own check of R6 (DDR on DEVICE), R6 (UNREGISTERED/MANAGED) and R7.
    let p = prop(0);
    let cases = [
        acl::aclrtPhysicalMemProp {
            memAttr: acl::ACL_DDR_MEM_HUGE,
            ..p
        },
        acl::aclrtPhysicalMemProp {
            location: acl::aclrtMemLocation {
                id: 0,
                type_: acl::ACL_MEM_LOCATION_TYPE_UNREGISTERED,
            },
            ..p
        },
        acl::aclrtPhysicalMemProp {
            location: acl::aclrtMemLocation {
                id: 0,
                type_: acl::ACL_MEM_LOCATION_TYPE_MANAGED,
            },
            ..p
        },
        acl::aclrtPhysicalMemProp {
            memAttr: acl::ACL_HBM_MEM,
            ..p
        },
        acl::aclrtPhysicalMemProp {
            memAttr: acl::ACL_DDR_MEM,
            ..p
        },
        acl::aclrtPhysicalMemProp {
            memAttr: acl::ACL_HBM_MEM_P2P_HUGE,
            ..p
        },
        acl::aclrtPhysicalMemProp {
            memAttr: acl::ACL_HBM_MEM_P2P_NORMAL,
            ..p
        },
        acl::aclrtPhysicalMemProp {
            memAttr: acl::ACL_HBM_MEM_P2P_HUGE1G,
            ..p
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        // SAFETY: valid prop; must fail.
        let e = unsafe { ffi::phys::malloc(lib, MIB2, c) }.expect_err(&format!("case {i}"));
        assert_acl(
            &e,
            "aclrtMallocPhysical",
            acl::ACL_ERROR_INVALID_PARAM,
            ErrorKind::InvalidArgument,
        );
    }
    // Every attribute the safe enum offers is accepted where R7 says so.
    for (attr, host) in [
        (MemAttr::HbmHuge, false),
        (MemAttr::HbmNormal, false),
        (MemAttr::DdrHuge, true),
        (MemAttr::DdrNormal, true),
        (MemAttr::P2pHuge, true),
        (MemAttr::Huge, false),
    ] {
        let spec = MemSpec {
            location: if host {
                Location::Host
            } else {
                Location::Device
            },
            attr,
        };
        let g = env.dev.round_up_for(spec, 1).unwrap();
        let m = PhysicalMem::alloc(&env.dev, g, spec).unwrap_or_else(|e| panic!("{attr:?}: {e}"));
        assert_eq!(m.is_host(), host);
    }
    // HOST_NUMA through the safe API.
    let g = env.dev.round_up_for(MemSpec::host_numa(0), 1).unwrap();
    drop(PhysicalMem::host(&env.dev, g, Some(0)).unwrap());
    env.finish();
}

#[test]
fn r8_size_must_be_granular() {
    let env = setup();
    // Safe API: a non-multiple never becomes a Granular.
    let e = env.dev.granular(MIB2 + 4096).unwrap_err();
    assert!(
        matches!(e, Error::Misaligned { value, granule, .. } if value == MIB2 + 4096 && granule == MIB2),
        "{e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // The runtime's check.
    // SAFETY: valid prop; must fail.
    let e = unsafe { ffi::phys::malloc(env.rt.acl(), MIB2 + 4096, &prop(0)) }.unwrap_err();
    assert_acl(
        &e,
        "aclrtMallocPhysical",
        acl::ACL_ERROR_RT_PARAM_INVALID,
        ErrorKind::InvalidArgument,
    );
    env.finish();
}

#[test]
fn r9_r10_map_arguments() {
    let env = setup();
    let lib = env.rt.acl();
    let g = env.dev.granular(2 * MIB2).unwrap();
    let va = ReservedVa::new(&env.dev, g).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let h = mem.as_raw();
    // R9: flags != 0 → 100000; R10: size != physical size, offset != 0 → 107000.
    // SAFETY: the reservation and handle are live; every call below must fail, so nothing
    // gets mapped behind the safe types' back.
    unsafe {
        let e = ffi::map::map_raw(lib, va.as_raw(), g.get(), 0, h, 1).unwrap_err();
        assert_acl(
            &e,
            "aclrtMapMem",
            acl::ACL_ERROR_INVALID_PARAM,
            ErrorKind::InvalidArgument,
        );
        let e = ffi::map::map_raw(lib, va.as_raw(), MIB2, 0, h, 0).unwrap_err();
        assert_acl(
            &e,
            "aclrtMapMem",
            acl::ACL_ERROR_RT_PARAM_INVALID,
            ErrorKind::InvalidArgument,
        );
        let e = ffi::map::map_raw(lib, va.as_raw(), g.get(), MIB2, h, 0).unwrap_err();
        assert_acl(
            &e,
            "aclrtMapMem",
            acl::ACL_ERROR_RT_PARAM_INVALID,
            ErrorKind::InvalidArgument,
        );
        let e =
            ffi::map::map_raw(lib, va.as_raw(), g.get(), 0, std::ptr::null_mut(), 0).unwrap_err();
        assert_acl(
            &e,
            "aclrtMapMem",
            acl::ACL_ERROR_INVALID_PARAM,
            ErrorKind::InvalidArgument,
        );
    }
    // Safe API: the map size is always the physical size, so R10 holds by construction.
    let m = va.map(&mem, g.zero()).unwrap();
    assert_eq!(m.len(), mem.len());
    drop((m, va, mem));
    env.finish();
}

#[test]
fn r11_one_device_per_reservation_is_checked_on_the_host() {
    let env = setup();
    let dev1 = env.rt.device(1).unwrap();
    let g = env.dev.granular(MIB2).unwrap();
    let va = ReservedVa::new(&env.dev, g).unwrap();
    let mem1 = PhysicalMem::hbm(&dev1, dev1.granular(MIB2).unwrap()).unwrap();
    let e = va.map(&mem1, g.zero()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::WrongDevice {
                expected: 0,
                found: 1,
                ..
            }
        ),
        "{e:?}"
    );
    drop((va, mem1, dev1));
    env.finish();
}

#[test]
fn r12_r13_export_arguments() {
    let env = setup();
    let lib = env.rt.acl();
    let g = env.dev.granular(MIB2).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    // R12: NULL handle → 100000.
    let e = raw_fabric_export(lib, std::ptr::null_mut());
    assert_export_refused(&e, acl::ACL_ERROR_INVALID_PARAM);
    // R13: share type 3 → 107000 (unrepresentable in ShareKind).
    // SAFETY: live handle; must fail.
    let e = unsafe { ffi::share::export_v2(lib, mem.as_raw(), 0, 3) }.unwrap_err();
    assert_export_refused(&e, acl::ACL_ERROR_RT_PARAM_INVALID);
    // R13: flags > 1 through the safe API (unknown bits are kept by from_bits_retain).
    let e = mem
        .export(ShareKind::Fabric, ExportFlags::from_bits_retain(2))
        .unwrap_err();
    assert_export_refused(&e, acl::ACL_ERROR_RT_PARAM_INVALID);
    // A failed export does not count as the one export (R15).
    let h = mem
        .export(ShareKind::Default, ExportFlags::empty())
        .unwrap();
    assert_eq!(h.kind(), ShareKind::Default);
    drop((h, mem));
    env.finish();
}

/// R14: a FABRIC export needs a current context on the calling thread
/// (`ACL_ERROR_RT_CONTEXT_NULL` 107002); the safe API makes its device current first, so
/// only the raw `ffi` call on a fresh thread can hit it. (The product half, FABRIC only on A3,
/// is `sharing.rs`'s `fabric_is_not_supported_on_a2`.)
#[test]
fn r14_fabric_export_needs_a_current_context() {
    let env = setup();
    let lib = env.rt.acl();
    let g = env.dev.granular(MIB2).unwrap();
    let raw_mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let safe_mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            // A fresh thread: nothing is current on it.
            let e = raw_fabric_export(lib, raw_mem.as_raw());
            assert_export_refused(&e, acl::ACL_ERROR_RT_CONTEXT_NULL);
            assert_eq!(e.code(), Some(AclCode::RT_CONTEXT_NULL));
            // The safe API binds its device first, so the same export works from here.
            let h = safe_mem
                .export(ShareKind::Fabric, ExportFlags::empty())
                .unwrap();
            assert_eq!(h.kind(), ShareKind::Fabric);
        });
    });
    // The failed raw export did not count as the allocation's one export (R15).
    let h = raw_mem
        .export(ShareKind::Fabric, ExportFlags::empty())
        .unwrap();
    drop((h, raw_mem, safe_mem));
    env.finish();
}

#[test]
fn r15_one_export_per_allocation() {
    let env = setup();
    let lib = env.rt.acl();
    let g = env.dev.granular(MIB2).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let h = mem
        .export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)
        .unwrap();
    let e = mem
        .export(ShareKind::Fabric, ExportFlags::empty())
        .unwrap_err();
    assert!(matches!(e, Error::AlreadyExported), "{e:?}");
    // The runtime's own check of the same rule.
    let e = raw_fabric_export(lib, mem.as_raw());
    assert_export_refused(&e, acl::ACL_ERROR_RT_PARAM_INVALID);
    drop((h, mem));
    env.finish();
}

#[test]
fn r16_r17_import_flags_and_device() {
    let env = setup();
    let lib = env.rt.acl();
    let g = env.dev.granular(MIB2).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let h = mem
        .export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)
        .unwrap();
    // R16: flags != 0 (ffi::share::import_v2 always passes 0) → 100000.
    // SAFETY: 128 readable bytes; the call fails and imports nothing.
    let e = unsafe {
        ffi::share::import_v2_flags(
            lib,
            &acl::aclrtMemFabricHandle {
                data: *h.shared().raw_data(),
            },
            acl::ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
            1,
        )
    }
    .unwrap_err();
    assert_acl(
        &e,
        "aclrtMemImportFromShareableHandleV2",
        acl::ACL_ERROR_INVALID_PARAM,
        ErrorKind::InvalidArgument,
    );
    assert_eq!(e.code(), Some(AclCode::INVALID_PARAM));
    // R17: the import lands on the device we pass (made current first).
    let dev3 = env.rt.device(3).unwrap();
    let imp = h.shared().import(&dev3).unwrap();
    assert_eq!(imp.device().id(), 3);
    assert_eq!(imp.len(), mem.len());
    assert_eq!(imp.origin(), ascend_mem::Origin::Imported);
    assert_eq!(import_device(lib, &imp), 3);
    // Imported memory cannot be re-exported.
    assert!(imp.export(ShareKind::Fabric, ExportFlags::empty()).is_err());
    // A raw device change through the table does not misroute the next import: binding
    // checks aclrtGetDevice instead of trusting its per-thread cache.
    // SAFETY: plain integer argument.
    assert_eq!(unsafe { lib.aclrtSetDevice(5) }.unwrap(), 0);
    let imp2 = h.shared().import(&dev3).unwrap();
    assert_eq!(
        import_device(lib, &imp2),
        3,
        "import landed on the raw device"
    );
    // The same after a raw reset of the bound device (the thread has no current device).
    // SAFETY: plain integer arguments; nothing of ours lives in device 5's default context.
    unsafe {
        assert_eq!(lib.aclrtResetDevice(5).unwrap(), 0);
        assert_eq!(lib.aclrtSetDevice(3).unwrap(), 0);
        assert_eq!(lib.aclrtResetDevice(3).unwrap(), 0);
    }
    let imp3 = h.shared().import(&dev3).unwrap();
    assert_eq!(import_device(lib, &imp3), 3);
    drop((imp, imp2, imp3, h, mem, dev3));
    env.finish();
}

/// The device an imported allocation belongs to, as the runtime reports it.
fn import_device(lib: &acl::AclLib, m: &PhysicalMem) -> u32 {
    // SAFETY: a live handle.
    let p = unsafe { ffi::phys::properties(lib, m.as_raw()) }.unwrap();
    assert_eq!(p.location.type_, acl::ACL_MEM_LOCATION_TYPE_DEVICE);
    p.location.id
}

/// The size in share-handle bytes comes from the sender. A forged size is a typed error:
/// at import when it is not a whole number of the allocation's granules, at map when the
/// runtime refuses to map that size (R10: the map size must equal the real size).
#[test]
fn forged_import_size_is_a_typed_error() {
    let env = setup();
    let g = env.dev.granular(MIB2).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let h = mem
        .export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)
        .unwrap();
    let forge = |len: usize| {
        let mut b = h.to_bytes();
        b[8..16].copy_from_slice(&(len as u64).to_le_bytes());
        SharedHandle::from_bytes(&b).unwrap()
    };
    // Not granular: refused at import, and the imported handle is freed again.
    let e = forge(MIB2 + 4096).import(&env.dev).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ImportSizeMismatch {
                claimed,
                granule: MIB2,
                source: None,
                ..
            } if claimed == MIB2 + 4096
        ),
        "{e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(ascend_sim::counters().imports, 0, "the import was undone");
    // Granular but wrong (twice the real size): the import succeeds, the map is refused.
    let imp = forge(2 * MIB2).import(&env.dev).unwrap();
    assert_eq!(imp.len(), 2 * MIB2);
    let va = ReservedVa::new(&env.dev, g.checked_mul(2).unwrap()).unwrap();
    let e = va.map(&imp, g.zero()).unwrap_err();
    match &e {
        Error::ImportSizeMismatch {
            claimed,
            source: Some(src),
            ..
        } => {
            assert_eq!(*claimed, 2 * MIB2);
            assert_acl(
                src,
                "aclrtMapMem",
                acl::ACL_ERROR_RT_PARAM_INVALID,
                ErrorKind::InvalidArgument,
            );
        }
        other => panic!("expected ImportSizeMismatch from the map, got {other:?}"),
    }
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(e.code(), Some(AclCode::RT_PARAM_INVALID));
    assert_eq!(e.api(), Some("aclrtMapMem"));
    assert!(std::error::Error::source(&e).is_some());
    assert!(e.to_string().contains("0x400000"), "{e}");
    // The true size maps, and the failed map left no claim behind.
    let real = h.shared().import(&env.dev).unwrap();
    let m = va.map(&real, g.zero()).unwrap();
    drop((m, real, imp, va, h, mem));
    env.finish();
}

#[test]
fn r18_import_needs_the_exported_memory() {
    let env = setup();
    let g = env.dev.granular(MIB2).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let shared = *mem
        .export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)
        .unwrap()
        .shared();
    drop(mem); // the FabricHandle was a temporary; the memory is freed now
    let e = shared.import(&env.dev).unwrap_err();
    assert_acl(
        &e,
        "aclrtMemImportFromShareableHandleV2",
        acl::ACL_ERROR_RT_INVALID_HANDLE,
        ErrorKind::InvalidArgument,
    );
    env.finish();
}

#[test]
fn r20_teardown_order_in_the_call_log() {
    let env = setup();
    let g = env.dev.granular(MIB2).unwrap();
    let va = ReservedVa::new(&env.dev, g).unwrap();
    let mem = PhysicalMem::hbm(&env.dev, g).unwrap();
    let map = va.map(&mem, g.zero()).unwrap();
    ascend_sim::set_call_log(true);
    drop(va);
    drop(mem);
    drop(map);
    let log: Vec<String> = ascend_sim::call_log()
        .into_iter()
        .filter(|c| c.contains("Unmap") || c.contains("FreePhysical") || c.contains("ReleaseMem"))
        .collect();
    ascend_sim::set_call_log(false);
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log[0].contains("aclrtUnmapMem"), "{log:?}");
    assert!(log[1].contains("aclrtFreePhysical"), "{log:?}");
    assert!(log[2].contains("aclrtReleaseMemAddress"), "{log:?}");
    env.finish();
}

#[test]
fn acl_code_display_names_known_codes() {
    assert_eq!(
        AclCode(100000).to_string(),
        "ACL_ERROR_INVALID_PARAM (100000)"
    );
    assert_eq!(AclCode(424242).to_string(), "ACL error 424242");
    assert_eq!(AclCode::RT_STREAM_SYNC_TIMEOUT.kind(), ErrorKind::Timeout);
    assert_eq!(
        AclCode::RT_NO_PERMISSION.kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(AclCode::RT_MEMORY_ALLOCATION.kind(), ErrorKind::OutOfMemory);
    assert_eq!(
        AclCode::RT_FEATURE_NOT_SUPPORT.kind(),
        ErrorKind::NotSupported
    );
}

#[test]
fn r19_access_of_host_memory_for_the_device() {
    let env = setup();
    let lib = env.rt.acl();
    // HostBuffer grants its device read-write access itself.
    let hb = ascend_mem::HostBuffer::on_numa(&env.dev, MIB2, 0).unwrap();
    let mut loc = acl::aclrtMemLocation {
        id: 0,
        type_: acl::ACL_MEM_LOCATION_TYPE_DEVICE,
    };
    let mut flags = 0u64;
    // SAFETY: valid in/out pointers; the address is a live mapping.
    let r = unsafe { lib.aclrtMemGetAccess(hb.as_raw(), &mut loc, &mut flags) }.unwrap();
    assert_eq!(r, 0);
    assert_eq!(flags, u64::from(acl::ACL_RT_MEM_ACCESS_FLAGS_READWRITE));
    hb.write_from(b"host", 0).unwrap();
    // Granting access again (read-only here) is accepted; the emulator keeps aclrtMapMem's
    // default read-write access (access flags accumulate), so copies still work.
    hb.mapping()
        .set_device_access(&env.dev, ascend_mem::Access::Read)
        .unwrap();
    let mut back = [0u8; 4];
    hb.read_into(&mut back, 0).unwrap();
    assert_eq!(&back, b"host");
    drop(hb);
    env.finish();
}

#[test]
fn concurrent_maps_claim_ranges_exclusively() {
    let env = setup();
    let g = env.dev.granular(MIB2).unwrap();
    let va = ReservedVa::new(&env.dev, g.checked_mul(8).unwrap()).unwrap();
    let mems: Vec<PhysicalMem> = (0..16)
        .map(|_| PhysicalMem::hbm(&env.dev, g).unwrap())
        .collect();
    // 16 threads race for 8 slots, two per slot: exactly one of each pair wins, the other
    // gets Overlap from the host-side claim (never a runtime error or a double map).
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = mems
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let va = &va;
                s.spawn(move || va.map(m, g.checked_mul(i % 8).unwrap()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 8);
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, Error::Overlap { .. }), "{e:?}");
        }
    }
    assert_eq!(ascend_sim::counters().mappings, 8);
    drop(results);
    drop((va, mems));
    env.finish();
}
