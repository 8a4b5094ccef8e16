//! Choosing and opening a backend: real CANN, the in-process emulator, or a library by path.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

use acl::AclLib;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::ffi;

/// Which implementation serves the ACL calls of a [`Runtime`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// A CANN runtime library opened with `dlopen`.
    Cann {
        /// The library file(s) opened.
        path: String,
    },
    /// The in-tree emulator linked into this process (`Runtime::emulated`).
    EmulatorInProcess,
    /// The emulator's shared library (`libascend_sim.so`) opened with `dlopen` through the
    /// normal loading path.
    EmulatorDl {
        /// The library file opened.
        path: String,
    },
}

impl Backend {
    /// Whether this is the emulator (either way of reaching it).
    pub fn is_emulator(&self) -> bool {
        !matches!(self, Backend::Cann { .. })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Cann { path } => write!(f, "CANN ({path})"),
            Backend::EmulatorInProcess => f.write_str("emulator (in-process)"),
            Backend::EmulatorDl { path } => write!(f, "emulator via dlopen ({path})"),
        }
    }
}

pub(crate) struct RtInner {
    pub(crate) lib: &'static AclLib,
    backend: Backend,
    /// The state of each device opened through this runtime, by id. Owned and typed by
    /// `device.rs` (which sits above this file: a device holds its runtime), so stored here
    /// type-erased; see `Runtime::device`.
    pub(crate) devices: Mutex<HashMap<i32, Weak<dyn Any + Send + Sync>>>,
    /// The CANN load error `Runtime::from_env_or_emulator` fell back to the emulator on.
    fallback: Option<Box<acl::LoadError>>,
}

/// An opened ACL runtime: the function table every other type calls through.
///
/// Cheap to clone (an `Arc`). Opening calls `aclInit` once (a repeated init is fine). The
/// library stays loaded for the life of the process: handles made through it may outlive any
/// `Runtime` value, so it is never unloaded.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RtInner>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &self.inner.backend)
            .finish()
    }
}

/// Tables opened by path, kept for the process so repeated opens do not leak new copies.
fn by_path() -> &'static Mutex<HashMap<PathBuf, &'static AclLib>> {
    static M: OnceLock<Mutex<HashMap<PathBuf, &'static AclLib>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

/// Emulator marker symbols: if the opened library exports one, it is ascend-sim.
const SIM_MARKERS: &[&str] = &["ascendSimGetCounters", "ascendSimFailNth"];

fn classify(lib: &AclLib) -> Backend {
    let src = lib.source();
    if src.is_in_process() {
        return Backend::EmulatorInProcess;
    }
    let path = src.describe();
    let is_sim = SIM_MARKERS.iter().any(|m| lib.is_available(m)) || path.contains("ascend_sim");
    if is_sim {
        Backend::EmulatorDl { path }
    } else {
        Backend::Cann { path }
    }
}

impl Runtime {
    pub(crate) fn from_table(lib: &'static AclLib) -> Result<Runtime> {
        // aclInit once per table and process (a repeat would only bump ACL's init count).
        static INITED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
        {
            let mut inited = INITED.lock();
            let key = lib as *const AclLib as usize;
            if !inited.contains(&key) {
                ffi::init::init(lib)?;
                inited.push(key);
            }
        }
        let backend = classify(lib);
        tracing::debug!(%backend, "ACL runtime ready");
        Ok(Runtime {
            inner: Arc::new(RtInner {
                lib,
                backend,
                devices: Mutex::new(HashMap::new()),
                fallback: None,
            }),
        })
    }

    /// Opens the real CANN runtime from the standard search path (`ASCEND_ACL_LIB`, then
    /// `$ASCEND_HOME_PATH/lib64`, the build-time directory, the bare soname).
    ///
    /// Pointing `ASCEND_ACL_LIB` at the emulator's `libascend_sim.so` takes this same dlopen
    /// path; [`Runtime::backend`] then reports [`Backend::EmulatorDl`].
    ///
    /// # Errors
    /// [`Error::Load`] listing every path tried and how to fix it; an `aclInit` failure.
    #[doc(alias = "aclInit")]
    pub fn load() -> Result<Runtime> {
        let lib = acl::acl().map_err(|e| Error::Load(Box::new(e.clone())))?;
        Self::from_table(lib)
    }

    /// The in-tree emulator, linked into this process (feature `emulator`, off by default).
    /// The first emulator runtime of a process logs a WARN line saying so.
    ///
    /// Requires the `emulator` feature.
    ///
    /// # Errors
    /// An `aclInit` failure (the emulator does not normally fail it).
    #[cfg(feature = "emulator")]
    #[cfg_attr(docsrs, doc(cfg(feature = "emulator")))]
    pub fn emulated() -> Result<Runtime> {
        let rt = Self::from_table(ascend_sim::acl_table())?;
        warn_emulated(rt.backend());
        Ok(rt)
    }

    /// Picks the backend from `ASCEND_MEM_BACKEND` ([`BackendChoice::from_env`]): `cann` or
    /// unset ([`Runtime::load`]), `sim` or `emulator` (`Runtime::emulated`, feature
    /// `emulator`). Production is never silently emulated: with the variable unset and no CANN
    /// found, this is the load error listing every path tried (which also names
    /// `ASCEND_MEM_BACKEND=sim`). A library found by the search that is the emulator's shared
    /// library (e.g. through `ASCEND_ACL_LIB`) is used, with a WARN line saying so.
    ///
    /// Programs that want CANN when present and the emulator otherwise (demos, examples) ask
    /// for it by name: `Runtime::from_env_or_emulator`.
    ///
    /// # Errors
    /// As [`Runtime::load`]; [`Error::UnknownBackend`] naming the value and the accepted
    /// values for anything else.
    pub fn from_env() -> Result<Runtime> {
        match BackendChoice::from_env()? {
            BackendChoice::Unset | BackendChoice::Cann => Self::load_noting_emulator(),
            #[cfg(feature = "emulator")]
            BackendChoice::Emulator => Self::emulated(),
            // `parse` gives it only with the feature (without, `sim` is an unknown value): kept
            // total rather than a panic.
            #[cfg(not(feature = "emulator"))]
            BackendChoice::Emulator => Err(BackendChoice::unknown("sim")),
        }
    }

    /// As [`Runtime::from_env`], except that with `ASCEND_MEM_BACKEND` unset and no CANN
    /// found it falls back to the in-process emulator, so the program runs anywhere.
    /// `ASCEND_MEM_BACKEND=cann` still requires CANN. For examples and demos; a production
    /// service should call [`Runtime::from_env`] or [`Runtime::load`].
    ///
    /// The fallback is never silent: it logs a WARN line with the CANN load error (every
    /// path tried and why each failed), besides the emulator's own once-per-process WARN
    /// line, and the runtime keeps the load error: [`Runtime::fallback_reason`].
    ///
    /// Requires the `emulator` feature.
    ///
    /// # Errors
    /// As [`Runtime::from_env`] (a load error only when CANN was required by name).
    #[cfg(feature = "emulator")]
    #[cfg_attr(docsrs, doc(cfg(feature = "emulator")))]
    pub fn from_env_or_emulator() -> Result<Runtime> {
        match BackendChoice::from_env()? {
            BackendChoice::Cann => Self::load_noting_emulator(),
            BackendChoice::Unset => match Self::load_noting_emulator() {
                Err(Error::Load(e)) => {
                    tracing::warn!(
                        tried = e.attempts.len(),
                        error = %e,
                        "ascend-mem: ASCEND_MEM_BACKEND is unset and CANN did not load; \
                         falling back to the in-process emulator"
                    );
                    let mut rt = Self::emulated()?;
                    // Just made by `emulated` (`from_table`), so not shared yet.
                    match Arc::get_mut(&mut rt.inner) {
                        Some(inner) => inner.fallback = Some(e),
                        None => tracing::debug!("the fallback reason is not kept: runtime shared"),
                    }
                    Ok(rt)
                }
                r => r,
            },
            BackendChoice::Emulator => Self::emulated(),
        }
    }

    /// Why this runtime is the emulator when CANN was looked for: the CANN load error that
    /// made `Runtime::from_env_or_emulator` fall back (with `ASCEND_MEM_BACKEND` unset).
    /// `None` for every other runtime (CANN, the emulator asked for by name or opened
    /// directly, a library opened by path); clones share the reason.
    pub fn fallback_reason(&self) -> Option<&acl::LoadError> {
        self.inner.fallback.as_deref()
    }

    /// [`Runtime::load`], with a WARN line when what it found is the emulator's library.
    fn load_noting_emulator() -> Result<Runtime> {
        let rt = Self::load()?;
        if rt.backend().is_emulator() {
            warn_emulated(rt.backend());
        } else {
            tracing::info!(backend = %rt.backend(), "ascend-mem: using CANN");
        }
        Ok(rt)
    }

    /// Which implementation serves this runtime.
    pub fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    /// The raw function table (borrowed; for calls this crate does not wrap, see [`ffi`]).
    ///
    /// # Changing the current device or context through the raw table
    /// ACL keeps the current device and context per thread. Every call of this crate first
    /// makes its device current ([`Device::bind`](crate::Device::bind)), and that check asks
    /// `aclrtGetDevice` rather than trusting a cache, so a raw `aclrtSetDevice`, `aclrtSetCurrentContext` or
    /// `aclrtResetDevice` made through this table cannot send a later call (a V2 import, a
    /// stream or event creation) to the wrong device. What the check cannot undo is a raw
    /// `aclrtResetDevice` or `aclrtDestroyContext` that tears down a context while this
    /// crate's streams, events or memory on it are alive: drop those first. A raw
    /// `aclrtSetCurrentContext` to an explicit context of the *same* device is kept (the
    /// device matches), so streams and events made afterwards belong to that context.
    pub fn acl(&self) -> &'static AclLib {
        self.inner.lib
    }

    /// The number of devices.
    ///
    /// # Errors
    /// An `aclrtGetDeviceCount` failure.
    #[doc(alias = "aclrtGetDeviceCount")]
    pub fn device_count(&self) -> Result<u32> {
        ffi::device::count(self.inner.lib)
    }
}

// The public `unsafe` entry points: the caller vouches for the library opened.
impl Runtime {
    /// Opens an ACL runtime library from one explicit file (CANN or the emulator's
    /// `libascend_sim.so`). The library stays loaded for the life of the process; opening the
    /// same path again reuses it.
    ///
    /// # Errors
    /// [`Error::Load`] with the single attempt; an `aclInit` failure.
    ///
    /// # Safety
    /// Opening a shared library runs its initialisers, and its exports are called as the ACL
    /// functions of `acl-sys`: the file must be a trusted ACL runtime (or the emulator).
    #[allow(unsafe_code)]
    pub unsafe fn from_library_path(path: impl AsRef<Path>) -> Result<Runtime> {
        let path = path.as_ref().to_path_buf();
        let lib = {
            let mut m = by_path().lock();
            match m.get(&path) {
                Some(l) => *l,
                None => {
                    // SAFETY: forwarded to the caller: the library is trusted.
                    let lib = unsafe { AclLib::open_path(&path) }
                        .map_err(|e| Error::Load(Box::new(e)))?;
                    // Never unloaded: handles from it may outlive every Runtime.
                    let lib: &'static AclLib = Box::leak(Box::new(lib));
                    m.insert(path, lib);
                    lib
                }
            }
        };
        Self::from_table(lib)
    }

    /// Wraps an ACL table obtained elsewhere (for instance a fresh table over the emulator's
    /// in-process lookup, or one opened with custom search rules).
    ///
    /// # Errors
    /// An `aclInit` failure.
    ///
    /// # Safety
    /// Every symbol `lib` resolves must be the ACL function of that name with the signature
    /// declared in `acl-sys` (the table's methods call through them unchecked).
    #[allow(unsafe_code)]
    pub unsafe fn from_table_unchecked(lib: &'static AclLib) -> Result<Runtime> {
        Self::from_table(lib)
    }
}

/// What `ASCEND_MEM_BACKEND` asks for: the one reading of the variable, which
/// [`Runtime::from_env`] and `Runtime::from_env_or_emulator` act on and which tools that
/// report or check the choice (a doctor, a benchmark) use so they agree with it.
///
/// ```
/// use ascend_mem::BackendChoice;
///
/// assert_eq!(BackendChoice::parse(" CANN ")?, BackendChoice::Cann);
/// assert_eq!(BackendChoice::parse("")?, BackendChoice::Unset);
/// let e = BackendChoice::parse("tpu").unwrap_err();
/// assert!(e.to_string().starts_with("ASCEND_MEM_BACKEND=\"tpu\" is not a backend"));
/// # Ok::<(), ascend_mem::Error>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendChoice {
    /// Unset, empty or only white space: CANN for [`Runtime::from_env`] (no CANN is the load
    /// error); CANN if found, else the emulator, for `Runtime::from_env_or_emulator`.
    Unset,
    /// `cann`: CANN, and no CANN is the load error, whichever constructor is called.
    Cann,
    /// `sim` or `emulator`: the in-process emulator. Only with the `emulator` feature; without
    /// it these values are [`Error::UnknownBackend`], so this is never returned.
    Emulator,
}

impl BackendChoice {
    /// The variable read: `ASCEND_MEM_BACKEND`.
    pub const VAR: &'static str = "ASCEND_MEM_BACKEND";

    /// Reads [`BackendChoice::VAR`] from the environment (see [`BackendChoice::parse`]).
    ///
    /// # Errors
    /// [`Error::UnknownBackend`] naming the variable, the value as found (a value that is not
    /// valid Unicode shown with replacement characters: it is refused, never read as unset)
    /// and the values this build accepts.
    pub fn from_env() -> Result<BackendChoice> {
        let v = std::env::var_os(Self::VAR).unwrap_or_default();
        Self::parse(&v.to_string_lossy())
    }

    /// Reads a value of [`BackendChoice::VAR`]: case and surrounding white space are ignored;
    /// `""` is [`BackendChoice::Unset`], `cann` [`BackendChoice::Cann`], `sim` or `emulator`
    /// [`BackendChoice::Emulator`] (feature `emulator`).
    ///
    /// # Errors
    /// [`Error::UnknownBackend`] for anything else, carrying `value` as given (untrimmed) and
    /// the accepted values.
    pub fn parse(value: &str) -> Result<BackendChoice> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" => Ok(BackendChoice::Unset),
            "cann" => Ok(BackendChoice::Cann),
            #[cfg(feature = "emulator")]
            "sim" | "emulator" => Ok(BackendChoice::Emulator),
            _ => Err(Self::unknown(value)),
        }
    }

    /// The error for `value`: it names no backend this build has.
    fn unknown(value: &str) -> Error {
        #[cfg(feature = "emulator")]
        const ACCEPTED: &str = "\"cann\" (or unset/empty), \"sim\" or \"emulator\"";
        #[cfg(not(feature = "emulator"))]
        const ACCEPTED: &str =
            "\"cann\" (or unset/empty); \"sim\"/\"emulator\" need ascend-mem's `emulator` feature";
        Error::UnknownBackend {
            value: value.into(),
            accepted: ACCEPTED,
        }
    }
}

/// Says once per process, at WARN, that the emulator serves this process.
fn warn_emulated(backend: &Backend) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            %backend,
            "ascend-mem: running on the emulator (host memory, no NPU); not for production"
        )
    });
}
