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
