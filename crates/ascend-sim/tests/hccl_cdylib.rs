//! The emulator's HCCL as a shared library: `HcclLib::open_paths` on `libascend_sim.so`
//! (what `ASCEND_HCCL_LIB=…/libascend_sim.so` does), a one-rank symmetric AllGather through it.

use std::ffi::c_void;
use std::path::PathBuf;
use std::process::Command;
use std::ptr::null_mut;
use std::sync::OnceLock;

use acl_sys::*;
use hccl_sys::*;

/// A freshly built `libascend_sim.so`.
///
/// The `.so` next to the test binary is never trusted as is (it may predate the sources), and
/// it is not rebuilt in place either: a `cargo build -p ascend-sim` into the same target dir
/// resolves features for that one package, rebuilds the crate's unhashed `libascend_sim.rlib`
/// with another hash, and breaks every later step of the running `cargo test` that links it.
/// So the cargo running the tests (`CARGO`) builds the library, once per test process, into
/// its own directory inside the target dir this test binary lives in (which is
/// `CARGO_TARGET_DIR` when that is set), with the same profile; cargo decides freshness, and
/// after the first build this is a no-op.
fn lib_path() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            let profile_dir = exe.parent().unwrap().parent().unwrap();
            let profile = profile_dir
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let target_dir = profile_dir.parent().unwrap().join("ascend-sim-cdylib");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "ascend-sim", "--lib", "--target-dir"])
                .arg(&target_dir)
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            match profile.as_str() {
                "debug" => {}
                "release" => {
                    cmd.arg("--release");
                }
                other => {
                    cmd.args(["--profile", other]);
                }
            }
            let out = cmd.output().expect("run cargo build -p ascend-sim");
            assert!(
                out.status.success(),
                "cargo build -p ascend-sim failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let lib = target_dir.join(&profile).join("libascend_sim.so");
            assert!(
                lib.exists(),
                "{} not found after `cargo build -p ascend-sim`",
                lib.display()
            );
            lib
        })
        .clone()
}

#[test]
fn hccl_through_the_shared_library() {
    let path = lib_path();
    // SAFETY: our own emulator library.
    let a = unsafe { AclLib::open_path(&path) }.unwrap();
    // SAFETY: as above.
    let h = unsafe { HcclLib::open_paths(std::slice::from_ref(&path)) }.unwrap();
    for s in hccl_sys::SYMBOLS {
        assert!(h.is_available(s), "{s} not exported by {}", path.display());
    }
    let mib2 = 2usize << 20;
    let prop = aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: ACL_HBM_MEM_HUGE,
        location: aclrtMemLocation {
            id: 0,
            type_: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        reserve: 0,
    };
    // SAFETY: every call passes live locals as the C contract requires.
    unsafe {
        assert_eq!(a.aclrtSetDevice(0).unwrap(), 0);
        let mut stream = null_mut();
        assert_eq!(a.aclrtCreateStream(&mut stream).unwrap(), 0);
        let mut root = HcclRootInfo::default();
        assert_eq!(h.HcclGetRootInfo(&mut root).unwrap(), 0);
        let mut comm = null_mut();
        assert_eq!(h.HcclCommInitRootInfo(1, &root, 0, &mut comm).unwrap(), 0);
        let mut va: *mut c_void = null_mut();
        assert_eq!(
            a.aclrtReserveMemAddress(&mut va, mib2, 0, null_mut(), 0)
                .unwrap(),
            0
        );
        let mut ph = null_mut();
        assert_eq!(a.aclrtMallocPhysical(&mut ph, mib2, &prop, 0).unwrap(), 0);
        assert_eq!(a.aclrtMapMem(va, mib2, 0, ph, 0).unwrap(), 0);
        let mut w = null_mut();
        assert_eq!(
            h.HcclCommSymWinRegister(comm, va, mib2 as u64, &mut w, 1)
                .unwrap(),
            0
        );
        va.cast::<u32>().write(0xABCD_0123);
        let dst = va.cast::<u8>().add(4096).cast::<c_void>();
        assert_eq!(
            h.HcclAllGather(va, dst, 1, HCCL_DATA_TYPE_UINT32, comm, stream)
                .unwrap(),
            0
        );
        assert_eq!(a.aclrtSynchronizeStream(stream).unwrap(), 0);
        assert_eq!(dst.cast::<u32>().read(), 0xABCD_0123);
        let text = std::ffi::CStr::from_ptr(h.HcclGetErrorString(HCCL_E_PARA).unwrap());
        assert_eq!(text.to_str().unwrap(), "parameter error");
        assert_eq!(h.HcclGroupStart().unwrap(), HCCL_E_NOT_SUPPORT);
        assert_eq!(h.HcclCommSymWinDeregister(w).unwrap(), 0);
        assert_eq!(h.HcclCommDestroy(comm).unwrap(), 0);
        assert_eq!(a.aclrtUnmapMem(va).unwrap(), 0);
        assert_eq!(a.aclrtFreePhysical(ph).unwrap(), 0);
        assert_eq!(a.aclrtReleaseMemAddress(va).unwrap(), 0);
        assert_eq!(a.aclrtDestroyStream(stream).unwrap(), 0);
        assert_eq!(a.aclrtResetDevice(0).unwrap(), 0);
    }
}
