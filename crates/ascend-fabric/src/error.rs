//! The engine's error type and what each error means as a HIXL status.

use std::fmt;
use std::time::Duration;

use crate::control::ClientError;
use crate::options::OptionError;
use crate::ranges::RangeError;
use crate::wire::WireError;
use ascend_cs::HixlCode;
use ascend_mem::Addr;

/// Why a channel to a peer ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The keepalive socket reached EOF or failed: the peer process died or closed it
    /// (also when a heartbeat is what found the socket closed or reset).
    KeepaliveClosed,
    /// A heartbeat could not be sent within its timeout on a socket still open (the peer
    /// stopped reading).
    HeartbeatFailed,
    /// This engine disconnected ([`Engine::disconnect`](crate::Engine::disconnect)).
    Disconnected,
    /// This engine is shutting down.
    EngineShutdown,
    /// The peer left the engine directory (its entry was deleted or its lease expired); see
    /// [`directory::Member`](crate::directory::Member).
    DirectoryLeft,
    /// The peer's host left a heartbeat unacknowledged for
    /// [`EngineOptions::peer_timeout`](crate::EngineOptions::peer_timeout), or was reported
    /// unreachable: it is down or cut off (a dead process's kernel closes its sockets, which
    /// is `KeepaliveClosed`). A live peer that stopped reading its socket for that long, so
    /// that TCP's probes of its full window went unanswered, ends this way too.
    PeerUnresponsive,
}

impl LostReason {
    /// Its `reason` label in the engine's metrics (`keepalive_closed`, `heartbeat_failed`,
    /// `disconnected`, `engine_shutdown`, `directory_left`, `peer_unresponsive`).
    pub fn label(self) -> &'static str {
        match self {
            LostReason::KeepaliveClosed => "keepalive_closed",
            LostReason::HeartbeatFailed => "heartbeat_failed",
            LostReason::Disconnected => "disconnected",
            LostReason::EngineShutdown => "engine_shutdown",
            LostReason::DirectoryLeft => "directory_left",
            LostReason::PeerUnresponsive => "peer_unresponsive",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::KeepaliveClosed => "the keepalive socket closed (peer gone)",
            LostReason::HeartbeatFailed => "a heartbeat could not be sent",
            LostReason::Disconnected => "disconnected by this engine",
            LostReason::EngineShutdown => "the engine shut down",
            LostReason::DirectoryLeft => "the peer left the engine directory",
            LostReason::PeerUnresponsive => "the peer's host stopped acknowledging heartbeats",
        })
    }
}

/// Which side of a descriptor an address check is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// `local_addr`.
    Local,
    /// `remote_addr`.
    Remote,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Local => "local",
            Side::Remote => "remote",
        })
    }
}

/// An engine error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An ACL call or a host-side check of ascend-mem failed.
    #[error(transparent)]
    Mem(#[from] ascend_mem::Error),
    /// A bad option or engine address.
    #[error(transparent)]
    Option(#[from] OptionError),
    /// A control-plane exchange with a peer failed.
    #[error(transparent)]
    Control(#[from] ClientError),
    /// A frame could not be built or parsed.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A range could not be inserted or resolved.
    #[error(transparent)]
    Range(#[from] RangeError),
    /// The control server could not start.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The engine address.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An address that is not VMM memory of this runtime (plain heap memory, `aclrtMalloc`
    /// memory, or unmapped VA) was given for registration.
    #[error(
        "register: {addr:#x} (+{len:#x}) is not fabric-shareable VMM memory ({reason}); allocate \
         it with Engine::alloc_device / Engine::alloc_host or ascend-mem's DeviceBuffer / HostBuffer"
    )]
    NotShareable {
        /// The address.
        addr: Addr,
        /// The length.
        len: usize,
        /// What the runtime said.
        reason: String,
    },
    /// A registration overlaps another one with a different range.
    #[error("register: [{addr:#x}, +{len:#x}) overlaps the registration at {existing:#x}")]
    RegistrationOverlap {
        /// Start.
        addr: Addr,
        /// Length.
        len: usize,
        /// Start of the existing registration.
        existing: Addr,
    },
    /// The parts of a registration do not form one contiguous range of one reservation.
    #[error("register: part {index} at {addr:#x}: {reason}")]
    BadSpan {
        /// The part (0-based).
        index: usize,
        /// Its first address.
        addr: Addr,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A descriptor made from a registration or a peer's segment reaches past its end
    /// ([`TransferDesc::between`](crate::TransferDesc::between)).
    #[error("descriptor: the {side} range at offset {offset} of {len} bytes is past the {size} bytes there")]
    OutOfRange {
        /// Which side.
        side: Side,
        /// The offset asked for.
        offset: usize,
        /// The length asked for.
        len: usize,
        /// The registration's (local) or segment's (remote) length.
        size: usize,
    },
    /// A transfer was given no descriptors.
    #[error("transfer: the descriptor list is empty")]
    EmptyBatch,
    /// A descriptor of length zero.
    #[error("transfer: descriptor {index} has length 0")]
    ZeroLength {
        /// Index of the descriptor.
        index: usize,
    },
    /// A descriptor whose range overflows the address space.
    #[error("transfer: descriptor {index}: {side} address {addr:#x} + {len:#x} overflows")]
    Overflow {
        /// Index of the descriptor.
        index: usize,
        /// Which address.
        side: Side,
        /// The address.
        addr: Addr,
        /// The length.
        len: usize,
    },
    /// A descriptor's range is not (entirely) registered locally or offered by the peer.
    #[error(
        "transfer: descriptor {index}: {side} range [{addr:#x}, +{len:#x}) is not registered \
         (first uncovered address {uncovered:#x})"
    )]
    NotRegistered {
        /// Index of the descriptor.
        index: usize,
        /// Which address.
        side: Side,
        /// Start of the descriptor's range on that side.
        addr: Addr,
        /// Its length.
        len: usize,
        /// The first address not covered.
        uncovered: Addr,
    },
    /// The runtime refused the copy of a descriptor when it was queued (a batch call's
    /// `failIndex`, or a single copy's failing `aclrtMemcpyAsync`), mapped back through the
    /// plan to the descriptor the refused copy starts in.
    #[error("transfer: descriptor {index}: {source}")]
    CopyRefused {
        /// Index of the descriptor.
        index: usize,
        /// The runtime's error (names the call and the copy).
        #[source]
        source: ascend_mem::Error,
    },
    /// No channel to that peer.
    #[error("{peer}: not connected")]
    NotConnected {
        /// The peer's engine address.
        peer: String,
    },
    /// A channel to that peer exists already.
    #[error("{peer}: already connected")]
    AlreadyConnected {
        /// The peer's engine address.
        peer: String,
    },
    /// The peer was lost while the operation was pending (or before it started).
    #[error("{peer}: peer lost: {reason}")]
    PeerLost {
        /// The peer's engine address.
        peer: String,
        /// What happened.
        reason: LostReason,
    },
    /// The resource is in use by in-flight transfers.
    #[error("{what} is in use by {in_flight} in-flight transfer(s)")]
    Busy {
        /// What.
        what: &'static str,
        /// How many transfers use it.
        in_flight: usize,
    },
    /// A wait ran out.
    #[error("{what}: timed out after {after:?}")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// The time given.
        after: Duration,
    },
    /// Streams or VA ran out.
    #[error("{what} exhausted ({detail})")]
    ResourceExhausted {
        /// Which resource.
        what: &'static str,
        /// Numbers.
        detail: String,
    },
    /// A peer offered an unusable share-handle list.
    #[error("{peer}: share-handle entry {index} ({va_addr:#x}, +{len:#x}) is unusable: {reason}")]
    BadEntry {
        /// The peer.
        peer: String,
        /// Index of the entry.
        index: usize,
        /// Its address.
        va_addr: Addr,
        /// Its length.
        len: usize,
        /// Why.
        reason: &'static str,
    },
    /// The transfer request was aborted (dropped or its sync wait timed out).
    #[error("transfer aborted")]
    Aborted,
    /// The transfer was cancelled by [`TransferRequest::cancel`](crate::TransferRequest::cancel)
    /// before its copies ended.
    #[error("{peer}: transfer {id} cancelled")]
    Cancelled {
        /// The peer's engine address.
        peer: String,
        /// The request's id.
        id: u64,
    },
    /// The outcome of this request was already returned by an earlier call.
    #[error("the result of this transfer was already reported: {0}")]
    AlreadyReported(String),
    /// A registration name that is empty, too long, or taken by another live registration.
    #[error("register_named: name {name:?} is unusable: {reason}")]
    BadName {
        /// The name (cut to 256 bytes).
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A block list could not be prepared.
    #[error("{call}: {reason}")]
    Prepare {
        /// The call (`prepare_local`, `prepare_remote`, a transfer of prepared lists).
        call: &'static str,
        /// What is wrong, with the values.
        reason: String,
    },
    /// A remote block list prepared on an earlier connection to its peer: the engine has
    /// connected to the peer again since, and the list names the old connection's imports.
    #[error(
        "{peer}: the remote block list was prepared on an earlier connection to this peer; \
         prepare it again (Engine::prepare_remote)"
    )]
    StalePrepared {
        /// The peer.
        peer: String,
    },
    /// A block index of a prepared transfer lies past the end of its list.
    #[error("transfer_prepared: pair {index}: {side} block {block} is out of range (the list has {blocks})")]
    BlockIndex {
        /// Index of the pair.
        index: usize,
        /// Which list.
        side: Side,
        /// The block index given.
        block: usize,
        /// Blocks in the list.
        blocks: usize,
    },
    /// A call or argument this engine does not support.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The peer deregistered memory this transfer (or prepared list) uses: the peer is alive
    /// and the channel stays for the rest of its memory. A transfer in flight that used the
    /// memory was aborted first (nothing of it lands there any more). Raw descriptors into
    /// the memory from now on are [`Error::NotRegistered`]; a prepared list over it is
    /// refused with this error (prepare one over what the peer offers now).
    #[error("{peer} deregistered its memory at {addr:#x} ({len} bytes) that this transfer uses")]
    Revoked {
        /// The peer.
        peer: String,
        /// The peer's address of the revoked segment.
        addr: Addr,
        /// Its length.
        len: usize,
    },
    /// The peer offers no way to ask for its segments after the connect (a C++ HIXL
    /// engine): they are those of the connect (see
    /// [`Engine::refresh_segments`](crate::Engine::refresh_segments)).
    #[error("{peer} offers its segments only at the connect (a HIXL engine): reconnect to see registrations made since")]
    SegmentsFixed {
        /// The peer.
        peer: String,
    },
}

impl Error {
    /// The HIXL status this error corresponds to.
    pub fn status(&self) -> HixlCode {
        match self {
            Error::Mem(e) | Error::CopyRefused { source: e, .. } => match e.kind() {
                ascend_mem::ErrorKind::InvalidArgument => HixlCode::PARAM_INVALID,
                ascend_mem::ErrorKind::Timeout => HixlCode::TIMEOUT,
                ascend_mem::ErrorKind::NotSupported => HixlCode::UNSUPPORTED,
                ascend_mem::ErrorKind::OutOfMemory => HixlCode::RESOURCE_EXHAUSTED,
                _ => HixlCode::FAILED,
            },
            Error::Option(e) => e.status(),
            Error::Control(e) => e.status(),
            Error::Wire(_) => HixlCode::PARAM_INVALID,
            Error::Range(_) => HixlCode::PARAM_INVALID,
            Error::Listen { .. } => HixlCode::FAILED,
            Error::NotShareable { .. }
            | Error::RegistrationOverlap { .. }
            | Error::BadSpan { .. }
            | Error::OutOfRange { .. }
            | Error::EmptyBatch
            | Error::ZeroLength { .. }
            | Error::Overflow { .. }
            | Error::NotRegistered { .. }
            | Error::BadEntry { .. }
            | Error::BadName { .. }
            | Error::Prepare { .. }
            | Error::StalePrepared { .. }
            | Error::BlockIndex { .. }
            | Error::AlreadyReported(_) => HixlCode::PARAM_INVALID,
            Error::NotConnected { .. } => HixlCode::NOT_CONNECTED,
            Error::AlreadyConnected { .. } => HixlCode::ALREADY_CONNECTED,
            Error::PeerLost { .. } => HixlCode::NOT_CONNECTED,
            Error::Busy { .. } | Error::Aborted | Error::Cancelled { .. } => HixlCode::FAILED,
            Error::Timeout { .. } => HixlCode::TIMEOUT,
            Error::ResourceExhausted { .. } => HixlCode::RESOURCE_EXHAUSTED,
            Error::Unsupported(_) | Error::SegmentsFixed { .. } => HixlCode::UNSUPPORTED,
            Error::Revoked { .. } => HixlCode::FAILED,
        }
    }

    /// Whether this is [`Error::PeerLost`].
    pub fn is_peer_lost(&self) -> bool {
        matches!(self, Error::PeerLost { .. })
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl<T> From<ascend_mem::CloseError<T, Error>> for Error {
    fn from(e: ascend_mem::CloseError<T, Error>) -> Error {
        e.into_error()
    }
}

impl<T> From<ascend_mem::CloseError<T>> for Error {
    fn from(e: ascend_mem::CloseError<T>) -> Error {
        Error::Mem(e.into_error())
    }
}

#[cfg(test)]
mod tests {
    use super::LostReason;

    #[test]
    fn every_loss_reason_has_its_series_in_the_metrics() {
        let all = [
            LostReason::KeepaliveClosed,
            LostReason::HeartbeatFailed,
            LostReason::Disconnected,
            LostReason::EngineShutdown,
            LostReason::DirectoryLeft,
            LostReason::PeerUnresponsive,
        ];
        // A new reason added here without a series would go uncounted.
        for r in all {
            assert!(crate::metrics::REASONS.contains(&r.label()), "{r:?}");
        }
        assert_eq!(all.len(), crate::metrics::REASONS.len());
    }
}
