//! Export plumbing: the per-call wrapper (panic catching, fault injection, call log, error
//! recording), the thread-local error state, live-object counters and configuration.

use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use acl_sys::aclError;
use parking_lot::Mutex;

/// A failed call: the code and a message naming the argument and its value. The wrapper
/// prefixes the symbol name.
#[derive(Debug, Clone)]
pub(crate) struct AclErr {
    pub code: aclError,
    pub msg: String,
}

pub(crate) type Res<T = ()> = Result<T, AclErr>;

pub(crate) fn err(code: aclError, msg: impl Into<String>) -> AclErr {
    AclErr {
        code,
        msg: msg.into(),
    }
}

/// `bail!(code, "fmt", args)` returns an [`AclErr`].
macro_rules! bail {
    ($code:expr, $($fmt:tt)*) => {
        return Err($crate::rt::err($code, format!($($fmt)*)))
    };
}

/// `ensure!(cond, code, "fmt", args)`.
macro_rules! ensure {
    ($cond:expr, $code:expr, $($fmt:tt)*) => {
        if !$cond {
            bail!($code, $($fmt)*);
        }
    };
}

/// Defines one exported ACL function. The body is a block returning [`Res`]; the wrapper adds
/// initialisation, call counting, fault injection, the call log, panic catching and the
/// thread-local error state. The symbol must be listed in `acl_sys::SYMBOLS` (checked at
/// compile time).
macro_rules! export {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) { $($body:tt)* }) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The C contract of the ACL call: every pointer argument is null or valid for the
        /// documented use (out-pointers writable, in-pointers readable), handles are values
        /// previously returned by this library (stale or foreign ones are rejected by lookup).
        #[no_mangle]
        #[allow(non_snake_case, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> acl_sys::aclError {
            const IDX: usize = $crate::rt::sym_index(stringify!($name));
            $crate::rt::enter(IDX, stringify!($name), move || -> $crate::rt::Res { $($body)* })
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Symbols

pub(crate) const NSYM: usize = acl_sys::SYMBOLS.len();

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Index of `name` in `acl_sys::SYMBOLS`; a compile-time error for an unknown name.
pub(crate) const fn sym_index(name: &str) -> usize {
    let syms = acl_sys::SYMBOLS;
    let mut i = 0;
    while i < syms.len() {
        if str_eq(syms[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("not a symbol of acl_sys::SYMBOLS")
}

pub(crate) fn sym_index_rt(name: &str) -> Option<usize> {
    acl_sys::SYMBOLS.iter().position(|s| *s == name)
}

static CALLS: [AtomicU64; NSYM] = [const { AtomicU64::new(0) }; NSYM];
static HIDDEN: [AtomicBool; NSYM] = [const { AtomicBool::new(false) }; NSYM];

pub(crate) fn is_hidden(idx: usize) -> bool {
    HIDDEN[idx].load(Relaxed)
}

// ---------------------------------------------------------------------------------------------
// Fault injection

#[derive(Debug, Clone, Copy)]
struct Fault {
    idx: usize,
    /// Fires when the symbol's call count reaches this value.
    at: u64,
    code: aclError,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static FAULTS: Mutex<Vec<Fault>> = Mutex::new(Vec::new());

fn arm(idx: usize, n: u64, code: aclError) {
    let base = CALLS[idx].load(Relaxed);
    let mut f = FAULTS.lock();
    f.push(Fault {
        idx,
        at: base + n.max(1),
        code,
    });
    ARMED.store(true, Relaxed);
}

fn fault_hit(idx: usize, count: u64) -> Option<aclError> {
    let mut f = FAULTS.lock();
    let pos = f.iter().position(|x| x.idx == idx && x.at == count)?;
    let code = f.remove(pos).code;
    if f.is_empty() {
        ARMED.store(false, Relaxed);
    }
    Some(code)
}

pub(crate) fn fail_nth(symbol: &str, n: u64, code: i32) -> bool {
    init();
    match sym_index_rt(symbol) {
        Some(i) => {
            arm(i, n, code);
            true
        }
        None => false,
    }
}

pub(crate) fn clear_faults() {
    init();
    FAULTS.lock().clear();
    ARMED.store(false, Relaxed);
    for h in &HIDDEN {
        h.store(false, Relaxed);
    }
}

pub(crate) fn hide(symbol: &str) {
    if let Some(i) = sym_index_rt(symbol) {
        HIDDEN[i].store(true, Relaxed);
    }
}

pub(crate) fn calls(symbol: &str) -> u64 {
    sym_index_rt(symbol).map_or(0, |i| CALLS[i].load(Relaxed))
}

/// Parses `ASCEND_SIM_FAIL=sym:n[:code][,sym:n[:code]]`.
fn arm_from_env(spec: &str) {
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut parts = item.split(':');
        let sym = parts.next().unwrap_or("");
        let n = parts.next().and_then(|s| s.trim().parse::<u64>().ok());
        let code = match parts.next() {
            Some(c) => c.trim().parse::<i32>().ok(),
            None => Some(acl_sys::ACL_ERROR_RT_DRV_INTERNAL_ERROR),
        };
        match (sym_index_rt(sym), n, code) {
            (Some(i), Some(n), Some(code)) if n > 0 => arm(i, n, code),
            _ => eprintln!("ascend-sim: ignoring malformed ASCEND_SIM_FAIL entry `{item}`"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Call log

static LOG_ON: AtomicBool = AtomicBool::new(false);
static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn call_log() -> Vec<String> {
    LOG.lock().clone()
}

pub(crate) fn set_call_log(on: bool) {
    init();
    if !on {
        LOG.lock().clear();
    }
    LOG_ON.store(on, Relaxed);
}

// ---------------------------------------------------------------------------------------------
// Configuration

/// Product emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Soc {
    A2,
    A3,
    S950,
}

/// How stream work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamMode {
    Threaded,
    Deterministic,
}

#[derive(Debug)]
pub(crate) struct Config {
    pub devices: u32,
    pub soc: Soc,
    pub hbm_bytes: u64,
    pub host_bytes: u64,
    pub mode: StreamMode,
}

/// Upper bound of `ASCEND_SIM_DEVICES`.
pub(crate) const MAX_DEVICES: u32 = 64;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(x) => x,
            Err(_) => {
                eprintln!("ascend-sim: {name}={v} is not a number; using {default}");
                default
            }
        },
        _ => default,
    }
}

fn read_config() -> Config {
    let mut devices = env_u64("ASCEND_SIM_DEVICES", 16);
    if devices == 0 || devices > u64::from(MAX_DEVICES) {
        eprintln!("ascend-sim: ASCEND_SIM_DEVICES={devices} out of 1..={MAX_DEVICES}; using 16");
        devices = 16;
    }
    let soc = match std::env::var("ASCEND_SIM_SOC")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        None | Some("") | Some("A3") | Some("a3") => Soc::A3,
        Some("A2") | Some("a2") => Soc::A2,
        Some("950") => Soc::S950,
        Some(other) => {
            eprintln!("ascend-sim: unknown ASCEND_SIM_SOC={other}; using A3");
            Soc::A3
        }
    };
    let mode = match std::env::var("ASCEND_SIM_STREAM_MODE")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        None | Some("") | Some("threaded") => StreamMode::Threaded,
        Some("deterministic") => StreamMode::Deterministic,
        Some(other) => {
            eprintln!("ascend-sim: unknown ASCEND_SIM_STREAM_MODE={other}; using threaded");
            StreamMode::Threaded
        }
    };
    Config {
        devices: devices as u32,
        soc,
        hbm_bytes: env_u64("ASCEND_SIM_HBM_BYTES", 1 << 30),
        host_bytes: env_u64("ASCEND_SIM_HOST_BYTES", 4 << 30),
        mode,
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration; the first call also arms `ASCEND_SIM_FAIL` and `ASCEND_SIM_CALL_LOG`.
pub(crate) fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        if let Ok(spec) = std::env::var("ASCEND_SIM_FAIL") {
            arm_from_env(&spec);
        }
        if std::env::var("ASCEND_SIM_CALL_LOG").is_ok_and(|v| v == "1") {
            LOG_ON.store(true, Relaxed);
        }
        read_config()
    })
}

#[inline]
pub(crate) fn init() {
    let _ = config();
}

// ---------------------------------------------------------------------------------------------
// Counters

/// Indices into the live-object counters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ctr {
    Reservations = 0,
    Physical,
    Imports,
    Mappings,
    Exports,
    Streams,
    Events,
    Contexts,
    DeviceMallocs,
    HostMallocs,
    Comms,
    Windows,
}

pub(crate) const NCTR: usize = 12;
static COUNTERS: [AtomicI64; NCTR] = [const { AtomicI64::new(0) }; NCTR];

pub(crate) fn inc(c: Ctr) {
    COUNTERS[c as usize].fetch_add(1, Relaxed);
}

pub(crate) fn dec(c: Ctr) {
    COUNTERS[c as usize].fetch_sub(1, Relaxed);
}

pub(crate) fn counter_values() -> [u64; NCTR] {
    let mut out = [0u64; NCTR];
    for (o, c) in out.iter_mut().zip(COUNTERS.iter()) {
        *o = c.load(Relaxed).max(0) as u64;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Memory capacity accounting

static HBM_USED: [AtomicU64; MAX_DEVICES as usize] =
    [const { AtomicU64::new(0) }; MAX_DEVICES as usize];
static HOST_USED: AtomicU64 = AtomicU64::new(0);

/// What an allocation was charged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pool {
    Hbm(u32),
    Host,
}

fn pool_counter(p: Pool) -> (&'static AtomicU64, u64) {
    match p {
        Pool::Hbm(d) => (&HBM_USED[d as usize], config().hbm_bytes),
        Pool::Host => (&HOST_USED, config().host_bytes),
    }
}

/// Charges `bytes` against `pool`; fails with ACL_ERROR_RT_MEMORY_ALLOCATION when it would
/// exceed the capacity.
pub(crate) fn charge(pool: Pool, bytes: u64) -> Res {
    let (ctr, cap) = pool_counter(pool);
    let mut cur = ctr.load(Relaxed);
    loop {
        let new = cur.checked_add(bytes).filter(|n| *n <= cap);
        let Some(new) = new else {
            bail!(
                acl_sys::ACL_ERROR_RT_MEMORY_ALLOCATION,
                "size {bytes} exceeds the free capacity of {pool:?} ({} of {cap} bytes in use)",
                cur
            );
        };
        match ctr.compare_exchange_weak(cur, new, Relaxed, Relaxed) {
            Ok(_) => return Ok(()),
            Err(c) => cur = c,
        }
    }
}

pub(crate) fn refund(pool: Pool, bytes: u64) {
    pool_counter(pool).0.fetch_sub(bytes, Relaxed);
}

pub(crate) fn pool_used(pool: Pool) -> (u64, u64) {
    let (ctr, cap) = pool_counter(pool);
    (ctr.load(Relaxed), cap)
}

pub(crate) fn hbm_in_use(device: u32) -> u64 {
    HBM_USED.get(device as usize).map_or(0, |c| c.load(Relaxed))
}

// ---------------------------------------------------------------------------------------------
// Thread-local error state

thread_local! {
    static LAST_ERR: Cell<aclError> = const { Cell::new(0) };
    static MSG: RefCell<Option<CString>> = const { RefCell::new(None) };
    static RETURNED: RefCell<Option<CString>> = const { RefCell::new(None) };
}

pub(crate) fn set_error(code: aclError, msg: String) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERR.with(|e| e.set(code));
    MSG.with(|m| *m.borrow_mut() = Some(c));
}

pub(crate) fn take_message() -> *const std::ffi::c_char {
    let msg = MSG.with(|m| m.borrow_mut().take());
    RETURNED.with(|r| {
        let mut r = r.borrow_mut();
        *r = msg;
        r.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
    })
}

pub(crate) fn last_error(clear: bool) -> aclError {
    LAST_ERR.with(|e| if clear { e.replace(0) } else { e.get() })
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs `f` as the body of export `name` (index `idx` in `acl_sys::SYMBOLS`).
#[inline]
pub(crate) fn enter(idx: usize, name: &'static str, f: impl FnOnce() -> Res) -> aclError {
    init();
    let count = CALLS[idx].fetch_add(1, Relaxed) + 1;
    if LOG_ON.load(Relaxed) {
        LOG.lock().push(name.to_string());
    }
    if ARMED.load(Relaxed) {
        if let Some(code) = fault_hit(idx, count) {
            if code == PANIC_CODE {
                return run_caught(name, || panic!("injected panic (ASCEND_SIM_FAIL)"));
            }
            set_error(code, format!("{name}: injected failure (ASCEND_SIM_FAIL)"));
            return code;
        }
    }
    run_caught(name, f)
}

/// A fault code that makes the call panic inside its wrapper instead of returning (tests the
/// panic path: the call returns ACL_ERROR_RT_INTERNAL_ERROR).
pub(crate) const PANIC_CODE: i32 = i32::MIN;

fn run_caught(name: &'static str, f: impl FnOnce() -> Res) -> aclError {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => acl_sys::ACL_SUCCESS,
        Ok(Err(e)) => {
            set_error(e.code, format!("{name}: {}", e.msg));
            e.code
        }
        Err(p) => {
            let code = acl_sys::ACL_ERROR_RT_INTERNAL_ERROR;
            set_error(
                code,
                format!("{name}: internal error (panic: {})", panic_text(&*p)),
            );
            code
        }
    }
}

/// Like [`enter`] for exports that do not return `aclError` (no fault injection).
pub(crate) fn enter_raw<T>(
    idx: usize,
    name: &'static str,
    fallback: T,
    f: impl FnOnce() -> T,
) -> T {
    init();
    CALLS[idx].fetch_add(1, Relaxed);
    if LOG_ON.load(Relaxed) {
        LOG.lock().push(name.to_string());
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            set_error(
                acl_sys::ACL_ERROR_RT_INTERNAL_ERROR,
                format!("{name}: internal error (panic: {})", panic_text(&*p)),
            );
            fallback
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pointer helpers

/// A checked, non-null out-pointer.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// Checks `p` for null (ACL_ERROR_INVALID_PARAM naming `what`).
    ///
    /// # Safety
    /// `p` is null or valid for a write of `T` until [`Out::set`] is called.
    pub(crate) unsafe fn new(p: *mut T, what: &str) -> Res<Self> {
        if p.is_null() {
            bail!(acl_sys::ACL_ERROR_INVALID_PARAM, "{what} is NULL");
        }
        Ok(Self(p))
    }

    pub(crate) fn set(self, v: T) {
        // SAFETY: non-null and writable per the contract of `Out::new`; unaligned writes are
        // tolerated because C callers may pass packed storage.
        unsafe { self.0.write_unaligned(v) }
    }
}

/// Reads a checked in-pointer.
///
/// # Safety
/// `p` is null or valid for a read of `T`.
pub(crate) unsafe fn read_in<T: Copy>(p: *const T, what: &str) -> Res<T> {
    if p.is_null() {
        bail!(acl_sys::ACL_ERROR_INVALID_PARAM, "{what} is NULL");
    }
    // SAFETY: non-null, readable per the caller's contract.
    Ok(unsafe { p.read_unaligned() })
}

/// Calling process id.
pub(crate) fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
