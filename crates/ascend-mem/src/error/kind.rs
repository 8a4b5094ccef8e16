//! [`ErrorKind`]: the small classification every status code and error maps to. Its own file
//! so the status newtypes (`AclCode` in `acl_code.rs`, `HcclCode` in `hccl_code.rs`) and the
//! error type can all use it without depending on each other in a circle.

/// A small, stable classification of [`Error`](crate::Error) to match on while variants grow.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Device or host memory, streams or events ran out (`ACL_ERROR_BAD_ALLOC` 200000,
    /// `ACL_ERROR_RT_MEMORY_ALLOCATION` 207001, `ACL_ERROR_RT_DEVICE_OOM`, …).
    OutOfMemory,
    /// An argument was rejected, by our checks or by ACL.
    InvalidArgument,
    /// The runtime, product or loaded library cannot do this (includes missing symbols).
    NotSupported,
    /// A wait ran out of time.
    Timeout,
    /// The caller may not do this (e.g. an import by a pid not on the allow-list).
    PermissionDenied,
    /// The runtime library could not be loaded.
    Unavailable,
    /// Anything else.
    Other,
}
