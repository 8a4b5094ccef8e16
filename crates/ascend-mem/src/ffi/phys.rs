//! Physical allocations.

use acl::AclLib;

use crate::error::Result;

/// `aclrtMallocPhysical(&h, size, prop, 0)`: `flags` must be 0 (rule R5).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table; the handle must be freed with [`free`].
pub unsafe fn malloc(
    lib: &AclLib,
    size: usize,
    prop: &acl::aclrtPhysicalMemProp,
) -> Result<acl::aclrtDrvMemHandle> {
    // SAFETY: as `malloc_flags` with flags 0.
    unsafe { malloc_flags(lib, size, prop, 0) }
}

/// `aclrtMallocPhysical` with explicit flags (only for tests of rule R5).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// As [`malloc`].
pub unsafe fn malloc_flags(
    lib: &AclLib,
    size: usize,
    prop: &acl::aclrtPhysicalMemProp,
    flags: u64,
) -> Result<acl::aclrtDrvMemHandle> {
    let mut h = std::ptr::null_mut();
    // SAFETY: `h` is a writable slot; `prop` is a valid struct for the call's duration.
    unsafe { call!(lib, aclrtMallocPhysical(&mut h, size, prop, flags)) }?;
    Ok(h)
}

/// `aclrtFreePhysical`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `h` is a live handle from [`malloc`] or an import, no longer mapped anywhere, and is
/// not used again.
pub unsafe fn free(lib: &AclLib, h: acl::aclrtDrvMemHandle) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtFreePhysical(h)) }
}

/// `aclrtMemGetAllocationGranularity`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table.
pub unsafe fn granularity(
    lib: &AclLib,
    prop: &acl::aclrtPhysicalMemProp,
    option: acl::aclrtMemGranularityOptions,
) -> Result<usize> {
    let mut g = 0usize;
    let mut p = *prop;
    // SAFETY: `p` and `g` are valid for the call; the C side only reads `p`.
    unsafe {
        call!(
            lib,
            aclrtMemGetAllocationGranularity(&mut p, option, &mut g)
        )
    }?;
    Ok(g)
}

/// `aclrtMemGetAllocationPropertiesFromHandle`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `h` is a live handle.
pub unsafe fn properties(
    lib: &AclLib,
    h: acl::aclrtDrvMemHandle,
) -> Result<acl::aclrtPhysicalMemProp> {
    let mut p = acl::aclrtPhysicalMemProp::default();
    // SAFETY: `p` is writable; handle validity forwarded to the caller.
    unsafe { call!(lib, aclrtMemGetAllocationPropertiesFromHandle(h, &mut p)) }?;
    Ok(p)
}
