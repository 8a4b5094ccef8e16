//! Looking addresses up. The calls only read what the runtime knows about an address (any
//! value is fine: unknown addresses are reported as errors), so these functions are safe.

use std::ffi::c_void;

use acl::AclLib;

use crate::error::Result;

/// `aclrtMemGetAddressRange`: the block containing `addr`, as `(base, size)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn address_range(lib: &AclLib, addr: usize) -> Result<(usize, usize)> {
    let mut base: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: the call only looks the address up; both out-pointers are writable locals.
    unsafe {
        call!(
            lib,
            aclrtMemGetAddressRange(addr as *mut c_void, &mut base, &mut size)
        )
    }?;
    Ok((base as usize, size))
}

/// `aclrtPointerGetAttributes`: where `addr` lives.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn attributes(lib: &AclLib, addr: usize) -> Result<acl::aclrtPtrAttributes> {
    let mut a = acl::aclrtPtrAttributes::default();
    // SAFETY: the call only looks the address up; `a` is a writable local.
    unsafe {
        call!(
            lib,
            aclrtPointerGetAttributes(addr as *const c_void, &mut a)
        )
    }?;
    Ok(a)
}
