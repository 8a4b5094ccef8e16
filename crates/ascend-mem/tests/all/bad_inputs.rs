//! A table of bad inputs: each must produce a typed error naming the call (never UB, a panic
//! or a hang), and leave nothing behind.
//!
//! "safe" rows go through the public safe API; rows marked "ffi" or "table" feed inputs the safe
//! API makes unrepresentable (a map size other than the physical size, flags, raw handles,
//! addresses) through `ascend_mem::ffi` or the raw ACL table, and check the runtime's code.

use std::ffi::c_void;

use crate::common::{setup, Env};
use ascend_mem::prelude::*;
use ascend_mem::{
    ffi, DeviceBuffer, Error, ErrorKind, ExportFlags, MemSpec, PhysicalMem, ReservedVa, ShareKind,
    SharedHandle, Stream,
};

const MIB2: usize = 2 << 20;

/// What a row expects.
enum Expect {
    /// An ACL error from this API with one of these codes, and this kind.
    Acl(&'static str, &'static [i32], ErrorKind),
    /// One of our own checks (predicate on the error), with this kind.
    Ours(fn(&Error) -> bool, ErrorKind),
}

type Row = (&'static str, fn(&Env) -> Result<(), Error>, Expect);

fn addr(p: *mut c_void, off: usize) -> *mut c_void {
    (p as usize + off) as *mut c_void
}

fn g(env: &Env, n: usize) -> ascend_mem::Granular {
    env.dev.granular(n * MIB2).unwrap()
}

/// `aclrtMallocPhysical` of 2 MiB with device-0 HBM properties as changed by `edit` (rows
/// expect it to fail).
fn malloc_hbm_with(env: &Env, edit: fn(&mut acl::aclrtPhysicalMemProp)) -> Result<(), Error> {
    let mut p = MemSpec::DEVICE_HBM.to_prop(0);
    edit(&mut p);
    // SAFETY: a valid prop struct; the row expects the call to fail.
    unsafe { ffi::phys::malloc(env.rt.acl(), MIB2, &p) }.map(|_| ())
}

const INVALID: &[i32] = &[acl::ACL_ERROR_INVALID_PARAM];
const RT_INVALID: &[i32] = &[acl::ACL_ERROR_RT_PARAM_INVALID];

fn rows() -> Vec<Row> {
    use Expect::*;
    vec![
        // --- sizes
        (
            "safe: reserve a zero size",
            |env| ReservedVa::new(&env.dev, g(env, 0)).map(drop),
            Ours(
                |e| {
                    matches!(
                        e,
                        Error::InvalidArgument {
                            what: "size",
                            value: 0,
                            ..
                        }
                    )
                },
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: allocate a zero size",
            |env| PhysicalMem::hbm(&env.dev, g(env, 0)).map(drop),
            Ours(
                |e| {
                    matches!(
                        e,
                        Error::InvalidArgument {
                            api: "aclrtMallocPhysical",
                            ..
                        }
                    )
                },
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: unaligned size (2 MiB + 1)",
            |env| env.dev.granular(MIB2 + 1).map(drop),
            Ours(
                |e| matches!(e, Error::Misaligned { value, granule, .. } if *value == MIB2 + 1 && *granule == MIB2),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: unaligned size (4 KiB)",
            |env| env.dev.granular(4096).map(drop),
            Ours(
                |e| matches!(e, Error::Misaligned { value: 4096, .. }),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: reserve size 0",
            |env| {
                // SAFETY: plain values; must fail.
                unsafe { ffi::va::reserve(env.rt.acl(), 0, 0) }.map(|_| ())
            },
            Acl(
                "aclrtReserveMemAddress",
                INVALID,
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: reserve size not a granule multiple",
            |env| {
                // SAFETY: plain values; must fail.
                unsafe { ffi::va::reserve(env.rt.acl(), 4096, 0) }.map(|_| ())
            },
            Acl(
                "aclrtReserveMemAddress",
                RT_INVALID,
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: reserve flags 7",
            |env| {
                // SAFETY: plain values; must fail.
                unsafe { ffi::va::reserve(env.rt.acl(), MIB2, 7) }.map(|_| ())
            },
            Acl(
                "aclrtReserveMemAddress",
                INVALID,
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: physical size 0",
            |env| {
                // SAFETY: valid prop; must fail.
                unsafe { ffi::phys::malloc(env.rt.acl(), 0, &MemSpec::DEVICE_HBM.to_prop(0)) }
                    .map(|_| ())
            },
            Acl("aclrtMallocPhysical", INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: physical size not a granule multiple",
            |env| {
                // SAFETY: valid prop; must fail.
                unsafe {
                    ffi::phys::malloc(env.rt.acl(), MIB2 + 4096, &MemSpec::DEVICE_HBM.to_prop(0))
                }
                .map(|_| ())
            },
            Acl(
                "aclrtMallocPhysical",
                RT_INVALID,
                ErrorKind::InvalidArgument,
            ),
        ),
        // --- flags, types, locations
        (
            "ffi: physical flags 1",
            |env| {
                // SAFETY: valid prop; must fail.
                unsafe {
                    ffi::phys::malloc_flags(env.rt.acl(), MIB2, &MemSpec::DEVICE_HBM.to_prop(0), 1)
                }
                .map(|_| ())
            },
            Acl("aclrtMallocPhysical", INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: handle type POSIX",
            |env| malloc_hbm_with(env, |p| p.handleType = acl::ACL_MEM_HANDLE_TYPE_POSIX),
            Acl("aclrtMallocPhysical", INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: rejected memAttr ACL_HBM_MEM",
            |env| malloc_hbm_with(env, |p| p.memAttr = acl::ACL_HBM_MEM),
            Acl("aclrtMallocPhysical", INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: location UNREGISTERED",
            |env| {
                malloc_hbm_with(env, |p| {
                    p.location.type_ = acl::ACL_MEM_LOCATION_TYPE_UNREGISTERED
                })
            },
            Acl("aclrtMallocPhysical", INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: location type 99",
            |env| malloc_hbm_with(env, |p| p.location.type_ = 99),
            Acl(
                "aclrtMallocPhysical",
                &[
                    acl::ACL_ERROR_INVALID_PARAM,
                    acl::ACL_ERROR_RT_PARAM_INVALID,
                ],
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: device location id 999",
            |env| {
                // SAFETY: valid prop; must fail.
                unsafe { ffi::phys::malloc(env.rt.acl(), MIB2, &MemSpec::DEVICE_HBM.to_prop(999)) }
                    .map(|_| ())
            },
            Acl(
                "aclrtMallocPhysical",
                &[
                    acl::ACL_ERROR_INVALID_PARAM,
                    acl::ACL_ERROR_RT_INVALID_DEVICEID,
                ],
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: DDR attribute on a device location",
            |env| {
                let spec = MemSpec {
                    location: ascend_mem::Location::Device,
                    attr: ascend_mem::MemAttr::DdrNormal,
                };
                PhysicalMem::alloc(&env.dev, g(env, 1), spec).map(drop)
            },
            Ours(
                |e| {
                    matches!(
                        e,
                        Error::InvalidArgument {
                            api: "aclrtMallocPhysical",
                            ..
                        }
                    )
                },
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: device id -1",
            |env| env.rt.device(-1).map(drop),
            Ours(
                |e| matches!(e, Error::InvalidArgument { value: -1, .. }),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: device id 4096 (runtime says)",
            |env| env.rt.device(4096).map(drop),
            Acl(
                "aclrtSetDevice",
                &[
                    acl::ACL_ERROR_RT_INVALID_DEVICEID,
                    acl::ACL_ERROR_INVALID_DEVICE,
                ],
                ErrorKind::InvalidArgument,
            ),
        ),
        // --- mapping
        (
            "ffi: map size != physical size",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 2))?;
                let mem = PhysicalMem::hbm(&env.dev, g(env, 2))?;
                // SAFETY: live objects; must fail (nothing mapped behind the safe types).
                unsafe { ffi::map::map(env.rt.acl(), va.as_raw(), MIB2, mem.as_raw()) }
            },
            Acl("aclrtMapMem", RT_INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: map flags 1",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 1))?;
                let mem = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                // SAFETY: live objects; must fail.
                unsafe { ffi::map::map_raw(env.rt.acl(), va.as_raw(), MIB2, 0, mem.as_raw(), 1) }
            },
            Acl("aclrtMapMem", INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "safe: double map (overlap)",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 2))?;
                let a = PhysicalMem::hbm(&env.dev, g(env, 2))?;
                let b = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                let _m = va.map(&a, g(env, 0))?;
                va.map(&b, g(env, 1)).map(drop)
            },
            Ours(
                |e| matches!(e, Error::Overlap { offset, existing_offset: 0, .. } if *offset == MIB2),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "unchecked: double map (runtime says)",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 1))?;
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                let b = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                let _m = va.map(&a, g(env, 0))?;
                // SAFETY: deliberately breaks "unclaimed"; the runtime rejects it, so no second
                // mapping is made.
                unsafe { va.map_unchecked(&b, 0) }.map(drop)
            },
            Acl("aclrtMapMem", RT_INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "safe: map outside the reservation",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 1))?;
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                va.map(&a, g(env, 1)).map(drop)
            },
            Ours(
                |e| matches!(e, Error::OutOfBounds { offset, size, .. } if *offset == MIB2 && *size == MIB2),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "unchecked: map past the reservation's end (runtime says)",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 2))?;
                let a = PhysicalMem::hbm(&env.dev, g(env, 2))?;
                // SAFETY: deliberately out of range; the runtime rejects it.
                unsafe { va.map_unchecked(&a, MIB2) }.map(drop)
            },
            Acl("aclrtMapMem", RT_INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "unchecked: map at an unaligned address",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 2))?;
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                // SAFETY: deliberately unaligned; the runtime rejects it.
                unsafe { va.map_unchecked(&a, 4096) }.map(drop)
            },
            Acl("aclrtMapMem", RT_INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: unmap an unmapped address",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 1))?;
                // SAFETY: nothing is mapped there; the runtime rejects it.
                unsafe { ffi::map::unmap(env.rt.acl(), va.as_raw()) }
            },
            Acl("aclrtUnmapMem", RT_INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: unmap an address outside any reservation",
            |env| {
                let x = 0u64;
                // SAFETY: not a reservation; the runtime rejects it.
                unsafe { ffi::map::unmap(env.rt.acl(), &x as *const u64 as *mut c_void) }
            },
            Acl("aclrtUnmapMem", RT_INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: release while mapped",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 1))?;
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                let _m = va.map(&a, g(env, 0))?;
                // SAFETY: deliberately breaks "nothing mapped"; the runtime refuses.
                unsafe { ffi::va::release(env.rt.acl(), va.as_raw()) }
            },
            Acl(
                "aclrtReleaseMemAddress",
                RT_INVALID,
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: release an address inside (not the start of) a reservation",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 2))?;
                // SAFETY: not a reservation start; the runtime refuses.
                unsafe { ffi::va::release(env.rt.acl(), addr(va.as_raw(), MIB2)) }
            },
            Acl(
                "aclrtReleaseMemAddress",
                RT_INVALID,
                ErrorKind::InvalidArgument,
            ),
        ),
        // --- handles
        (
            "ffi: free a garbage handle",
            |env| {
                // SAFETY: the runtime looks handles up and rejects unknown ones.
                unsafe { ffi::phys::free(env.rt.acl(), 0xdead_beef as *mut c_void) }
            },
            Acl(
                "aclrtFreePhysical",
                &[acl::ACL_ERROR_RT_INVALID_HANDLE],
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: map a stream handle as memory (wrong handle type)",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 1))?;
                let s = Stream::new(&env.dev)?;
                // SAFETY: wrong kind of handle; the runtime rejects it.
                unsafe { ffi::map::map(env.rt.acl(), va.as_raw(), MIB2, s.as_raw()) }
            },
            Acl(
                "aclrtMapMem",
                &[acl::ACL_ERROR_RT_INVALID_HANDLE],
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: granularity with a bad option",
            |env| {
                // SAFETY: valid prop; must fail.
                unsafe { ffi::phys::granularity(env.rt.acl(), &MemSpec::DEVICE_HBM.to_prop(0), 7) }
                    .map(drop)
            },
            Acl(
                "aclrtMemGetAllocationGranularity",
                &[
                    acl::ACL_ERROR_INVALID_PARAM,
                    acl::ACL_ERROR_RT_PARAM_INVALID,
                ],
                ErrorKind::InvalidArgument,
            ),
        ),
        // --- sharing
        (
            "safe: garbage import bytes (framing)",
            |_| SharedHandle::from_bytes(&[0xAB; 57]).map(drop),
            Ours(
                |e| matches!(e, Error::BadHandleBytes { len: 57, .. }),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: well-framed garbage FABRIC handle (runtime says)",
            |env| {
                SharedHandle::from_parts(ShareKind::Fabric, MIB2, [0x5A; 128])
                    .import(&env.dev)
                    .map(drop)
            },
            Acl(
                "aclrtMemImportFromShareableHandleV2",
                &[
                    acl::ACL_ERROR_RT_PARAM_INVALID,
                    acl::ACL_ERROR_RT_INVALID_HANDLE,
                ],
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: garbage DEFAULT handle (runtime says)",
            |env| {
                SharedHandle::from_parts(ShareKind::Default, MIB2, [0x11; 128])
                    .import(&env.dev)
                    .map(drop)
            },
            Acl(
                "aclrtMemImportFromShareableHandleV2",
                &[
                    acl::ACL_ERROR_RT_PARAM_INVALID,
                    acl::ACL_ERROR_RT_INVALID_HANDLE,
                ],
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: second export of one allocation",
            |env| {
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                let _h = a.export(ShareKind::Default, ExportFlags::empty())?;
                a.export(ShareKind::Fabric, ExportFlags::empty()).map(drop)
            },
            Ours(
                |e| matches!(e, Error::AlreadyExported),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: second export of one allocation (runtime says)",
            |env| {
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                let _h = a.export(ShareKind::Default, ExportFlags::empty())?;
                // SAFETY: live handle; the runtime refuses the second export.
                unsafe {
                    ffi::share::export_v2(
                        env.rt.acl(),
                        a.as_raw(),
                        0,
                        acl::ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
                    )
                }
                .map(drop)
            },
            Acl(
                "aclrtMemExportToShareableHandleV2",
                RT_INVALID,
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: export flags with unknown bits",
            |env| {
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                a.export(ShareKind::Fabric, ExportFlags::from_bits_retain(0x10))
                    .map(drop)
            },
            Acl(
                "aclrtMemExportToShareableHandleV2",
                RT_INVALID,
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: empty pid allow-list",
            |env| {
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                a.export(ShareKind::Fabric, ExportFlags::empty())?
                    .allow_pids(&[])
            },
            Ours(
                |e| matches!(e, Error::InvalidArgument { what: "pidNum", .. }),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: empty pid allow-list (runtime says)",
            |env| {
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                let h = a.export(ShareKind::Fabric, ExportFlags::empty())?;
                let data = acl::aclrtMemFabricHandle {
                    data: *h.shared().raw_data(),
                };
                // SAFETY: plain data; the runtime checks pidNum > 0.
                unsafe {
                    ffi::share::set_pids_v2(
                        env.rt.acl(),
                        &data,
                        acl::ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
                        &[],
                    )
                }
            },
            Acl(
                "aclrtMemSetPidToShareableHandleV2",
                &[acl::ACL_ERROR_INVALID_PARAM],
                ErrorKind::InvalidArgument,
            ),
        ),
        // --- capacity
        (
            "safe: allocation over the HBM capacity",
            |env| {
                let big = env.dev.round_up(2 << 30)?; // 2 GiB > the emulator's 1 GiB default
                PhysicalMem::hbm(&env.dev, big).map(drop)
            },
            Acl(
                "aclrtMallocPhysical",
                &[
                    acl::ACL_ERROR_RT_MEMORY_ALLOCATION,
                    acl::ACL_ERROR_BAD_ALLOC,
                    acl::ACL_ERROR_RT_DEVICE_OOM,
                ],
                ErrorKind::OutOfMemory,
            ),
        ),
        // --- copies
        (
            "safe: read past the end of a buffer",
            |env| {
                let b = DeviceBuffer::new(&env.dev, MIB2)?;
                let mut out = [0u8; 16];
                b.read_into(&mut out, MIB2 - 8)
            },
            Ours(
                |e| matches!(e, Error::OutOfBounds { len: 16, .. }),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: slice past the end",
            |env| {
                let b = DeviceBuffer::new(&env.dev, MIB2)?;
                b.slice(10..MIB2 + 1).map(drop)
            },
            Ours(
                |e| matches!(e, Error::OutOfBounds { .. }),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: async copy larger than its destination",
            |env| {
                let a = DeviceBuffer::new(&env.dev, 2 * MIB2)?;
                let b = DeviceBuffer::new(&env.dev, MIB2)?;
                let mut s = Stream::new(&env.dev)?;
                s.copy_async(&b.as_slice(), &a.as_slice())
            },
            Ours(
                |e| matches!(e, Error::OutOfBounds { .. }),
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "ffi: sync copy into reserved but unmapped VA",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 1))?;
                let src = [1u8; 64];
                // SAFETY: deliberately unmapped destination; the runtime checks it (no fault).
                unsafe {
                    ffi::copy::memcpy(
                        env.rt.acl(),
                        va.as_raw(),
                        64,
                        src.as_ptr().cast(),
                        64,
                        acl::ACL_MEMCPY_HOST_TO_DEVICE,
                    )
                }
            },
            Acl(
                "aclrtMemcpy",
                &[acl::ACL_ERROR_RT_DEVICE_MEM_ERROR],
                ErrorKind::Other,
            ),
        ),
        (
            "ffi: copy running past a mapping into unmapped VA",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 2))?;
                let a = PhysicalMem::hbm(&env.dev, g(env, 1))?;
                let m = va.map(&a, g(env, 0))?;
                let mut out = vec![0u8; 8192];
                // SAFETY: the source range runs 4 KiB into unmapped VA; the runtime checks it.
                unsafe {
                    ffi::copy::memcpy(
                        env.rt.acl(),
                        out.as_mut_ptr().cast(),
                        8192,
                        addr(m.as_raw(), MIB2 - 4096),
                        8192,
                        acl::ACL_MEMCPY_DEVICE_TO_HOST,
                    )
                }
            },
            Acl(
                "aclrtMemcpy",
                &[acl::ACL_ERROR_RT_DEVICE_MEM_ERROR],
                ErrorKind::Other,
            ),
        ),
        (
            "ffi: memset of unmapped VA",
            |env| {
                let va = ReservedVa::new(&env.dev, g(env, 1))?;
                // SAFETY: deliberately unmapped; the runtime checks it.
                unsafe { ffi::copy::memset(env.rt.acl(), va.as_raw(), 64, 0, 64) }
            },
            Acl(
                "aclrtMemset",
                &[acl::ACL_ERROR_RT_DEVICE_MEM_ERROR],
                ErrorKind::Other,
            ),
        ),
        (
            "ffi: copy kind that does not match the pointers",
            |env| {
                let b = DeviceBuffer::new(&env.dev, MIB2)?;
                let mut out = [0u8; 64];
                // SAFETY: valid ranges, wrong kind; the runtime checks the kind.
                unsafe {
                    ffi::copy::memcpy(
                        env.rt.acl(),
                        out.as_mut_ptr().cast(),
                        64,
                        b.as_raw(),
                        64,
                        acl::ACL_MEMCPY_HOST_TO_HOST,
                    )
                }
            },
            Acl("aclrtMemcpy", RT_INVALID, ErrorKind::InvalidArgument),
        ),
        (
            "ffi: copy count over destMax",
            |env| {
                let b = DeviceBuffer::new(&env.dev, MIB2)?;
                let src = [0u8; 64];
                // SAFETY: count > destMax; the runtime checks it.
                unsafe {
                    ffi::copy::memcpy(
                        env.rt.acl(),
                        b.as_raw(),
                        32,
                        src.as_ptr().cast(),
                        64,
                        acl::ACL_MEMCPY_HOST_TO_DEVICE,
                    )
                }
            },
            Acl(
                "aclrtMemcpy",
                &[
                    acl::ACL_ERROR_INVALID_PARAM,
                    acl::ACL_ERROR_RT_PARAM_INVALID,
                ],
                ErrorKind::InvalidArgument,
            ),
        ),
        (
            "safe: stream sync with a zero timeout on a held stream",
            |env| {
                let a = DeviceBuffer::new(&env.dev, MIB2)?;
                let b = DeviceBuffer::new(&env.dev, MIB2)?;
                let mut s = Stream::new(&env.dev)?;
                let hold = ascend_sim::testing::hold_stream(s.as_raw());
                s.copy_async(&b.as_slice(), &a.as_slice())?;
                let r = s.synchronize_timeout(std::time::Duration::from_millis(0));
                drop(hold);
                s.synchronize()?;
                r
            },
            Acl(
                "aclrtSynchronizeStreamWithTimeout",
                &[acl::ACL_ERROR_RT_STREAM_SYNC_TIMEOUT],
                ErrorKind::Timeout,
            ),
        ),
    ]
}

#[test]
fn bad_input_table() {
    let env = setup();
    let rows = rows();
    assert!(rows.len() >= 25, "at least 25 rows, have {}", rows.len());
    let mut failures = Vec::new();
    for (name, run, expect) in &rows {
        let before = ascend_sim::counters();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&env)));
        let outcome = match r {
            Err(_) => Err("panicked".to_string()),
            Ok(Ok(())) => Err("succeeded".to_string()),
            Ok(Err(e)) => match expect {
                Expect::Acl(api, codes, kind) => match &e {
                    Error::Acl { api: a, code, msg }
                        if a == api && codes.contains(&code.0) && e.kind() == *kind =>
                    {
                        if msg.is_empty() {
                            Err(format!("no error text: {e}"))
                        } else {
                            Ok(())
                        }
                    }
                    _ => Err(format!("wrong error: {e:?} (kind {:?})", e.kind())),
                },
                Expect::Ours(pred, kind) => {
                    if pred(&e) && e.kind() == *kind {
                        Ok(())
                    } else {
                        Err(format!("wrong error: {e:?} (kind {:?})", e.kind()))
                    }
                }
            },
        };
        if let Err(why) = outcome {
            failures.push(format!("{name}: {why}"));
        }
        let after = ascend_sim::counters();
        if format!("{before:?}") != format!("{after:?}") {
            failures.push(format!("{name}: leaked {before:?} -> {after:?}"));
        }
        let _ = env.dev.check_sticky();
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
    env.finish();
}
