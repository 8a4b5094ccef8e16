//! The export shim shared by the ACL, HCCL and HIXL surfaces: one symbol table over the three
//! (`acl_sys::SYMBOLS`, then `hccl_sys::SYMBOLS`, then `hixl_sys::SYMBOLS`), per-symbol call
//! counts, fault injection (`ASCEND_SIM_FAIL` and the `fault` APIs), symbol hiding, the call
//! log, and the one entry guard every export runs through ([`enter`], [`enter_raw`]) with the
//! one macro that defines an export ([`export!`]).
//!
//! A surface says how its calls fail ([`Surface`]): its status type, its error value and how a
//! failure is recorded (each surface keeps its own thread-local message).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use parking_lot::Mutex;

/// How one C surface reports failures. Implemented by [`Acl`] (in `rt.rs`), [`Hccl`] (in
/// `hccl/error.rs`) and [`Hixl`] (in `hixl/error.rs`).
pub(crate) trait Surface {
    /// The surface's position in [`TABLES`].
    const ID: usize;
    /// The status an export returns.
    type Code: Copy + PartialEq;
    /// A failed call: a code and a message (the guard prefixes the symbol name).
    type Err;
    /// The success status.
    const SUCCESS: Self::Code;
    /// The status of a call whose body panicked.
    const INTERNAL: Self::Code;
    /// The status an `ASCEND_SIM_FAIL` entry without a code injects.
    const FAULT_DEFAULT: Self::Code;
    /// The surface's status for an injected code (C callers pass any integer).
    fn code(raw: i64) -> Self::Code;
    /// A failure value.
    fn error(code: Self::Code, msg: String) -> Self::Err;
    /// Records the failure of export `name` in the surface's error state; returns its code.
    fn fail(name: &str, e: Self::Err) -> Self::Code;
}

/// The ACL runtime surface (`acl_sys::SYMBOLS`).
pub(crate) struct Acl;
/// The HCCL surface (`hccl_sys::SYMBOLS`).
pub(crate) struct Hccl;
/// The HixlCS surface (`hixl_sys::SYMBOLS`).
pub(crate) struct Hixl;

// ---------------------------------------------------------------------------------------------
// Symbols

/// The symbol tables of the surfaces, in index order.
const TABLES: [&[&str]; 3] = [acl_sys::SYMBOLS, hccl_sys::SYMBOLS, hixl_sys::SYMBOLS];

/// Symbols of all surfaces.
const NSYM: usize = acl_sys::SYMBOLS.len() + hccl_sys::SYMBOLS.len() + hixl_sys::SYMBOLS.len();

/// The first global index of surface `id`.
const fn base(id: usize) -> usize {
    let mut b = 0;
    let mut i = 0;
    while i < id {
        b += TABLES[i].len();
        i += 1;
    }
    b
}

/// The global indices of surface `S`.
pub(crate) fn range<S: Surface>() -> std::ops::Range<usize> {
    base(S::ID)..base(S::ID) + TABLES[S::ID].len()
}

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

/// The global index of `name`, a symbol of surface `S`; a compile-time error for a name that is
/// not in the surface's table.
pub(crate) const fn index<S: Surface>(name: &str) -> usize {
    let syms = TABLES[S::ID];
    let mut i = 0;
    while i < syms.len() {
        if str_eq(syms[i], name) {
            return base(S::ID) + i;
        }
        i += 1;
    }
    panic!("not a symbol of the surface's table")
}

/// The global index of `name` in any surface's table.
pub(crate) fn lookup_index(name: &str) -> Option<usize> {
    TABLES
        .iter()
        .flat_map(|t| t.iter())
        .position(|s| *s == name)
}

static CALLS: [AtomicU64; NSYM] = [const { AtomicU64::new(0) }; NSYM];
static HIDDEN: [AtomicBool; NSYM] = [const { AtomicBool::new(false) }; NSYM];

/// Whether `name` has been hidden from the lookup functions ([`hide`]).
pub(crate) fn is_hidden(name: &str) -> bool {
    lookup_index(name).is_some_and(|i| HIDDEN[i].load(Relaxed))
}

/// Hides `name` from the lookup functions until [`clear_faults`]; false for an unknown name.
pub(crate) fn hide(name: &str) -> bool {
    init();
    lookup_index(name)
        .map(|i| HIDDEN[i].store(true, Relaxed))
        .is_some()
}

/// How many times `name` has been called in this process (0 for an unknown name).
pub(crate) fn calls(name: &str) -> u64 {
    lookup_index(name).map_or(0, |i| CALLS[i].load(Relaxed))
}

// ---------------------------------------------------------------------------------------------
// Fault injection

/// What an armed fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Injected {
    /// Returns this code (converted by [`Surface::code`]).
    Code(i64),
    /// Returns the surface's [`Surface::FAULT_DEFAULT`].
    Default,
    /// Panics inside the guard (which then returns [`Surface::INTERNAL`]).
    Panic,
}

#[derive(Debug, Clone, Copy)]
struct Fault {
    idx: usize,
    /// Fires when the symbol's call count reaches this value.
    at: u64,
    what: Injected,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static FAULTS: Mutex<Vec<Fault>> = Mutex::new(Vec::new());

fn arm(idx: usize, n: u64, what: Injected) {
    let at = CALLS[idx].load(Relaxed) + n.max(1);
    FAULTS.lock().push(Fault { idx, at, what });
    ARMED.store(true, Relaxed);
}

fn fault_hit(idx: usize, count: u64) -> Option<Injected> {
    let mut f = FAULTS.lock();
    let pos = f.iter().position(|x| x.idx == idx && x.at == count)?;
    let what = f.remove(pos).what;
    if f.is_empty() {
        ARMED.store(false, Relaxed);
    }
    Some(what)
}

/// Makes the `n`-th call (1-based, counted from now) of `name` (a symbol of any surface) fail
/// as `what` says. False for an unknown name.
pub(crate) fn fail_nth(name: &str, n: u64, what: Injected) -> bool {
    init();
    match lookup_index(name) {
        Some(i) => {
            arm(i, n, what);
            true
        }
        None => false,
    }
}

/// Disarms the faults of the symbols in `indices` (and unhides them).
pub(crate) fn clear_faults(indices: std::ops::Range<usize>) {
    init();
    let mut f = FAULTS.lock();
    f.retain(|x| !indices.contains(&x.idx));
    ARMED.store(!f.is_empty(), Relaxed);
    for h in &HIDDEN[indices] {
        h.store(false, Relaxed);
    }
}

/// Every symbol of every surface.
pub(crate) const ALL: std::ops::Range<usize> = 0..NSYM;

/// The code `ASCEND_SIM_FAIL` and the C fault call use to inject a panic.
pub(crate) const PANIC_CODE: i64 = i32::MIN as i64;

/// Parses `ASCEND_SIM_FAIL=sym:n[:code][,sym:n[:code]]` (any surface's symbols; a code of
/// `i32::MIN` injects a panic).
fn arm_from_env(spec: &str) {
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut parts = item.split(':');
        let sym = parts.next().unwrap_or("");
        let n = parts.next().and_then(|s| s.trim().parse::<u64>().ok());
        let what = match parts.next() {
            Some(c) => match c.trim().parse::<i64>() {
                Ok(PANIC_CODE) => Some(Injected::Panic),
                Ok(c) => Some(Injected::Code(c)),
                Err(_) => None,
            },
            None => Some(Injected::Default),
        };
        match (lookup_index(sym), n, what) {
            (Some(i), Some(n), Some(what)) if n > 0 => arm(i, n, what),
            _ => eprintln!("ascend-sim: ignoring malformed ASCEND_SIM_FAIL entry `{item}`"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Call log

static LOG_ON: AtomicBool = AtomicBool::new(false);
static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The calls logged since the log was turned on, in order.
pub(crate) fn call_log() -> Vec<String> {
    LOG.lock().clone()
}

/// Turns the call log on or off (off also clears it).
pub(crate) fn set_call_log(on: bool) {
    init();
    if !on {
        LOG.lock().clear();
    }
    LOG_ON.store(on, Relaxed);
}

// ---------------------------------------------------------------------------------------------
// The entry guard

/// Reads the configuration and, once, `ASCEND_SIM_FAIL` and `ASCEND_SIM_CALL_LOG`.
pub(crate) fn init() {
    static ENV: OnceLock<()> = OnceLock::new();
    crate::config::config();
    ENV.get_or_init(|| {
        if let Ok(spec) = std::env::var("ASCEND_SIM_FAIL") {
            arm_from_env(&spec);
        }
        if std::env::var("ASCEND_SIM_CALL_LOG").is_ok_and(|v| v == "1") {
            LOG_ON.store(true, Relaxed);
        }
    });
}

/// Counts a call of symbol `idx` and logs it; returns the armed fault it hits, if any.
fn count_call(idx: usize, name: &'static str) -> Option<Injected> {
    init();
    let count = CALLS[idx].fetch_add(1, Relaxed) + 1;
    if LOG_ON.load(Relaxed) {
        LOG.lock().push(name.to_string());
    }
    if ARMED.load(Relaxed) {
        fault_hit(idx, count)
    } else {
        None
    }
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

/// Runs `f` after the injected fault, if any: a panic, or a failure with the injected code.
fn injected_or<S: Surface, T>(
    fault: Option<Injected>,
    f: impl FnOnce() -> Result<T, S::Err>,
) -> Result<T, S::Err> {
    let code = match fault {
        None => return f(),
        Some(Injected::Panic) => panic!("injected panic (ASCEND_SIM_FAIL)"),
        Some(Injected::Code(c)) => S::code(c),
        Some(Injected::Default) => S::FAULT_DEFAULT,
    };
    Err(S::error(
        code,
        "injected failure (ASCEND_SIM_FAIL)".to_string(),
    ))
}

/// Runs `f` as the body of export `name` (global index `idx`) of surface `S`: initialisation,
/// call counting, the call log, fault injection, panic catching and the surface's error state.
pub(crate) fn enter<S: Surface>(
    idx: usize,
    name: &'static str,
    f: impl FnOnce() -> Result<(), S::Err>,
) -> S::Code {
    let fault = count_call(idx, name);
    match catch_unwind(AssertUnwindSafe(|| injected_or::<S, ()>(fault, f))) {
        Ok(Ok(())) => S::SUCCESS,
        Ok(Err(e)) => S::fail(name, e),
        Err(p) => S::fail(name, panic_error::<S>(&*p)),
    }
}

fn panic_error<S: Surface>(p: &(dyn std::any::Any + Send)) -> S::Err {
    S::error(
        S::INTERNAL,
        format!("internal error (panic: {})", panic_text(p)),
    )
}

/// Like [`enter`] for exports that do not return the surface's status: an injected fault or a
/// panic records the failure and returns `fallback`.
pub(crate) fn enter_raw<S: Surface, T>(
    idx: usize,
    name: &'static str,
    fallback: T,
    f: impl FnOnce() -> T,
) -> T {
    let fault = count_call(idx, name);
    match catch_unwind(AssertUnwindSafe(|| injected_or::<S, T>(fault, || Ok(f())))) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            S::fail(name, e);
            fallback
        }
        Err(p) => {
            S::fail(name, panic_error::<S>(&*p));
            fallback
        }
    }
}

/// The C status type of a surface's exports (the public signature names it, not the private
/// [`Surface::Code`] it equals).
macro_rules! status_type {
    (Acl) => {
        acl_sys::aclError
    };
    (Hccl) => {
        hccl_sys::HcclResult
    };
    (Hixl) => {
        hixl_sys::HixlStatus
    };
}

/// Defines one exported C function of a surface ([`Acl`], [`Hccl`] or [`Hixl`]); the symbol
/// must be in the surface's table (checked at compile time). The wrapper is [`enter`]:
///
/// ```ignore
/// export! { Acl;
///     /// Docs.
///     fn aclrtSomething(arg: T) { /* a block returning Result<(), the surface's error> */ }
/// }
/// ```
///
/// With `-> Type, fallback expr;` after the arguments, the body returns `Type` directly and
/// the wrapper is [`enter_raw`] (`fallback` is returned on an injected fault or a panic).
macro_rules! export {
    ($surf:ident; $(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) { $($body:tt)* }) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The C contract of the call: every pointer argument is null or valid for the
        /// documented use (out-pointers writable, in-pointers readable, strings
        /// NUL-terminated), handles are values previously returned by this library (stale or
        /// foreign ones are rejected by lookup).
        #[no_mangle]
        #[allow(non_snake_case, unused_variables)]
        pub unsafe extern "C" fn $name(
            $($arg: $ty),*
        ) -> status_type!($surf) {
            const IDX: usize = $crate::export::index::<$crate::export::$surf>(stringify!($name));
            $crate::export::enter::<$crate::export::$surf>(
                IDX,
                stringify!($name),
                move || -> Result<(), <$crate::export::$surf as $crate::export::Surface>::Err> {
                    $($body)*
                },
            )
        }
    };
    ($surf:ident; $(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty, fallback $fb:expr; { $($body:tt)* }) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The C contract of the call (plain values; any value is accepted).
        #[no_mangle]
        #[allow(non_snake_case)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            const IDX: usize = $crate::export::index::<$crate::export::$surf>(stringify!($name));
            $crate::export::enter_raw::<$crate::export::$surf, $ret>(
                IDX,
                stringify!($name),
                $fb,
                move || -> $ret { $($body)* },
            )
        }
    };
}

/// Defines `$lookup(name) -> *const c_void` over the listed exports of a surface, each checked
/// at compile time against its `$sys::fn_types` pointer type; hidden symbols
/// ([`hide`]) answer null. Under `cfg(test)` also `$len`, the number of listed names.
macro_rules! symbol_table {
    ($sys:ident, $lookup:ident, $len:ident; $($name:ident),* $(,)?) => {
        pub(crate) fn $lookup(name: &str) -> *const std::ffi::c_void {
            $crate::export::init();
            if $crate::export::is_hidden(name) {
                return std::ptr::null();
            }
            match name {
                $(stringify!($name) => {
                    let f: $sys::fn_types::$name = $name;
                    f as *const std::ffi::c_void
                })*
                _ => std::ptr::null(),
            }
        }
        #[cfg(test)]
        pub(crate) const $len: usize = [$(stringify!($name)),*].len();
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_disjoint_and_cover_every_table() {
        assert_eq!(range::<Acl>().start, 0);
        assert_eq!(range::<Acl>().end, range::<Hccl>().start);
        assert_eq!(range::<Hccl>().end, range::<Hixl>().start);
        assert_eq!(range::<Hixl>().end, NSYM);
        assert_eq!(
            index::<Hccl>("HcclGetRootInfo"),
            lookup_index("HcclGetRootInfo").unwrap()
        );
        assert_eq!(
            index::<Hixl>("HixlCSServerCreate"),
            lookup_index("HixlCSServerCreate").unwrap()
        );
        assert_eq!(lookup_index("aclNoSuchThing"), None);
    }
}
