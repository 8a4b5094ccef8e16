//! Builds the emulator as a shared library for the tests that load or link it
//! (`cdylib.rs`, `hccl_cdylib.rs`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

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
pub fn lib_path() -> PathBuf {
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
