//! The thin layer over `acl-sys`: one small function per C call, grouped by area.
//!
//! Out-parameters become return values; a non-zero status becomes
//! [`Error::Acl`](crate::Error::Acl) carrying the C name, the [`AclCode`](crate::AclCode) and
//! the `aclGetRecentErrMsg()` text read right after the failure on the same thread; a symbol
//! the library lacks becomes [`Error::MissingSymbol`](crate::Error::MissingSymbol). Every
//! function takes the [`AclLib`] table to call through, so the same code serves real CANN,
//! the in-process emulator and the emulator opened by path.
//!
//! That status check is the one every C library of the workspace shares ([`StatusCheck`],
//! applied by [`checked_call!`](crate::checked_call), in `status.rs`): HCCL's calls make it
//! too, and so do ascend-cs's HixlCS calls, each with its own status type and error.
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

use acl::AclLib;

use crate::error::Result;

mod live;
mod status;

pub(crate) use live::RawHandle;
pub use live::{EventRef, OwnedEvent, OwnedStream, StreamRef};

pub(crate) use status::{hcall, HcclStatus};
pub use status::{recent_error_message, StatusCheck};

/// Turns the result of an ACL table call into our `Result`, reading the error text on failure
/// (the [`StatusCheck`] of [`AclLib`]).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) for a non-zero status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn check(
    lib: &AclLib,
    api: &'static str,
    r: std::result::Result<acl::aclError, acl::MissingSymbol>,
) -> Result<()> {
    StatusCheck::check(lib, api, r)
}

/// `call!(lib, aclrtFoo(a, b))`: [`checked_call!`](crate::checked_call) through the ACL table
/// `lib`, which is its own [`StatusCheck`]. Must be used inside an `unsafe` block (the table
/// methods are `unsafe`).
macro_rules! call {
    ($lib:expr, $($call:tt)+) => {{
        let lib: &::acl::AclLib = $lib;
        $crate::checked_call!(lib, lib, $($call)+)
    }};
}

pub mod batch;
pub mod copy;
pub mod device;
pub mod event;
pub mod host;
pub mod ptr;

pub mod init;
pub mod map;
pub mod phys;
pub mod share;
pub mod stream;
pub mod va;
pub mod value;
