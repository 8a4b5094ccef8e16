//! Which HCCL function table a [`Runtime`] uses, and turning `HcclResult`s into [`Error`]s.
//!
//! * the in-process emulator (`Runtime::emulated`) → `ascend_sim::hccl_table()`;
//! * the emulator's shared library opened as the ACL runtime (`ASCEND_ACL_LIB=…/libascend_sim.so`)
//!   → the same file opened again as the HCCL table (it exports every `Hccl*` symbol), unless
//!   `ASCEND_HCCL_LIB` names another file;
//! * real CANN → [`hccl_sys::hccl()`]: `libhccl.so` plus `libhcomm.so` from the standard search
//!   path (`ASCEND_HCCL_LIB`, `$ASCEND_HOME_PATH/lib64`, …).
//!
//! The table is chosen on first use (the first [`RootInfo::generate`](super::RootInfo::generate)
//! or [`Comm`](super::Comm) init, or [`Runtime::hccl`]) and cached for the process: a process
//! that never makes a communicator never loads libhccl. The rule is
//! [`crate::sibling`]'s, shared with the other tables over the ACL runtime.
//!
//! Loading the library is in `handle/hccl_lib.rs` (opening a library by path is `unsafe`); this
//! file makes only safe calls.

use acl::AclLib;
use hccl_sys::{HcclLib, HcclResult};

use super::HcclCode;
use crate::error::{Error, Result};
pub(crate) use crate::handle::hccl_table as table;
use crate::runtime::Runtime;

impl Runtime {
    /// The raw HCCL function table this runtime's communicators call through (borrowed; for
    /// calls the [`hccl`](crate::hccl) module does not wrap). Chosen and opened on first use:
    /// see [`crate::hccl`] for which library serves which backend.
    ///
    /// # Errors
    /// [`Error::Load`] when the HCCL libraries cannot be opened (the message lists every
    /// path tried).
    pub fn hccl(&self) -> Result<&'static HcclLib> {
        table(self)
    }
}

/// The text for a failure of `code`, read right after it on the same thread: the in-process
/// emulator's message; else `aclGetRecentErrMsg()` (HCCL reports through ACL's error manager);
/// else `HcclGetErrorString(code)`.
pub(crate) fn message(h: &HcclLib, acl: &AclLib, code: HcclResult) -> Box<str> {
    #[cfg(feature = "emulator")]
    if std::ptr::eq(h, ascend_sim::hccl_table()) {
        if let Some(m) = ascend_sim::hccl_last_error_message() {
            return m.into_boxed_str();
        }
    }
    let m = crate::ffi::recent_error_message(acl);
    if !m.is_empty() {
        return m;
    }
    crate::handle::hccl_error_string(h, code)
}

/// Turns the result of an HCCL table call into our `Result`, reading the message on failure.
pub(crate) fn check(
    h: &HcclLib,
    acl: &AclLib,
    api: &'static str,
    r: std::result::Result<HcclResult, hccl_sys::MissingSymbol>,
) -> Result<()> {
    match r {
        Ok(0) => Ok(()),
        Ok(code) => Err(Error::Hccl {
            api,
            code: HcclCode(code),
            msg: message(h, acl, code),
        }),
        Err(m) => Err(m.into()),
    }
}

/// `hcall!(h, acl, HcclFoo(a, b))`: calls through the HCCL table and checks the status with
/// the C name. Must be used inside an `unsafe` block (the table methods are `unsafe`).
macro_rules! hcall {
    ($h:expr, $acl:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let h: &::hccl_sys::HcclLib = $h;
        $crate::hccl::table::check(h, $acl, stringify!($f), h.$f($($arg),*))
    }};
}
pub(crate) use hcall;
