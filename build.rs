//! Build script of the `ascend` facade.
//!
//! Looks for a CANN install (`ASCEND_HOME_PATH`, `ASCEND_TOOLKIT_HOME`, then the default
//! `/usr/local/Ascend/ascend-toolkit/latest`) and records its `lib64` directory, reported as
//! `ascend::BUILD_CANN_LIB_DIR`. The sys crates record the same directory as their loaders'
//! build-time default. Without CANN nothing is recorded and the build goes on: the emulator
//! serves every call.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    ascend_build::record_build_lib_dir(
        "ASCEND_BUILD_CANN_LIB_DIR",
        &["libascendcl.so", "libacl_rt.so"],
    );
}
