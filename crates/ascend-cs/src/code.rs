//! HIXL's status codes: one type for the HixlCS C API's statuses (`HixlStatus`) and the
//! FabricMem engine's wire statuses (`hixl::Status`), which share their values (ascend-fabric's
//! engine uses this type for the latter).

use std::fmt;

/// A HIXL status code (`hixl::Status` on the control wire, `HixlStatus` in the HixlCS C API;
/// both a `uint32_t` with the same values).
///
/// A newtype, not an enum: a C++ peer or a newer library may return codes we have never seen.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HixlCode(pub u32);

impl HixlCode {
    /// `SUCCESS` (`HIXL_SUCCESS`) 0.
    pub const SUCCESS: HixlCode = HixlCode(0);
    /// `PARAM_INVALID` (`HIXL_PARAM_INVALID`) 103900: bad argument, bad option or handle,
    /// unknown request.
    pub const PARAM_INVALID: HixlCode = HixlCode(103_900);
    /// `TIMEOUT` (`HIXL_TIMEOUT`) 103901: a wait ran out.
    pub const TIMEOUT: HixlCode = HixlCode(103_901);
    /// `NOT_CONNECTED` (`HIXL_NOT_CONNECTED`) 103902: no connection to that peer.
    pub const NOT_CONNECTED: HixlCode = HixlCode(103_902);
    /// `ALREADY_CONNECTED` (`HIXL_ALREADY_CONNECTED`) 103903.
    pub const ALREADY_CONNECTED: HixlCode = HixlCode(103_903);
    /// `NOTIFY_FAILED` (`HIXL_NOTIFY_FAILED`) 103904 (reserved in the C API).
    pub const NOTIFY_FAILED: HixlCode = HixlCode(103_904);
    /// `UNSUPPORTED` (`HIXL_UNSUPPORTED`) 103905: an option, protocol, call or feature not
    /// available.
    pub const UNSUPPORTED: HixlCode = HixlCode(103_905);
    /// `RESOURCE_EXHAUSTED` (`HIXL_RESOURCE_EXHAUSTED`) 203900: out of a resource.
    pub const RESOURCE_EXHAUSTED: HixlCode = HixlCode(203_900);
    /// `FAILED` (`HIXL_FAILED`) 503900: generic failure.
    pub const FAILED: HixlCode = HixlCode(503_900);

    /// The C++ name of a known code (`hixl::Status`).
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::SUCCESS => "SUCCESS",
            Self::PARAM_INVALID => "PARAM_INVALID",
            Self::TIMEOUT => "TIMEOUT",
            Self::NOT_CONNECTED => "NOT_CONNECTED",
            Self::ALREADY_CONNECTED => "ALREADY_CONNECTED",
            Self::NOTIFY_FAILED => "NOTIFY_FAILED",
            Self::UNSUPPORTED => "UNSUPPORTED",
            Self::RESOURCE_EXHAUSTED => "RESOURCE_EXHAUSTED",
            Self::FAILED => "FAILED",
            _ => return None,
        })
    }

    /// The C API's name of a known code (`HIXL_` and the C++ name).
    pub fn c_name(self) -> Option<&'static str> {
        Some(match self {
            Self::SUCCESS => "HIXL_SUCCESS",
            Self::PARAM_INVALID => "HIXL_PARAM_INVALID",
            Self::TIMEOUT => "HIXL_TIMEOUT",
            Self::NOT_CONNECTED => "HIXL_NOT_CONNECTED",
            Self::ALREADY_CONNECTED => "HIXL_ALREADY_CONNECTED",
            Self::NOTIFY_FAILED => "HIXL_NOTIFY_FAILED",
            Self::UNSUPPORTED => "HIXL_UNSUPPORTED",
            Self::RESOURCE_EXHAUSTED => "HIXL_RESOURCE_EXHAUSTED",
            Self::FAILED => "HIXL_FAILED",
            _ => return None,
        })
    }
}

/// The C API's codes are the same values (checked when this crate compiles).
const _: () = {
    assert!(HixlCode::SUCCESS.0 == hixl_sys::HIXL_SUCCESS);
    assert!(HixlCode::PARAM_INVALID.0 == hixl_sys::HIXL_PARAM_INVALID);
    assert!(HixlCode::TIMEOUT.0 == hixl_sys::HIXL_TIMEOUT);
    assert!(HixlCode::NOT_CONNECTED.0 == hixl_sys::HIXL_NOT_CONNECTED);
    assert!(HixlCode::ALREADY_CONNECTED.0 == hixl_sys::HIXL_ALREADY_CONNECTED);
    assert!(HixlCode::NOTIFY_FAILED.0 == hixl_sys::HIXL_NOTIFY_FAILED);
    assert!(HixlCode::UNSUPPORTED.0 == hixl_sys::HIXL_UNSUPPORTED);
    assert!(HixlCode::RESOURCE_EXHAUSTED.0 == hixl_sys::HIXL_RESOURCE_EXHAUSTED);
    assert!(HixlCode::FAILED.0 == hixl_sys::HIXL_FAILED);
};

impl fmt::Display for HixlCode {
    /// `NAME (value)` with the C++ name, or `HIXL status value` for an unknown code.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "HIXL status {}", self.0),
        }
    }
}

/// Displays a code with its C API name (`HIXL_PARAM_INVALID (103900)`), as the HixlCS
/// wrapper's errors show it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct CName(pub(crate) HixlCode);

impl fmt::Display for CName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.c_name() {
            Some(n) => write!(f, "{n} ({})", self.0 .0),
            None => write!(f, "HIXL status {}", self.0 .0),
        }
    }
}
