//! Events.

use acl::AclLib;

use crate::error::Result;

/// `aclrtCreateEvent` (default flags).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table and a bound device; destroy with [`destroy`].
pub unsafe fn create_default(lib: &AclLib) -> Result<acl::aclrtEvent> {
    let mut e = std::ptr::null_mut();
    // SAFETY: `e` is a writable slot.
    unsafe { call!(lib, aclrtCreateEvent(&mut e)) }?;
    Ok(e)
}

/// `aclrtCreateEventWithFlag`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table and a bound device; destroy with [`destroy`].
pub unsafe fn create(lib: &AclLib, flags: u32) -> Result<acl::aclrtEvent> {
    let mut e = std::ptr::null_mut();
    // SAFETY: `e` is a writable slot.
    unsafe { call!(lib, aclrtCreateEventWithFlag(&mut e, flags)) }?;
    Ok(e)
}

/// `aclrtDestroyEvent`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `e` is live and not used again.
pub unsafe fn destroy(lib: &AclLib, e: acl::aclrtEvent) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtDestroyEvent(e)) }
}

/// `aclrtRecordEvent(event, stream)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `e` and `s` are live.
pub unsafe fn record(lib: &AclLib, e: acl::aclrtEvent, s: acl::aclrtStream) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtRecordEvent(e, s)) }
}

/// `aclrtQueryEventStatus`: the raw `aclrtEventRecordedStatus` (1 = complete).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `e` is live.
pub unsafe fn query(lib: &AclLib, e: acl::aclrtEvent) -> Result<acl::aclrtEventRecordedStatus> {
    let mut st = acl::ACL_EVENT_RECORDED_STATUS_NOT_READY;
    // SAFETY: `st` is writable; event validity forwarded to the caller.
    unsafe { call!(lib, aclrtQueryEventStatus(e, &mut st)) }?;
    Ok(st)
}

/// `aclrtSynchronizeEvent`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `e` is live.
pub unsafe fn synchronize(lib: &AclLib, e: acl::aclrtEvent) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtSynchronizeEvent(e)) }
}

/// `aclrtSynchronizeEventWithTimeout` (milliseconds).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `e` is live.
pub unsafe fn synchronize_timeout(lib: &AclLib, e: acl::aclrtEvent, ms: i32) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtSynchronizeEventWithTimeout(e, ms)) }
}

/// `aclrtEventElapsedTime(&ms, start, end)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// Both events are live.
pub unsafe fn elapsed(lib: &AclLib, start: acl::aclrtEvent, end: acl::aclrtEvent) -> Result<f32> {
    let mut ms = 0f32;
    // SAFETY: `ms` is writable; event validity forwarded to the caller.
    unsafe { call!(lib, aclrtEventElapsedTime(&mut ms, start, end)) }?;
    Ok(ms)
}
