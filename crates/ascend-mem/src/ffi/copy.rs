//! Copies and fills.

use std::ffi::c_void;

use acl::AclLib;

use super::StreamRef;
use crate::error::Result;

/// `aclrtMemcpy(dst, dst_max, src, count, kind)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `dst..dst+dst_max` and `src..src+count` are valid for the given kind, and no Rust
/// reference covers the destination while the copy runs.
pub unsafe fn memcpy(
    lib: &AclLib,
    dst: *mut c_void,
    dst_max: usize,
    src: *const c_void,
    count: usize,
    kind: acl::aclrtMemcpyKind,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtMemcpy(dst, dst_max, src, count, kind)) }
}

/// `aclrtMemcpyAsync(dst, dst_max, src, count, kind, stream.as_raw())`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// As [`memcpy`], and both ranges stay valid (and the destination unobserved) until the
/// stream has been synchronized past this copy.
pub unsafe fn memcpy_async(
    lib: &AclLib,
    dst: *mut c_void,
    dst_max: usize,
    src: *const c_void,
    count: usize,
    kind: acl::aclrtMemcpyKind,
    stream: StreamRef<'_>,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe {
        call!(
            lib,
            aclrtMemcpyAsync(dst, dst_max, src, count, kind, stream.as_raw())
        )
    }
}

/// `aclrtMemset(dst, max, value, count)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `dst..dst+max` is valid device or mapped memory.
pub unsafe fn memset(
    lib: &AclLib,
    dst: *mut c_void,
    max: usize,
    value: u8,
    count: usize,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtMemset(dst, max, i32::from(value), count)) }
}

/// `aclrtMemsetAsync(dst, max, value, count, stream)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// As [`memset`], valid until the stream is synchronized past this operation.
pub unsafe fn memset_async(
    lib: &AclLib,
    dst: *mut c_void,
    max: usize,
    value: u8,
    count: usize,
    stream: StreamRef<'_>,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe {
        call!(
            lib,
            aclrtMemsetAsync(dst, max, i32::from(value), count, stream.as_raw())
        )
    }
}
