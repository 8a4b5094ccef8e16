//! Build script of acl-sys: records a CANN install found at build time as the loader's default
//! directory (never fails without one) and, with the `bindgen` feature, regenerates the
//! bindings (see the `ascend-build` crate).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    ascend_build::record_build_lib_dir(
        "ACL_SYS_BUILD_LIB_DIR",
        &["libascendcl.so", "libacl_rt.so"],
    );
    #[cfg(feature = "bindgen")]
    ascend_build::regenerate(&ascend_build::Regen {
        krate: "acl-sys",
        package: "ascend-acl-sys",
        header: "include/acl_decls.h",
        real_wrapper: "#include <acl/acl.h>\n#include <acl/error_codes/rt_error_codes.h>\n",
        real_probe: "acl/acl.h",
        real_clang_args: &[],
        functions: "acl.*",
        types: "acl.*",
        vars: "ACL_.*",
        blocklist: &[],
        raw_lines: &[],
        update_var: "ACL_SYS_UPDATE_BINDINGS",
    });
}
