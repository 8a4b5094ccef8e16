//! Events. Every call takes an [`OwnedEvent`] or an [`EventRef`], which prove the event is
//! live, so these functions are safe.

use acl::AclLib;

use super::{EventRef, OwnedEvent, StreamRef};
use crate::error::{Error, Result};

/// `aclrtCreateEvent` (default flags), on the device bound to the calling thread.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn create_default(lib: &AclLib) -> Result<OwnedEvent> {
    let mut e = std::ptr::null_mut();
    // SAFETY: `e` is a writable slot.
    unsafe { call!(lib, aclrtCreateEvent(&mut e)) }?;
    // SAFETY: a successful create hands us a fresh event nobody else owns.
    Ok(unsafe { OwnedEvent::from_raw(e) })
}

/// `aclrtCreateEventWithFlag`, on the device bound to the calling thread.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn create(lib: &AclLib, flags: u32) -> Result<OwnedEvent> {
    let mut e = std::ptr::null_mut();
    // SAFETY: `e` is a writable slot; `flags` is a plain value.
    unsafe { call!(lib, aclrtCreateEventWithFlag(&mut e, flags)) }?;
    // SAFETY: a successful create hands us a fresh event nobody else owns.
    Ok(unsafe { OwnedEvent::from_raw(e) })
}

/// `aclrtDestroyEvent`. On failure the event comes back with the error.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn destroy(lib: &AclLib, e: OwnedEvent) -> std::result::Result<(), (Error, OwnedEvent)> {
    // SAFETY: `e` is live and owned; it is consumed here, so it is not used again on success.
    match unsafe { call!(lib, aclrtDestroyEvent(e.as_raw())) } {
        Ok(()) => Ok(()),
        Err(err) => Err((err, e)),
    }
}

/// `aclrtRecordEvent(event, stream)`.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn record(lib: &AclLib, e: EventRef<'_>, s: StreamRef<'_>) -> Result<()> {
    // SAFETY: the borrows prove both live.
    unsafe { call!(lib, aclrtRecordEvent(e.as_raw(), s.as_raw())) }
}

/// `aclrtQueryEventStatus`: the raw `aclrtEventRecordedStatus` (1 = complete).
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn query(lib: &AclLib, e: EventRef<'_>) -> Result<acl::aclrtEventRecordedStatus> {
    let mut st = acl::ACL_EVENT_RECORDED_STATUS_NOT_READY;
    // SAFETY: `st` is writable; the borrow proves the event live.
    unsafe { call!(lib, aclrtQueryEventStatus(e.as_raw(), &mut st)) }?;
    Ok(st)
}

/// `aclrtSynchronizeEvent`.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn synchronize(lib: &AclLib, e: EventRef<'_>) -> Result<()> {
    // SAFETY: the borrow proves the event live.
    unsafe { call!(lib, aclrtSynchronizeEvent(e.as_raw())) }
}

/// `aclrtSynchronizeEventWithTimeout` (milliseconds).
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn synchronize_timeout(lib: &AclLib, e: EventRef<'_>, ms: i32) -> Result<()> {
    // SAFETY: the borrow proves the event live.
    unsafe { call!(lib, aclrtSynchronizeEventWithTimeout(e.as_raw(), ms)) }
}

/// `aclrtEventElapsedTime(&ms, start, end)`.
///
/// # Errors
/// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
pub fn elapsed(lib: &AclLib, start: EventRef<'_>, end: EventRef<'_>) -> Result<f32> {
    let mut ms = 0f32;
    // SAFETY: `ms` is writable; the borrows prove both events live.
    unsafe {
        call!(
            lib,
            aclrtEventElapsedTime(&mut ms, start.as_raw(), end.as_raw())
        )
    }?;
    Ok(ms)
}
