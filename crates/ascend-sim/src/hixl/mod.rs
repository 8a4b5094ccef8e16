//! The HixlCS emulation: every symbol of [`hixl_sys::SYMBOLS`], servers and clients on
//! loopback TCP, one-sided put/get over the emulator's memory sharing. See the crate
//! documentation, section "HIXL client/server emulation".

use std::cell::RefCell;
use std::ffi::c_void;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use hixl_sys::HixlStatus;
use parking_lot::Mutex;

/// A failed HIXL call: the status and a message naming the argument and its value.
#[derive(Debug, Clone)]
pub(crate) struct XErr {
    pub code: HixlStatus,
    pub msg: String,
}

pub(crate) type XRes<T = ()> = Result<T, XErr>;

pub(crate) fn xerr(code: HixlStatus, msg: impl Into<String>) -> XErr {
    XErr {
        code,
        msg: msg.into(),
    }
}

/// `xbail!(code, "fmt", args)` returns an [`XErr`].
macro_rules! xbail {
    ($code:expr, $($fmt:tt)*) => {
        return Err($crate::hixl::xerr($code, format!($($fmt)*)))
    };
}

/// `xensure!(cond, code, "fmt", args)`.
macro_rules! xensure {
    ($cond:expr, $code:expr, $($fmt:tt)*) => {
        if !$cond {
            xbail!($code, $($fmt)*);
        }
    };
}

mod client;
mod exports;
mod handle;
mod mem;
mod server;
mod wire;

/// The `HIXL_*` name of a status.
pub(crate) fn code_name(code: HixlStatus) -> &'static str {
    match code {
        hixl_sys::HIXL_SUCCESS => "HIXL_SUCCESS",
        hixl_sys::HIXL_PARAM_INVALID => "HIXL_PARAM_INVALID",
        hixl_sys::HIXL_TIMEOUT => "HIXL_TIMEOUT",
        hixl_sys::HIXL_NOT_CONNECTED => "HIXL_NOT_CONNECTED",
        hixl_sys::HIXL_ALREADY_CONNECTED => "HIXL_ALREADY_CONNECTED",
        hixl_sys::HIXL_NOTIFY_FAILED => "HIXL_NOTIFY_FAILED",
        hixl_sys::HIXL_UNSUPPORTED => "HIXL_UNSUPPORTED",
        hixl_sys::HIXL_RESOURCE_EXHAUSTED => "HIXL_RESOURCE_EXHAUSTED",
        hixl_sys::HIXL_FAILED => "HIXL_FAILED",
        _ => "unknown HixlStatus",
    }
}

// ---------------------------------------------------------------------------------------------
// Error messages

thread_local! {
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The message of the last failed HIXL call on this thread (`"HixlCSX: text (HIXL_Y)"`), kept
/// until the next failure on the thread. HIXL's C API has no message call; this is the
/// emulator's own, for tests and the in-process safe wrapper.
pub fn hixl_last_error_message() -> Option<String> {
    LAST.with(|l| l.borrow().clone())
}

fn fail(name: &str, e: &XErr) -> HixlStatus {
    let m = format!("{name}: {} ({})", e.msg, code_name(e.code));
    LAST.with(|l| *l.borrow_mut() = Some(m));
    e.code
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

// ---------------------------------------------------------------------------------------------
// Symbols, call counts and fault injection

const NSYM: usize = hixl_sys::SYMBOLS.len();

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

/// Index of `name` in `hixl_sys::SYMBOLS`; a compile-time error for an unknown name.
pub(crate) const fn sym_index(name: &str) -> usize {
    let syms = hixl_sys::SYMBOLS;
    let mut i = 0;
    while i < syms.len() {
        if str_eq(syms[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("not a symbol of hixl_sys::SYMBOLS")
}

fn sym_index_rt(name: &str) -> Option<usize> {
    hixl_sys::SYMBOLS.iter().position(|s| *s == name)
}

static CALLS: [AtomicU64; NSYM] = [const { AtomicU64::new(0) }; NSYM];
/// Armed faults: (symbol index, call count at which it fires, status; [`fault::PANIC`] panics).
static FAULTS: Mutex<Vec<(usize, u64, HixlStatus)>> = Mutex::new(Vec::new());

/// Fault injection for the HIXL exports (process-global; separate from the ACL faults).
pub mod fault {
    use super::*;

    /// The status that makes the call panic inside its wrapper (which then returns
    /// `HIXL_FAILED`).
    pub const PANIC: HixlStatus = u32::MAX;

    /// Makes the `n`-th call (1-based, counted from now) of `symbol` (a name of
    /// [`hixl_sys::SYMBOLS`]) return `status` without doing anything. Returns false for an
    /// unknown symbol.
    pub fn fail_nth(symbol: &str, n: u64, status: HixlStatus) -> bool {
        match sym_index_rt(symbol) {
            Some(i) => {
                let at = CALLS[i].load(Relaxed) + n.max(1);
                FAULTS.lock().push((i, at, status));
                true
            }
            None => false,
        }
    }

    /// Disarms every HIXL fault.
    pub fn clear() {
        FAULTS.lock().clear();
    }

    /// How many times `symbol` has been called in this process.
    pub fn calls(symbol: &str) -> u64 {
        sym_index_rt(symbol).map_or(0, |i| CALLS[i].load(Relaxed))
    }
}

fn fault_hit(idx: usize, count: u64) -> Option<HixlStatus> {
    let mut f = FAULTS.lock();
    let pos = f.iter().position(|x| x.0 == idx && x.1 == count)?;
    Some(f.remove(pos).2)
}

/// Runs the body of export `name`: initialisation, call counting, fault injection, panic
/// catching, error recording.
pub(crate) fn enter(idx: usize, name: &'static str, f: impl FnOnce() -> XRes) -> HixlStatus {
    crate::rt::init();
    let count = CALLS[idx].fetch_add(1, Relaxed) + 1;
    let injected = fault_hit(idx, count);
    let run = || -> XRes {
        match injected {
            Some(fault::PANIC) => panic!("injected panic (hixl fault::fail_nth)"),
            Some(code) => Err(xerr(code, "injected failure (hixl fault::fail_nth)")),
            None => f(),
        }
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => hixl_sys::HIXL_SUCCESS,
        Ok(Err(e)) => fail(name, &e),
        Err(p) => fail(
            name,
            &xerr(
                hixl_sys::HIXL_FAILED,
                format!("internal error (panic: {})", panic_text(&*p)),
            ),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Counters

#[derive(Debug, Clone, Copy)]
pub(crate) enum XCtr {
    Servers = 0,
    Clients,
    ServerMems,
    ClientMems,
    RemoteMaps,
    Ops,
}

const NXCTR: usize = 6;
static XCOUNTERS: [AtomicI64; NXCTR] = [const { AtomicI64::new(0) }; NXCTR];

pub(crate) fn xinc(c: XCtr) {
    XCOUNTERS[c as usize].fetch_add(1, Relaxed);
}

pub(crate) fn xdec(c: XCtr) {
    XCOUNTERS[c as usize].fetch_sub(1, Relaxed);
}

/// Live HIXL objects of this process (see [`hixl_counters`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HixlCounters {
    /// Live servers (`HixlCSServerCreate` minus `HixlCSServerDestroy`).
    pub servers: u64,
    /// Live clients (`HixlCSClientCreate` minus `HixlCSClientDestroy`).
    pub clients: u64,
    /// Live server memory registrations (destroy unregisters the rest).
    pub server_mems: u64,
    /// Live client memory registrations (destroy unregisters the rest).
    pub client_mems: u64,
    /// Server memory blocks a client has imported and mapped (or reaches by pid).
    pub remote_maps: u64,
    /// Async operations not yet reported finished by a query (destroy drops finished ones).
    pub ops: u64,
}

impl HixlCounters {
    /// Whether every counter is zero (nothing leaked).
    pub fn is_zero(&self) -> bool {
        *self == HixlCounters::default()
    }
}

impl fmt::Display for HixlCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "servers {}, clients {}, server_mems {}, client_mems {}, remote_maps {}, ops {}",
            self.servers,
            self.clients,
            self.server_mems,
            self.client_mems,
            self.remote_maps,
            self.ops
        )
    }
}

/// The live HIXL objects of this process.
pub fn hixl_counters() -> HixlCounters {
    let v = |c: XCtr| XCOUNTERS[c as usize].load(Relaxed).max(0) as u64;
    HixlCounters {
        servers: v(XCtr::Servers),
        clients: v(XCtr::Clients),
        server_mems: v(XCtr::ServerMems),
        client_mems: v(XCtr::ClientMems),
        remote_maps: v(XCtr::RemoteMaps),
        ops: v(XCtr::Ops),
    }
}

// ---------------------------------------------------------------------------------------------
// Test hooks

/// Test hooks of the HIXL emulation.
pub mod testing {
    use std::time::Duration;

    use parking_lot::{Condvar, Mutex};

    pub(crate) static HOLDS: Mutex<u32> = Mutex::new(0);
    pub(crate) static RELEASED: Condvar = Condvar::new();

    /// While alive, no client worker starts a queued batch (every client of the process):
    /// async batches stay WAITING and sync ones time out. Dropping it lets them run.
    #[derive(Debug)]
    #[must_use = "dropping the hold releases the workers at once"]
    pub struct Hold(());

    impl Hold {
        /// Releases the workers (same as dropping).
        pub fn release(self) {}
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            let mut h = HOLDS.lock();
            *h = h.saturating_sub(1);
            RELEASED.notify_all();
        }
    }

    /// Holds every client worker of the process (see [`Hold`]).
    pub fn hold() -> Hold {
        *HOLDS.lock() += 1;
        Hold(())
    }

    /// Waits while held, up to `max`; returns whether still held.
    pub(crate) fn wait_released(max: Duration) -> bool {
        let mut h = HOLDS.lock();
        if *h > 0 {
            RELEASED.wait_for(&mut h, max);
        }
        *h > 0
    }

    /// Sets how long an async batch may wait before a query reports it TIMEOUT (and it is
    /// dropped unrun). Default: `ASCEND_SIM_HIXL_ASYNC_TIMEOUT_MS`, else 60 s.
    pub fn set_async_timeout(t: Duration) {
        super::ASYNC_TIMEOUT_MS.store(t.as_millis().max(1) as u64, super::Relaxed);
    }
}

/// 0 = not read from the environment yet.
static ASYNC_TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn async_timeout() -> std::time::Duration {
    let mut ms = ASYNC_TIMEOUT_MS.load(Relaxed);
    if ms == 0 {
        ms = std::env::var("ASCEND_SIM_HIXL_ASYNC_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|v| *v > 0)
            .unwrap_or(60_000);
        let _ = ASYNC_TIMEOUT_MS.compare_exchange(0, ms, Relaxed, Relaxed);
        ms = ASYNC_TIMEOUT_MS.load(Relaxed);
    }
    std::time::Duration::from_millis(ms)
}

// ---------------------------------------------------------------------------------------------
// Lookup and table

/// The emulator's export for `name` (any name of [`hixl_sys::SYMBOLS`]); null for other names.
pub fn hixl_lookup(name: &str) -> *const c_void {
    exports::raw_lookup(name)
}

/// The process-wide HIXL loader table served by this emulator in-process.
pub fn hixl_table() -> &'static hixl_sys::HixlLib {
    static T: OnceLock<hixl_sys::HixlLib> = OnceLock::new();
    T.get_or_init(|| {
        // SAFETY: `hixl_lookup` returns this crate's exports, each checked at compile time
        // against `hixl_sys::fn_types`, and they live as long as the process.
        unsafe {
            hixl_sys::HixlLib::from_source(hixl_sys::Source::InProcess {
                name: "ascend-sim",
                lookup: hixl_lookup,
            })
        }
    })
}
