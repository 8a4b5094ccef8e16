//! The engine directory: engines publish themselves under a name, find each other by name,
//! and learn of arrivals and departures, so a fleet needs no list of `ip:port`s.
//!
//! * [`Directory`] is the store behind it (a trait); `EtcdDirectory` keeps it in etcd
//!   (feature `etcd`): each entry under `<prefix>/engines/<name>` is attached to a lease its
//!   publisher keeps alive, so a publisher that dies leaves the directory when its lease
//!   runs out.
//! * [`EngineEntry`] is what an engine publishes: its control address, device, product, the
//!   segments it offers (name, address, length) and a version.
//! * [`Member`] ties an [`Engine`](crate::Engine) to a directory: it publishes the engine, connects to
//!   peers by name ([`Member::connect_by_name`]), and watches the directory. When a peer it
//!   connected to by name leaves (its key deleted, or its lease expired), the member ends
//!   that channel exactly as a closed keepalive socket does: in-flight transfers fail with
//!   [`Error::PeerLost`](crate::Error::PeerLost), reason
//!   [`LostReason::DirectoryLeft`](crate::LostReason::DirectoryLeft), after their streams are
//!   aborted and the imports unmapped.
//!
//! A directory outage leaves established channels alone: the store's errors are logged,
//! counted in [`DirectoryStats`] and retried with backoff, and transfers go on; when the store
//! is back, the watch reads the directory again and reports what changed meanwhile.

mod entry;
#[cfg(feature = "etcd")]
mod etcd;
mod member;

use std::fmt;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

pub use entry::{check_name, EngineEntry, SegmentInfo, ENTRY_FORMAT, MAX_ENTRY, MAX_NAME};
#[cfg(feature = "etcd")]
pub use etcd::{EtcdDirectory, EtcdOptions};
pub use member::Member;

/// A directory error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirectoryError {
    /// The store could not be reached when the directory was opened.
    #[error("engine directory: cannot reach {endpoint}: {reason}")]
    Unreachable {
        /// The endpoint(s) tried.
        endpoint: String,
        /// What failed.
        reason: String,
    },
    /// A call to the store failed or timed out.
    #[error("engine directory: {op} on {endpoint} failed: {reason}")]
    Request {
        /// The call (`publish`, `lookup`, `list`, ...).
        op: &'static str,
        /// The endpoint(s).
        endpoint: String,
        /// What failed.
        reason: String,
    },
    /// Another live engine holds the name.
    #[error("engine directory: the name {name:?} is held by a live engine at {holder}")]
    NameTaken {
        /// The name.
        name: String,
        /// The holder's address, as its entry gives it (or `?` when its entry is malformed).
        holder: String,
    },
    /// No engine is published under the name.
    #[error("engine directory: no engine named {name:?}")]
    NotFound {
        /// The name.
        name: String,
    },
    /// A name that cannot be a directory key.
    #[error("engine directory: bad engine name {name:?}: {reason}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A bad directory prefix or option.
    #[error("engine directory: bad {what} {value:?}: {reason}")]
    BadOption {
        /// The option.
        what: &'static str,
        /// Its value.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// An entry that is not a valid [`EngineEntry`].
    #[error("engine directory: malformed entry at {key:?}: {reason}")]
    Malformed {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The peer left the directory while this engine connected to it.
    #[error("engine directory: {name:?} left while connecting to it")]
    Left {
        /// The name.
        name: String,
    },
    /// The engine refused (connecting to the address an entry names).
    #[error(transparent)]
    Engine(#[from] crate::Error),
    /// The directory's own runtime or thread could not start.
    #[error("engine directory: cannot start its runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// A change seen in the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectoryEvent {
    /// An engine was published under `name` (or its entry changed).
    Joined {
        /// Its name.
        name: String,
        /// Its entry.
        entry: EngineEntry,
    },
    /// The engine published under `name` left: its key was deleted or its lease expired.
    Left {
        /// Its name.
        name: String,
    },
}

/// Counters of a directory client.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectoryStats {
    /// Calls to the store that failed or timed out (each is logged; background ones are
    /// retried with backoff).
    pub errors: u64,
    /// Times a watch or keep-alive stream was opened again after a failure.
    pub reconnects: u64,
    /// Lease keep-alives answered by the store.
    pub keepalives: u64,
    /// Watch events received (puts and deletes under the prefix).
    pub watch_events: u64,
    /// Entries skipped as malformed (each logged as a warning).
    pub malformed: u64,
    /// Entries published again after their lease was lost.
    pub republished: u64,
}

type Undo = Box<dyn FnOnce() + Send + Sync>;

/// An engine's entry kept published: its lease is kept alive in the background, and published
/// again (as a new lease) if it is lost, while the name is free.
///
/// Dropping it withdraws the entry (the lease is revoked, so the key goes at once; if the
/// store is unreachable, the key goes when the lease runs out).
#[must_use = "dropping the Publication withdraws the entry"]
pub struct Publication {
    name: String,
    withdraw: Option<Undo>,
}

impl Publication {
    /// A publication of `name` that `withdraw` ends (for implementations of [`Directory`]).
    pub fn new(name: &str, withdraw: impl FnOnce() + Send + Sync + 'static) -> Publication {
        Publication {
            name: name.to_owned(),
            withdraw: Some(Box::new(withdraw)),
        }
    }

    /// The name published.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Publication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publication")
            .field("name", &self.name)
            .finish()
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        if let Some(w) = self.withdraw.take() {
            w();
        }
    }
}

/// A stream of [`DirectoryEvent`]s: first a [`DirectoryEvent::Joined`] for every entry
/// present when the watch starts, then the changes. After an outage of the store, the watch
/// reads the directory again and reports the difference (departures included).
///
/// Dropping it (or [`WatchCancel::cancel`]) ends the background watch.
#[must_use = "dropping the Watch ends it"]
pub struct Watch {
    rx: mpsc::Receiver<DirectoryEvent>,
    cancel: WatchCancel,
}

/// Ends a [`Watch`] from another thread: its receiver then sees the stream end.
#[derive(Clone)]
pub struct WatchCancel(Arc<dyn Fn() + Send + Sync>);

impl WatchCancel {
    /// Ends the watch.
    pub fn cancel(&self) {
        (self.0)()
    }
}

impl fmt::Debug for WatchCancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WatchCancel")
    }
}

impl Watch {
    /// A watch whose events arrive on `rx` and that `cancel` ends (for implementations of
    /// [`Directory`]; ending it must drop the sender).
    pub fn new(
        rx: mpsc::Receiver<DirectoryEvent>,
        cancel: impl Fn() + Send + Sync + 'static,
    ) -> Watch {
        Watch {
            rx,
            cancel: WatchCancel(Arc::new(cancel)),
        }
    }

    /// The next event; `None` once the watch has ended.
    pub fn recv(&self) -> Option<DirectoryEvent> {
        self.rx.recv().ok()
    }

    /// The next event within `timeout`; `None` on timeout or once the watch has ended.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<DirectoryEvent> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// A handle that ends this watch.
    pub fn canceller(&self) -> WatchCancel {
        self.cancel.clone()
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Watch")
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Where engines publish themselves and find each other.
///
/// Every call is synchronous and bounded by the implementation's request timeout; none
/// holds a lock of the caller's across a call to the store.
pub trait Directory: Send + Sync + fmt::Debug {
    /// Publishes `entry` under `name` and keeps it published until the returned
    /// [`Publication`] is dropped.
    ///
    /// # Errors
    /// [`DirectoryError::BadName`]; [`DirectoryError::Malformed`] for an entry that fails
    /// [`EngineEntry::check`]; [`DirectoryError::NameTaken`] when a live engine holds the
    /// name; [`DirectoryError::Request`] when the store fails.
    fn publish(&self, name: &str, entry: &EngineEntry) -> Result<Publication, DirectoryError>;

    /// The entry published under `name`, if any.
    ///
    /// # Errors
    /// [`DirectoryError::BadName`]; [`DirectoryError::Malformed`] when the stored entry is
    /// not valid; [`DirectoryError::Request`].
    fn lookup(&self, name: &str) -> Result<Option<EngineEntry>, DirectoryError>;

    /// Every engine whose name starts with `name_prefix` (`""`: all), by name; malformed
    /// entries are skipped with a warning and counted.
    ///
    /// # Errors
    /// [`DirectoryError::Request`].
    fn list(&self, name_prefix: &str) -> Result<Vec<(String, EngineEntry)>, DirectoryError>;

    /// Starts watching the whole directory.
    ///
    /// # Errors
    /// [`DirectoryError::Request`] if the first read of the directory fails.
    fn watch(&self) -> Result<Watch, DirectoryError>;

    /// The client's counters.
    fn stats(&self) -> DirectoryStats;
}
