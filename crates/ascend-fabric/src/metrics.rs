//! The engine's metrics, recorded through the [`metrics`] facade: the engine records, the
//! application installs the recorder it wants (a Prometheus exporter, a statsd one, a test's
//! debugging recorder). Without a recorder nothing is recorded: every handle is a no-op, and
//! recording costs a branch.
//!
//! Handles are registered when their owner is made (an engine, a channel to a peer, a
//! directory client), with the recorder installed then: install it before making the engine
//! (as every program using `metrics` does, at start-up). [`describe`] tells the recorder each
//! metric's unit and meaning.
//!
//! | name | kind | unit | labels | what |
//! |---|---|---|---|---|
//! | `ascend_fabric_transfers_total` | counter | transfers | `engine`, `peer`, `op`, `outcome` | transfers ended, by outcome: `ok`, `timeout` (the stall deadline or a synchronous transfer's timeout), `cancelled` (`cancel`), `aborted` (dropped while pending), `peer_lost` (the channel was lost under it), `failed` (any other error: a copy or queuing it refused, the memory revoked by its owner, ...) |
//! | `ascend_fabric_transfer_bytes_total` | counter | bytes | `engine`, `peer`, `op` | bytes moved by transfers that ended `ok` |
//! | `ascend_fabric_transfer_descriptors_total` | counter | descriptors | `engine`, `peer`, `op` | descriptors of transfers that ended `ok` |
//! | `ascend_fabric_transfer_duration_seconds` | histogram | seconds | `engine`, `peer`, `op` | submission to observed completion, of transfers that ended `ok` (the slot wait included) |
//! | `ascend_fabric_slot_wait_seconds` | histogram | seconds | `engine` | how long each submission that found every stream slot busy waited, until it got one, timed out or was dropped (back-pressure; a submission that found one free is not recorded) |
//! | `ascend_fabric_transfers_in_flight` | gauge | transfers | `engine`, `peer` | transfers submitted and not ended |
//! | `ascend_fabric_connects_total` | counter | connects | `engine`, `peer` | channels made to a peer (a reconnect counts again) |
//! | `ascend_fabric_connect_failures_total` | counter | connects | `engine` | connects that failed (no peer label: a failed connect may name anything) |
//! | `ascend_fabric_disconnects_total` | counter | channels | `engine`, `peer`, `reason` | channels ended, by reason: `keepalive_closed`, `heartbeat_failed`, `disconnected`, `engine_shutdown`, `directory_left`, `peer_unresponsive` |
//! | `ascend_fabric_control_rejected_total` | counter | connections | `engine`, `reason` | control-plane connections the server refused: `not_allowed` (not in the allow-list), `over_cap` (over its connection cap) |
//! | `ascend_fabric_control_sessions` | gauge | sessions | `engine` | peers' control sessions open at this engine's server |
//! | `ascend_fabric_engine_info` | gauge | - | `engine`, `backend`, `device` | 1 for each live engine: its address, the runtime's backend, its device (0 once it is dropped) |
//! | `ascend_fabric_directory_members` | gauge | engines | `member` | engines in the directory, as the [`Member`](crate::directory::Member) published under `member` sees it (0 once it is dropped) |
//! | `ascend_fabric_directory_arrivals_total` | counter | engines | `member` | engines that joined the directory (the ones there when the member joined included) |
//! | `ascend_fabric_directory_departures_total` | counter | engines | `member` | engines that left it (key deleted, lease expired) |
//! | `ascend_fabric_directory_errors_total` | counter | errors | `endpoint` | etcd calls that failed or timed out, and broken watch and keep-alive streams |
//!
//! A channel's series stay after it is lost (a reconnect to the same peer records into them
//! again): each peer an engine connected to adds its series for the life of the process.
//!
//! `op` is `write` or `read`; `engine` is the engine's identity on the wire
//! ([`Engine::channel_id`](crate::Engine::channel_id): its `ip:port`, with a suffix unique to
//! the instance for an engine that does not listen), `peer` the peer's address as given to
//! `connect`.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Unit};

/// Transfers ended, by outcome.
pub const TRANSFERS: &str = "ascend_fabric_transfers_total";
/// Bytes moved by transfers that ended `ok`.
pub const TRANSFER_BYTES: &str = "ascend_fabric_transfer_bytes_total";
/// Descriptors of transfers that ended `ok`.
pub const TRANSFER_DESCRIPTORS: &str = "ascend_fabric_transfer_descriptors_total";
/// Submission to observed completion of transfers that ended `ok`.
pub const TRANSFER_DURATION: &str = "ascend_fabric_transfer_duration_seconds";
/// Time a submission that found every stream slot busy waited for one.
pub const SLOT_WAIT: &str = "ascend_fabric_slot_wait_seconds";
/// Transfers submitted and not ended.
pub const IN_FLIGHT: &str = "ascend_fabric_transfers_in_flight";
/// Channels made to a peer.
pub const CONNECTS: &str = "ascend_fabric_connects_total";
/// Connects that failed.
pub const CONNECT_FAILURES: &str = "ascend_fabric_connect_failures_total";
/// Channels ended, by reason.
pub const DISCONNECTS: &str = "ascend_fabric_disconnects_total";
/// Control-plane connections the server refused, by reason.
pub const CONTROL_REJECTED: &str = "ascend_fabric_control_rejected_total";
/// Control sessions open at the engine's server.
pub const CONTROL_SESSIONS: &str = "ascend_fabric_control_sessions";
/// 1 per live engine, labelled with its address, backend and device.
pub const ENGINE_INFO: &str = "ascend_fabric_engine_info";
/// Engines in the directory, as a member sees it.
pub const DIRECTORY_MEMBERS: &str = "ascend_fabric_directory_members";
/// Engines that joined the directory, as a member saw them.
pub const DIRECTORY_ARRIVALS: &str = "ascend_fabric_directory_arrivals_total";
/// Engines that left the directory, as a member saw them.
pub const DIRECTORY_DEPARTURES: &str = "ascend_fabric_directory_departures_total";
/// Directory store calls that failed.
pub const DIRECTORY_ERRORS: &str = "ascend_fabric_directory_errors_total";

/// Tells the installed recorder the unit and meaning of every metric the engine records
/// (exporters show them as `# HELP` and `# UNIT`). Call once after installing it.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(TRANSFERS, "transfers ended, by outcome");
    describe_counter!(
        TRANSFER_BYTES,
        Unit::Bytes,
        "bytes moved by completed transfers"
    );
    describe_counter!(TRANSFER_DESCRIPTORS, "descriptors of completed transfers");
    describe_histogram!(
        TRANSFER_DURATION,
        Unit::Seconds,
        "submission to completion of completed transfers"
    );
    describe_histogram!(
        SLOT_WAIT,
        Unit::Seconds,
        "time a submission waited for a busy stream slot"
    );
    describe_gauge!(IN_FLIGHT, "transfers submitted and not ended");
    describe_counter!(CONNECTS, "channels made to a peer");
    describe_counter!(CONNECT_FAILURES, "connects that failed");
    describe_counter!(DISCONNECTS, "channels to a peer ended, by reason");
    describe_counter!(
        CONTROL_REJECTED,
        "control-plane connections refused, by reason"
    );
    describe_gauge!(CONTROL_SESSIONS, "control sessions open at the server");
    describe_gauge!(
        ENGINE_INFO,
        "1 per live engine: its address, backend and device"
    );
    describe_gauge!(DIRECTORY_MEMBERS, "engines in the directory");
    describe_counter!(DIRECTORY_ARRIVALS, "engines that joined the directory");
    describe_counter!(DIRECTORY_DEPARTURES, "engines that left the directory");
    describe_counter!(DIRECTORY_ERRORS, "directory store calls that failed");
}

/// How a transfer ended, as the `outcome` label says it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Failed,
    Timeout,
    Cancelled,
    Aborted,
    PeerLost,
}

impl Outcome {
    const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::Failed,
        Outcome::Timeout,
        Outcome::Cancelled,
        Outcome::Aborted,
        Outcome::PeerLost,
    ];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::Aborted => "aborted",
            Outcome::PeerLost => "peer_lost",
        }
    }
}

/// The `reason` labels of a lost channel (`LostReason::label`; `error.rs` checks each is here).
pub(crate) const REASONS: [&str; 6] = [
    "keepalive_closed",
    "heartbeat_failed",
    "disconnected",
    "engine_shutdown",
    "directory_left",
    "peer_unresponsive",
];

/// One direction's handles of a channel.
struct OpMetrics {
    ended: [Counter; 6],
    bytes: Counter,
    descriptors: Counter,
    duration: Histogram,
}

impl OpMetrics {
    fn new(engine: &str, peer: &str, op: &'static str) -> OpMetrics {
        let ended = Outcome::ALL.map(|o| {
            metrics::counter!(TRANSFERS, "engine" => engine.to_owned(), "peer" => peer.to_owned(),
                "op" => op, "outcome" => o.label())
        });
        let labels = [
            ("engine", engine.to_owned()),
            ("peer", peer.to_owned()),
            ("op", op.to_owned()),
        ];
        OpMetrics {
            ended,
            bytes: metrics::counter!(TRANSFER_BYTES, &labels),
            descriptors: metrics::counter!(TRANSFER_DESCRIPTORS, &labels),
            duration: metrics::histogram!(TRANSFER_DURATION, &labels),
        }
    }
}

/// The handles of one channel (an engine's connection to one peer), registered when the
/// channel is made.
pub(crate) struct PeerMetrics {
    write: OpMetrics,
    read: OpMetrics,
    connects: Counter,
    in_flight: Gauge,
    disconnects: [Counter; REASONS.len()],
}

impl PeerMetrics {
    pub(crate) fn new(engine: &str, peer: &str) -> PeerMetrics {
        let labels = [("engine", engine.to_owned()), ("peer", peer.to_owned())];
        PeerMetrics {
            write: OpMetrics::new(engine, peer, "write"),
            read: OpMetrics::new(engine, peer, "read"),
            connects: metrics::counter!(CONNECTS, &labels),
            in_flight: metrics::gauge!(IN_FLIGHT, &labels),
            disconnects: REASONS.map(|r| {
                metrics::counter!(DISCONNECTS, "engine" => engine.to_owned(),
                    "peer" => peer.to_owned(), "reason" => r)
            }),
        }
    }

    /// The channel is made (it counts as a connect).
    pub(crate) fn connected(&self) {
        self.connects.increment(1);
    }

    /// A transfer was submitted.
    pub(crate) fn submitted(&self) {
        self.in_flight.increment(1.0);
    }

    /// A transfer ended: its direction, size (bytes, descriptors), time since submission and
    /// outcome.
    pub(crate) fn ended(&self, write: bool, size: (u64, u64), took: Duration, o: Outcome) {
        self.in_flight.decrement(1.0);
        let m = if write { &self.write } else { &self.read };
        m.ended[o as usize].increment(1);
        if o == Outcome::Ok {
            m.bytes.increment(size.0);
            m.descriptors.increment(size.1);
            m.duration.record(took.as_secs_f64());
        }
    }

    /// The channel was lost for the reason labelled `reason` (`LostReason::label`).
    pub(crate) fn lost(&self, reason: &str) {
        if let Some(i) = REASONS.iter().position(|x| *x == reason) {
            self.disconnects[i].increment(1);
        }
    }
}

/// The slot-wait histogram of `engine`, registered when it is made.
pub(crate) fn slot_wait(engine: &str) -> Histogram {
    metrics::histogram!(SLOT_WAIT, "engine" => engine.to_owned())
}

/// The failed-connect counter of `engine`, registered when it is made.
pub(crate) fn connect_failures(engine: &str) -> Counter {
    metrics::counter!(CONNECT_FAILURES, "engine" => engine.to_owned())
}

/// The handles of an engine's control server, registered when the engine is made.
pub(crate) struct ServerMetrics {
    pub(crate) not_allowed: Counter,
    pub(crate) over_cap: Counter,
    pub(crate) sessions: Gauge,
}

impl ServerMetrics {
    pub(crate) fn new(engine: &str) -> ServerMetrics {
        let reason = |r: &'static str| metrics::counter!(CONTROL_REJECTED, "engine" => engine.to_owned(), "reason" => r);
        ServerMetrics {
            not_allowed: reason("not_allowed"),
            over_cap: reason("over_cap"),
            sessions: metrics::gauge!(CONTROL_SESSIONS, "engine" => engine.to_owned()),
        }
    }

    /// Handles that record nothing (a control server of no engine).
    #[cfg_attr(not(feature = "protocol-internals"), allow(dead_code))]
    pub(crate) fn none() -> ServerMetrics {
        ServerMetrics {
            not_allowed: Counter::noop(),
            over_cap: Counter::noop(),
            sessions: Gauge::noop(),
        }
    }
}

impl std::fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerMetrics")
    }
}

/// The `ascend_fabric_engine_info` gauge of a live engine: 1 while it lives, 0 once dropped.
pub(crate) struct EngineInfo(Gauge);

impl EngineInfo {
    pub(crate) fn new(engine: &str, backend: &str, device: i32) -> EngineInfo {
        let g = metrics::gauge!(ENGINE_INFO, "engine" => engine.to_owned(),
            "backend" => backend.to_owned(), "device" => device.to_string());
        g.set(1.0);
        EngineInfo(g)
    }
}

impl Drop for EngineInfo {
    fn drop(&mut self) {
        self.0.set(0.0);
    }
}

/// The handles of a directory member, registered when it joins.
pub(crate) struct MemberMetrics {
    members: Gauge,
    arrivals: Counter,
    departures: Counter,
}

impl MemberMetrics {
    pub(crate) fn new(member: &str) -> MemberMetrics {
        let m = || member.to_owned();
        MemberMetrics {
            members: metrics::gauge!(DIRECTORY_MEMBERS, "member" => m()),
            arrivals: metrics::counter!(DIRECTORY_ARRIVALS, "member" => m()),
            departures: metrics::counter!(DIRECTORY_DEPARTURES, "member" => m()),
        }
    }

    /// An engine joined; `now` are in the directory.
    pub(crate) fn arrived(&self, now: usize) {
        self.arrivals.increment(1);
        self.members.set(now as f64);
    }

    /// An engine left; `now` are in the directory.
    pub(crate) fn departed(&self, now: usize) {
        self.departures.increment(1);
        self.members.set(now as f64);
    }
}

impl Drop for MemberMetrics {
    fn drop(&mut self) {
        // A member that is gone sees no engine.
        self.members.set(0.0);
    }
}

/// The error counter of a directory client of `endpoint`, registered when it connects.
// Only the etcd directory counts store errors.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) fn directory_errors(endpoint: &str) -> Counter {
    metrics::counter!(DIRECTORY_ERRORS, "endpoint" => endpoint.to_owned())
}
