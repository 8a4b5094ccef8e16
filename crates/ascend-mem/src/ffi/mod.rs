//! The thin layer over `acl-sys`: one small function per C call, grouped by area.
//!
//! Out-parameters become return values; a non-zero status becomes [`Error::Acl`] carrying the
//! C name, the [`AclCode`] and the `aclGetRecentErrMsg()` text read right after the failure on
//! the same thread; a symbol the library lacks becomes [`Error::MissingSymbol`]. Every function
//! takes the [`AclLib`] table to call through, so the same code serves real CANN, the
//! in-process emulator and the emulator opened by path.
//!
//! An [`AclLib`] is a valid table by construction (opening one is `unsafe`, and its contract
//! is that every symbol is the ACL function of that name). A function is then safe when its
//! arguments prove what the call needs: plain values, or live
//! handles as [`OwnedStream`]/[`StreamRef`] and [`OwnedEvent`]/[`EventRef`] (an owned handle
//! is live until the `destroy` that consumes it; a borrow cannot outlive its owner). Where
//! raw pointer or handle validity is the caller's job the function is `unsafe`, with a
//! `# Safety` section. The safe types of this crate are the intended callers; it is public so
//! tests and rare calls can reach the C layer without a wider safe API.
//!
//! Arguments CANN documents as reserved or "must be 0" are not parameters here: the function
//! passes the constant and says which rule requires it.

use std::ffi::CStr;

use acl::AclLib;

use crate::error::{AclCode, Error, Result};

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

/// Turns the result of a table call into our `Result`, reading the error text on failure.
///
/// # Errors
/// [`Error::Acl`] for a non-zero status; [`Error::MissingSymbol`].
pub fn check(
    lib: &AclLib,
    api: &'static str,
    r: std::result::Result<acl::aclError, acl::MissingSymbol>,
) -> Result<()> {
    match r {
        Ok(0) => Ok(()),
        Ok(code) => Err(Error::Acl {
            api,
            code: AclCode(code),
            msg: recent_error_message(lib),
        }),
        Err(m) => Err(m.into()),
    }
}

/// `call!(lib, aclrtFoo(a, b))`: calls through the table and checks the status with the C name.
/// Must be used inside an `unsafe` block (the table methods are `unsafe`).
macro_rules! call {
    ($lib:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib: &::acl::AclLib = $lib;
        $crate::ffi::check(lib, stringify!($f), lib.$f($($arg),*))
    }};
}

pub mod batch;
pub mod copy;
pub mod device;
pub mod event;
pub mod host;
pub mod ptr;
pub use crate::handle::{EventRef, OwnedEvent, OwnedStream, StreamRef};

pub mod init;
pub mod map;
pub mod phys;
pub mod share;
pub mod stream;
pub mod va;
pub mod value;
