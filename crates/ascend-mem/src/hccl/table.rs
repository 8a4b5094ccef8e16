//! Which HCCL function table a [`Runtime`] uses, and opening it (its status check is `ffi`'s,
//! with the other libraries').
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
//! Opening a library by path is `unsafe` (its initialisers run and its symbols are trusted):
//! here it is done only for the files the rule picked, which the runtime already opened as its
//! ACL library.

use hccl_sys::HcclLib;

use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::sibling::{LibCache, LibChoice};

/// Tables chosen so far, one per ACL table.
static TABLES: LibCache<HcclLib> = LibCache::new();

fn load_err(e: &hccl_sys::LoadError) -> Error {
    Error::Load(Box::new(e.clone()))
}

/// Opens the table for `choice`, which [`LibCache::get_or_open`] made for the runtime.
#[allow(unsafe_code)]
fn open(choice: LibChoice) -> Result<&'static HcclLib> {
    match choice {
        #[cfg(feature = "emulator")]
        LibChoice::InProcess => Ok(ascend_sim::hccl_table()),
        LibChoice::EmulatorFiles(paths) => {
            // SAFETY: `choice` comes from `LibChoice::for_runtime` (through the cache below,
            // the only caller), so the files are the emulator's shared library, already trusted
            // (and opened) as this runtime's ACL library; it exports the HCCL symbols with the
            // signatures hccl-sys declares. Leaked: handles made through it may live as long as
            // the process.
            let lib = unsafe { HcclLib::open_paths(&paths) }.map_err(|e| load_err(&e))?;
            Ok(Box::leak(Box::new(lib)))
        }
        _ => hccl_sys::hccl().map_err(load_err),
    }
}

/// The HCCL table serving `rt` (see the module docs), chosen once per ACL table.
///
/// # Errors
/// [`Error::Load`] when the library cannot be opened.
pub(crate) fn table(rt: &Runtime) -> Result<&'static HcclLib> {
    TABLES.get_or_open(rt, hccl_sys::SPEC.path_var, |choice| {
        let t = open(choice)?;
        tracing::debug!(source = %t.source().describe(), "HCCL table chosen");
        Ok(t)
    })
}

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
