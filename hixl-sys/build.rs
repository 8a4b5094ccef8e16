//! Build script of hixl-sys: records a CANN install found at build time as the loader's
//! default directory and, with the `bindgen` feature, regenerates the bindings. The shared
//! support code is the `ascend-build` crate.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    ascend_build::record_build_lib_dir("HIXL_SYS_BUILD_LIB_DIR", &["libcann_hixl.so"]);
    #[cfg(feature = "bindgen")]
    ascend_build::regenerate(&ascend_build::Regen {
        krate: "hixl-sys",
        package: "ascend-hixl-sys",
        header: "include/hixl_decls.h",
        real_wrapper: "#include <cs/hixl_cs.h>\n",
        real_probe: "cs/hixl_cs.h",
        // The real header uses C++ default member initialisers.
        real_clang_args: &["-x", "c++", "-std=c++14"],
        functions: "HixlCS.*",
        types: "Hixl.*|CommMem.*|CommAddr.*|CommProtocol|EndpointLoc.*|EndpointDesc|CompleteHandle|MemHandle",
        vars: "HIXL_.*|COMM_.*|ENDPOINT_.*",
        blocklist: &[],
        raw_lines: &[],
        update_var: "HIXL_SYS_UPDATE_BINDINGS",
    });
}
