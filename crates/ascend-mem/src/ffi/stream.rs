//! Streams. Every call takes an [`OwnedStream`] or a [`StreamRef`], which prove the stream is
//! live, so these functions are safe.

use acl::AclLib;

use super::{EventRef, OwnedStream, StreamRef};
use crate::error::{Error, Result};

/// `aclrtCreateStreamWithConfig`, on the device bound to the calling thread.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn create(lib: &AclLib, priority: u32, flags: u32) -> Result<OwnedStream> {
    let mut s = std::ptr::null_mut();
    // SAFETY: `s` is a writable slot; the other arguments are plain values.
    unsafe { call!(lib, aclrtCreateStreamWithConfig(&mut s, priority, flags)) }?;
    // SAFETY: a successful create hands us a fresh stream nobody else owns.
    Ok(unsafe { OwnedStream::from_raw(s) })
}

/// `aclrtDestroyStream`. On failure the stream comes back with the error (it may still be
/// live). Its owner synchronizes first: memory that queued work uses must outlive the work
/// (see [`super::copy::memcpy_async`]).
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn destroy(lib: &AclLib, s: OwnedStream) -> std::result::Result<(), (Error, OwnedStream)> {
    // SAFETY: `s` is live and owned; it is consumed here, so it is not used again on success.
    match unsafe { call!(lib, aclrtDestroyStream(s.as_raw())) } {
        Ok(()) => Ok(()),
        Err(e) => Err((e, s)),
    }
}

/// `aclrtSynchronizeStream`.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn synchronize(lib: &AclLib, s: StreamRef<'_>) -> Result<()> {
    // SAFETY: the borrow proves the stream live.
    unsafe { call!(lib, aclrtSynchronizeStream(s.as_raw())) }
}

/// `aclrtSynchronizeStreamWithTimeout` (milliseconds; −1 forever, 0 check once).
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn synchronize_timeout(lib: &AclLib, s: StreamRef<'_>, ms: i32) -> Result<()> {
    // SAFETY: the borrow proves the stream live.
    unsafe { call!(lib, aclrtSynchronizeStreamWithTimeout(s.as_raw(), ms)) }
}

/// `aclrtStreamQuery`: the raw `aclrtStreamStatus`.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn query(lib: &AclLib, s: StreamRef<'_>) -> Result<acl::aclrtStreamStatus> {
    let mut st = acl::ACL_STREAM_STATUS_RESERVED;
    // SAFETY: `st` is writable; the borrow proves the stream live.
    unsafe { call!(lib, aclrtStreamQuery(s.as_raw(), &mut st)) }?;
    Ok(st)
}

/// `aclrtStreamAbort`.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn abort(lib: &AclLib, s: StreamRef<'_>) -> Result<()> {
    // SAFETY: the borrow proves the stream live.
    unsafe { call!(lib, aclrtStreamAbort(s.as_raw())) }
}

/// `aclrtSetStreamFailureMode`.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn set_failure_mode(lib: &AclLib, s: StreamRef<'_>, mode: u64) -> Result<()> {
    // SAFETY: the borrow proves the stream live.
    unsafe { call!(lib, aclrtSetStreamFailureMode(s.as_raw(), mode)) }
}

/// `aclrtStreamWaitEvent(stream, event)`. Whoever holds the event keeps it alive until the
/// stream is synchronized past this wait.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn wait_event(lib: &AclLib, s: StreamRef<'_>, e: EventRef<'_>) -> Result<()> {
    // SAFETY: the borrows prove both live.
    unsafe { call!(lib, aclrtStreamWaitEvent(s.as_raw(), e.as_raw())) }
}
