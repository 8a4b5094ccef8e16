//! Build script of hccl-sys: records a CANN install found at build time as the loader's
//! default directory and, with the `bindgen` feature, regenerates the bindings. The shared
//! support code is the `ascend-build` crate.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    ascend_build::record_build_lib_dir("HCCL_SYS_BUILD_LIB_DIR", &["libhccl.so", "libhcomm.so"]);
    #[cfg(feature = "bindgen")]
    ascend_build::regenerate(&ascend_build::Regen {
        krate: "hccl-sys",
        package: "ascend-hccl-sys",
        header: "include/hccl_decls.h",
        real_wrapper:
            "#include <hccl/hccl.h>\n#include <hccl/hccl_comm.h>\n#include <hccl/hccl_types.h>\n",
        real_probe: "hccl/hccl.h",
        // The real HCCL headers do not compile as C.
        real_clang_args: &["-x", "c++", "-std=c++14"],
        functions: "Hccl.*",
        types: "Hccl.*",
        vars: "HCCL_.*|COMM_NAME_MAX_LENGTH|UDI_MAX_LENGTH|BUFFER_NAME_MAX_LENGTH",
        blocklist: &["aclrtStream", "aclrtDrvMemHandle"],
        raw_lines: &["pub use acl_sys::{aclrtDrvMemHandle, aclrtStream};"],
        update_var: "HCCL_SYS_UPDATE_BINDINGS",
    });
}
