//! Build script of the `ascend` facade.
//!
//! Looks for a CANN install (`ASCEND_HOME_PATH`, `ASCEND_TOOLKIT_HOME`, then the default
//! `/usr/local/Ascend/ascend-toolkit/latest`) and records its `lib64` directory as the default
//! search directory reported by [`ascend::BUILD_CANN_LIB_DIR`]. The sys crates record the same
//! directory for their loaders. Without CANN nothing is recorded and the build goes on: the
//! emulator serves every call.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=ASCEND_HOME_PATH");
    println!("cargo:rerun-if-env-changed=ASCEND_TOOLKIT_HOME");
    println!("cargo:rerun-if-changed=build.rs");
    let candidates = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"]
        .into_iter()
        .filter_map(|v| std::env::var_os(v).filter(|s| !s.is_empty()).map(PathBuf::from))
        .chain(std::iter::once(PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest")));
    for home in candidates {
        let lib64 = home.join("lib64");
        if ["libascendcl.so", "libacl_rt.so"].iter().any(|f| lib64.join(f).exists()) {
            println!("cargo:rustc-env=ASCEND_BUILD_CANN_LIB_DIR={}", lib64.display());
            return;
        }
    }
}
