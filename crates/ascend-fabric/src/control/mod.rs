//! The FabricMem control plane over TCP: the server an engine runs on its `ip:port`, and the
//! client calls a connecting engine makes.
//!
//! Internal to the engine: public only with the `protocol-internals` feature, which is
//! unstable and for this crate's own tests; nothing here is covered by semver. What an engine
//! user meets of it is re-exported at the crate root ([`ClientError`]), and what the server's
//! bounds and the shared secret mean for an engine is in the
//! [crate docs](crate#the-control-plane).
//!
//! # Server
//! One thread runs an event loop (the `polling` crate: epoll on Linux) over the listener and
//! every connection, whether it is still in its request phase or has become a keepalive
//! session. Sockets are non-blocking; partial frames are buffered per connection and replies
//! leave from a per-connection out-buffer as the socket becomes writable, so a slow reader never
//! holds up anyone else. The loop sleeps until a socket is ready, a command arrives
//! ([`ControlServer::revoke`], drop) or the nearest deadline passes.
//!
//! Every accepted connection carries exactly one request frame (after the handshake below when
//! a secret is set). A connect request is answered with the current share-handle list and a
//! status, SUCCESS only once the session exists (a duplicate `channel_id` gets
//! `ALREADY_CONNECTED`, a list too large for one frame `RESOURCE_EXHAUSTED`); the socket then
//! carries heartbeat frames. A disconnect request closes the named session. A notify is queued.
//! Anything malformed closes that one connection, counted in [`ServerStats::malformed`].
//!
//! Bounds ([`ServerConfig`]): at most `max_connections` open connections and
//! `max_connections_per_ip` from one address (more are answered with a `RESOURCE_EXHAUSTED`
//! status whose message names the cap, and closed, as soon as they are accepted; a client of
//! this crate reports [`ClientError::Status`] with that message, with or without a secret,
//! for a connect or a disconnect; a notify reads no answer, so one over the cap is lost, as a
//! HIXL notify is when nobody takes it);
//! a connection must complete its request phase, handshake included, within
//! `request_timeout` of being accepted (silent and trickling senders are closed then); a
//! session that sends no heartbeat for `session_heartbeat_timeout` (default 120 s, HIXL's
//! figure) is reaped. HIXL clients that neither listen nor use AutoConnect send no heartbeats
//! and would be reaped after that timeout: set it to `None` to serve them indefinitely (an
//! engine takes it from [`EngineOptions::session_heartbeat_timeout`](crate::EngineOptions)).
//! Our own engines send one every [`EngineOptions::heartbeat_interval`](crate::EngineOptions).
//!
//! # The shared secret
//! With [`ServerConfig::shared_secret`] set, every connection, whatever it asks for (connect,
//! disconnect or notify), must first complete a mutual challenge-response: the client sends a
//! fresh nonce ([`AuthHello`](crate::wire::AuthHello)); the server answers with its own nonce
//! and an HMAC-SHA256 over both under the secret ([`AuthChallenge`](crate::wire::AuthChallenge));
//! the client checks it (so it never sends a request to a server that cannot prove it knows the
//! secret, and fails with [`ClientError::ServerAuth`]) and answers with its own HMAC
//! ([`AuthProof`](crate::wire::AuthProof)), which the server checks in constant time before it
//! reads the request. A connection without a valid proof is closed, counted in
//! [`ServerStats::auth_failures`] ([`ServerStats::malformed`] when what it sent is not even a
//! well-formed frame), and its request is never acted on. The secret itself never
//! crosses the wire; fresh nonces on both sides make a recorded exchange useless later.
//! What it protects and what it does not is said in the [crate docs](crate#the-control-plane).
//!
//! # Client
//! [`connect`] opens a new connection, exchanges connect/response/status, and returns the
//! offered entries with the socket kept as the keepalive channel; [`disconnect`] and
//! [`send_notify`] each use a new connection, as HIXL does. Each authenticates first when
//! given a secret.

mod auth;
mod client;
mod conn;
mod dispatch;
mod event_loop;
mod server;
mod shared;
mod source;

pub use auth::unique_suffix;
pub use client::{connect, disconnect, segments, send_heartbeat, send_notify, ClientError};
// The engine never names it (it takes what `connect` returns apart).
#[cfg(feature = "protocol-internals")]
pub use client::Connected;
pub use server::ControlServer;

use crate::wire::{SegmentName, ShareHandleEntry};
use std::net::IpAddr;
use std::time::Duration;

/// HIXL status codes carried in status messages (the values of [`crate::HixlCode`]).
pub mod status {
    use ascend_cs::HixlCode;

    /// Success.
    pub const SUCCESS: u32 = HixlCode::SUCCESS.0;
    /// Bad argument, bad option, unknown request.
    pub const PARAM_INVALID: u32 = HixlCode::PARAM_INVALID.0;
    /// A wait ran out.
    pub const TIMEOUT: u32 = HixlCode::TIMEOUT.0;
    /// No connection to that peer.
    pub const NOT_CONNECTED: u32 = HixlCode::NOT_CONNECTED.0;
    /// Already connected to that peer.
    pub const ALREADY_CONNECTED: u32 = HixlCode::ALREADY_CONNECTED.0;
    /// Out of a resource.
    pub const RESOURCE_EXHAUSTED: u32 = HixlCode::RESOURCE_EXHAUSTED.0;
    /// Generic failure.
    pub const FAILED: u32 = HixlCode::FAILED.0;
}

/// Notify queue capacity.
pub const NOTIFY_QUEUE_CAP: usize = 4096;
/// Timeout of the client's sends when the caller gives none (HIXL: 3 s).
pub const SERVER_IO_TIMEOUT: Duration = Duration::from_secs(3);

/// The longest wait a deadline stands for: a timeout too long for the clock
/// (`Duration::MAX` as "no limit") is cut to it.
pub(crate) const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The instant `timeout` from now, or [`FOREVER`] from now when the clock cannot hold it
/// (never a panic on a huge timeout).
pub(crate) fn deadline_after(timeout: Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(FOREVER))
        .unwrap_or(now)
}
/// Longest request frame `length` the server accepts. HIXL's framing allows 1 MiB, but a
/// request (connect, disconnect, notify) is at most a few KiB; the lower bound keeps what a
/// connection can make the server buffer small.
pub const MAX_REQUEST_LEN: u64 = 64 << 10;

/// What the server needs from its engine. The callbacks run on the server's event-loop thread:
/// they must be quick and must not call back into the [`ControlServer`].
pub trait ControlHandler: Send + Sync + 'static {
    /// The current export list offered to a connecting client.
    fn share_handles(&self) -> Vec<ShareHandleEntry>;
    /// Names of registrations, offered with the export list (none by default).
    fn segment_names(&self) -> Vec<SegmentName> {
        Vec::new()
    }
    /// A client's keepalive session began.
    fn session_opened(&self, _channel_id: &str) {}
    /// A client's keepalive session ended (closed socket, disconnect request, revocation,
    /// missed heartbeats).
    fn session_closed(&self, _channel_id: &str) {}
}

/// Server settings. `Default` gives the bounds documented on each field.
#[derive(Clone)]
pub struct ServerConfig {
    /// Require every connection to prove knowledge of this secret (see the module docs).
    pub shared_secret: Option<String>,
    /// Accept connections only from these IPs.
    pub allowed_peers: Option<Vec<IpAddr>>,
    /// Most connections open at once, sessions included (default 4096).
    pub max_connections: usize,
    /// Most connections open at once from one IP address (default 256).
    pub max_connections_per_ip: usize,
    /// Time from accepting a connection to having its whole request (handshake included)
    /// and having sent the reply (default 3 s, HIXL's server send timeout).
    pub request_timeout: Duration,
    /// A session with no heartbeat for this long is closed (default 120 s, HIXL's figure);
    /// `None` keeps sessions until their socket closes, as HIXL's engine does in practice.
    pub session_heartbeat_timeout: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            shared_secret: None,
            allowed_peers: None,
            max_connections: 4096,
            max_connections_per_ip: 256,
            request_timeout: Duration::from_secs(3),
            session_heartbeat_timeout: Some(Duration::from_secs(120)),
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field(
                "shared_secret",
                &self.shared_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("allowed_peers", &self.allowed_peers)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_ip", &self.max_connections_per_ip)
            .field("request_timeout", &self.request_timeout)
            .field("session_heartbeat_timeout", &self.session_heartbeat_timeout)
            .finish()
    }
}

/// A snapshot of the server's counters ([`ControlServer::stats`]). The first two are current
/// values, the rest totals since the server started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStats {
    /// Connections open now, sessions included.
    pub open_connections: u64,
    /// Keepalive sessions open now.
    pub sessions: u64,
    /// Connections closed on accept: over `max_connections` or `max_connections_per_ip`.
    pub refused_over_cap: u64,
    /// Connections closed on accept: peer not in `allowed_peers`.
    pub refused_not_allowed: u64,
    /// Connections closed because their request phase outlived `request_timeout`.
    pub closed_at_deadline: u64,
    /// Sessions closed for sending no heartbeat within `session_heartbeat_timeout`.
    pub reaped: u64,
    /// Connections closed for a missing or wrong proof of the shared secret.
    pub auth_failures: u64,
    /// Connections closed for a malformed frame or request.
    pub malformed: u64,
}
