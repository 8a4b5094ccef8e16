//! The one status check of every C library this workspace calls (ACL, HCCL, HIXL's HixlCS).
//!
//! Each function of those libraries returns a status; a call through a loader table returns
//! that status, or [`MissingSymbol`](acl::MissingSymbol) when the library lacks the function.
//! [`StatusCheck`] is the conversion each library gives (which status is success, and the error
//! a failure becomes, with the library's message read right after it on the same thread), and
//! [`checked_call!`](crate::checked_call) the one macro that calls through a table and applies
//! it, naming the C function. Here: ACL ([`AclLib`] itself; [`Error::Acl`]) and HCCL
//! (`HcclStatus`; [`Error::Hccl`]). The HixlCS wrapper (ascend-cs) implements it for its own
//! library and error type.

use std::ffi::CStr;

use acl::AclLib;
use hccl_sys::{HcclLib, HcclResult};

use crate::error::{AclCode, Error, HcclCode};

/// How a C library reports a failed call: the status its functions return, which value means
/// success, and the error any other value becomes. Applied by
/// [`checked_call!`](crate::checked_call), or through [`StatusCheck::check`].
pub trait StatusCheck {
    /// The status the library's functions return (`aclError`, `HcclResult`, `HixlStatus`).
    type Status: Copy + PartialEq;
    /// The error a failed call becomes; a function the library lacks converts into it too.
    type Error: From<acl::MissingSymbol>;
    /// The status of a call that succeeded.
    const SUCCESS: Self::Status;

    /// The error for C function `api` having returned `status` (not [`Self::SUCCESS`]).
    /// Called right after the call, on the same thread, so it can read the library's own
    /// message for the failure.
    fn failure(&self, api: &'static str, status: Self::Status) -> Self::Error;

    /// Turns the result of a table call of `api` into a `Result`: success passes, any other
    /// status becomes [`StatusCheck::failure`], a missing function its own error.
    ///
    /// # Errors
    /// As above.
    fn check(
        &self,
        api: &'static str,
        r: std::result::Result<Self::Status, acl::MissingSymbol>,
    ) -> std::result::Result<(), Self::Error> {
        match r {
            Ok(s) if s == Self::SUCCESS => Ok(()),
            Ok(s) => Err(self.failure(api, s)),
            Err(m) => Err(m.into()),
        }
    }
}

/// `checked_call!(checker, table, CFunction(a, b))`: calls `CFunction` through the loader
/// table `table` and checks the status it returns with `checker`'s
/// [`StatusCheck`](crate::ffi::StatusCheck), the C name being the error's `api`.
///
/// The table methods are `unsafe`: use it inside an `unsafe` block whose `// SAFETY:` comment
/// says why the call is sound. `checker` is evaluated before the call, `table` once.
///
/// ```
/// # #[cfg(not(feature = "emulator"))] fn main() {}
/// # #[cfg(feature = "emulator")]
/// # fn main() -> ascend_mem::Result<()> {
/// let lib = ascend_mem::Runtime::emulated()?.acl();
/// let mut n = 0u32;
/// // SAFETY: `n` is a writable out-value.
/// unsafe { ascend_mem::checked_call!(lib, lib, aclrtGetDeviceCount(&mut n)) }?;
/// assert!(n > 0);
/// # Ok(())
/// # }
/// ```
#[macro_export]
macro_rules! checked_call {
    ($checker:expr, $table:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        $crate::ffi::StatusCheck::check($checker, ::core::stringify!($f), $table.$f($($arg),*))
    };
}

/// Reads `aclGetRecentErrMsg()` on this thread (empty when the library has none).
pub fn recent_error_message(lib: &AclLib) -> Box<str> {
    // SAFETY: takes no arguments; returns a thread-local string or null.
    let p = match unsafe { lib.aclGetRecentErrMsg() } {
        Ok(p) if !p.is_null() => p,
        _ => return Box::from(""),
    };
    // SAFETY: a non-null result is a NUL-terminated string valid until the next ACL call on this
    // thread; we copy it out at once.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_string_lossy().into_owned().into_boxed_str()
}

/// ACL: a non-zero `aclError` becomes [`Error::Acl`] with the `aclGetRecentErrMsg()` text.
impl StatusCheck for AclLib {
    type Status = acl::aclError;
    type Error = Error;
    const SUCCESS: acl::aclError = acl::ACL_SUCCESS;

    fn failure(&self, api: &'static str, code: acl::aclError) -> Error {
        Error::Acl {
            api,
            code: AclCode(code),
            msg: recent_error_message(self),
        }
    }
}

/// HCCL's status check: the table called through, and the ACL table whose error manager HCCL
/// reports through (for the message).
#[derive(Copy, Clone)]
pub(crate) struct HcclStatus<'a> {
    pub(crate) h: &'a HcclLib,
    pub(crate) acl: &'a AclLib,
}

/// HCCL: a non-zero `HcclResult` becomes [`Error::Hccl`] with the library's text for it.
impl StatusCheck for HcclStatus<'_> {
    type Status = HcclResult;
    type Error = Error;
    const SUCCESS: HcclResult = hccl_sys::HCCL_SUCCESS;

    fn failure(&self, api: &'static str, code: HcclResult) -> Error {
        Error::Hccl {
            api,
            code: HcclCode(code),
            msg: hccl_message(self.h, self.acl, code),
        }
    }
}

/// The text for an HCCL failure of `code`, read right after it on the same thread: the
/// in-process emulator's message; else `aclGetRecentErrMsg()` (HCCL reports through ACL's
/// error manager); else `HcclGetErrorString(code)`.
fn hccl_message(h: &HcclLib, acl: &AclLib, code: HcclResult) -> Box<str> {
    #[cfg(feature = "emulator")]
    if std::ptr::eq(h, ascend_sim::hccl_table()) {
        if let Some(m) = ascend_sim::hccl_last_error_message() {
            return m.into_boxed_str();
        }
    }
    let m = recent_error_message(acl);
    if !m.is_empty() {
        return m;
    }
    hccl_error_string(h, code)
}

/// `HcclGetErrorString(code)`, copied out (empty when the library has none).
fn hccl_error_string(h: &HcclLib, code: HcclResult) -> Box<str> {
    // SAFETY: takes a plain value and returns a static string or null.
    match unsafe { h.HcclGetErrorString(code) } {
        Ok(p) if !p.is_null() => {
            // SAFETY: a non-null result is a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(p) };
            s.to_string_lossy().into_owned().into_boxed_str()
        }
        _ => Box::from(""),
    }
}

/// `hcall!(h, acl, HcclFoo(a, b))`: [`checked_call!`](crate::checked_call) through the HCCL
/// table `h`, with `acl` (the runtime's ACL table) for the message. Must be used inside an
/// `unsafe` block (the table methods are `unsafe`).
macro_rules! hcall {
    ($h:expr, $acl:expr, $($call:tt)+) => {{
        let h: &::hccl_sys::HcclLib = $h;
        let checker = $crate::ffi::HcclStatus { h, acl: $acl };
        $crate::checked_call!(&checker, h, $($call)+)
    }};
}
pub(crate) use hcall;
