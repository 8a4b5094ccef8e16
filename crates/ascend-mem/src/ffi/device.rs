//! Devices.

use acl::AclLib;

use crate::error::Result;

/// `aclrtSetDevice`: binds `id` to the calling thread.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn set(lib: &AclLib, id: i32) -> Result<()> {
    // SAFETY: plain integer argument.
    unsafe { call!(lib, aclrtSetDevice(id)) }
}

/// `aclrtResetDevice`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// Every resource of this device made on this thread must be gone.
pub unsafe fn reset(lib: &AclLib, id: i32) -> Result<()> {
    // SAFETY: plain integer argument; resource lifetime forwarded to the caller.
    unsafe { call!(lib, aclrtResetDevice(id)) }
}

/// `aclrtGetDeviceCount`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn count(lib: &AclLib) -> Result<u32> {
    let mut n = 0u32;
    // SAFETY: `n` is a writable u32.
    unsafe { call!(lib, aclrtGetDeviceCount(&mut n)) }?;
    Ok(n)
}

/// `aclrtGetDevice`: the device bound to the calling thread.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn current(lib: &AclLib) -> Result<i32> {
    let mut id = -1i32;
    // SAFETY: `id` is a writable i32.
    unsafe { call!(lib, aclrtGetDevice(&mut id)) }?;
    Ok(id)
}

/// `aclrtDeviceGetBareTgid`: this process's pid as share allow-lists see it.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn bare_tgid(lib: &AclLib) -> Result<i32> {
    let mut pid = 0i32;
    // SAFETY: `pid` is a writable i32.
    unsafe { call!(lib, aclrtDeviceGetBareTgid(&mut pid)) }?;
    Ok(pid)
}

/// `aclrtGetLogicDevIdByUserDevId`: the driver-logical id (for access descriptors).
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn logic_id(lib: &AclLib, user_id: i32) -> Result<i32> {
    let mut id = 0i32;
    // SAFETY: `id` is a writable i32.
    unsafe { call!(lib, aclrtGetLogicDevIdByUserDevId(user_id, &mut id)) }?;
    Ok(id)
}

/// `aclrtGetSocName`: the SoC name, or `None` when the runtime returns NULL or an empty name.
///
/// # Errors
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn soc_name(lib: &AclLib) -> Result<Option<String>> {
    // SAFETY: takes no arguments; returns a static NUL-terminated string or NULL.
    let p = unsafe { lib.aclrtGetSocName() }?;
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null: a NUL-terminated string that lives as long as the library; copied out.
    let name = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy();
    Ok((!name.is_empty()).then(|| name.into_owned()))
}
