//! Engine configuration: a typed builder, and HIXL's string option map read into it
//! ([`EngineOptions::from_hixl`]; its rules, key by key, are in that method's docs).

mod hixl;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ascend_mem::Addr;

/// HIXL's keys.
pub mod keys {
    /// `OPTION_ENABLE_USE_FABRIC_MEM`.
    pub const ENABLE_USE_FABRIC_MEM: &str = "EnableUseFabricMem";
    /// `OPTION_BUFFER_POOL`.
    pub const BUFFER_POOL: &str = "BufferPool";
    /// ADXL's spelling of the buffer pool key.
    pub const ADXL_BUFFER_POOL: &str = "adxl.BufferPool";
    /// `OPTION_AUTO_CONNECT`.
    pub const AUTO_CONNECT: &str = "AutoConnect";
    /// `OPTION_RDMA_TRAFFIC_CLASS`.
    pub const RDMA_TRAFFIC_CLASS: &str = "RdmaTrafficClass";
    /// ADXL's spelling.
    pub const ADXL_RDMA_TRAFFIC_CLASS: &str = "adxl.RdmaTrafficClass";
    /// `OPTION_RDMA_SERVICE_LEVEL`.
    pub const RDMA_SERVICE_LEVEL: &str = "RdmaServiceLevel";
    /// ADXL's spelling.
    pub const ADXL_RDMA_SERVICE_LEVEL: &str = "adxl.RdmaServiceLevel";
    /// `OPTION_LOCAL_COMM_RES`.
    pub const LOCAL_COMM_RES: &str = "LocalCommRes";
    /// ADXL's spelling.
    pub const ADXL_LOCAL_COMM_RES: &str = "adxl.LocalCommRes";
    /// `OPTION_GLOBAL_RESOURCE_CONFIG`.
    pub const GLOBAL_RESOURCE_CONFIG: &str = "GlobalResourceConfig";
}

/// An option or address that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionError {
    /// A key's value is outside its rules.
    #[error("option {key} = {value:?}: {reason}")]
    Invalid {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// The rule it breaks.
        reason: String,
    },
    /// A key this engine does not know.
    #[error("unknown option {key:?}")]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// A feature HIXL has that this engine does not provide.
    #[error("{0}")]
    Unsupported(String),
    /// The local engine address does not parse.
    #[error("engine address {value:?}: {reason} (expected ip, ip:port or [ipv6]:port)")]
    BadAddress {
        /// The text given.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl OptionError {
    /// The HIXL status HIXL's own engine returns for the same map: `UNSUPPORTED` (103905)
    /// for [`OptionError::Unsupported`], `PARAM_INVALID` (103900) for every other option
    /// error.
    pub fn status(&self) -> crate::HixlCode {
        match self {
            OptionError::Unsupported(_) => crate::HixlCode::UNSUPPORTED,
            _ => crate::HixlCode::PARAM_INVALID,
        }
    }
}

/// An engine's address, as HIXL writes it: `ip`, `ip:port` or `[ipv6]:port`. A non-zero port
/// means the engine listens there for control connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EngineAddr {
    /// The IP address.
    pub ip: IpAddr,
    /// The port, 0 when absent.
    pub port: u16,
    text: String,
}

impl EngineAddr {
    /// Parses `ip`, `ip:port`, `[ipv6]:port`, `host` or `host:port`. A host name is resolved
    /// now (IPv4 or IPv6, the resolver's first answer); the text as given stays the engine's
    /// identity.
    ///
    /// # Errors
    /// [`OptionError::BadAddress`]: not an address, a bad port, or a name that does not
    /// resolve.
    pub fn parse(s: &str) -> Result<Self, OptionError> {
        let bad = |reason| OptionError::BadAddress {
            value: s.to_owned(),
            reason,
        };
        let at = |ip, port| EngineAddr {
            ip,
            port,
            text: s.to_owned(),
        };
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(at(ip, 0));
        }
        if let Ok(sa) = s.parse::<SocketAddr>() {
            return Ok(at(sa.ip(), sa.port()));
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, p.parse::<u16>().map_err(|_| bad("not a port number"))?),
            None => (s, 0),
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
        if host.is_empty() || !host.chars().all(valid) {
            return Err(bad("not an address or a host name"));
        }
        let mut found = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
            .map_err(|_| bad("the host name does not resolve"))?;
        let sa = found
            .next()
            .ok_or_else(|| bad("the host name resolves to no address"))?;
        Ok(at(sa.ip(), port))
    }

    /// Whether this engine runs a control server.
    pub fn listens(&self) -> bool {
        self.port != 0
    }

    /// The socket address of the control server.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// The text as given: how peers name this engine, and the `channel_id` it sends when it
    /// listens on a host address (see [`Engine::channel_id`](crate::Engine::channel_id)).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Display for EngineAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Everything an engine is configured with.
///
/// Made with [`EngineOptions::builder`] (checked), [`EngineOptions::from_hixl`] or
/// [`Default`]; fields can be read and changed in place. New options may be added in a minor
/// release, so the struct cannot be written out as a literal outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineOptions {
    /// Copy streams per transfer task (`fabric_memory.task_stream_num`, 1..=8).
    pub task_stream_num: u32,
    /// VA pool capacity in bytes (`fabric_memory.max_capacity`, given in TB).
    pub pool_capacity: usize,
    /// Where the VA pool is reserved (`fabric_memory.start_address`, given in TB): honoured
    /// on an A3 when the range is free, see [`EngineOptionsBuilder::pool_start`].
    pub pool_start: Addr,
    /// Connect on demand (3 s timeout) and disconnect a peer whose transfer's copies failed
    /// or timed out (`AutoConnect`); off by default, as in HIXL.
    pub auto_connect: bool,
    /// Heartbeat interval on keepalive sockets (HIXL: 10 s).
    pub heartbeat_interval: Duration,
    /// A peer whose host leaves a heartbeat unacknowledged this long is lost with
    /// [`LostReason::PeerUnresponsive`](crate::LostReason::PeerUnresponsive) (default 30 s;
    /// `None`: the system's TCP retransmission limit, about 15 minutes on Linux). A process
    /// that dies has its kernel close its sockets, which is seen at once; a host that is
    /// powered off or cut off closes nothing, and only this bound finds it. Set on the
    /// keepalive socket as `TCP_USER_TIMEOUT` (Linux; elsewhere ignored), so it changes
    /// nothing on the wire. Loss is found within about a heartbeat interval plus this. A live
    /// peer that stops reading its socket this long is lost the same way (TCP's probes of its
    /// full window count as unacknowledged).
    pub peer_timeout: Option<Duration>,
    /// Default connect timeout (HIXL's default argument: 1000 ms).
    pub connect_timeout: Duration,
    /// Optional shared secret (off by default, as HIXL has none). When set, every control
    /// request in both directions (connect, disconnect, notify) starts with a mutual
    /// HMAC-SHA256 challenge-response proving both sides know it; the secret itself never
    /// crosses the wire, and peers without it can neither connect, disconnect nor notify.
    /// Later bytes are not encrypted (see [the control plane](crate#the-control-plane)). Both
    /// engines need the same secret; HIXL peers cannot take part. Anyone who can reach the port
    /// can obtain a proof over nonces of their choosing and guess offline, so use a long random
    /// secret (32 random bytes, hex- or base64-encoded), never a password; an empty one is
    /// refused.
    pub shared_secret: Option<String>,
    /// Optional allow-list of peer IPs for incoming control connections (off by default).
    pub allowed_peers: Option<Vec<IpAddr>>,
    /// Our control server closes a peer's session after this long without a heartbeat
    /// (default 120 s, HIXL's figure; `None`: never, as HIXL's engine in practice). Our
    /// engines send one every [`heartbeat_interval`](Self::heartbeat_interval); HIXL clients
    /// that neither listen nor use AutoConnect send none, so serving those for longer than
    /// this needs `None`.
    pub session_heartbeat_timeout: Option<Duration>,
    /// Send each stream's host-DRAM ↔ device copies of a transfer to the runtime as one
    /// `aclrtMemcpyBatchAsync` (on by default; see `Stream::copy_table_async` in ascend-mem).
    /// Off: one `aclrtMemcpyAsync` per copy, as HIXL issues them, for a runtime whose batch
    /// call refuses the engine's copies (for example their memory locations).
    pub batch_copies: bool,
    /// Threads that submit a transfer's copies (1..=`task_stream_num`, default 1): with more
    /// than one, the slot's streams are shared among that many threads, the calling one
    /// among them, each queuing its streams' copies. For a runtime whose host cost per copy
    /// call (microseconds on an A3 host path) makes one submitting thread the bound of a
    /// transfer of many small copies. The helpers are started per transfer (tens of
    /// microseconds each), and only for a transfer of at least
    /// [`SUBMIT_THREAD_MIN_COPIES`](crate::SUBMIT_THREAD_MIN_COPIES) copies per thread; the
    /// others are submitted by the calling thread alone.
    pub submit_threads: u32,
    /// Log a summary of each peer's transfers at INFO every this long, as HIXL's engine does
    /// every 30 minutes (`None`, the default: no summary). Per peer and direction with
    /// transfers completed in the interval, a `transfer summary` event (target
    /// `ascend_fabric::summary`): `transfers`, `avg_size` (bytes), `avg_gbps` (the bytes over
    /// the time the transfers took, submission to completion), `min_gbps` and `max_gbps` (of
    /// single transfers), `max_ms` (the longest); then a `slowest link` event naming the peer
    /// and direction with the lowest average. An interval without completed transfers logs
    /// nothing; a lost channel takes its unlogged figures with it.
    pub summary_interval: Option<Duration>,
}

pub(crate) const TB: usize = 1 << 40;

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            task_stream_num: 4,
            pool_capacity: 32 * TB,
            pool_start: Addr::new(40 << 40),
            auto_connect: false,
            heartbeat_interval: Duration::from_secs(10),
            peer_timeout: Some(Duration::from_secs(30)),
            connect_timeout: Duration::from_millis(1000),
            shared_secret: None,
            allowed_peers: None,
            session_heartbeat_timeout: Some(Duration::from_secs(120)),
            batch_copies: true,
            submit_threads: 1,
            summary_interval: None,
        }
    }
}

pub(crate) fn invalid(
    key: &str,
    value: impl Into<String>,
    reason: impl Into<String>,
) -> OptionError {
    OptionError::Invalid {
        key: key.to_owned(),
        value: value.into(),
        reason: reason.into(),
    }
}

impl EngineOptions {
    /// Starts a typed builder from the defaults.
    pub fn builder() -> EngineOptionsBuilder {
        EngineOptionsBuilder {
            opts: EngineOptions::default(),
        }
    }
}

/// Typed builder for [`EngineOptions`].
#[derive(Debug, Clone)]
pub struct EngineOptionsBuilder {
    opts: EngineOptions,
}

impl EngineOptionsBuilder {
    /// Copy streams per task, 1..=8.
    pub fn task_stream_num(mut self, n: u32) -> Self {
        self.opts.task_stream_num = n;
        self
    }

    /// VA pool capacity in bytes.
    pub fn pool_capacity(mut self, bytes: usize) -> Self {
        self.opts.pool_capacity = bytes;
        self
    }

    /// Where the VA pool is reserved (default 40 TiB; [`Addr::NULL`]: anywhere). Used where
    /// the product has fixed-address reservations without the unified-cache path (an A3) and
    /// the range is free; otherwise the pool goes anywhere.
    pub fn pool_start(mut self, at: Addr) -> Self {
        self.opts.pool_start = at;
        self
    }

    /// Connect on demand; disconnect peers whose transfers fail.
    pub fn auto_connect(mut self, on: bool) -> Self {
        self.opts.auto_connect = on;
        self
    }

    /// Log a transfer summary every `d`, or none (`None`, the default)
    /// ([`EngineOptions::summary_interval`]).
    pub fn summary_interval(mut self, d: Option<Duration>) -> Self {
        self.opts.summary_interval = d;
        self
    }

    /// Heartbeat interval on keepalive sockets.
    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.opts.heartbeat_interval = d;
        self
    }

    /// How long a heartbeat may stay unacknowledged before its peer is lost (`None`: the
    /// system's limit); see [`EngineOptions::peer_timeout`].
    pub fn peer_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.opts.peer_timeout = timeout;
        self
    }

    /// Default connect timeout.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.opts.connect_timeout = d;
        self
    }

    /// Require every control request, ours and our peers', to prove knowledge of this
    /// secret (see [`EngineOptions::shared_secret`]).
    pub fn shared_secret(mut self, secret: impl Into<String>) -> Self {
        self.opts.shared_secret = Some(secret.into());
        self
    }

    /// Accept control connections only from these IPs.
    pub fn allowed_peers(mut self, peers: impl IntoIterator<Item = IpAddr>) -> Self {
        self.opts.allowed_peers = Some(peers.into_iter().collect());
        self
    }

    /// How long our control server keeps a peer's session without a heartbeat (`None`:
    /// forever); see [`EngineOptions::session_heartbeat_timeout`].
    pub fn session_heartbeat_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.opts.session_heartbeat_timeout = timeout;
        self
    }

    /// Batch host-DRAM ↔ device copies (default on); see [`EngineOptions::batch_copies`].
    pub fn batch_copies(mut self, on: bool) -> Self {
        self.opts.batch_copies = on;
        self
    }

    /// Threads submitting a transfer's copies (default 1); see
    /// [`EngineOptions::submit_threads`].
    pub fn submit_threads(mut self, n: u32) -> Self {
        self.opts.submit_threads = n;
        self
    }

    /// Checks the values and returns the options.
    ///
    /// # Errors
    /// [`OptionError::Invalid`] for a value outside its range.
    pub fn build(self) -> Result<EngineOptions, OptionError> {
        self.opts.validate()?;
        Ok(self.opts)
    }
}

impl EngineOptions {
    /// Checks every value against its range: what [`EngineOptionsBuilder::build`] checks, and
    /// what [`Engine::new`](crate::Engine::new) checks again (the fields are public, so options
    /// may be changed after they were built).
    ///
    /// # Errors
    /// [`OptionError::Invalid`] naming the first value outside its range.
    pub fn validate(&self) -> Result<(), OptionError> {
        let o = self;
        if o.shared_secret.as_deref() == Some("") {
            return Err(invalid(
                "shared_secret",
                String::new(),
                "must not be empty (use a long random string)",
            ));
        }
        if !(1..=8).contains(&o.task_stream_num) {
            return Err(invalid(
                "task_stream_num",
                o.task_stream_num.to_string(),
                "must be in 1..=8",
            ));
        }
        if !(1..=o.task_stream_num).contains(&o.submit_threads) {
            return Err(invalid(
                "submit_threads",
                o.submit_threads.to_string(),
                format!(
                    "must be in 1..=task_stream_num ({}): a thread per stream at most",
                    o.task_stream_num
                ),
            ));
        }
        if o.pool_capacity == 0 {
            return Err(invalid("pool_capacity", "0", "must be above 0"));
        }
        if o.pool_start.get() % (1 << 30) != 0 {
            return Err(invalid(
                "pool_start",
                format!("{:#x}", o.pool_start),
                "must be a multiple of 1 GiB",
            ));
        }
        if o.heartbeat_interval.is_zero() {
            return Err(invalid("heartbeat_interval", "0s", "must be above 0"));
        }
        if let Some(t) = o.peer_timeout {
            if t < Duration::from_millis(1) || t.as_millis() > u128::from(u32::MAX) {
                return Err(invalid(
                    "peer_timeout",
                    format!("{t:?}"),
                    "must be 1 ms to 49 days (None leaves the system's limit)",
                ));
            }
        }
        if o.summary_interval.is_some_and(|t| t.is_zero()) {
            return Err(invalid(
                "summary_interval",
                "0s",
                "must be above 0 (None logs no summary)",
            ));
        }
        if o.session_heartbeat_timeout.is_some_and(|t| t.is_zero()) {
            return Err(invalid(
                "session_heartbeat_timeout",
                "0s",
                "must be above 0 (None keeps sessions)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let a = EngineAddr::parse("127.0.0.1:26000").unwrap();
        assert!(a.listens());
        assert_eq!(a.port, 26000);
        assert_eq!(a.as_str(), "127.0.0.1:26000");
        let b = EngineAddr::parse("10.0.0.2").unwrap();
        assert!(!b.listens());
        let c = EngineAddr::parse("[::1]:26001").unwrap();
        assert_eq!(c.ip, "::1".parse::<IpAddr>().unwrap());
        let d = EngineAddr::parse("localhost:26002").unwrap();
        assert!(d.ip.is_loopback() && d.port == 26002, "{d:?}");
        assert_eq!(d.as_str(), "localhost:26002");
        assert!(!EngineAddr::parse("localhost").unwrap().listens());
        for bad in [
            "",
            "1.2.3.4:99999",
            "[::1]",
            "1.2.3.4:",
            "localhost:port",
            "two words:1",
            "no-such-host.invalid:1",
        ] {
            assert!(
                matches!(EngineAddr::parse(bad), Err(OptionError::BadAddress { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn builder_checks_ranges() {
        assert!(EngineOptions::builder().task_stream_num(8).build().is_ok());
        assert!(matches!(
            EngineOptions::builder().shared_secret("").build(),
            Err(OptionError::Invalid { key, .. }) if key == "shared_secret"
        ));
        assert!(matches!(
            EngineOptions::builder().task_stream_num(0).build(),
            Err(OptionError::Invalid { .. })
        ));
        assert!(matches!(
            EngineOptions::builder().task_stream_num(9).build(),
            Err(OptionError::Invalid { .. })
        ));
        assert!(matches!(
            EngineOptions::builder()
                .heartbeat_interval(Duration::ZERO)
                .build(),
            Err(OptionError::Invalid { .. })
        ));
        let o = EngineOptions::builder()
            .shared_secret("s")
            .allowed_peers(["127.0.0.1".parse().unwrap()])
            .build()
            .unwrap();
        assert_eq!(o.shared_secret.as_deref(), Some("s"));
        assert_eq!(o.allowed_peers.unwrap().len(), 1);
        assert_eq!(
            o.session_heartbeat_timeout,
            Some(Duration::from_secs(120)),
            "HIXL's figure by default"
        );
        assert!(matches!(
            EngineOptions::builder()
                .session_heartbeat_timeout(Some(Duration::ZERO))
                .build(),
            Err(OptionError::Invalid { .. })
        ));
        let never = EngineOptions::builder()
            .session_heartbeat_timeout(None)
            .build()
            .unwrap();
        assert_eq!(never.session_heartbeat_timeout, None);
    }

    #[test]
    fn peer_timeout_is_checked_and_named() {
        assert_eq!(
            EngineOptions::default().peer_timeout,
            Some(Duration::from_secs(30))
        );
        for bad in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
            match EngineOptions::builder().peer_timeout(Some(bad)).build() {
                Err(OptionError::Invalid { key, value, .. }) => {
                    assert_eq!(key, "peer_timeout");
                    assert_eq!(value, format!("{bad:?}"));
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let o = EngineOptions::builder()
            .peer_timeout(Some(Duration::from_millis(1)))
            .build()
            .unwrap();
        assert_eq!(o.peer_timeout, Some(Duration::from_millis(1)));
        let none = EngineOptions::builder().peer_timeout(None).build().unwrap();
        assert_eq!(none.peer_timeout, None);
    }
}
