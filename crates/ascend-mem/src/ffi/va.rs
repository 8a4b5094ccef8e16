//! Virtual address reservations.

use std::ffi::c_void;

use acl::AclLib;

use crate::error::Result;

/// `aclrtReserveMemAddress(&va, size, 0, NULL, flags)`: alignment is reserved (rule R2,
/// pass 0) and `expectPtr` is NULL (R3: a fixed address is experimental).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table; the returned range must be released with [`release`].
pub unsafe fn reserve(lib: &AclLib, size: usize, flags: u64) -> Result<*mut c_void> {
    let mut va = std::ptr::null_mut();
    // SAFETY: `va` is a writable pointer slot; the other arguments are plain values.
    unsafe {
        call!(
            lib,
            aclrtReserveMemAddress(&mut va, size, 0, std::ptr::null_mut(), flags)
        )
    }?;
    Ok(va)
}

/// `aclrtReserveMemAddress` with every argument explicit (only for tests of rules R2, R3:
/// `alignment` is reserved and must be 0; a non-NULL `expectPtr` must lie in the
/// product's fixed-address window and be aligned).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// As [`reserve`]; a fixed `expect` address must not be in use by this process.
pub unsafe fn reserve_raw(
    lib: &AclLib,
    size: usize,
    alignment: usize,
    expect: *mut c_void,
    flags: u64,
) -> Result<*mut c_void> {
    let mut va = std::ptr::null_mut();
    // SAFETY: `va` is a writable pointer slot; the rest is forwarded to the caller.
    unsafe {
        call!(
            lib,
            aclrtReserveMemAddress(&mut va, size, alignment, expect, flags)
        )
    }?;
    Ok(va)
}

/// `aclrtReserveMemAddressNoUCMemory(&va, size, 0, expect, flags)`: a reservation at a
/// fixed address for memory mapped without the unified-cache path (rule R4). Only A3
/// products have it (others return `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` 207000); a NULL
/// `expectPtr` is "not supported" (207000 too, on which HIXL falls back to [`reserve`]);
/// `expectPtr` is 1 GiB aligned, and `size` a non-zero multiple of 1 GiB. `alignment` is reserved and passed as 0. Released with [`release`].
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table and an `expect` range this process does not use; the
/// returned range must be released with [`release`].
#[doc(alias = "aclrtReserveMemAddressNoUCMemory")]
pub unsafe fn reserve_no_uc(
    lib: &AclLib,
    size: usize,
    expect: *mut c_void,
    flags: u64,
) -> Result<*mut c_void> {
    let mut va = std::ptr::null_mut();
    // SAFETY: `va` is a writable pointer slot; the rest is forwarded to the caller.
    unsafe {
        call!(
            lib,
            aclrtReserveMemAddressNoUCMemory(&mut va, size, 0, expect, flags)
        )
    }?;
    Ok(va)
}

/// `aclrtReleaseMemAddress`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `va` came from [`reserve`], is not released yet, and nothing is mapped in it (R20).
pub unsafe fn release(lib: &AclLib, va: *mut c_void) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtReleaseMemAddress(va)) }
}
