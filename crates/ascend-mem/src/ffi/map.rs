//! Mapping physical memory into reserved VA.

use std::ffi::c_void;

use acl::AclLib;

use crate::error::Result;

/// `aclrtMapMem(va, size, 0, h, 0)`: `offset` and `flags` must be 0 (rules R9, R10).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `va..va+size` lies in a live reservation and is not mapped; `h` is live and `size`
/// equals its size.
pub unsafe fn map(
    lib: &AclLib,
    va: *mut c_void,
    size: usize,
    h: acl::aclrtDrvMemHandle,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtMapMem(va, size, 0, h, 0)) }
}

/// `aclrtMapMem` with explicit offset and flags (only for tests of rules R9, R10).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// As [`map()`].
pub unsafe fn map_raw(
    lib: &AclLib,
    va: *mut c_void,
    size: usize,
    offset: usize,
    h: acl::aclrtDrvMemHandle,
    flags: u64,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtMapMem(va, size, offset, h, flags)) }
}

/// `aclrtUnmapMem`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `va` is the start of a live mapping and nothing (host or stream) uses it any more.
pub unsafe fn unmap(lib: &AclLib, va: *mut c_void) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtUnmapMem(va)) }
}

/// `aclrtMemSetAccess` for one descriptor.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `va`/`size` equal those of a live map call.
pub unsafe fn set_access(
    lib: &AclLib,
    va: *mut c_void,
    size: usize,
    desc: &acl::aclrtMemAccessDesc,
) -> Result<()> {
    let mut d = *desc;
    // SAFETY: `d` is valid for the call; the rest is forwarded to the caller.
    unsafe { call!(lib, aclrtMemSetAccess(va, size, &mut d, 1)) }
}
