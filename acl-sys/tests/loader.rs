//! The loader: search order, the error that lists every path, lazy symbols.

use acl_sys::loader::{self, LibSpec};
use std::path::PathBuf;

const SPEC: LibSpec = LibSpec {
    name: "test runtime",
    path_var: "ACL_SYS_TEST_LIB",
    file_names: &["libacl_sys_test_a.so", "libacl_sys_test_b.so"],
    build_dir: Some("/opt/build-default/lib64"),
    open_all: false,
};

// One test touches the environment, so nothing else races with it.
#[test]
fn search_order_and_load_error() {
    std::env::remove_var("ACL_SYS_TEST_LIB");
    std::env::set_var("ASCEND_HOME_PATH", "/opt/cann-home");
    std::env::remove_var("ASCEND_TOOLKIT_HOME");
    let c = loader::candidates(&SPEC);
    let expect: Vec<PathBuf> = [
        "/opt/cann-home/lib64/libacl_sys_test_a.so",
        "/opt/cann-home/lib64/libacl_sys_test_b.so",
        "/opt/build-default/lib64/libacl_sys_test_a.so",
        "/opt/build-default/lib64/libacl_sys_test_b.so",
        "libacl_sys_test_a.so",
        "libacl_sys_test_b.so",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    assert_eq!(c, expect);

    // SAFETY: none of these paths exist, so no library initialiser runs.
    let err = unsafe { loader::open(&SPEC) }.unwrap_err();
    assert_eq!(err.attempts.len(), 6);
    let text = err.to_string();
    for p in &expect {
        assert!(text.contains(&*p.to_string_lossy()), "{text}");
    }
    assert!(
        text.contains("ACL_SYS_TEST_LIB") && text.contains("ASCEND_HOME_PATH"),
        "{text}"
    );

    // An explicit path is the only candidate: no silent fallback.
    std::env::set_var("ACL_SYS_TEST_LIB", "/nowhere/libexplicit.so");
    // SAFETY: the path does not exist.
    let err = unsafe { loader::open(&SPEC) }.unwrap_err();
    assert_eq!(err.attempts.len(), 1);
    assert_eq!(err.attempts[0].path, "/nowhere/libexplicit.so");
    std::env::remove_var("ACL_SYS_TEST_LIB");
    std::env::remove_var("ASCEND_HOME_PATH");
}

#[test]
fn a_missing_symbol_is_an_error_when_called() {
    // The C library opens fine but exports no ACL symbol.
    // SAFETY: libc's initialisers have already run in this process.
    let lib = unsafe { acl_sys::AclLib::open_path("libc.so.6".as_ref()) }.expect("libc opens");
    assert!(!lib.is_available("aclrtMapMem"));
    let mut count = 0u32;
    // SAFETY: the call cannot happen (the symbol is absent); the pointer is valid anyway.
    let err = unsafe { lib.aclrtGetDeviceCount(&mut count) }.unwrap_err();
    assert_eq!(err.symbol, "aclrtGetDeviceCount");
    assert!(err.to_string().contains("aclrtGetDeviceCount"));
}

#[test]
fn in_process_source_resolves_through_the_lookup() {
    unsafe extern "C" fn count(out: *mut u32) -> acl_sys::aclError {
        // SAFETY: the caller passes a writable pointer.
        unsafe { *out = 7 };
        0
    }
    fn lookup(name: &str) -> *const std::ffi::c_void {
        match name {
            "aclrtGetDeviceCount" => {
                let f: acl_sys::fn_types::aclrtGetDeviceCount = count;
                f as *const std::ffi::c_void
            }
            _ => std::ptr::null(),
        }
    }
    // SAFETY: the lookup returns `count`, which has the declared signature, or null.
    let lib = unsafe {
        acl_sys::AclLib::from_source(acl_sys::Source::InProcess {
            name: "test",
            lookup,
        })
    };
    let mut n = 0u32;
    // SAFETY: `n` is writable.
    assert_eq!(unsafe { lib.aclrtGetDeviceCount(&mut n) }, Ok(0));
    assert_eq!(n, 7);
    // SAFETY: never reached: the symbol is absent.
    assert!(unsafe { lib.aclrtSetDevice(0) }.is_err());
    assert!(lib.source().is_in_process());
}
