//! The emulator's HCCL argument rules at the C level: init and config reading, symmetric-window
//! registration rules with their codes, collective arguments, mismatches across ranks.

#[macro_use]
mod common;
#[macro_use]
mod hccl_common;

use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use common::*;
use hccl_common::*;
use hccl_sys::{HcclConfigValue, HCCL_DETERMINISTIC, HCCL_E_RUNTIME, HCCL_E_TCP_CONNECT};

const MIB: usize = 1 << 20;

/// Inits a single-rank communicator with `cfg` (device 0 current); returns the code and comm.
fn init1(cfg: Option<&HcclCommConfig>) -> (u32, HcclComm) {
    let root = root_info();
    let mut comm = null_mut();
    let code = match cfg {
        Some(c) => hc!(HcclCommInitRootInfoConfig(1, &root, 0, c, &mut comm)),
        None => hc!(HcclCommInitRootInfo(1, &root, 0, &mut comm)),
    };
    (code, comm)
}

fn with_device<R>(f: impl FnOnce() -> R) -> R {
    set_device(0);
    let r = f();
    reset_device(0);
    r
}

fn set_version(c: &mut HcclCommConfig, v: u32) {
    for (i, b) in v.to_ne_bytes().iter().enumerate() {
        c.reserved[12 + i] = *b as _;
    }
}

fn set_size(c: &mut HcclCommConfig, s: u64) {
    for (i, b) in s.to_ne_bytes().iter().enumerate() {
        c.reserved[i] = *b as _;
    }
}

fn comm_name(comm: HcclComm) -> String {
    let mut buf = [0 as std::ffi::c_char; 128];
    hok!(HcclGetCommName(comm, buf.as_mut_ptr()));
    // SAFETY: NUL-terminated by the call.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn init_argument_rules() {
    let _g = LOCK.lock();
    let root = root_info();
    let mut comm = null_mut();
    with_device(|| {
        hcode!(HCCL_E_PARA, HcclCommInitRootInfo(0, &root, 0, &mut comm));
        hcode!(HCCL_E_PARA, HcclCommInitRootInfo(2, &root, 2, &mut comm));
        hcode!(HCCL_E_PTR, HcclCommInitRootInfo(1, null(), 0, &mut comm));
        hcode!(HCCL_E_PTR, HcclCommInitRootInfo(1, &root, 0, null_mut()));
        hcode!(
            HCCL_E_PTR,
            HcclCommInitRootInfoConfig(1, &root, 0, null(), &mut comm)
        );
        hcode!(HCCL_E_PTR, HcclGetRootInfo(null_mut()));
        let mut bad = root;
        bad.internal[30] ^= 1;
        hcode!(HCCL_E_PARA, HcclCommInitRootInfo(1, &bad, 0, &mut comm));
        hcode!(
            HCCL_E_PARA,
            HcclCommInitRootInfo(1, &HcclRootInfo::default(), 0, &mut comm)
        );
    });
    // No current device on this thread.
    std::thread::spawn(move || {
        let mut comm = null_mut();
        hcode!(HCCL_E_RUNTIME, HcclCommInitRootInfo(1, &root, 0, &mut comm));
    })
    .join()
    .unwrap();
    assert_clean();
}

#[test]
fn a_rank_that_never_joins_times_out() {
    let _g = LOCK.lock();
    let cfg = config(|c| c.hcclExecTimeOut = 1);
    with_device(|| {
        let root = root_info();
        let mut comm = null_mut();
        let t0 = Instant::now();
        hcode!(
            HCCL_E_TIMEOUT,
            HcclCommInitRootInfoConfig(2, &root, 0, &cfg, &mut comm)
        );
        let dt = t0.elapsed();
        assert!(
            dt >= Duration::from_millis(900) && dt < Duration::from_secs(5),
            "{dt:?}"
        );
    });
    assert_clean();
}

#[test]
fn config_is_read_like_the_library() {
    let _g = LOCK.lock();
    with_device(|| {
        // Magic.
        let c = config(|c| c.reserved[8] ^= 1);
        assert_eq!(init1(Some(&c)).0, HCCL_E_PARA);
        // A size too small for the header.
        let c = config(|c| set_size(c, 16));
        assert_eq!(init1(Some(&c)).0, HCCL_E_PARA);
        // Buffer size: set below 1 MB.
        let c = config(|c| c.hcclBufferSize = 0);
        assert_eq!(init1(Some(&c)).0, HCCL_E_PARA);
        // Deterministic out of range.
        let c = config(|c| c.hcclDeterministic = 3);
        assert_eq!(init1(Some(&c)).0, HCCL_E_PARA);
        // Zero-copy > 1: read from version 7 only.
        let c = config(|c| c.aclGraphZeroCopyEnable = 2);
        assert_eq!(init1(Some(&c)).0, HCCL_E_PARA);
        let c = config(|c| {
            c.aclGraphZeroCopyEnable = 2;
            set_version(c, 6);
        });
        let (code, comm) = init1(Some(&c));
        assert_eq!(code, 0);
        hok!(HcclCommDestroy(comm));
        // Exec timeout: read from version 8.
        let c = config(|c| c.hcclExecTimeOut = -5);
        assert_eq!(init1(Some(&c)).0, HCCL_E_PARA);
        let c = config(|c| {
            c.hcclExecTimeOut = -5;
            set_version(c, 7);
        });
        let (code, comm) = init1(Some(&c));
        assert_eq!(code, 0);
        hok!(HcclCommDestroy(comm));
        // hcclSymWinMaxMemSizePerRank: read from version 10, and only within `size`.
        let c = config(|c| c.hcclSymWinMaxMemSizePerRank = 0);
        assert_eq!(init1(Some(&c)).0, HCCL_E_PARA);
        for (v, size) in [(9u32, 2240u64), (10, 2232)] {
            let c = config(|c| {
                c.hcclSymWinMaxMemSizePerRank = 0;
                set_version(c, v);
                set_size(c, size);
            });
            let (code, comm) = init1(Some(&c));
            assert_eq!(
                code,
                0,
                "version {v} size {size}: {:?}",
                ascend_sim::hccl_last_error_message()
            );
            hok!(HcclCommDestroy(comm));
        }
        // A larger (v11, 2248-byte) struct: the known prefix is read.
        #[repr(C, align(8))]
        struct V11 {
            c: HcclCommConfig,
            sq_depth: u32,
            pad: u32,
        }
        let mut big = V11 {
            c: config(|c| {
                set_size(c, 2248);
                set_version(c, 11);
                c.hcclCommName[..3].copy_from_slice(&[b'v' as _, b'1' as _, b'1' as _]);
            }),
            sq_depth: 0xFFFF_FFFF,
            pad: 0,
        };
        big.pad = 0;
        let (code, comm) = init1(Some(&big.c));
        assert_eq!(code, 0, "{:?}", ascend_sim::hccl_last_error_message());
        assert_eq!(comm_name(comm), "v11");
        hok!(HcclCommDestroy(comm));
        // The name is read from version 2 on.
        let c = config(|c| {
            c.hcclCommName[0] = b'x' as _;
            set_version(c, 1);
        });
        let (code, comm) = init1(Some(&c));
        assert_eq!(code, 0);
        assert!(
            comm_name(comm).starts_with("sim-hccl-"),
            "{}",
            comm_name(comm)
        );
        hok!(HcclCommDestroy(comm));
        // Op expansion mode: read from version 4 (host mode forbids windows).
        let v = VmmBuf::new(0, MIB);
        for (ver, want) in [(3u32, 0u32), (4, HCCL_E_NOT_SUPPORT)] {
            let c = config(|c| {
                c.hcclOpExpansionMode = 1;
                set_version(c, ver);
            });
            let (code, comm) = init1(Some(&c));
            assert_eq!(code, 0);
            let mut w = null_mut();
            hcode!(want, HcclCommSymWinRegister(comm, v.ptr, 4096, &mut w, 1));
            if want == 0 {
                hok!(HcclCommSymWinDeregister(w));
            }
            hok!(HcclCommDestroy(comm));
        }
        drop(v);
        // No config: environment defaults; a name is generated.
        let (code, comm) = init1(None);
        assert_eq!(code, 0);
        assert!(comm_name(comm).starts_with("sim-hccl-"));
        let mut found = null_mut();
        let name = std::ffi::CString::new(comm_name(comm)).unwrap();
        hok!(HcclCommGetHandleWithName(name.as_ptr(), &mut found));
        assert_eq!(found, comm);
        hok!(HcclCommDestroy(comm));
        hcode!(
            HCCL_E_NOT_FOUND,
            HcclCommGetHandleWithName(name.as_ptr(), &mut found)
        );
    });
    assert_clean();
}

#[test]
fn register_rules() {
    let _g = LOCK.lock();
    with_device(|| {
        let c = config(|c| c.hcclSymWinMaxMemSizePerRank = 1);
        let (code, comm) = init1(Some(&c));
        assert_eq!(code, 0);
        let v = VmmBuf::new(0, 4 * MIB);
        let mut w = null_mut();
        // Pointers.
        hcode!(
            HCCL_E_PTR,
            HcclCommSymWinRegister(null_mut(), v.ptr, 4096, &mut w, 1)
        );
        hcode!(
            HCCL_E_PTR,
            HcclCommSymWinRegister(comm, null_mut(), 4096, &mut w, 1)
        );
        hcode!(
            HCCL_E_PTR,
            HcclCommSymWinRegister(comm, v.ptr, 4096, null_mut(), 1)
        );
        // Flag and size.
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, v.ptr, 4096, &mut w, 0)
        );
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, v.ptr, 4096, &mut w, 2)
        );
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, v.ptr, 0, &mut w, 1)
        );
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, v.ptr, (1 << 30) + 1, &mut w, 1)
        );
        // Size above the mapped physical memory.
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, v.ptr, (4 * MIB + 1) as u64, &mut w, 1)
        );
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, v.at(MIB), (3 * MIB + 1) as u64, &mut w, 1)
        );
        // Not VMM memory: aclrtMalloc, a bare reservation, plain host memory.
        let d = DevBuf::new(MIB);
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, d.ptr, 4096, &mut w, 1)
        );
        let va = reserve(MIB2);
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, va, 4096, &mut w, 1)
        );
        ok!(aclrtReleaseMemAddress(va));
        let mut host = vec![0u8; 4096];
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, host.as_mut_ptr().cast(), 4096, &mut w, 1)
        );
        // Host physical memory mapped with the VMM calls is not device memory.
        let (hva, hh) = mapped(MIB2, &host_prop());
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinRegister(comm, hva, 4096, &mut w, 1)
        );
        teardown(hva, hh);
        assert_eq!(counters().windows, 0);
        // A good one: 4096 bytes of a 4 MiB allocation register the whole allocation.
        hok!(HcclCommSymWinRegister(comm, v.at(4096), 4096, &mut w, 1));
        assert_eq!(counters().windows, 1);
        let mut got = null_mut();
        let mut off = 0usize;
        hok!(HcclCommSymWinGet(
            comm,
            v.at(3 * MIB),
            16,
            &mut got,
            &mut off
        ));
        assert_eq!((got, off), (w, 3 * MIB));
        hok!(HcclCommSymWinGet(comm, v.ptr, 4 * MIB, &mut got, &mut off));
        assert_eq!((got, off), (w, 0));
        // Get rules.
        hcode!(
            HCCL_E_PTR,
            HcclCommSymWinGet(comm, v.ptr, 16, &mut got, null_mut())
        );
        hcode!(
            HCCL_E_PTR,
            HcclCommSymWinGet(comm, null_mut(), 16, &mut got, &mut off)
        );
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinGet(comm, v.ptr, 0, &mut got, &mut off)
        );
        hcode!(
            HCCL_E_NOT_FOUND,
            HcclCommSymWinGet(comm, v.at(4 * MIB - 8), 16, &mut got, &mut off)
        );
        assert!(got.is_null());
        hcode!(
            HCCL_E_NOT_FOUND,
            HcclCommSymWinGet(comm, d.ptr, 16, &mut got, &mut off)
        );
        // Deregister: unknown handles, twice; user memory survives.
        write_bytes(v.ptr, b"still here");
        hok!(HcclCommSymWinDeregister(w));
        hcode!(HCCL_E_PARA, HcclCommSymWinDeregister(w));
        hcode!(HCCL_E_PTR, HcclCommSymWinDeregister(null_mut()));
        hcode!(
            HCCL_E_PARA,
            HcclCommSymWinDeregister(0x1234usize as *mut c_void)
        );
        assert_eq!(read_bytes(v.ptr, 10), b"still here");
        assert_eq!(counters().windows, 0);
        // Op expansion modes: 0 and 2 work, AIV (3) does not.
        for (mode, want) in [(2u32, 0u32), (3, HCCL_E_NOT_SUPPORT)] {
            let c = config(|c| c.hcclOpExpansionMode = mode);
            let (code, c2) = init1(Some(&c));
            assert_eq!(code, 0);
            let mut w2 = null_mut();
            hcode!(want, HcclCommSymWinRegister(c2, v.ptr, 4096, &mut w2, 1));
            if want == 0 {
                hok!(HcclCommSymWinDeregister(w2));
            }
            hok!(HcclCommDestroy(c2));
        }
        // Destroy deregisters what is left.
        hok!(HcclCommSymWinRegister(comm, v.ptr, 4096, &mut w, 1));
        let mut w3 = null_mut();
        let v2 = VmmBuf::new(0, MIB);
        hok!(HcclCommSymWinRegister(comm, v2.ptr, 4096, &mut w3, 1));
        assert_eq!(counters().windows, 2);
        hok!(HcclCommDestroy(comm));
        assert_eq!(counters().windows, 0);
        hcode!(HCCL_E_PARA, HcclCommSymWinDeregister(w3));
        drop(v2);
        drop(d);
        drop(v);
    });
    assert_clean();
}

/// A window spanning two physical allocations mapped back to back in one reservation.
#[test]
fn window_over_two_allocations() {
    let _g = LOCK.lock();
    with_device(|| {
        let (code, comm) = init1(None);
        assert_eq!(code, 0);
        let va = reserve(2 * MIB2);
        let h1 = malloc_phys(MIB2, &dev_prop(0));
        let h2 = malloc_phys(MIB2, &dev_prop(0));
        ok!(aclrtMapMem(va, MIB2, 0, h1, 0));
        // SAFETY: inside the reservation.
        let va2 = unsafe { va.cast::<u8>().add(MIB2) }.cast::<c_void>();
        ok!(aclrtMapMem(va2, MIB2, 0, h2, 0));
        let mut w = null_mut();
        hok!(HcclCommSymWinRegister(
            comm,
            va,
            (MIB2 + 1) as u64,
            &mut w,
            1
        ));
        let mut got = null_mut();
        let mut off = 0;
        hok!(HcclCommSymWinGet(comm, va2, MIB2, &mut got, &mut off));
        assert_eq!((got, off), (w, MIB2));
        hok!(HcclCommSymWinDeregister(w));
        hok!(HcclCommDestroy(comm));
        ok!(aclrtUnmapMem(va));
        ok!(aclrtUnmapMem(va2));
        ok!(aclrtFreePhysical(h1));
        ok!(aclrtFreePhysical(h2));
        ok!(aclrtReleaseMemAddress(va));
    });
    assert_clean();
}

/// Ranks registering different sizes all get an error, promptly.
#[test]
fn size_mismatch_fails_on_every_rank() {
    let _g = LOCK.lock();
    let cfg = config(|c| c.hcclExecTimeOut = 20);
    let t0 = Instant::now();
    let codes = ranks(3, Some(cfg), |r| {
        let v = VmmBuf::new(r.rank, 4 * MIB);
        let size = if r.rank == 1 { 2 * MIB2 } else { MIB2 };
        let mut w = null_mut();
        let code = hc!(HcclCommSymWinRegister(
            r.comm,
            v.ptr,
            size as u64,
            &mut w,
            1
        ));
        let msg = ascend_sim::hccl_last_error_message().unwrap_or_default();
        // A rank whose memory is not VMM memory fails every rank too.
        let d = DevBuf::new(MIB);
        let p = if r.rank == 2 { d.ptr } else { v.ptr };
        let code2 = hc!(HcclCommSymWinRegister(r.comm, p, 4096, &mut w, 1));
        // The communicator still works afterwards.
        let v2 = VmmBuf::new(r.rank, MIB);
        let w2 = register(r, v2.ptr, 4096);
        hok!(HcclCommSymWinDeregister(w2));
        (code, msg, code2)
    });
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    for (code, msg, code2) in &codes {
        assert_eq!(*code, HCCL_E_PARA, "{msg}");
        assert!(msg.contains("sizes differ"), "{msg}");
        assert_eq!(*code2, HCCL_E_PARA);
    }
    assert_clean();
}

#[test]
fn collective_argument_rules() {
    let _g = LOCK.lock();
    ranks(1, None, |r| {
        let d = DevBuf::new(4096);
        let e = DevBuf::new(4096);
        let (c, s) = (r.comm, r.stream);
        let f32t = HCCL_DATA_TYPE_FP32;
        hcode!(HCCL_E_PTR, HcclAllGather(null_mut(), e.ptr, 4, f32t, c, s));
        hcode!(HCCL_E_PTR, HcclAllGather(d.ptr, null_mut(), 4, f32t, c, s));
        hcode!(
            HCCL_E_PTR,
            HcclAllGather(d.ptr, e.ptr, 4, f32t, null_mut(), s)
        );
        hcode!(
            HCCL_E_PTR,
            HcclAllGather(d.ptr, e.ptr, 4, f32t, c, null_mut())
        );
        hcode!(HCCL_E_PARA, HcclAllGather(d.ptr, e.ptr, 4, 13, c, s));
        hcode!(
            HCCL_E_NOT_SUPPORT,
            HcclAllGather(d.ptr, e.ptr, 4, HCCL_DATA_TYPE_FP8E4M3, c, s)
        );
        hcode!(
            HCCL_E_NOT_SUPPORT,
            HcclAllGather(d.ptr, e.ptr, 4, HCCL_DATA_TYPE_HIF8, c, s)
        );
        hcode!(HCCL_E_PARA, HcclAllReduce(d.ptr, e.ptr, 4, f32t, 4, c, s));
        hcode!(HCCL_E_PARA, HcclBroadcast(d.ptr, 4, f32t, 1, c, s));
        // AllToAll: equal counts and types only (the emulator's rule); past the end.
        hcode!(
            HCCL_E_PARA,
            HcclAlltoAll(d.ptr, 4, f32t, e.ptr, 8, f32t, c, s)
        );
        hcode!(
            HCCL_E_PARA,
            HcclAlltoAll(d.ptr, 4, f32t, e.ptr, 4, HCCL_DATA_TYPE_INT32, c, s)
        );
        hcode!(
            HCCL_E_PTR,
            HcclAlltoAll(null_mut(), 4, f32t, e.ptr, 4, f32t, c, s)
        );
        hcode!(
            HCCL_E_PARA,
            HcclAlltoAll(d.ptr, 2048, f32t, e.ptr, 2048, f32t, c, s)
        );
        hok!(HcclAlltoAll(d.ptr, 4, f32t, e.ptr, 4, f32t, c, s));
        // Past the end of the allocation; plain host memory.
        hcode!(
            HCCL_E_PARA,
            HcclAllReduce(d.ptr, e.ptr, 2048, f32t, HCCL_REDUCE_SUM, c, s)
        );
        let mut host = vec![0u8; 64];
        hcode!(
            HCCL_E_PARA,
            HcclAllReduce(
                host.as_mut_ptr().cast(),
                e.ptr,
                4,
                f32t,
                HCCL_REDUCE_SUM,
                c,
                s
            )
        );
        // Count 0 is a no-op.
        hok!(HcclAllReduce(d.ptr, e.ptr, 0, f32t, HCCL_REDUCE_SUM, c, s));
        assert_eq!(r.sync(), 0);
        let mut err = 99;
        hok!(HcclGetCommAsyncError(c, &mut err));
        assert_eq!(err, 0);
    });
    assert_clean();
}

/// Ranks calling different collectives (or counts) fail on every rank at synchronize; the
/// communicator stays usable and reports the asynchronous error.
#[test]
fn mismatched_collectives_fail_on_every_rank() {
    let _g = LOCK.lock();
    ranks(2, None, |r| {
        let d = DevBuf::new(4096);
        let e = DevBuf::new(4096);
        let count = if r.rank == 0 { 4 } else { 8 };
        hok!(HcclAllGather(
            d.ptr,
            e.ptr,
            count,
            HCCL_DATA_TYPE_FP32,
            r.comm,
            r.stream
        ));
        let code = r.sync();
        assert_eq!(code, ACL_ERROR_RT_INTERNAL_ERROR, "{}", last_msg());
        let mut err = 0;
        hok!(HcclGetCommAsyncError(r.comm, &mut err));
        assert_eq!(err, HCCL_E_PARA);
        if r.rank == 0 {
            hok!(HcclAllReduce(
                d.ptr,
                e.ptr,
                4,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                r.comm,
                r.stream
            ));
        } else {
            hok!(HcclAllGather(
                d.ptr,
                e.ptr,
                4,
                HCCL_DATA_TYPE_FP32,
                r.comm,
                r.stream
            ));
        }
        assert_eq!(r.sync(), ACL_ERROR_RT_INTERNAL_ERROR);
        assert!(ascend_sim::hccl_recent_error_message().is_some());
        hok!(HcclBarrier(r.comm, r.stream));
        hok!(HcclAllGather(
            d.ptr,
            e.ptr,
            4,
            HCCL_DATA_TYPE_FP32,
            r.comm,
            r.stream
        ));
        assert_eq!(r.sync(), 0, "{}", last_msg());
    });
    assert_clean();
}

#[test]
fn management_calls() {
    let _g = LOCK.lock();
    assert_eq!(err_string(0), "no error");
    assert_eq!(err_string(HCCL_E_PARA), "parameter error");
    assert_eq!(err_string(HCCL_E_PTR), "empty pointer");
    assert_eq!(err_string(HCCL_E_TIMEOUT), "timeout");
    assert_eq!(err_string(HCCL_E_REMOTE), "error cqe");
    assert_eq!(err_string(5000), "unknow error");
    assert_eq!(
        hc!(HcclGetCommConfigCapability()),
        hccl_sys::HCCL_COMM_CONFIG_RESERVED
    );
    let mut v = HcclConfigValue { value: 1 };
    hok!(HcclSetConfig(HCCL_DETERMINISTIC, v));
    v.value = 0;
    hok!(HcclGetConfig(HCCL_DETERMINISTIC, &mut v));
    // SAFETY: the union's only field.
    assert_eq!(unsafe { v.value }, 1);
    hok!(HcclSetConfig(
        HCCL_DETERMINISTIC,
        HcclConfigValue { value: 0 }
    ));
    hcode!(
        HCCL_E_PARA,
        HcclSetConfig(HCCL_DETERMINISTIC, HcclConfigValue { value: 3 })
    );
    // Outside the emulated scope: not supported, with a message.
    hcode!(HCCL_E_NOT_SUPPORT, HcclGroupStart());
    hcode!(
        HCCL_E_NOT_SUPPORT,
        HcclCommInitAll(2, null_mut(), null_mut())
    );
    hcode!(
        HCCL_E_NOT_SUPPORT,
        HcclSend(null_mut(), 1, 0, 0, null_mut(), null_mut())
    );
    let m = ascend_sim::hccl_last_error_message().unwrap();
    assert!(
        m.starts_with("HcclSend:") && m.contains("HCCL_E_NOT_SUPPORT"),
        "{m}"
    );
    // Every symbol resolves.
    for s in hccl_sys::SYMBOLS {
        assert!(h().is_available(s), "{s}");
    }
    ranks(2, None, |r| {
        let mut size = 0;
        let mut id = 9;
        hok!(HcclGetRankSize(r.comm, &mut size));
        hok!(HcclGetRankId(r.comm, &mut id));
        assert_eq!((size, id), (2, r.rank));
        hcode!(HCCL_E_PTR, HcclGetRankSize(r.comm, null_mut()));
        hcode!(HCCL_E_PTR, HcclGetRankSize(null_mut(), &mut size));
        hcode!(
            HCCL_E_PARA,
            HcclGetRankSize(0x77usize as HcclComm, &mut size)
        );
        hok!(HcclBarrier(r.comm, r.stream));
        assert_eq!(r.sync(), 0);
        let mut info = -1i32;
        hok!(HcclConfigGetInfo(
            r.comm,
            0,
            4,
            (&mut info as *mut i32).cast()
        ));
        assert_eq!(info, 0); // AI CPU
    });
    assert_clean();
    // A destroyed communicator is unknown.
    set_device(0);
    let (code, comm) = init1(None);
    assert_eq!(code, 0);
    hok!(HcclCommDestroy(comm));
    let mut size = 0;
    hcode!(HCCL_E_PARA, HcclGetRankSize(comm, &mut size));
    hcode!(HCCL_E_PARA, HcclCommDestroy(comm));
    reset_device(0);
    assert_clean();
}

/// `HCCL_IF_IP` sets the address the root's rendezvous listens on (the emulated host's, on
/// several hosts): the root info carries it, and a value that is not an IPv4 address makes
/// `HcclGetRootInfo` fail with `HCCL_E_TCP_CONNECT`, naming it. The listener is made once per
/// process, so each case runs in a child of its own.
#[test]
fn hccl_if_ip_is_the_rendezvous_address() {
    match std::env::var("HCCL_IF_IP").ok().as_deref() {
        Some("127.0.0.2") => {
            let root = root_info();
            let b: Vec<u8> = root.internal.iter().map(|c| *c as u8).collect();
            assert_eq!(b[12..16], [127, 0, 0, 2], "the root info's address");
            let (code, comm) = with_device(|| init1(None));
            assert_eq!(code, HCCL_SUCCESS);
            assert_eq!(hc!(HcclCommDestroy(comm)), HCCL_SUCCESS);
        }
        Some("not-an-address") => {
            let mut root = HcclRootInfo::default();
            hcode!(HCCL_E_TCP_CONNECT, HcclGetRootInfo(&mut root));
            let msg = ascend_sim::hccl_last_error_message().unwrap_or_default();
            assert!(msg.contains("HCCL_IF_IP"), "{msg}");
        }
        _ => {
            for v in ["127.0.0.2", "not-an-address"] {
                let out = rerun(
                    ascend_testkit::test_name!(hccl_if_ip_is_the_rendezvous_address),
                    &[("HCCL_IF_IP", v)],
                );
                assert_child_ok(&out);
            }
        }
    }
}
