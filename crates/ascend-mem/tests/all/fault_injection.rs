//! Fault injection: every ACL call the safe layer makes fails once, at every call index in
//! turn, inside one scenario that exercises all of them: device open and count, granularity,
//! reserve, allocate, map, sync copies and fills, export, allow-list, import (with its size
//! check), a `HostBuffer` (with its access grant), streams, async copies and fills, events
//! (create, record, wait, query, synchronize, elapsed time), abort, and every teardown (unmap,
//! free, release, stream and event destroy). Each time the injected error must come back to the
//! caller (from the failing step, or from the `close`/`unmap` that hands the value back, which
//! the scenario then retries), nothing may leak (counters back to zero) and nothing may be
//! freed, unmapped, released or destroyed twice (call counts balance).
//!
//! `aclrtGetDevice` is the one call whose failure is absorbed rather than returned: it only
//! checks whether the device is still current, and a failure means "bind again"
//! (`aclrtSetDevice`). A separate test fails it at every index and asserts exactly that.
//! `aclInit` runs once per table and process, so it is outside the per-run scenario.

use std::time::Duration;

use crate::common::{assert_clean, setup};
use ascend_mem::prelude::*;
use ascend_mem::{
    AclCode, Error, Event, EventFlags, ExportFlags, FailureMode, HostBuffer, Mapping, PhysicalMem,
    ReservedVa, Runtime, ShareKind, Stream, StreamFlags,
};
use ascend_sim::fault;

const INJECTED: i32 = acl::ACL_ERROR_RT_DRV_INTERNAL_ERROR;

/// Every status-returning ACL call the safe layer makes (except `aclInit` and the absorbed
/// `aclrtGetDevice`, see the module docs).
const SYMBOLS: &[&str] = &[
    // devices
    "aclrtSetDevice",
    "aclrtGetDeviceCount",
    "aclrtDeviceGetBareTgid",
    "aclrtGetLogicDevIdByUserDevId",
    // VMM
    "aclrtMemGetAllocationGranularity",
    "aclrtReserveMemAddress",
    "aclrtMallocPhysical",
    "aclrtMapMem",
    "aclrtMemSetAccess",
    "aclrtMemcpy",
    "aclrtMemset",
    // sharing
    "aclrtMemExportToShareableHandleV2",
    "aclrtMemSetPidToShareableHandleV2",
    "aclrtMemImportFromShareableHandleV2",
    "aclrtMemGetAllocationPropertiesFromHandle",
    // streams and async copies
    "aclrtCreateStreamWithConfig",
    "aclrtSetStreamFailureMode",
    "aclrtMemcpyAsync",
    "aclrtMemsetAsync",
    "aclrtStreamWaitEvent",
    "aclrtSynchronizeStream",
    "aclrtSynchronizeStreamWithTimeout",
    "aclrtStreamQuery",
    "aclrtStreamAbort",
    // events
    "aclrtCreateEvent",
    "aclrtCreateEventWithFlag",
    "aclrtRecordEvent",
    "aclrtQueryEventStatus",
    "aclrtSynchronizeEvent",
    "aclrtSynchronizeEventWithTimeout",
    "aclrtEventElapsedTime",
    // teardown
    "aclrtDestroyEvent",
    "aclrtDestroyStream",
    "aclrtUnmapMem",
    "aclrtFreePhysical",
    "aclrtReleaseMemAddress",
];

/// Teardown calls: a failure of one of these is retried by the scenario, which then completes.
const TEARDOWN: &[&str] = &[
    "aclrtDestroyEvent",
    "aclrtDestroyStream",
    "aclrtUnmapMem",
    "aclrtFreePhysical",
    "aclrtReleaseMemAddress",
];

fn retry<T>(
    x: T,
    close: fn(T) -> Result<(), ascend_mem::CloseError<T>>,
    seen: &mut Vec<Error>,
) -> Result<(), Error> {
    match close(x) {
        Ok(()) => Ok(()),
        Err(e) => {
            let (e, x) = e.into_parts();
            seen.push(e);
            // `?` takes the error and lets the value go.
            close(x)?;
            Ok(())
        }
    }
}

/// The full scenario on device 1 (a fresh device context each run, so the device is opened
/// and the granularity asked every time). Teardown uses the fallible closes and retries once.
fn scenario(rt: &Runtime, seen: &mut Vec<Error>) -> Result<(), Error> {
    assert!(rt.device_count()? > 1);
    let dev = rt.device(1)?;

    // VMM: reserve, allocate, map, sync copies and fills.
    let g = dev.granular(2 << 20)?;
    let va = ReservedVa::new(&dev, g.checked_mul(2).unwrap())?;
    let mem = PhysicalMem::hbm(&dev, g)?;
    let map = va.map(&mem, g.zero())?;
    map.fill(0)?;
    map.write_from(b"fault", 0)?;

    // Sharing: export, allow-list, import (size check), map the import.
    let pid = dev.bare_pid()?;
    let fh = mem.export(ShareKind::Fabric, ExportFlags::empty())?;
    fh.allow_pids(&[pid])?;
    let imp = fh.shared().import(&dev)?;
    let map2 = va.map(&imp, g)?;
    let mut back = [0u8; 5];
    map2.read_into(&mut back, 0)?;
    assert_eq!(&back, b"fault");

    // HostBuffer: reserve, allocate host DRAM, map, grant the device access.
    let hb = HostBuffer::new(&dev, 2 << 20)?;

    // Streams, async copies and events.
    let mut s = Stream::new(&dev)?;
    s.set_failure_mode(FailureMode::Stop)?;
    let t0 = Event::with_flags(&dev, EventFlags::TIME_LINE)?;
    let t1 = Event::new(&dev)?;
    t0.record(&mut s)?;
    s.copy_async(&hb.as_slice(), &map2.slice(..4096)?)?;
    s.fill_async(&map.slice(4096..8192)?, 0xAB)?;
    t1.record(&mut s)?;
    let mut s2 = Stream::with_config(&dev, 0, StreamFlags::empty())?;
    s2.wait_event(&t1)?;
    s2.synchronize_timeout(Duration::from_secs(30))?;
    t1.synchronize()?;
    t1.synchronize_timeout(Duration::from_secs(30))?;
    assert!(t1.is_complete()?);
    s.synchronize()?;
    assert!(s.is_complete()?);
    assert!(t1.elapsed_since(&t0)? >= 0.0);
    let mut head = [0u8; 5];
    hb.read_into(&mut head, 0)?;
    assert_eq!(&head, b"fault");
    // Abort: the next synchronize reports the discarded work once.
    s2.abort()?;
    match s2.synchronize() {
        Err(e) if e.code() == Some(AclCode::RT_STREAM_ABORT) => {}
        Err(e) => return Err(e),
        Ok(()) => panic!("a synchronize after abort reports it"),
    }

    // Teardown, every step fallible and retried once.
    retry(t1, Event::close, seen)?;
    retry(t0, Event::close, seen)?;
    retry(s2, Stream::close, seen)?;
    retry(s, Stream::close, seen)?;
    let hmap = hb.into_mapping();
    let (hmem, hva) = (hmap.memory(), hmap.reservation());
    retry(hmap, Mapping::unmap, seen)?;
    retry(hmem, PhysicalMem::close, seen)?;
    retry(hva, ReservedVa::close, seen)?;
    retry(map2, Mapping::unmap, seen)?;
    retry(imp, PhysicalMem::close, seen)?;
    retry(map, Mapping::unmap, seen)?;
    drop(fh);
    retry(mem, PhysicalMem::close, seen)?;
    retry(va, ReservedVa::close, seen)?;
    Ok(())
}

fn calls_of(syms: &[&str]) -> Vec<u64> {
    syms.iter().map(|s| fault::calls(s)).collect()
}

fn calls() -> Vec<u64> {
    calls_of(SYMBOLS)
}

fn idx(s: &str) -> usize {
    SYMBOLS.iter().position(|x| *x == s).unwrap()
}

/// Asserts that every object made in a run was torn down exactly once: `d` holds the calls
/// of each symbol during the run, `sym` is the symbol that failed once.
fn assert_balanced(d: &[u64], sym: &str, ctx: &str) {
    let fail = |s: &str| u64::from(sym == s);
    let made = |s: &str| d[idx(s)] - fail(s);
    let pairs: [(&[&str], &str); 5] = [
        (
            &["aclrtMallocPhysical", "aclrtMemImportFromShareableHandleV2"],
            "aclrtFreePhysical",
        ),
        (&["aclrtMapMem"], "aclrtUnmapMem"),
        (&["aclrtReserveMemAddress"], "aclrtReleaseMemAddress"),
        (&["aclrtCreateStreamWithConfig"], "aclrtDestroyStream"),
        (
            &["aclrtCreateEvent", "aclrtCreateEventWithFlag"],
            "aclrtDestroyEvent",
        ),
    ];
    for (makers, undo) in pairs {
        let n: u64 = makers.iter().map(|m| made(m)).sum();
        assert_eq!(d[idx(undo)], n + fail(undo), "{ctx}: {undo} count");
    }
}

#[test]
fn every_acl_call_failing_once() {
    let env = setup();
    // Warm up, then count each symbol's calls in a clean run.
    scenario(&env.rt, &mut Vec::new()).unwrap();
    let before = calls();
    scenario(&env.rt, &mut Vec::new()).unwrap();
    let per_run: Vec<u64> = calls().iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_clean();
    for (si, sym) in SYMBOLS.iter().enumerate() {
        assert!(per_run[si] > 0, "{sym} is not called by the scenario");
    }
    assert_balanced(&per_run, "", "clean run");

    let mut runs = 0;
    for (si, sym) in SYMBOLS.iter().enumerate() {
        for n in 1..=per_run[si] {
            runs += 1;
            fault::clear();
            let c0 = calls();
            fault::fail_nth(sym, n, INJECTED);
            let mut seen = Vec::new();
            let r = scenario(&env.rt, &mut seen);
            fault::clear();
            let d: Vec<u64> = calls().iter().zip(&c0).map(|(a, b)| a - b).collect();
            let ctx = format!("{sym} failing at call {n}: result {r:?}, retried {seen:?}");

            // The injected failure reached the caller, naming the call and the code.
            let is_injected =
                |e: &Error| e.api() == Some(*sym) && e.code().map(|c| c.0) == Some(INJECTED);
            let surfaced =
                r.as_ref().err().is_some_and(is_injected) || seen.iter().any(is_injected);
            assert!(surfaced, "{ctx}");
            // A failing teardown step was retried and the scenario completed.
            if TEARDOWN.contains(sym) {
                assert!(r.is_ok(), "{ctx}");
            }

            // Nothing leaked.
            let c = ascend_sim::counters();
            assert!(c.is_zero(), "{ctx}: leaked {c:?}");
            // Nothing torn down twice.
            assert_balanced(&d, sym, &ctx);
        }
    }
    assert!(runs >= SYMBOLS.len());
    env.finish();
}

#[test]
fn get_device_failing_falls_back_to_set_device() {
    let env = setup();
    scenario(&env.rt, &mut Vec::new()).unwrap();
    let pair = ["aclrtGetDevice", "aclrtSetDevice"];
    let before = calls_of(&pair);
    scenario(&env.rt, &mut Vec::new()).unwrap();
    let per_run = calls_of(&pair)[0] - before[0];
    let sets_per_run = calls_of(&pair)[1] - before[1];
    assert!(
        per_run > 0,
        "bind checks the current device with aclrtGetDevice"
    );
    for n in 1..=per_run {
        fault::clear();
        let c0 = calls_of(&pair);
        fault::fail_nth("aclrtGetDevice", n, INJECTED);
        let mut seen = Vec::new();
        let r = scenario(&env.rt, &mut seen);
        fault::clear();
        let d: Vec<u64> = calls_of(&pair)
            .iter()
            .zip(&c0)
            .map(|(a, b)| a - b)
            .collect();
        let ctx = format!("aclrtGetDevice failing at call {n}: {r:?}, retried {seen:?}");
        // Absorbed: the run succeeds with no retries, binding once more instead.
        assert!(r.is_ok() && seen.is_empty(), "{ctx}");
        assert_eq!(d[1], sets_per_run + 1, "{ctx}: one extra aclrtSetDevice");
        let c = ascend_sim::counters();
        assert!(c.is_zero(), "{ctx}: leaked {c:?}");
    }
    env.finish();
}

#[test]
fn hidden_symbol_is_missing_symbol_not_a_panic() {
    let _env = setup();
    fault::hide_symbol("aclrtMemExportToShareableHandleV2");
    // A fresh table, so the hidden symbol is resolved (as absent) on first use.
    // SAFETY: the emulator's lookup returns its exports, which have acl-sys's signatures.
    let table = unsafe {
        acl::AclLib::from_source(acl::Source::InProcess {
            name: "ascend-sim (test table)",
            lookup: ascend_sim::lookup,
        })
    };
    let table: &'static acl::AclLib = Box::leak(Box::new(table));
    // SAFETY: the emulator's lookup returns its exports, which have acl-sys's signatures.
    let rt = unsafe { Runtime::from_table_unchecked(table) }.unwrap();
    let dev = rt.device(0).unwrap();
    let g = dev.granular(2 << 20).unwrap();
    let mem = PhysicalMem::hbm(&dev, g).unwrap();
    let e = mem
        .export(ShareKind::Fabric, ExportFlags::empty())
        .unwrap_err();
    fault::clear();
    assert!(
        matches!(
            e,
            Error::MissingSymbol {
                symbol: "aclrtMemExportToShareableHandleV2",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.kind(), ascend_mem::ErrorKind::NotSupported);
    assert!(e.to_string().contains("aclrtMemExportToShareableHandleV2"));
    // Everything else still works through the same table.
    let again = mem
        .export(ShareKind::Fabric, ExportFlags::empty())
        .unwrap_err();
    assert!(matches!(again, Error::MissingSymbol { .. }));
    drop((mem, dev, rt));
    assert_clean();
}
