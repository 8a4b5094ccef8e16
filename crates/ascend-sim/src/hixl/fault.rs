//! Fault injection for the HIXL exports with HIXL statuses (the same process-global machinery
//! as [`crate::fault`], which also reaches these symbols).

use hixl_sys::HixlStatus;

use crate::export::{self, Hixl, Injected};

/// The status that makes the call panic inside its wrapper (which then returns
/// `HIXL_FAILED`).
pub const PANIC: HixlStatus = u32::MAX;

/// Makes the `n`-th call (1-based, counted from now) of `symbol` (a name of
/// [`hixl_sys::SYMBOLS`]) return `status` without doing anything. Returns false for a
/// name that is not a HIXL symbol.
pub fn fail_nth(symbol: &str, n: u64, status: HixlStatus) -> bool {
    if !hixl_sys::SYMBOLS.contains(&symbol) {
        return false;
    }
    let what = if status == PANIC {
        Injected::Panic
    } else {
        Injected::Code(status.into())
    };
    export::fail_nth(symbol, n, what)
}

/// Disarms every HIXL fault.
pub fn clear() {
    export::clear_faults(export::range::<Hixl>())
}

/// How many times `symbol` has been called in this process.
pub fn calls(symbol: &str) -> u64 {
    export::calls(symbol)
}
