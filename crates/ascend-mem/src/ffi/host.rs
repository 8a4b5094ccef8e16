//! Pinned host memory: `aclrtMallocHost` and `aclrtFreeHost`.

use std::ffi::c_void;

use acl::AclLib;

use crate::error::Result;

/// `aclrtMallocHost(&p, size)`: `size` bytes of page-locked host memory that devices can reach
/// (on the device bound to the calling thread's context). The caller owns the block and frees
/// it with [`free`].
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status (size 0 included);
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
pub fn malloc(lib: &AclLib, size: usize) -> Result<*mut c_void> {
    let mut p = std::ptr::null_mut();
    // SAFETY: `p` is a writable slot; `size` is a plain value.
    unsafe { call!(lib, aclrtMallocHost(&mut p, size)) }?;
    Ok(p)
}

/// `aclrtFreeHost(p)`.
///
/// # Errors
/// [`Error::Acl`](crate::Error::Acl) with the returned status;
/// [`Error::MissingSymbol`](crate::Error::MissingSymbol).
///
/// # Safety
/// `p` is the start of a live `aclrtMallocHost` block of this library, which no Rust
/// reference covers and no queued work still uses; it is not used after a successful call.
pub unsafe fn free(lib: &AclLib, p: *mut c_void) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { call!(lib, aclrtFreeHost(p)) }
}
