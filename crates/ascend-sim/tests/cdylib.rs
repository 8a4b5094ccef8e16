//! The emulator as a shared library: opened through the normal loader path
//! (`AclLib::open_path`), and linked by a C program (`tests/c/smoke.c`).

#[macro_use]
mod common;
mod sim_cdylib;

use std::ffi::c_void;
use std::path::PathBuf;
use std::process::Command;
use std::ptr::null_mut;

use acl_sys::*;
use common::{dev_prop, LOCK, MIB2};
use sim_cdylib::lib_path;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SimCounters([u64; 12]);

#[test]
fn shared_library_through_the_loader() {
    let _g = LOCK.lock();
    let path = lib_path();
    // SAFETY: our own emulator library.
    let t = unsafe { AclLib::open_path(&path) }.unwrap();
    assert!(!t.source().is_in_process());
    // SAFETY: the same library, kept open for the test.
    let raw = unsafe { libloading::Library::new(&path) }.unwrap();
    // SAFETY: the symbol has this signature (see ascend_sim::ascendSimGetCounters).
    let get: libloading::Symbol<'_, unsafe extern "C" fn(*mut SimCounters) -> i32> =
        unsafe { raw.get(b"ascendSimGetCounters") }.unwrap();
    // SAFETY: as above.
    let fail: libloading::Symbol<
        '_,
        unsafe extern "C" fn(*const std::ffi::c_char, u64, i32) -> i32,
    > = unsafe { raw.get(b"ascendSimFailNth") }.unwrap();
    let counters = || {
        let mut c = SimCounters::default();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { get(&mut c) }, 0);
        c.0
    };

    // SAFETY: every call below passes live locals as the C contract requires.
    unsafe {
        assert_eq!(t.aclrtSetDevice(0).unwrap(), 0);
        let mut va: *mut c_void = null_mut();
        assert_eq!(
            t.aclrtReserveMemAddress(&mut va, MIB2, 0, null_mut(), 0)
                .unwrap(),
            0
        );
        let mut h = null_mut();
        assert_eq!(
            t.aclrtMallocPhysical(&mut h, MIB2, &dev_prop(0), 0)
                .unwrap(),
            0
        );
        assert_eq!(fail(c"aclrtMapMem".as_ptr(), 1, 207001), 0);
        assert_eq!(t.aclrtMapMem(va, MIB2, 0, h, 0).unwrap(), 207001);
        assert_eq!(t.aclrtMapMem(va, MIB2, 0, h, 0).unwrap(), 0);
        let c = counters();
        assert_eq!((c[0], c[1], c[3]), (1, 1, 1), "{c:?}");
        let src = [9u8; 256];
        let mut dst = [0u8; 256];
        assert_eq!(
            t.aclrtMemcpy(
                va,
                MIB2,
                src.as_ptr().cast(),
                256,
                ACL_MEMCPY_HOST_TO_DEVICE
            )
            .unwrap(),
            0
        );
        assert_eq!(
            t.aclrtMemcpy(
                dst.as_mut_ptr().cast(),
                256,
                va,
                256,
                ACL_MEMCPY_DEVICE_TO_HOST
            )
            .unwrap(),
            0
        );
        assert_eq!(dst, src);
        assert_eq!(t.aclrtUnmapMem(va).unwrap(), 0);
        assert_eq!(t.aclrtFreePhysical(h).unwrap(), 0);
        assert_eq!(t.aclrtReleaseMemAddress(va).unwrap(), 0);
        assert_eq!(t.aclrtResetDevice(0).unwrap(), 0);
    }
    assert_eq!(counters(), [0; 12]);
    // The in-process emulator is a separate instance and saw none of this.
    assert!(ascend_sim::counters().is_zero());
}

#[test]
fn c_smoke_program() {
    let _g = LOCK.lock();
    if Command::new("cc").arg("--version").output().is_err() {
        // Not a failure (the ABI is also covered through the loader above), but never silent:
        // written to the stderr handle itself, which the test harness does not capture.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "c_smoke_program skipped: no C compiler (`cc` is not on PATH); \
             install gcc or clang to run the C ABI smoke test"
        );
        return;
    }
    let lib = lib_path();
    let dir = lib.parent().unwrap();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/smoke.c");
    let bin = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ascend_sim_smoke");
    let out = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .arg(format!("-L{}", dir.display()))
        .arg("-lascend_sim")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without cargo's LD_LIBRARY_PATH: it lists the target's deps directory, whose
    // `libascend_sim.so` may predate the sources and would win over the runpath. Each product
    // reports its SoC name (an alias reports its family's first name; a full name is reported
    // as given) and refuses a NoUC reservation without an address as "not supported".
    for (soc, name) in [
        (None, "Ascend910_9391"),
        (Some("A3"), "Ascend910_9391"),
        (Some("Ascend910_9382"), "Ascend910_9382"),
        (Some("A2"), "Ascend910B1"),
        (Some("Ascend910B4-1"), "Ascend910B4-1"),
        (Some("950"), "Ascend950"),
        (Some("Ascend950PR"), "Ascend950PR"),
    ] {
        let mut cmd = Command::new(&bin);
        cmd.arg(name).env_remove("LD_LIBRARY_PATH");
        match soc {
            Some(s) => cmd.env("ASCEND_SIM_SOC", s),
            None => cmd.env_remove("ASCEND_SIM_SOC"),
        };
        let run = cmd.output().unwrap();
        let so = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && so.contains("SMOKE OK"),
            "smoke with ASCEND_SIM_SOC={soc:?} failed:\n{so}\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
}
