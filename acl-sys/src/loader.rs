//! Run-time loading shared by the Ascend `-sys` crates.
//!
//! A library is opened with libloading (never linked), trying in order: the explicit path in a
//! variable such as `ASCEND_ACL_LIB`, `$ASCEND_HOME_PATH/lib64` (or `$ASCEND_TOOLKIT_HOME/lib64`),
//! the directory found at build time, and finally the bare soname so `LD_LIBRARY_PATH` applies.
//! Every attempt and the loader's message are kept for the error.
//!
//! Symbols are resolved lazily, one `OnceLock<Option<fn>>` per function: a symbol the library
//! lacks is reported as [`MissingSymbol`] when it is called, never at open time and never as a
//! panic. A table can also be filled from an in-process lookup function, which is how the
//! emulator serves the same tables without a shared library.

use std::ffi::c_void;
use std::fmt;
use std::path::{Path, PathBuf};

/// Describes where a library is searched for.
#[derive(Debug, Clone, Copy)]
pub struct LibSpec {
    /// Human name used in messages, e.g. `"ACL runtime"`.
    pub name: &'static str,
    /// Variable holding an explicit path to the library file.
    pub path_var: &'static str,
    /// File names to try in each directory, in order.
    pub file_names: &'static [&'static str],
    /// Directory recorded at build time, if a CANN install was found then.
    pub build_dir: Option<&'static str>,
    /// Open every file name that exists rather than stopping at the first one. Used where a
    /// table's symbols are spread over several libraries.
    pub open_all: bool,
}

/// One path the loader tried and the loader's message for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The path or soname passed to `dlopen`.
    pub path: String,
    /// The `dlerror` text.
    pub message: String,
}

/// The library could not be opened from any candidate path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// Human name of the library.
    pub library: &'static str,
    /// Variable that takes an explicit path.
    pub path_var: &'static str,
    /// Every path tried, in order.
    pub attempts: Vec<Attempt>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "could not load the {} library; tried:", self.library)?;
        for a in &self.attempts {
            writeln!(f, "  {}: {}", a.path, a.message)?;
        }
        write!(
            f,
            "fix: install the CANN toolkit and `source <install>/set_env.sh` (sets ASCEND_HOME_PATH), \
             or set {} to the library file, or add its directory to LD_LIBRARY_PATH; \
             to run without an NPU use the emulator (ASCEND_MEM_BACKEND=sim)",
            self.path_var
        )
    }
}

impl std::error::Error for LoadError {}

/// A function the opened library does not export (typically an older CANN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MissingSymbol {
    /// Human name of the library.
    pub library: &'static str,
    /// The C symbol.
    pub symbol: &'static str,
}

impl fmt::Display for MissingSymbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the {} library does not export `{}` (CANN too old for this call?)",
            self.library, self.symbol
        )
    }
}

impl std::error::Error for MissingSymbol {}

/// Looks a symbol up in an in-process implementation; returns null when absent.
pub type InProcessLookup = fn(&str) -> *const c_void;

/// Where a table's symbols come from.
pub enum Source {
    /// Libraries opened with `dlopen`, searched in order for each symbol.
    Dl(Vec<(PathBuf, libloading::Library)>),
    /// An implementation linked into this process (the emulator).
    InProcess {
        /// Name shown by [`Source::describe`].
        name: &'static str,
        /// The symbol lookup.
        lookup: InProcessLookup,
    },
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Source {
    /// Resolves `name`, returning null when no source exports it.
    pub fn resolve(&self, name: &str) -> *const c_void {
        match self {
            Source::Dl(libs) => {
                for (_, lib) in libs {
                    // SAFETY: we only read the symbol's address; the caller transmutes it to
                    // the function type declared for this name in the bindings.
                    if let Ok(sym) = unsafe { lib.get::<*const c_void>(name.as_bytes()) } {
                        return *sym;
                    }
                }
                std::ptr::null()
            }
            Source::InProcess { lookup, .. } => lookup(name),
        }
    }

    /// A short description: the opened paths, or the in-process implementation's name.
    pub fn describe(&self) -> String {
        match self {
            Source::Dl(libs) => libs
                .iter()
                .map(|(p, _)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            Source::InProcess { name, .. } => format!("{name} (in-process)"),
        }
    }

    /// Whether this source is an in-process implementation.
    pub fn is_in_process(&self) -> bool {
        matches!(self, Source::InProcess { .. })
    }
}

/// The candidate paths for `spec`, in search order.
pub fn candidates(spec: &LibSpec) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os(spec.path_var).filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
        if let Some(home) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            for f in spec.file_names {
                out.push(Path::new(&home).join("lib64").join(f));
            }
        }
    }
    if let Some(dir) = spec.build_dir {
        for f in spec.file_names {
            out.push(Path::new(dir).join(f));
        }
    }
    for f in spec.file_names {
        out.push(PathBuf::from(f));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// Opens the library described by `spec` from its candidate paths.
///
/// An explicit path variable, when set, is the only candidate tried: a user who names a file
/// wants that file or an error, not a silent fallback.
///
/// # Errors
/// A [`LoadError`] listing every path tried and the loader's message for each.
///
/// # Safety
/// Opening a shared library runs its initialisers; the caller trusts the library found on
/// these paths (see libloading's `Library::new`).
pub unsafe fn open(spec: &LibSpec) -> Result<Source, LoadError> {
    let mut paths = candidates(spec);
    let explicit = std::env::var_os(spec.path_var).is_some_and(|p| !p.is_empty());
    if explicit {
        paths.truncate(1);
    }
    // SAFETY: forwarded to the caller.
    unsafe { open_paths(spec, &paths) }
}

/// Opens the first loadable path of `paths` (or every loadable one with `spec.open_all`).
///
/// # Errors
/// A [`LoadError`] when none of `paths` opens.
///
/// # Safety
/// As for [`open`].
pub unsafe fn open_paths(spec: &LibSpec, paths: &[PathBuf]) -> Result<Source, LoadError> {
    let mut attempts = Vec::new();
    let mut libs = Vec::new();
    for p in paths {
        // SAFETY: forwarded to the caller: the library's initialisers are trusted.
        match unsafe { libloading::Library::new(p) } {
            Ok(lib) => {
                libs.push((p.clone(), lib));
                if !spec.open_all {
                    break;
                }
            }
            Err(e) => attempts.push(Attempt {
                path: p.display().to_string(),
                message: e.to_string(),
            }),
        }
    }
    if libs.is_empty() {
        return Err(LoadError {
            library: spec.name,
            path_var: spec.path_var,
            attempts,
        });
    }
    Ok(Source::Dl(libs))
}

/// Builds a loader table type from bindgen's extern block.
///
/// Used by the generated `functions.rs` of each `-sys` crate through a local `functions!`
/// macro. For every declaration it makes a lazily resolved slot, an `unsafe fn` method with the
/// same name and arguments returning `Result<ret, MissingSymbol>`, a function-pointer type alias
/// in `fn_types`, and an entry of `SYMBOLS`.
#[macro_export]
macro_rules! loader_table {
    (
        $(#[$tmeta:meta])* $table:ident, $libname:expr;
        $(
            $(#[$fmeta:meta])*
            pub fn $name:ident ( $( $arg:ident : $argty:ty ),* $(,)? ) -> $ret:ty ;
        )*
    ) => {
        /// Function-pointer types of every bound symbol, as declared in the bindings.
        #[allow(non_camel_case_types)]
        pub mod fn_types {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[doc = concat!("Type of `", stringify!($name), "`.")]
                pub type $name = unsafe extern "C" fn($($argty),*) -> $ret;
            )*
        }

        /// Every symbol the table binds.
        pub const SYMBOLS: &[&str] = &[$(stringify!($name)),*];

        #[allow(non_snake_case)]
        struct Slots {
            $( $name: ::std::sync::OnceLock<Option<fn_types::$name>>, )*
        }

        $(#[$tmeta])*
        pub struct $table {
            source: $crate::loader::Source,
            slots: Slots,
        }

        impl ::std::fmt::Debug for $table {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($table)).field("source", &self.source).finish()
            }
        }

        impl $table {
            /// Wraps a source; symbols resolve on first use.
            ///
            /// # Safety
            /// Every symbol the source resolves under a name of this table must be a function
            /// with the C signature the bindings declare for that name (the table calls it as
            /// such), and must stay valid for as long as the table is used. Libraries opened
            /// through the `-sys` crates' loaders and the emulator's lookup meet this.
            pub unsafe fn from_source(source: $crate::loader::Source) -> Self {
                Self {
                    source,
                    slots: Slots { $( $name: ::std::sync::OnceLock::new(), )* },
                }
            }

            /// Where the symbols come from.
            pub fn source(&self) -> &$crate::loader::Source {
                &self.source
            }

            /// Whether the source exports `symbol`.
            pub fn is_available(&self, symbol: &str) -> bool {
                !self.source.resolve(symbol).is_null()
            }

            $(
                $(#[$fmeta])*
                #[doc = concat!("Calls `", stringify!($name), "`, resolving it on first use.")]
                ///
                /// # Errors
                /// [`MissingSymbol`]($crate::loader::MissingSymbol) when the library lacks it.
                ///
                /// # Safety
                /// The C function's own contract: every pointer argument valid as the CANN
                /// documentation requires, handles live, out-pointers writable.
                #[allow(non_snake_case, clippy::too_many_arguments)]
                #[inline]
                pub unsafe fn $name(&self, $($arg: $argty),*) -> Result<$ret, $crate::loader::MissingSymbol> {
                    let slot = self.slots.$name.get_or_init(|| {
                        let p = self.source.resolve(stringify!($name));
                        if p.is_null() {
                            None
                        } else {
                            // SAFETY: the symbol has this C signature, as declared in the
                            // bindings generated from the same declarations.
                            Some(unsafe { ::std::mem::transmute::<*const ::std::ffi::c_void, fn_types::$name>(p) })
                        }
                    });
                    match slot {
                        // SAFETY: forwarded to the caller (see `# Safety`).
                        Some(f) => Ok(unsafe { f($($arg),*) }),
                        None => Err($crate::loader::MissingSymbol { library: $libname, symbol: stringify!($name) }),
                    }
                }
            )*
        }
    };
}
