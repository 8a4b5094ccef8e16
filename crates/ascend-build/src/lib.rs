//! Build-script support shared by the Ascend `-sys` crates (`ascend-acl-sys`,
//! `ascend-hccl-sys`, `ascend-hixl-sys`) and the `ascend` facade: finding a CANN install
//! ([`cann_home`]) and recording its `lib64` as the loaders' build-time default directory
//! ([`record_build_lib_dir`]); reading and comparing the install's CANN version
//! ([`read_cann_version`], [`CannVersion`]) and recording it for the facade's
//! `ascend::build_info()` ([`record_cann_build_info`], the facade's whole build script), with a
//! warning when it is older than [`OLDEST_SUPPORTED_CANN`]; and (feature `bindgen`)
//! regenerating a crate's bindings from its declarations header, or from the real CANN headers
//! when an install has them.
//!
//! `regenerate` (feature `bindgen`) splits bindgen's output into `bindings.rs` (types, constants, layout
//! assertions) and `functions.rs` (the extern block wrapped in the crate's `functions!` macro,
//! which builds the lazily resolved loader table). Output goes to `$OUT_DIR`; with
//! `<PREFIX>_UPDATE_BINDINGS=1` it also replaces the checked-in files under `src/`.

use std::path::PathBuf;

/// Where CANN is installed when no variable says, in the order [`cann_home`] looks: CANN 9.x's
/// default folder, then the toolkit folder of older releases.
pub const DEFAULT_CANN_HOMES: [&str; 2] = [
    "/usr/local/Ascend/cann",
    "/usr/local/Ascend/ascend-toolkit/latest",
];

/// The CANN install this build sees: `ASCEND_HOME_PATH`, then `ASCEND_TOOLKIT_HOME`, then the
/// first of [`DEFAULT_CANN_HOMES`] that is a folder.
pub fn cann_home() -> Option<PathBuf> {
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(v));
        }
    }
    DEFAULT_CANN_HOMES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
}

/// Sets the compile-time variable `env_name` to the install's `lib64` when it holds one of
/// `file_names`; sets nothing (and never fails) without CANN.
pub fn record_build_lib_dir(env_name: &str, file_names: &[&str]) {
    println!("cargo:rerun-if-env-changed=ASCEND_HOME_PATH");
    println!("cargo:rerun-if-env-changed=ASCEND_TOOLKIT_HOME");
    if let Some(home) = cann_home() {
        let lib64 = home.join("lib64");
        if file_names.iter().any(|f| lib64.join(f).exists()) {
            println!("cargo:rustc-env={env_name}={}", lib64.display());
        }
    }
}

mod cann_version;
pub use cann_version::{
    parse_cann_version, read_cann_version, record_cann_build_info, CannVersion,
    OLDEST_SUPPORTED_CANN,
};

#[cfg(feature = "bindgen")]
mod regen;
#[cfg(feature = "bindgen")]
pub use regen::{regenerate, Regen};
