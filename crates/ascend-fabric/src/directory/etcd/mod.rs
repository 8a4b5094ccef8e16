//! [`EtcdDirectory`]: the engine directory kept in etcd (v3 API), one key per engine under
//! `<prefix>/engines/`, each attached to a lease its publisher keeps alive.
//!
//! The async client runs on a small runtime of the directory's own (one worker thread), so
//! every [`Directory`] call is a plain blocking call bounded by the request timeout; keep-alives
//! and watches are tasks on that runtime. No lock is held across a call to etcd.

mod lease;
mod watch;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};

use super::entry::{check_name, EngineEntry};
use super::{Directory, DirectoryError, DirectoryStats, Publication, Watch};

/// How to reach etcd and how entries are kept.
///
/// Requires the `etcd` feature.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub struct EtcdOptions {
    /// etcd endpoints (`http://127.0.0.1:2379`, or `127.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// Keys go under `<prefix>/engines/<name>`. Default `/ascend`.
    pub prefix: String,
    /// The lease TTL of a published entry: a publisher that stops keeping it alive (a dead
    /// process) leaves the directory this long after its last keep-alive. Whole seconds, at
    /// least 1 (etcd may raise it to its own minimum, about 2 s with default election
    /// settings). Default 10 s. Keep-alives go every third of it.
    pub ttl: Duration,
    /// Bound of each call to etcd (connecting included). Default 3 s.
    pub request_timeout: Duration,
}

impl EtcdOptions {
    /// Options for `endpoint` with the defaults.
    pub fn new(endpoint: impl Into<String>) -> EtcdOptions {
        EtcdOptions {
            endpoints: vec![endpoint.into()],
            prefix: "/ascend".into(),
            ttl: Duration::from_secs(10),
            request_timeout: Duration::from_secs(3),
        }
    }

    /// With keys under `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> EtcdOptions {
        self.prefix = prefix.into();
        self
    }

    /// With lease TTL `ttl`.
    pub fn ttl(mut self, ttl: Duration) -> EtcdOptions {
        self.ttl = ttl;
        self
    }

    /// With request timeout `t`.
    pub fn request_timeout(mut self, t: Duration) -> EtcdOptions {
        self.request_timeout = t;
        self
    }

    fn check(&self) -> Result<(), DirectoryError> {
        let bad = |what, value: String, reason| DirectoryError::BadOption {
            what,
            value,
            reason,
        };
        if self.endpoints.is_empty() || self.endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err(bad(
                "endpoints",
                format!("{:?}", self.endpoints),
                "need at least one, none empty",
            ));
        }
        let p = &self.prefix;
        if p.is_empty() || p.ends_with('/') || p.contains("//") {
            return Err(bad(
                "prefix",
                p.clone(),
                "must be non-empty, with no trailing or doubled '/'",
            ));
        }
        if self.ttl < Duration::from_secs(1) || self.ttl.subsec_nanos() != 0 {
            return Err(bad(
                "ttl",
                format!("{:?}", self.ttl),
                "must be whole seconds, at least 1",
            ));
        }
        if self.request_timeout.is_zero() {
            return Err(bad("request_timeout", "0".into(), "must be positive"));
        }
        Ok(())
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) errors: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) keepalives: AtomicU64,
    pub(crate) watch_events: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) republished: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Ctx {
    /// A failed store call or a broken stream: counted in the metrics, then the stats (so
    /// the metric never lags the stats).
    pub(crate) fn count_error(&self) {
        self.errors.increment(1);
        bump(&self.stats.errors);
    }
}

/// What the directory's tasks need: no handle to the runtime itself, so the runtime is only
/// ever dropped by a thread outside it.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) stats: Arc<Counters>,
    /// `ascend_fabric_directory_errors_total` of this endpoint.
    pub(crate) errors: metrics::Counter,
    pub(crate) endpoint: Arc<str>,
    /// `<prefix>/engines/`.
    pub(crate) dir: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) timeout: Duration,
}

impl Ctx {
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}{name}", self.dir)
    }

    /// The engine name of `key`, when it is one key right below `<prefix>/engines/`.
    pub(crate) fn name_of(&self, key: &[u8]) -> Result<String, DirectoryError> {
        let key = String::from_utf8_lossy(key);
        let bad = |reason: &str| DirectoryError::Malformed {
            key: key.to_string(),
            reason: reason.to_owned(),
        };
        let name = key
            .strip_prefix(&*self.dir)
            .ok_or_else(|| bad("not under the prefix"))?;
        check_name(name).map_err(|e| bad(&e.to_string()))?;
        Ok(name.to_owned())
    }

    /// `fut` within the request timeout; a failure is counted and named after `op`.
    pub(crate) async fn call<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, DirectoryError> {
        let reason = match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        self.count_error();
        Err(DirectoryError::Request {
            op,
            endpoint: self.endpoint.to_string(),
            reason,
        })
    }

    /// Every valid entry under `<prefix>/engines/<name_prefix>` by name, and the store's
    /// revision of the read; malformed ones are skipped with a warning.
    pub(crate) async fn read(
        &self,
        op: &'static str,
        name_prefix: &str,
    ) -> Result<(BTreeMap<String, EngineEntry>, i64), DirectoryError> {
        let mut c = self.client.clone();
        let key = self.key(name_prefix);
        let resp = self
            .call(op, c.get(key, Some(GetOptions::new().with_prefix())))
            .await?;
        let rev = resp.header().map_or(0, |h| h.revision());
        let mut out = BTreeMap::new();
        for kv in resp.kvs() {
            match self.parse(kv.key(), kv.value()) {
                Ok((name, e)) => {
                    out.insert(name, e);
                }
                Err(e) => self.malformed(&e),
            }
        }
        Ok((out, rev))
    }

    pub(crate) fn parse(
        &self,
        key: &[u8],
        value: &[u8],
    ) -> Result<(String, EngineEntry), DirectoryError> {
        let name = self.name_of(key)?;
        let entry = EngineEntry::decode(&String::from_utf8_lossy(key), value)?;
        Ok((name, entry))
    }

    pub(crate) fn malformed(&self, e: &DirectoryError) {
        bump(&self.stats.malformed);
        tracing::warn!(endpoint = %self.endpoint, error = %e, "skipping a malformed directory entry");
    }
}

struct Shared {
    rt: tokio::runtime::Runtime,
    ctx: Ctx,
}

impl Shared {
    fn block_on<T>(&self, f: impl Future<Output = T>) -> T {
        self.rt.block_on(f)
    }
}

/// The engine directory in etcd.
///
/// Calls block (each bounded by [`EtcdOptions::request_timeout`]) and must not be made from
/// inside an async runtime. Cheap to clone. Dropping the last clone stops its runtime: the
/// keep-alives of publications still alive stop (their entries go when their leases run out)
/// and watches end.
///
/// Requires the `etcd` feature.
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub struct EtcdDirectory {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EtcdDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdDirectory")
            .field("endpoint", &self.shared.ctx.endpoint)
            .field("dir", &self.shared.ctx.dir)
            .finish()
    }
}

impl EtcdDirectory {
    /// Connects to etcd and checks it answers.
    ///
    /// # Errors
    /// [`DirectoryError::BadOption`]; [`DirectoryError::Unreachable`] naming the endpoints
    /// when etcd does not answer within the request timeout; [`DirectoryError::Runtime`].
    pub fn connect(opts: EtcdOptions) -> Result<EtcdDirectory, DirectoryError> {
        opts.check()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fabric-etcd")
            .enable_all()
            .build()
            .map_err(DirectoryError::Runtime)?;
        let endpoint = opts.endpoints.join(",");
        let t = opts.request_timeout;
        let unreachable = |reason: String| DirectoryError::Unreachable {
            endpoint: endpoint.clone(),
            reason,
        };
        let copts = ConnectOptions::new()
            .with_connect_timeout(t)
            .with_keep_alive(Duration::from_secs(1), t)
            .with_keep_alive_while_idle(true);
        let client = rt
            .block_on(async {
                let mut c = tokio::time::timeout(t, Client::connect(&opts.endpoints, Some(copts)))
                    .await
                    .map_err(|_| format!("no connection within {t:?}"))?
                    .map_err(|e| e.to_string())?;
                // The channel connects lazily: one call proves etcd answers.
                tokio::time::timeout(t, c.status())
                    .await
                    .map_err(|_| format!("no answer within {t:?}"))?
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(c)
            })
            .map_err(unreachable)?;
        let ctx = Ctx {
            client,
            stats: Arc::default(),
            errors: crate::metrics::directory_errors(&endpoint),
            endpoint: endpoint.as_str().into(),
            dir: format!("{}/engines/", opts.prefix).into(),
            ttl: opts.ttl,
            timeout: t,
        };
        tracing::info!(endpoint = %endpoint, dir = %ctx.dir, "engine directory connected");
        Ok(EtcdDirectory {
            shared: Arc::new(Shared { rt, ctx }),
        })
    }

    /// The key an engine named `name` is published under.
    pub fn key(&self, name: &str) -> String {
        self.shared.ctx.key(name)
    }

    /// Deletes the entry of `name`, whoever published it (an operator's removal: its peers
    /// see it leave). Returns whether there was one.
    ///
    /// # Errors
    /// [`DirectoryError::BadName`]; [`DirectoryError::Request`].
    pub fn remove(&self, name: &str) -> Result<bool, DirectoryError> {
        check_name(name)?;
        let s = &self.shared;
        let mut c = s.ctx.client.clone();
        let key = s.ctx.key(name);
        let r = s.block_on(s.ctx.call("remove", c.delete(key, None)))?;
        Ok(r.deleted() > 0)
    }
}

impl Directory for EtcdDirectory {
    fn publish(&self, name: &str, entry: &EngineEntry) -> Result<Publication, DirectoryError> {
        lease::publish(self.shared.clone(), name, entry)
    }

    fn lookup(&self, name: &str) -> Result<Option<EngineEntry>, DirectoryError> {
        check_name(name)?;
        let s = &self.shared;
        let key = s.ctx.key(name);
        let mut c = s.ctx.client.clone();
        let resp = s.block_on(s.ctx.call("lookup", c.get(key.as_str(), None)))?;
        match resp.kvs().first() {
            None => Ok(None),
            Some(kv) => EngineEntry::decode(&key, kv.value()).map(Some),
        }
    }

    fn list(&self, name_prefix: &str) -> Result<Vec<(String, EngineEntry)>, DirectoryError> {
        if !name_prefix.is_empty() {
            check_name(name_prefix)?;
        }
        let s = &self.shared;
        let (map, _) = s.block_on(s.ctx.read("list", name_prefix))?;
        Ok(map.into_iter().collect())
    }

    fn watch(&self) -> Result<Watch, DirectoryError> {
        watch::start(&self.shared)
    }

    fn stats(&self) -> DirectoryStats {
        let c = &self.shared.ctx.stats;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DirectoryStats {
            errors: l(&c.errors),
            reconnects: l(&c.reconnects),
            keepalives: l(&c.keepalives),
            watch_events: l(&c.watch_events),
            malformed: l(&c.malformed),
            republished: l(&c.republished),
        }
    }
}

/// Retry delays: doubling from `first` up to `max`, back to `first` after a success.
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }

    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }
}
