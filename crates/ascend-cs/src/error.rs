//! The errors of the HixlCS wrapper, each with the HIXL status the C API gives (or would give)
//! for the same input.

use hixl_sys as hixl;

use crate::code::{CName, HixlCode};

/// Errors of the HixlCS wrapper.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `HixlCS*` call returned a failure status.
    #[error("{api} failed with {}{}{msg}", CName(*code), if msg.is_empty() { "" } else { ": " })]
    Hixl {
        /// The C function.
        api: &'static str,
        /// Its status.
        code: HixlCode,
        /// The library's message, when it has one (the in-process emulator's), else empty.
        msg: Box<str>,
    },
    /// The HIXL library could not be opened.
    #[error("cannot load the HIXL library")]
    Load(#[source] Box<hixl::LoadError>),
    /// The library lacks a symbol (CANN too old).
    #[error(transparent)]
    MissingSymbol(#[from] hixl::MissingSymbol),
    /// An ACL-side failure (binding the device, ...).
    #[error(transparent)]
    Mem(#[from] ascend_mem::Error),
    /// An argument the host can reject (a string with a NUL, a timeout over `u32::MAX` ms, ...).
    #[error("{api}: {what} {value} is invalid")]
    InvalidArgument {
        /// The C function it was for.
        api: &'static str,
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: Box<str>,
    },
    /// A batch with no descriptor.
    #[error("{api}: the batch is empty")]
    EmptyBatch {
        /// The C function it was for.
        api: &'static str,
    },
    /// More descriptors than a `uint32_t` count holds.
    #[error("{api}: {count} descriptors, more than {max}")]
    TooManyOps {
        /// The C function it was for.
        api: &'static str,
        /// Descriptors given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A descriptor of length 0.
    #[error("descriptor {index} has length 0")]
    ZeroLength {
        /// Its index in the batch.
        index: usize,
    },
    /// A descriptor's local range runs past its registration.
    #[error(
        "descriptor {index}: local [{offset}, +{len}) runs past the registration of {size} bytes"
    )]
    LocalOutOfBounds {
        /// Its index in the batch.
        index: usize,
        /// Offset in the registration.
        offset: usize,
        /// Length.
        len: usize,
        /// The registration's size.
        size: usize,
    },
    /// A descriptor's remote range runs past its block of the server's list.
    #[error("descriptor {index}: remote [{offset}, +{len}) runs past the remote block \"{tag}\" of {size} bytes")]
    RemoteOutOfBounds {
        /// Its index in the batch.
        index: usize,
        /// The block's tag.
        tag: Box<str>,
        /// Offset in the block.
        offset: usize,
        /// Length.
        len: usize,
        /// The block's size.
        size: usize,
    },
    /// A descriptor names memory registered with another client.
    #[error("descriptor {index}: the local registration belongs to another client")]
    ForeignRegistration {
        /// Its index in the batch.
        index: usize,
    },
    /// No block of the server's list has this tag.
    #[error("the server has no memory tagged \"{tag}\" (tags: {known:?})")]
    UnknownTag {
        /// The tag asked for.
        tag: Box<str>,
        /// The tags the list has.
        known: Vec<String>,
    },
    /// An async batch finished with HIXL_COMPLETE_STATUS_FAILED.
    #[error("the {op} batch failed{}{msg}", if msg.is_empty() { "" } else { ": " })]
    BatchFailed {
        /// `put` or `get`.
        op: &'static str,
        /// The library's message, when it has one.
        msg: Box<str>,
    },
    /// An async batch did not finish in time: the library reported
    /// HIXL_COMPLETE_STATUS_TIMEOUT (`reported`: it will not run), or [`Completion::wait`](crate::completion::Completion::wait)
    /// gave up while it was still waiting (it may still run).
    #[error("the {op} batch timed out ({})", if *reported { "reported by the library" } else { "still in flight" })]
    Timeout {
        /// `put` or `get`.
        op: &'static str,
        /// Whether the library reported the timeout (the batch is gone).
        reported: bool,
    },
    /// A client cannot close while async batches are in flight.
    #[error("{in_flight} async batch(es) in flight; wait for them before closing the client")]
    Busy {
        /// Batches this wrapper still tracks.
        in_flight: usize,
        /// The library's refusal.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// The HIXL status this error corresponds to (what the C API returns, or would return,
    /// for the same input).
    pub fn code(&self) -> HixlCode {
        match self {
            Error::Hixl { code, .. } => *code,
            Error::Load(_) | Error::MissingSymbol(_) | Error::Mem(_) => HixlCode::FAILED,
            Error::InvalidArgument { .. }
            | Error::EmptyBatch { .. }
            | Error::TooManyOps { .. }
            | Error::ZeroLength { .. }
            | Error::LocalOutOfBounds { .. }
            | Error::RemoteOutOfBounds { .. }
            | Error::ForeignRegistration { .. }
            | Error::UnknownTag { .. } => HixlCode::PARAM_INVALID,
            Error::BatchFailed { .. } => HixlCode::FAILED,
            Error::Timeout { .. } => HixlCode::TIMEOUT,
            Error::Busy { source, .. } => source.code(),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
