//! HIXL errors: the error value of the emulation, the `HIXL_*` names, the per-thread failure
//! message, how a failed HixlCS export is recorded, and fault injection with HIXL statuses.

use std::cell::RefCell;

use hixl_sys::HixlStatus;

use crate::export::{Hixl, Surface};

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
        return Err($crate::hixl::error::xerr($code, format!($($fmt)*)))
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

thread_local! {
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The message of the last failed HIXL call on this thread (`"HixlCSX: text (HIXL_Y)"`), kept
/// until the next failure on the thread. HIXL's C API has no message call; this is the
/// emulator's own, for tests and the in-process safe wrapper.
pub fn hixl_last_error_message() -> Option<String> {
    LAST.with(|l| l.borrow().clone())
}

pub(crate) fn fail(name: &str, e: &XErr) -> HixlStatus {
    let m = format!("{name}: {} ({})", e.msg, code_name(e.code));
    LAST.with(|l| *l.borrow_mut() = Some(m));
    e.code
}

impl Surface for Hixl {
    const ID: usize = 2;
    type Code = HixlStatus;
    type Err = XErr;
    const SUCCESS: HixlStatus = hixl_sys::HIXL_SUCCESS;
    const INTERNAL: HixlStatus = hixl_sys::HIXL_FAILED;
    const FAULT_DEFAULT: HixlStatus = hixl_sys::HIXL_FAILED;

    fn code(raw: i64) -> HixlStatus {
        raw as HixlStatus
    }

    fn error(code: HixlStatus, msg: String) -> XErr {
        XErr { code, msg }
    }

    fn fail(name: &str, e: XErr) -> HixlStatus {
        fail(name, &e)
    }
}
