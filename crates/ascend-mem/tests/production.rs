//! A program that asks for the backend from the environment (`Runtime::from_env()`) gets the
//! missing-CANN error on a host without CANN, an error that lists the paths tried and names
//! the switch to the emulator. The emulator is linked into this test (the crate's tests turn
//! its `emulator` feature on), and that is the point: `from_env` never falls back to it on
//! its own. (The library without the feature is checked by CI's dependency tree and clippy
//! of the library targets alone.) Its own binary: it sets the environment.

use ascend_mem::{ErrorKind, Runtime};

#[test]
fn from_env_without_cann_is_the_load_error_naming_the_emulator_switch() {
    // The one test of this binary: nothing else reads the environment concurrently.
    std::env::remove_var("ASCEND_MEM_BACKEND");
    std::env::set_var("ASCEND_ACL_LIB", "/nonexistent/ascend/libascendcl.so");
    std::env::set_var("ASCEND_HOME_PATH", "/nonexistent/home");
    std::env::remove_var("ASCEND_TOOLKIT_HOME");
    if let Ok(rt) = Runtime::load() {
        // A host with CANN where the search still finds it (the build-time directory or
        // the loader's path): then from_env must give CANN, never the emulator.
        assert!(!rt.backend().is_emulator(), "{:?}", rt.backend());
        let env = Runtime::from_env().expect("CANN found by load is found by from_env");
        assert!(!env.backend().is_emulator());
        return;
    }
    let e = Runtime::from_env().expect_err("no CANN and no emulator fallback");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let text = format!("{e}");
    assert!(
        text.contains("/nonexistent/ascend/libascendcl.so"),
        "lists the path tried: {text}"
    );
    assert!(text.contains("ASCEND_MEM_BACKEND=sim"), "{text}");
}
