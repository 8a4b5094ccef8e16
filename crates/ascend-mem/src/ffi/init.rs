//! Process setup.

use acl::AclLib;

use crate::error::{AclCode, Error, Result};

/// `aclInit(NULL)`. A repeated init (`ACL_ERROR_REPEAT_INITIALIZE`) counts as success.
///
/// # Errors
/// [`Error::Acl`] with the returned status;
/// [`Error::MissingSymbol`].
pub fn init(lib: &AclLib) -> Result<()> {
    // SAFETY: a NULL config path is documented as allowed.
    match unsafe { call!(lib, aclInit(std::ptr::null())) } {
        Err(Error::Acl { code, .. }) if code == AclCode::REPEAT_INITIALIZE => Ok(()),
        r => r,
    }
}

/// `aclsysGetVersionStr`: the version text of the installed CANN package `package` (`runtime`,
/// `toolkit`, `driver`, ...), as its `version.info` holds it.
///
/// # Errors
/// [`Error::InvalidArgument`] for a name with a NUL byte; [`Error::Acl`] with the returned
/// status (`ACL_ERROR_INVALID_FILE` for a package that is not installed);
/// [`Error::MissingSymbol`] on runtimes without the call.
pub fn package_version(lib: &AclLib, package: &str) -> Result<String> {
    let name = std::ffi::CString::new(package).map_err(|e| Error::InvalidArgument {
        api: "aclsysGetVersionStr",
        what: "pkgName (a NUL byte at this index)",
        value: e.nul_position() as i128,
    })?;
    let mut name = name.into_bytes_with_nul();
    // One byte more than the documented size, kept 0, so the text always ends.
    let mut out = [0u8; acl::ACL_PKG_VERSION_MAX_SIZE as usize + 1];
    // SAFETY: `name` is NUL-terminated; `out` holds ACL_PKG_VERSION_MAX_SIZE writable bytes (the
    // size the C contract asks for) plus a last 0 the callee never reaches.
    unsafe {
        call!(
            lib,
            aclsysGetVersionStr(name.as_mut_ptr().cast(), out.as_mut_ptr().cast())
        )
    }?;
    let end = out.iter().position(|&b| b == 0).unwrap_or(out.len() - 1);
    Ok(String::from_utf8_lossy(&out[..end]).into_owned())
}
