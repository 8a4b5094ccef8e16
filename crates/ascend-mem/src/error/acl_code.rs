//! [`AclCode`]: the `aclError` status newtype.

use std::fmt;

use super::kind::ErrorKind;

/// An ACL status code (`aclError`, a C `int`).
///
/// A newtype, not an enum: a newer runtime can return values this crate has never seen, and
/// they must survive unchanged. The constants name the codes this crate meets; [`Display`]
/// prints the C name next to the number when the code is known.
///
/// [`Display`]: fmt::Display
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclCode(pub i32);

macro_rules! acl_codes {
    ($($name:ident = $c:ident;)*) => {
        impl AclCode {
            $(
                #[doc = concat!("`", stringify!($c), "`")]
                pub const $name: AclCode = AclCode(acl::$c);
            )*

            /// The C name of a known code.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( acl::$c => Some(stringify!($c)), )*
                    _ => None,
                }
            }
        }
    };
}

acl_codes! {
    SUCCESS = ACL_SUCCESS;
    INVALID_PARAM = ACL_ERROR_INVALID_PARAM;
    UNINITIALIZE = ACL_ERROR_UNINITIALIZE;
    REPEAT_INITIALIZE = ACL_ERROR_REPEAT_INITIALIZE;
    REPEAT_FINALIZE = ACL_ERROR_REPEAT_FINALIZE;
    BAD_ALLOC = ACL_ERROR_BAD_ALLOC;
    API_NOT_SUPPORT = ACL_ERROR_API_NOT_SUPPORT;
    INVALID_DEVICE = ACL_ERROR_INVALID_DEVICE;
    MEMORY_ADDRESS_UNALIGNED = ACL_ERROR_MEMORY_ADDRESS_UNALIGNED;
    RESOURCE_NOT_MATCH = ACL_ERROR_RESOURCE_NOT_MATCH;
    INVALID_RESOURCE_HANDLE = ACL_ERROR_INVALID_RESOURCE_HANDLE;
    FEATURE_UNSUPPORTED = ACL_ERROR_FEATURE_UNSUPPORTED;
    STORAGE_OVER_LIMIT = ACL_ERROR_STORAGE_OVER_LIMIT;
    INTERNAL_ERROR = ACL_ERROR_INTERNAL_ERROR;
    FAILURE = ACL_ERROR_FAILURE;
    GE_FAILURE = ACL_ERROR_GE_FAILURE;
    RT_FAILURE = ACL_ERROR_RT_FAILURE;
    DRV_FAILURE = ACL_ERROR_DRV_FAILURE;
    PROFILING_FAILURE = ACL_ERROR_PROFILING_FAILURE;
    RT_PARAM_INVALID = ACL_ERROR_RT_PARAM_INVALID;
    RT_INVALID_DEVICEID = ACL_ERROR_RT_INVALID_DEVICEID;
    RT_CONTEXT_NULL = ACL_ERROR_RT_CONTEXT_NULL;
    RT_STREAM_CONTEXT = ACL_ERROR_RT_STREAM_CONTEXT;
    RT_ADDR_UNALIGNED = ACL_ERROR_RT_ADDR_UNALIGNED;
    RT_INVALID_MEMORY_TYPE = ACL_ERROR_RT_INVALID_MEMORY_TYPE;
    RT_INVALID_HANDLE = ACL_ERROR_RT_INVALID_HANDLE;
    RT_WAIT_TIMEOUT = ACL_ERROR_RT_WAIT_TIMEOUT;
    RT_TASK_TIMEOUT = ACL_ERROR_RT_TASK_TIMEOUT;
    RT_STREAM_ABORT = ACL_ERROR_RT_STREAM_ABORT;
    RT_FEATURE_NOT_SUPPORT = ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    RT_MEMORY_ALLOCATION = ACL_ERROR_RT_MEMORY_ALLOCATION;
    RT_MEMORY_FREE = ACL_ERROR_RT_MEMORY_FREE;
    RT_NO_DEVICE = ACL_ERROR_RT_NO_DEVICE;
    RT_RESOURCE_ALLOC_FAIL = ACL_ERROR_RT_RESOURCE_ALLOC_FAIL;
    RT_NO_PERMISSION = ACL_ERROR_RT_NO_PERMISSION;
    RT_NO_EVENT_RESOURCE = ACL_ERROR_RT_NO_EVENT_RESOURCE;
    RT_NO_STREAM_RESOURCE = ACL_ERROR_RT_NO_STREAM_RESOURCE;
    RT_OVER_LIMIT = ACL_ERROR_RT_OVER_LIMIT;
    RT_DEVICE_OOM = ACL_ERROR_RT_DEVICE_OOM;
    RT_TIMEOUT = ACL_ERROR_RT_TIMEOUT;
    RT_INTERNAL_ERROR = ACL_ERROR_RT_INTERNAL_ERROR;
    RT_STREAM_NOT_COMPLETE = ACL_ERROR_RT_STREAM_NOT_COMPLETE;
    RT_EVENT_NOT_COMPLETE = ACL_ERROR_RT_EVENT_NOT_COMPLETE;
    RT_IPC_ERROR = ACL_ERROR_RT_IPC_ERROR;
    RT_DEV_SETUP_ERROR = ACL_ERROR_RT_DEV_SETUP_ERROR;
    RT_STREAM_SYNC_TIMEOUT = ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
    RT_EVENT_SYNC_TIMEOUT = ACL_ERROR_RT_EVENT_SYNC_TIMEOUT;
    RT_DEVICE_MEM_ERROR = ACL_ERROR_RT_DEVICE_MEM_ERROR;
    RT_LINK_ERROR = ACL_ERROR_RT_LINK_ERROR;
    RT_DRV_INTERNAL_ERROR = ACL_ERROR_RT_DRV_INTERNAL_ERROR;
    RT_SOCKET_CLOSE = ACL_ERROR_RT_SOCKET_CLOSE;
}

impl AclCode {
    /// The coarse class of this code.
    pub fn kind(self) -> ErrorKind {
        match self {
            Self::BAD_ALLOC
            | Self::RT_MEMORY_ALLOCATION
            | Self::RT_DEVICE_OOM
            | Self::STORAGE_OVER_LIMIT
            | Self::RT_RESOURCE_ALLOC_FAIL
            | Self::RT_NO_EVENT_RESOURCE
            | Self::RT_NO_STREAM_RESOURCE
            | Self::RT_OVER_LIMIT => ErrorKind::OutOfMemory,
            Self::INVALID_PARAM
            | Self::RT_PARAM_INVALID
            | Self::INVALID_DEVICE
            | Self::RT_INVALID_DEVICEID
            | Self::MEMORY_ADDRESS_UNALIGNED
            | Self::RT_ADDR_UNALIGNED
            | Self::RESOURCE_NOT_MATCH
            | Self::INVALID_RESOURCE_HANDLE
            | Self::RT_INVALID_HANDLE
            | Self::RT_INVALID_MEMORY_TYPE
            | Self::RT_CONTEXT_NULL
            | Self::RT_STREAM_CONTEXT
            | Self::UNINITIALIZE => ErrorKind::InvalidArgument,
            Self::API_NOT_SUPPORT | Self::FEATURE_UNSUPPORTED | Self::RT_FEATURE_NOT_SUPPORT => {
                ErrorKind::NotSupported
            }
            Self::RT_WAIT_TIMEOUT
            | Self::RT_TASK_TIMEOUT
            | Self::RT_TIMEOUT
            | Self::RT_STREAM_SYNC_TIMEOUT
            | Self::RT_EVENT_SYNC_TIMEOUT => ErrorKind::Timeout,
            Self::RT_NO_PERMISSION => ErrorKind::PermissionDenied,
            _ => ErrorKind::Other,
        }
    }
}

impl fmt::Display for AclCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "ACL error {}", self.0),
        }
    }
}
