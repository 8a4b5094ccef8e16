//! The HixlCS emulation: every symbol of [`hixl_sys::SYMBOLS`], servers and clients on
//! loopback TCP, one-sided put/get over the emulator's memory sharing. See the crate
//! documentation, section "HIXL client/server emulation".

use std::ffi::c_void;
use std::sync::OnceLock;

#[macro_use]
pub(crate) mod error;
mod client;
mod counters;
mod exports;
pub mod fault;
mod handle;
mod mem;
mod server;
pub mod testing;
mod wire;

pub use counters::{hixl_counters, HixlCounters};
pub use error::hixl_last_error_message;

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
