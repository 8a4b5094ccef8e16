//! Build script of the `ascend` facade: records the CANN toolkit this build sees (its version
//! and path) for `ascend::build_info()`, and warns when it is older than the oldest CANN the
//! bindings support. It never fails, and without CANN it prints nothing (see
//! `ascend_build::record_cann_build_info`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    ascend_build::record_cann_build_info();
}
