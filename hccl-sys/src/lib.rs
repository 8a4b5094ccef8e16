//! Raw bindings to HCCL (communicators, collectives, symmetric windows), loaded at run time.
//!
//! The crate currently holds the library search description; the function table and the
//! types follow with the communicator support in ascend-mem. Symbols are looked up in every
//! library found, because on a given install the management calls may live in `libhcomm.so`
//! and the collectives in `libhccl.so`.

pub use acl_sys::loader::{LoadError, MissingSymbol};

/// The search description of the HCCL libraries.
pub const SPEC: acl_sys::loader::LibSpec = acl_sys::loader::LibSpec {
    name: "HCCL",
    path_var: "ASCEND_HCCL_LIB",
    file_names: &["libhccl.so", "libhcomm.so"],
    build_dir: option_env!("ACL_SYS_BUILD_LIB_DIR"),
    open_all: true,
};
