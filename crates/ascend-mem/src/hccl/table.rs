//! Which HCCL function table a [`Runtime`] uses (its status check is `ffi`'s, with the others).
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

use hccl_sys::HcclLib;

use crate::error::Result;
pub(crate) use crate::handle::hccl_table as table;
use crate::runtime::Runtime;

impl Runtime {
    /// The raw HCCL function table this runtime's communicators call through (borrowed; for
    /// calls the [`hccl`](crate::hccl) module does not wrap). Chosen and opened on first use:
    /// see [`crate::hccl`] for which library serves which backend.
    ///
    /// # Errors
    /// [`Error::Load`](crate::Error::Load) when the HCCL libraries cannot be opened (the message lists every
    /// path tried).
    pub fn hccl(&self) -> Result<&'static HcclLib> {
        table(self)
    }
}
