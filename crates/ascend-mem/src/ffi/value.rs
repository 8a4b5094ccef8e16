//! Stream-ordered values: `aclrtValueWrite` and `aclrtValueWait`.

use std::ffi::c_void;

use acl::AclLib;

use super::StreamRef;
use crate::error::Result;

/// `aclrtValueWrite(addr, value, 0, stream)`: stores `value` at `addr` when the stream
/// reaches it. `flag` is reserved and must be 0 (CANN 9.x `acl_rt.h`), so it is not a
/// parameter.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `addr` is an 8-byte aligned word of device-visible memory that stays mapped (and is not
/// covered by a Rust reference) until the stream has been synchronized past the write.
pub unsafe fn write(
    lib: &AclLib,
    addr: *mut c_void,
    value: u64,
    stream: StreamRef<'_>,
) -> Result<()> {
    // SAFETY: forwarded to the caller; the stream is live by the borrow.
    unsafe { call!(lib, aclrtValueWrite(addr, value, 0, stream.as_raw())) }
}

/// `aclrtValueWait(addr, value, flag, stream)`: the stream waits until the word at `addr`
/// satisfies `flag` (`ACL_STREAM_WAIT_VALUE_GEQ`, `_EQ`, `_AND`, `_NOR`) against `value`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `addr` is an 8-byte aligned word of device-visible memory that stays mapped until the
/// stream has been synchronized past the wait.
pub unsafe fn wait(
    lib: &AclLib,
    addr: *mut c_void,
    value: u64,
    flag: u32,
    stream: StreamRef<'_>,
) -> Result<()> {
    // SAFETY: forwarded to the caller; the stream is live by the borrow.
    unsafe { call!(lib, aclrtValueWait(addr, value, flag, stream.as_raw())) }
}
