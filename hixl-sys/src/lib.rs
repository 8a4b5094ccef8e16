//! Raw bindings to the HIXL C API (`HixlCS*`, client/server one-sided transfers), loaded at
//! run time from `libcann_hixl.so`.
//!
//! The crate currently holds the library search description; the function table and types
//! follow with the client/server support. HIXL's engine class is C++ only and is not bound:
//! its FabricMem mode is provided natively by ascend-fabric.

pub use acl_sys::loader::{LoadError, MissingSymbol};

/// The search description of the HIXL library.
pub const SPEC: acl_sys::loader::LibSpec = acl_sys::loader::LibSpec {
    name: "HIXL",
    path_var: "ASCEND_HIXL_LIB",
    file_names: &["libcann_hixl.so"],
    build_dir: option_env!("ACL_SYS_BUILD_LIB_DIR"),
    open_all: false,
};
