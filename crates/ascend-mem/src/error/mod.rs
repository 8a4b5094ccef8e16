//! The crate's error type and what it is made of: the status newtypes of the C libraries
//! ([`AclCode`] for ACL, [`HcclCode`] for HCCL), the small [`ErrorKind`] every error and
//! status maps to, and [`CloseError`] (a teardown that hands the value back).
//!
//! The lowest layer of the crate: it names only the leaf `addr`, so every other module can use
//! it.

use crate::addr::Addr;
use std::fmt;

mod acl_code;
mod hccl_code;
mod kind;

pub use acl_code::AclCode;
pub use hccl_code::HcclCode;
pub use kind::ErrorKind;

/// Everything that can fail in this crate.
///
/// Every variant names the call or the check and carries the values involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An ACL call returned a non-zero status.
    #[error("{api} failed with {code}: {msg}")]
    Acl {
        /// The C function, e.g. `"aclrtMapMem"`.
        api: &'static str,
        /// The returned status.
        code: AclCode,
        /// `aclGetRecentErrMsg()` read right after the failure on the same thread (may be empty).
        msg: Box<str>,
    },
    /// An HCCL call returned a non-zero `HcclResult` (see [`crate::hccl`]).
    #[error("{api} failed with {code}: {msg}")]
    Hccl {
        /// The C function, e.g. `"HcclCommSymWinRegister"`.
        api: &'static str,
        /// The returned status.
        code: HcclCode,
        /// The library's text for the failure, read right after it on the same thread (the
        /// emulator's message, else `aclGetRecentErrMsg()`, else `HcclGetErrorString`).
        msg: Box<str>,
    },
    /// The loaded library does not export a function (an older CANN).
    #[error("{lib} lacks {symbol}; CANN too old for this call?")]
    MissingSymbol {
        /// Human name of the library.
        lib: &'static str,
        /// The C symbol.
        symbol: &'static str,
    },
    /// The runtime library could not be opened; the message lists every path tried and the fix.
    #[error("{0}")]
    Load(Box<acl::LoadError>),
    /// A size or offset is not a whole number of allocation granules.
    #[error("{what} = {value:#x} is not a multiple of the allocation granularity {granule:#x}")]
    Misaligned {
        /// Which argument.
        what: &'static str,
        /// The value given.
        value: usize,
        /// The granule it must be a multiple of.
        granule: usize,
    },
    /// A range does not fit inside the object it addresses.
    #[error("{what}: range [{offset:#x}, +{len:#x}) does not fit in {size:#x} bytes")]
    OutOfBounds {
        /// Which object or argument.
        what: &'static str,
        /// Start of the range.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// Size of the object.
        size: usize,
    },
    /// A byte length is not a whole number of elements of a typed view's or typed copy's
    /// element type (see [`TypedSlice`](crate::TypedSlice)).
    #[error(
        "{what}: {len:#x} bytes is not a whole number of {elem} elements ({elem_size} bytes each)"
    )]
    NotWholeElements {
        /// The call that checked it, e.g. `"MappingSlice::typed"`.
        what: &'static str,
        /// The length in bytes.
        len: usize,
        /// `size_of` the element type.
        elem_size: usize,
        /// The element type's name (`std::any::type_name`).
        elem: &'static str,
    },
    /// The start address of a typed view is not aligned for its element type (see
    /// [`TypedSlice`](crate::TypedSlice)).
    #[error("{what}: address {addr:#x} is not aligned to {align} bytes, as {elem} needs")]
    MisalignedElements {
        /// The call that checked it, e.g. `"MappingSlice::typed"`.
        what: &'static str,
        /// The start address.
        addr: Addr,
        /// `align_of` the element type.
        align: usize,
        /// The element type's name (`std::any::type_name`).
        elem: &'static str,
    },
    /// A copy of a [`Stream::copy_table_async`](crate::Stream::copy_table_async) batch names
    /// an entry its table lacks.
    #[error("aclrtMemcpyAsync (table batch): copy {copy}: {side} entry {entry} does not exist (the table has {entries})")]
    NoTableEntry {
        /// Index of the copy in the batch.
        copy: usize,
        /// Which table.
        side: CopySide,
        /// The entry named.
        entry: usize,
        /// Entries in the table.
        entries: usize,
    },
    /// A copy of a [`Stream::copy_table_async`](crate::Stream::copy_table_async) batch runs
    /// past the end of its entry.
    #[error("aclrtMemcpyAsync (table batch): copy {copy}: {side} entry {entry}: range [{offset:#x}, +{len:#x}) does not fit in its {size:#x} bytes")]
    TableRange {
        /// Index of the copy in the batch.
        copy: usize,
        /// Which table.
        side: CopySide,
        /// The entry named.
        entry: usize,
        /// Offset in the entry.
        offset: usize,
        /// Length of the copy.
        len: usize,
        /// The entry's length.
        size: usize,
    },
    /// A range to map overlaps one that is already mapped in the same reservation.
    #[error("map at [{offset:#x}, +{len:#x}) overlaps the mapping at [{existing_offset:#x}, +{existing_len:#x})")]
    Overlap {
        /// Requested offset in the reservation.
        offset: usize,
        /// Requested length.
        len: usize,
        /// Offset of the mapping already there.
        existing_offset: usize,
        /// Its length.
        existing_len: usize,
    },
    /// Two objects that must live on the same device do not.
    #[error("{what}: expected device {expected}, found device {found}")]
    WrongDevice {
        /// Which operation.
        what: &'static str,
        /// The device required.
        expected: i32,
        /// The device given.
        found: i32,
    },
    /// Memory imported from share-handle bytes does not have the size those bytes claim: the
    /// bytes were forged or corrupted in transit. The length in [`SharedHandle`] bytes comes
    /// from the sender; [`SharedHandle::import`] checks it against the allocation's
    /// granularity (read back from the imported handle), and [`ReservedVa::map`] reports the
    /// runtime's refusal to map that size (`aclrtMapMem` checks the map size against the real
    /// allocation) as this error, with the runtime's error as its source.
    ///
    /// [`SharedHandle`]: crate::SharedHandle
    /// [`SharedHandle::import`]: crate::SharedHandle::import
    /// [`ReservedVa::map`]: crate::ReservedVa::map
    #[error("imported memory: the share handle bytes claim {claimed:#x} bytes, but {reason} (allocation granule {granule:#x})")]
    ImportSizeMismatch {
        /// The size the share-handle bytes claim.
        claimed: usize,
        /// The allocation granule read back from the imported handle (0 when unknown).
        granule: usize,
        /// What gave the mismatch away.
        reason: &'static str,
        /// The runtime's error, when the runtime detected it.
        #[source]
        source: Option<Box<Error>>,
    },
    /// `ASCEND_MEM_BACKEND` holds a value that names no backend.
    #[error("ASCEND_MEM_BACKEND={value:?} is not a backend; accepted values: {accepted}")]
    UnknownBackend {
        /// The value found in the environment.
        value: Box<str>,
        /// The values this build accepts.
        accepted: &'static str,
    },
    /// An argument our own checks reject before any C call.
    #[error("{api}: invalid {what} = {value}")]
    InvalidArgument {
        /// The operation (usually the C function it guards).
        api: &'static str,
        /// Which argument.
        what: &'static str,
        /// The value given.
        value: i128,
    },
    /// A physical allocation was already exported (rule R15: one export per handle per process).
    #[error("aclrtMemExportToShareableHandleV2: this allocation is already exported; reuse its FabricHandle")]
    AlreadyExported,
    /// Share-handle bytes received from another process are malformed.
    #[error("share handle bytes: {reason} (got {len} bytes)")]
    BadHandleBytes {
        /// What is wrong.
        reason: &'static str,
        /// How many bytes were given.
        len: usize,
    },
    /// `close` on an object that is still shared (mapped, exported or cloned).
    #[error("{what} is still in use by {refs} other owner(s) (mapping, export or clone)")]
    Busy {
        /// Which object.
        what: &'static str,
        /// How many other owners hold it.
        refs: usize,
    },
    /// One copy of a batched copy ([`Stream::copy_batch_async`](crate::Stream::copy_batch_async),
    /// [`Stream::copy_table_async`](crate::Stream::copy_table_async)) failed: a check before
    /// any C call, or the runtime's refusal naming it (the batch call's `failIndex`, or the
    /// copy's own `aclrtMemcpyAsync` failing), as the index in the caller's slice.
    #[error("{api}: copy {copy}: {source}")]
    BatchCopy {
        /// The call, e.g. `"aclrtMemcpyBatchAsync"`.
        api: &'static str,
        /// Index of the copy in the caller's slice.
        copy: usize,
        /// What was wrong with it.
        #[source]
        source: Box<Error>,
    },
    /// A stream-ordered value word ([`ValueWord`](crate::ValueWord)) is not 8 bytes at an
    /// 8-byte aligned address.
    #[error("{what}: a value word is 8 bytes at an 8-byte aligned address; got {len} bytes at {addr:#x}")]
    BadValueWord {
        /// The call that checked it, e.g. `"ValueWord::new"`.
        what: &'static str,
        /// The start address given.
        addr: Addr,
        /// The length given.
        len: usize,
    },
    /// An error a `Drop` on this device recorded earlier (drops cannot return errors).
    #[error("an earlier teardown on device {device} failed")]
    Sticky {
        /// The device whose teardown failed.
        device: i32,
        /// The recorded error.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// The coarse class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Acl { code, .. } => code.kind(),
            Error::Hccl { code, .. } => code.kind(),
            Error::MissingSymbol { .. } => ErrorKind::NotSupported,
            Error::Load(_) => ErrorKind::Unavailable,
            Error::Misaligned { .. }
            | Error::OutOfBounds { .. }
            | Error::NotWholeElements { .. }
            | Error::MisalignedElements { .. }
            | Error::NoTableEntry { .. }
            | Error::TableRange { .. }
            | Error::Overlap { .. }
            | Error::WrongDevice { .. }
            | Error::ImportSizeMismatch { .. }
            | Error::UnknownBackend { .. }
            | Error::InvalidArgument { .. }
            | Error::AlreadyExported
            | Error::BadHandleBytes { .. }
            | Error::Busy { .. }
            | Error::BadValueWord { .. } => ErrorKind::InvalidArgument,
            Error::Sticky { source, .. } | Error::BatchCopy { source, .. } => source.kind(),
        }
    }

    /// The ACL status, when the error came from an ACL call (also through [`Error::Sticky`]
    /// and a runtime-detected [`Error::ImportSizeMismatch`]).
    pub fn code(&self) -> Option<AclCode> {
        match self {
            Error::Acl { code, .. } => Some(*code),
            Error::Sticky { source, .. } | Error::BatchCopy { source, .. } => source.code(),
            Error::ImportSizeMismatch {
                source: Some(source),
                ..
            } => source.code(),
            _ => None,
        }
    }

    /// The HCCL status, when the error came from an HCCL call (also through [`Error::Sticky`]).
    pub fn hccl_code(&self) -> Option<HcclCode> {
        match self {
            Error::Hccl { code, .. } => Some(*code),
            Error::Sticky { source, .. } => source.hccl_code(),
            _ => None,
        }
    }

    /// The C function that failed, when the error came from an ACL call or a missing symbol.
    pub fn api(&self) -> Option<&'static str> {
        match self {
            Error::Acl { api, .. } | Error::Hccl { api, .. } => Some(api),
            Error::MissingSymbol { symbol, .. } => Some(symbol),
            Error::InvalidArgument { api, .. } | Error::BatchCopy { api, .. } => Some(api),
            Error::Sticky { source, .. } => source.api(),
            Error::ImportSizeMismatch {
                source: Some(source),
                ..
            } => source.api(),
            _ => None,
        }
    }
}

impl From<acl::MissingSymbol> for Error {
    fn from(m: acl::MissingSymbol) -> Self {
        Error::MissingSymbol {
            lib: m.library,
            symbol: m.symbol,
        }
    }
}

/// Which table of a [`Stream::copy_table_async`] batch a copy error is about.
///
/// [`Stream::copy_table_async`]: crate::Stream::copy_table_async
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CopySide {
    /// The destination table.
    Dst,
    /// The source table.
    Src,
}

impl fmt::Display for CopySide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CopySide::Dst => "dst",
            CopySide::Src => "src",
        })
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A teardown call (`close`, `unmap`, `deregister`) that failed: the error, and the value
/// handed back so the caller can retry or look at it.
///
/// It displays as its error and reports the error's source, so a chain prints each part
/// once. `?` converts it into the error: the value is then dropped, and its own `Drop` makes
/// the teardown's last attempt (keeping the error for the device's next call if that fails
/// too).
///
/// ```
/// # fn f(va: ascend_mem::ReservedVa) -> ascend_mem::Result<()> {
/// va.close()?;
/// # Ok(())
/// # }
/// ```
pub struct CloseError<T, E = Error> {
    error: E,
    value: T,
}

impl<T, E> CloseError<T, E> {
    /// The error and the value.
    pub fn new(error: E, value: T) -> Self {
        CloseError { error, value }
    }

    /// Why the teardown failed.
    pub fn error(&self) -> &E {
        &self.error
    }

    /// The value, to retry or to drop.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The error, letting the value go.
    pub fn into_error(self) -> E {
        self.error
    }

    /// Both.
    pub fn into_parts(self) -> (E, T) {
        (self.error, self.value)
    }
}

impl<T, E: fmt::Debug> fmt::Debug for CloseError<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloseError")
            .field("error", &self.error)
            .field("value", &std::any::type_name::<T>())
            .finish()
    }
}

impl<T, E: fmt::Display> fmt::Display for CloseError<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<T, E: std::error::Error> std::error::Error for CloseError<T, E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl<T> From<CloseError<T>> for Error {
    fn from(e: CloseError<T>) -> Error {
        e.error
    }
}

/// The body of every `close(self)`: when `inner` has no other owner, tears it down with
/// `teardown`, giving `inner` back with the error if that fails; otherwise gives it back with
/// [`Error::Busy`] naming `what` and the number of other owners.
pub(crate) fn close_last<T>(
    inner: std::sync::Arc<T>,
    what: &'static str,
    teardown: impl FnOnce(&mut T) -> Result<()>,
) -> std::result::Result<(), (Error, std::sync::Arc<T>)> {
    match std::sync::Arc::try_unwrap(inner) {
        Ok(mut inner) => teardown(&mut inner).map_err(|e| (e, std::sync::Arc::new(inner))),
        Err(inner) => Err((
            Error::Busy {
                what,
                refs: std::sync::Arc::strong_count(&inner) - 1,
            },
            inner,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_call_and_value() {
        let e = Error::Acl {
            api: "aclrtMapMem",
            code: AclCode(107000),
            msg: "size 4096 differs".into(),
        };
        assert_eq!(
            e.to_string(),
            "aclrtMapMem failed with ACL_ERROR_RT_PARAM_INVALID (107000): size 4096 differs"
        );
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(e.api(), Some("aclrtMapMem"));
        let s = Error::Sticky {
            device: 1,
            source: Box::new(e),
        };
        assert_eq!(s.code(), Some(AclCode::RT_PARAM_INVALID));
        assert_eq!(s.kind(), ErrorKind::InvalidArgument);
        assert!(std::error::Error::source(&s).is_some());
        let o = Error::OutOfBounds {
            what: "read_into",
            offset: 8,
            len: 16,
            size: 16,
        };
        assert_eq!(
            o.to_string(),
            "read_into: range [0x8, +0x10) does not fit in 0x10 bytes"
        );
        assert_eq!(AclCode(7).to_string(), "ACL error 7");
        assert_eq!(AclCode::BAD_ALLOC.kind(), ErrorKind::OutOfMemory);
    }
}
