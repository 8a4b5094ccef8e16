//! Loading the HCCL library a [`Runtime`] uses.
//!
//! Which table serves which runtime is [`crate::sibling`]'s rule (documented with the
//! `hccl` module): the in-process emulator's table, the emulator's shared library opened
//! again as HCCL, or [`hccl_sys::hccl()`]'s standard search. Opening a library by path is
//! `unsafe` (its initialisers run and its symbols are trusted); here it is done only for the
//! files that rule picked, which the runtime already opened as its ACL library.

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
pub(crate) fn hccl_table(rt: &Runtime) -> Result<&'static HcclLib> {
    TABLES.get_or_open(rt, hccl_sys::SPEC.path_var, |choice| {
        let t = open(choice)?;
        tracing::debug!(source = %t.source().describe(), "HCCL table chosen");
        Ok(t)
    })
}
