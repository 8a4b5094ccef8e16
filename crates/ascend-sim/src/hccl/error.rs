//! HCCL errors: the error value of the emulation, the `HCCL_E_*` names and texts, the
//! per-thread and per-process failure messages, and how a failed HCCL export is recorded.

use std::cell::RefCell;
use std::ffi::CStr;

use hccl_sys::*;
use parking_lot::Mutex;

use crate::export::{Hccl, Surface};

/// A failed HCCL call: the code and a message.
#[derive(Debug, Clone)]
pub(crate) struct HErr {
    pub code: HcclResult,
    pub msg: String,
}

pub(crate) type HRes<T = ()> = Result<T, HErr>;

pub(crate) fn herr(code: HcclResult, msg: impl Into<String>) -> HErr {
    HErr {
        code,
        msg: msg.into(),
    }
}

/// The `HCCL_E_*` name of a code.
pub(crate) fn code_name(code: HcclResult) -> &'static str {
    match code {
        HCCL_SUCCESS => "HCCL_SUCCESS",
        HCCL_E_PARA => "HCCL_E_PARA",
        HCCL_E_PTR => "HCCL_E_PTR",
        HCCL_E_MEMORY => "HCCL_E_MEMORY",
        HCCL_E_INTERNAL => "HCCL_E_INTERNAL",
        HCCL_E_NOT_SUPPORT => "HCCL_E_NOT_SUPPORT",
        HCCL_E_NOT_FOUND => "HCCL_E_NOT_FOUND",
        HCCL_E_UNAVAIL => "HCCL_E_UNAVAIL",
        HCCL_E_SYSCALL => "HCCL_E_SYSCALL",
        HCCL_E_TIMEOUT => "HCCL_E_TIMEOUT",
        HCCL_E_OPEN_FILE_FAILURE => "HCCL_E_OPEN_FILE_FAILURE",
        HCCL_E_TCP_CONNECT => "HCCL_E_TCP_CONNECT",
        HCCL_E_ROCE_CONNECT => "HCCL_E_ROCE_CONNECT",
        HCCL_E_TCP_TRANSFER => "HCCL_E_TCP_TRANSFER",
        HCCL_E_ROCE_TRANSFER => "HCCL_E_ROCE_TRANSFER",
        HCCL_E_RUNTIME => "HCCL_E_RUNTIME",
        HCCL_E_DRV => "HCCL_E_DRV",
        HCCL_E_PROFILING => "HCCL_E_PROFILING",
        HCCL_E_CCE => "HCCL_E_CCE",
        HCCL_E_NETWORK => "HCCL_E_NETWORK",
        HCCL_E_AGAIN => "HCCL_E_AGAIN",
        HCCL_E_REMOTE => "HCCL_E_REMOTE",
        HCCL_E_SUSPENDING => "HCCL_E_SUSPENDING",
        HCCL_E_OPRETRY_FAIL => "HCCL_E_OPRETRY_FAIL",
        HCCL_E_OOM => "HCCL_E_OOM",
        _ => "unknown HcclResult",
    }
}

/// The text `HcclGetErrorString` returns (the real library's table).
pub(crate) fn error_text(code: HcclResult) -> &'static CStr {
    match code {
        HCCL_SUCCESS => c"no error",
        HCCL_E_PARA => c"parameter error",
        HCCL_E_PTR => c"empty pointer",
        HCCL_E_MEMORY => c"memory error",
        HCCL_E_INTERNAL => c"internal error",
        HCCL_E_NOT_SUPPORT => c"not support feature",
        HCCL_E_NOT_FOUND => c"not found specific resource",
        HCCL_E_UNAVAIL => c"resource unavailable",
        HCCL_E_SYSCALL => c"call system interface error",
        HCCL_E_TIMEOUT => c"timeout",
        HCCL_E_OPEN_FILE_FAILURE => c"open file fail",
        HCCL_E_TCP_CONNECT => c"tcp connect fail",
        HCCL_E_ROCE_CONNECT => c"roce connect fail",
        HCCL_E_TCP_TRANSFER => c"tcp transfer fail",
        HCCL_E_ROCE_TRANSFER => c"roce transfer fail",
        HCCL_E_RUNTIME => c"call runtime api fail",
        HCCL_E_DRV => c"call driver api fail",
        HCCL_E_PROFILING => c"call profiling api fail",
        HCCL_E_CCE => c"call cce api fail",
        HCCL_E_NETWORK => c"call network api fail",
        HCCL_E_AGAIN => c"try again",
        HCCL_E_REMOTE => c"error cqe",
        HCCL_E_SUSPENDING => c"error communicator suspending",
        HCCL_E_OPRETRY_FAIL => c"retry constraint",
        HCCL_E_OOM => c"out of memory",
        _ => c"unknow error",
    }
}

thread_local! {
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}
static RECENT: Mutex<Option<String>> = Mutex::new(None);

pub(crate) fn set_recent(msg: &str) {
    *RECENT.lock() = Some(msg.to_string());
}

/// The message of the last failed HCCL call on this thread (`"HcclX: text (HCCL_E_Y)"`), kept
/// until the next failure on the thread.
pub fn hccl_last_error_message() -> Option<String> {
    LAST.with(|l| l.borrow().clone())
}

/// The most recent HCCL failure message of the process, from any thread, including
/// collectives that failed on a stream.
pub fn hccl_recent_error_message() -> Option<String> {
    RECENT.lock().clone()
}

fn fail(name: &str, e: &HErr) -> HcclResult {
    let m = format!("{name}: {} ({})", e.msg, code_name(e.code));
    set_recent(&m);
    LAST.with(|l| *l.borrow_mut() = Some(m));
    e.code
}

impl Surface for Hccl {
    const ID: usize = 1;
    type Code = HcclResult;
    type Err = HErr;
    const SUCCESS: HcclResult = HCCL_SUCCESS;
    const INTERNAL: HcclResult = HCCL_E_INTERNAL;
    const FAULT_DEFAULT: HcclResult = HCCL_E_INTERNAL;

    fn code(raw: i64) -> HcclResult {
        raw as HcclResult
    }

    fn error(code: HcclResult, msg: String) -> HErr {
        HErr { code, msg }
    }

    fn fail(name: &str, e: HErr) -> HcclResult {
        fail(name, &e)
    }
}
