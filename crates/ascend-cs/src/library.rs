//! Which HIXL library serves a runtime, and calling through it: status checks with the C
//! name and the library's message, and the host-side argument conversions every call shares.

use std::ffi::CString;
use std::time::Duration;

use ascend_mem::ffi::StatusCheck;
use ascend_mem::sibling::{LibCache, LibChoice};
use ascend_mem::Runtime;
use hixl_sys as hixl;
use hixl_sys::HixlLib;

use crate::code::HixlCode;
use crate::error::{Error, Result};

/// Tables chosen so far, one per ACL table.
static TABLES: LibCache<HixlLib> = LibCache::new();

#[allow(unsafe_code)]
fn open(choice: LibChoice) -> Result<&'static HixlLib> {
    match choice {
        #[cfg(feature = "emulator")]
        LibChoice::InProcess => Ok(ascend_sim::hixl_table()),
        LibChoice::EmulatorFiles(paths) if !paths.is_empty() => {
            // SAFETY: the file is the emulator's shared library, already trusted (and opened)
            // as this runtime's ACL library; it exports the HixlCS symbols with the signatures
            // hixl-sys declares. Leaked: handles made through it may live as long as the
            // process.
            let lib =
                unsafe { HixlLib::open_path(&paths[0]) }.map_err(|e| Error::Load(Box::new(e)))?;
            Ok(Box::leak(Box::new(lib)))
        }
        // Without this crate's `emulator` feature an in-process runtime gets the search, as
        // before the choice was shared.
        _ => hixl::hixl().map_err(|e| Error::Load(Box::new(e.clone()))),
    }
}

/// The HIXL table serving `rt` (see the crate docs), chosen once per ACL table and kept for
/// the process (the rule is ascend-mem's [`sibling`](ascend_mem::sibling) one, shared with
/// its HCCL table).
///
/// # Errors
/// [`Error::Load`] when the library cannot be opened (the message lists every path tried).
pub fn table(rt: &Runtime) -> Result<&'static HixlLib> {
    TABLES.get_or_open(rt, hixl::SPEC.path_var, |choice| {
        let t = open(choice)?;
        tracing::debug!(source = %t.source().describe(), "HIXL table chosen");
        Ok(t)
    })
}

pub(crate) fn message(lib: &HixlLib) -> Box<str> {
    #[cfg(feature = "emulator")]
    if std::ptr::eq(lib, ascend_sim::hixl_table()) {
        return ascend_sim::hixl_last_error_message()
            .unwrap_or_default()
            .into_boxed_str();
    }
    let _ = lib;
    Box::from("")
}

/// HixlCS's status check (ascend-mem's one for every C library): a status other than
/// `HIXL_SUCCESS` becomes [`Error::Hixl`] with the library's message.
pub(crate) struct HixlStatus<'a>(pub(crate) &'a HixlLib);

impl StatusCheck for HixlStatus<'_> {
    type Status = hixl::HixlStatus;
    type Error = Error;
    const SUCCESS: hixl::HixlStatus = hixl::HIXL_SUCCESS;

    fn failure(&self, api: &'static str, code: hixl::HixlStatus) -> Error {
        Error::Hixl {
            api,
            code: HixlCode(code),
            msg: message(self.0),
        }
    }
}

/// `xcall!(lib, HixlCSFoo(a, b))`: ascend-mem's `checked_call!` through the HixlCS table, with
/// [`HixlStatus`]. Must be used inside an `unsafe` block.
macro_rules! xcall {
    ($lib:expr, $($call:tt)+) => {{
        let lib: &HixlLib = $lib;
        ascend_mem::checked_call!(&$crate::library::HixlStatus(lib), lib, $($call)+)
    }};
}
pub(crate) use xcall;

pub(crate) fn millis(api: &'static str, t: Duration) -> Result<u32> {
    u32::try_from(t.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| Error::InvalidArgument {
            api,
            what: "timeout (ms, 1..=u32::MAX)",
            value: format!("{t:?}").into(),
        })
}

pub(crate) fn cstring(api: &'static str, what: &'static str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument {
        api,
        what,
        value: format!("{s:?} (contains NUL)").into(),
    })
}
