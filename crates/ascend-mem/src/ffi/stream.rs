//! Streams.

use acl::AclLib;

use crate::error::Result;

/// `aclrtCreateStreamWithConfig`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table and a bound device; destroy with [`destroy`].
pub unsafe fn create(lib: &AclLib, priority: u32, flags: u32) -> Result<acl::aclrtStream> {
    let mut s = std::ptr::null_mut();
    // SAFETY: `s` is a writable slot.
    unsafe { call!(lib, aclrtCreateStreamWithConfig(&mut s, priority, flags)) }?;
    Ok(s)
}

/// `aclrtDestroyStream`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `s` is live and not used again.
pub unsafe fn destroy(lib: &AclLib, s: acl::aclrtStream) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtDestroyStream(s)) }
}

/// `aclrtSynchronizeStream`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `s` is live.
pub unsafe fn synchronize(lib: &AclLib, s: acl::aclrtStream) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtSynchronizeStream(s)) }
}

/// `aclrtSynchronizeStreamWithTimeout` (milliseconds; −1 forever, 0 check once).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `s` is live.
pub unsafe fn synchronize_timeout(lib: &AclLib, s: acl::aclrtStream, ms: i32) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtSynchronizeStreamWithTimeout(s, ms)) }
}

/// `aclrtStreamQuery`: the raw `aclrtStreamStatus`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `s` is live.
pub unsafe fn query(lib: &AclLib, s: acl::aclrtStream) -> Result<acl::aclrtStreamStatus> {
    let mut st = acl::ACL_STREAM_STATUS_RESERVED;
    // SAFETY: `st` is writable; stream validity forwarded to the caller.
    unsafe { call!(lib, aclrtStreamQuery(s, &mut st)) }?;
    Ok(st)
}

/// `aclrtStreamAbort`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `s` is live.
pub unsafe fn abort(lib: &AclLib, s: acl::aclrtStream) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtStreamAbort(s)) }
}

/// `aclrtSetStreamFailureMode`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `s` is live.
pub unsafe fn set_failure_mode(lib: &AclLib, s: acl::aclrtStream, mode: u64) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtSetStreamFailureMode(s, mode)) }
}

/// `aclrtStreamWaitEvent(stream, event)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `s` and `e` are live.
pub unsafe fn wait_event(lib: &AclLib, s: acl::aclrtStream, e: acl::aclrtEvent) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtStreamWaitEvent(s, e)) }
}
