//! Share handles (V2 calls).

use acl::AclLib;

use crate::error::Result;

/// The out-buffer of an export: a `uint64_t` for DEFAULT, 128 bytes for FABRIC (rule R14).
pub type HandleData = acl::aclrtMemFabricHandle;

/// `aclrtMemExportToShareableHandleV2(h, flags, shareType, &out)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `h` is a live handle.
pub unsafe fn export_v2(
    lib: &AclLib,
    h: acl::aclrtDrvMemHandle,
    flags: u64,
    share_type: acl::aclrtMemSharedHandleType,
) -> Result<HandleData> {
    // 128 bytes covers both out types (R14), zeroed so a DEFAULT export leaves the tail 0.
    let mut out = HandleData::default();
    // SAFETY: `out` is 128 writable bytes, enough for either share type.
    unsafe {
        call!(
            lib,
            aclrtMemExportToShareableHandleV2(
                h,
                flags,
                share_type,
                (&mut out as *mut HandleData).cast()
            )
        )
    }?;
    Ok(out)
}

/// `aclrtMemImportFromShareableHandleV2(&data, shareType, 0, &h)`: `flags` must be 0 (R16).
/// Imports onto the device current on the calling thread (R17).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table: the bytes are validated by the runtime. The handle must be
/// freed with [`phys::free`](super::phys::free).
pub unsafe fn import_v2(
    lib: &AclLib,
    data: &HandleData,
    share_type: acl::aclrtMemSharedHandleType,
) -> Result<acl::aclrtDrvMemHandle> {
    let mut d = *data;
    let mut h = std::ptr::null_mut();
    // SAFETY: `d` is 128 readable bytes (the C side only reads it); `h` is writable.
    unsafe {
        call!(
            lib,
            aclrtMemImportFromShareableHandleV2(
                (&mut d as *mut HandleData).cast(),
                share_type,
                0,
                &mut h
            )
        )
    }?;
    Ok(h)
}

/// `aclrtMemImportFromShareableHandleV2` with explicit flags (only for tests of rule R16:
/// `flags` must be 0).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// As [`import_v2`].
pub unsafe fn import_v2_flags(
    lib: &AclLib,
    data: &HandleData,
    share_type: acl::aclrtMemSharedHandleType,
    flags: u64,
) -> Result<acl::aclrtDrvMemHandle> {
    let mut d = *data;
    let mut h = std::ptr::null_mut();
    // SAFETY: `d` is 128 readable bytes (the C side only reads it); `h` is writable.
    unsafe {
        call!(
            lib,
            aclrtMemImportFromShareableHandleV2(
                (&mut d as *mut HandleData).cast(),
                share_type,
                flags,
                &mut h
            )
        )
    }?;
    Ok(h)
}

/// `aclrtMemSetPidToShareableHandleV2`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// None beyond a valid table; `pids` must not be empty (checked by the runtime).
pub unsafe fn set_pids_v2(
    lib: &AclLib,
    data: &HandleData,
    share_type: acl::aclrtMemSharedHandleType,
    pids: &[i32],
) -> Result<()> {
    let mut d = *data;
    let mut p = pids.to_vec();
    // SAFETY: `d` and `p` are valid for the call; the C side only reads them.
    unsafe {
        call!(
            lib,
            aclrtMemSetPidToShareableHandleV2(
                (&mut d as *mut HandleData).cast(),
                share_type,
                p.as_mut_ptr(),
                p.len()
            )
        )
    }
}
