//! Fault injection: every VMM call of a full scenario (granularity, reserve, allocate, map,
//! copy, export, allow-list, import, map the import, unmap, free, release) fails once, at
//! every call index in turn. Each time the injected error must come back to the caller
//! (from the failing step, or from the `close`/`unmap` that hands the value back, which the
//! scenario then retries), nothing may leak (counters back to zero) and nothing may be freed,
//! unmapped or released twice (call counts balance).

mod common;

use ascend_mem::{Error, ExportFlags, Mapping, PhysicalMem, ReservedVa, Runtime, ShareKind};
use ascend_sim::fault;
use common::{assert_clean, setup};

const INJECTED: i32 = acl_sys::ACL_ERROR_RT_DRV_INTERNAL_ERROR;

const SYMBOLS: &[&str] = &[
    "aclrtMemGetAllocationGranularity",
    "aclrtReserveMemAddress",
    "aclrtMallocPhysical",
    "aclrtMapMem",
    "aclrtMemcpy",
    "aclrtDeviceGetBareTgid",
    "aclrtMemExportToShareableHandleV2",
    "aclrtMemSetPidToShareableHandleV2",
    "aclrtMemImportFromShareableHandleV2",
    "aclrtUnmapMem",
    "aclrtFreePhysical",
    "aclrtReleaseMemAddress",
];

fn retry<T>(
    x: T,
    close: fn(T) -> Result<(), (Error, T)>,
    seen: &mut Vec<Error>,
) -> Result<(), Error> {
    match close(x) {
        Ok(()) => Ok(()),
        Err((e, x)) => {
            seen.push(e);
            close(x).map_err(|(e, _)| e)
        }
    }
}

/// The full scenario on device 1 (a fresh device context each run, so the granularity is
/// asked every time). Teardown uses the fallible closes and retries once.
fn scenario(rt: &Runtime, seen: &mut Vec<Error>) -> Result<(), Error> {
    let dev = rt.device(1)?;
    let g = dev.granular(2 << 20)?;
    let va = ReservedVa::new(&dev, g.checked_mul(2).unwrap())?;
    let mem = PhysicalMem::hbm(&dev, g)?;
    let map = va.map(&mem, g.zero())?;
    map.write_from(b"fault", 0)?;
    let pid = dev.bare_pid()?;
    let fh = mem.export(ShareKind::Fabric, ExportFlags::empty())?;
    fh.allow_pids(&[pid])?;
    let imp = fh.shared().import(&dev)?;
    let map2 = va.map(&imp, g)?;
    let mut back = [0u8; 5];
    map2.read_into(&mut back, 0)?;
    assert_eq!(&back, b"fault");
    retry(map2, Mapping::unmap, seen)?;
    retry(imp, PhysicalMem::close, seen)?;
    retry(map, Mapping::unmap, seen)?;
    drop(fh);
    retry(mem, PhysicalMem::close, seen)?;
    retry(va, ReservedVa::close, seen)?;
    Ok(())
}

fn calls() -> Vec<u64> {
    SYMBOLS.iter().map(|s| fault::calls(s)).collect()
}

fn idx(s: &str) -> usize {
    SYMBOLS.iter().position(|x| *x == s).unwrap()
}

#[test]
fn every_vmm_call_failing_once() {
    let env = setup();
    // Warm up (thread binding), then count each symbol's calls in a clean run.
    scenario(&env.rt, &mut Vec::new()).unwrap();
    let before = calls();
    scenario(&env.rt, &mut Vec::new()).unwrap();
    let per_run: Vec<u64> = calls().iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_clean();
    for (si, sym) in SYMBOLS.iter().enumerate() {
        assert!(per_run[si] > 0, "{sym} is not called by the scenario");
    }

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
            if [
                "aclrtUnmapMem",
                "aclrtFreePhysical",
                "aclrtReleaseMemAddress",
            ]
            .contains(sym)
            {
                assert!(r.is_ok(), "{ctx}");
            }

            // Nothing leaked.
            let c = ascend_sim::counters();
            assert!(c.is_zero(), "{ctx}: leaked {c:?}");

            // Nothing torn down twice: every success is undone exactly once, plus the one
            // injected failure of a teardown call.
            let fail = |s: &str| u64::from(*sym == s);
            let made_phys = d[idx("aclrtMallocPhysical")] - fail("aclrtMallocPhysical")
                + d[idx("aclrtMemImportFromShareableHandleV2")]
                - fail("aclrtMemImportFromShareableHandleV2");
            assert_eq!(
                d[idx("aclrtFreePhysical")],
                made_phys + fail("aclrtFreePhysical"),
                "{ctx}: frees"
            );
            let maps = d[idx("aclrtMapMem")] - fail("aclrtMapMem");
            assert_eq!(
                d[idx("aclrtUnmapMem")],
                maps + fail("aclrtUnmapMem"),
                "{ctx}: unmaps"
            );
            let reserves = d[idx("aclrtReserveMemAddress")] - fail("aclrtReserveMemAddress");
            assert_eq!(
                d[idx("aclrtReleaseMemAddress")],
                reserves + fail("aclrtReleaseMemAddress"),
                "{ctx}: releases"
            );
        }
    }
    assert!(runs >= SYMBOLS.len());
    env.finish();
}

#[test]
fn hidden_symbol_is_missing_symbol_not_a_panic() {
    let _env = setup();
    fault::hide_symbol("aclrtMemExportToShareableHandleV2");
    // A fresh table, so the hidden symbol is resolved (as absent) on first use.
    // SAFETY: the emulator's lookup returns its exports, which have acl-sys's signatures.
    let table = unsafe {
        acl_sys::AclLib::from_source(acl_sys::Source::InProcess {
            name: "ascend-sim (test table)",
            lookup: ascend_sim::lookup,
        })
    };
    let table: &'static acl_sys::AclLib = Box::leak(Box::new(table));
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
