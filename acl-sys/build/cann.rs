// Build-script support shared by the `-sys` crates and the facade (included with `include!`):
// finding a CANN install and recording its `lib64` as the loaders' build-time default.

#[allow(dead_code)]
fn cann_home() -> Option<std::path::PathBuf> {
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return Some(std::path::PathBuf::from(v));
        }
    }
    let default = std::path::PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest");
    default.is_dir().then_some(default)
}

#[allow(dead_code)]
fn record_build_lib_dir(env_name: &str, file_names: &[&str]) {
    println!("cargo:rerun-if-env-changed=ASCEND_HOME_PATH");
    println!("cargo:rerun-if-env-changed=ASCEND_TOOLKIT_HOME");
    if let Some(home) = cann_home() {
        let lib64 = home.join("lib64");
        if file_names.iter().any(|f| lib64.join(f).exists()) {
            println!("cargo:rustc-env={env_name}={}", lib64.display());
        }
    }
}

