//! [`Member`]: an engine in a directory. It publishes the engine, connects to peers by name,
//! and ends the channel of a peer that leaves the directory.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use super::entry::{check_name, EngineEntry, SegmentInfo};
use super::{Directory, DirectoryError, DirectoryEvent, Publication, Watch, WatchCancel};
use crate::metrics::MemberMetrics;
use crate::{Engine, LostReason};

struct Inner {
    engine: Engine,
    dir: Arc<dyn Directory>,
    name: String,
    entry: EngineEntry,
    /// Peers connected by name: name → the address their entry gave.
    peers: Mutex<HashMap<String, String>>,
    subscribers: Mutex<Vec<mpsc::Sender<DirectoryEvent>>>,
    metrics: MemberMetrics,
}

/// An [`Engine`] published in a [`Directory`] under a name.
///
/// While it lives, the engine's entry is kept published (its lease kept alive) and the
/// directory is watched by a thread of its own. When a peer connected through
/// [`Member::connect_by_name`] leaves the directory (its key deleted, its lease expired, or
/// its entry replaced by another engine's under the same name), its channel is ended as a
/// closed keepalive socket ends it: in-flight transfers fail with
/// [`Error::PeerLost`](crate::Error::PeerLost), reason [`LostReason::DirectoryLeft`], after
/// their streams are aborted and the peer's imports unmapped. Subscribers
/// ([`Member::subscribe`]) see each event after that has been done.
///
/// Dropping it withdraws the entry (peers see this engine leave at once), ends the watch and
/// joins its thread; the engine itself lives on in its other clones.
#[must_use = "dropping the Member withdraws the engine from the directory"]
pub struct Member {
    inner: Arc<Inner>,
    publication: Option<Publication>,
    cancel: WatchCancel,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("name", &self.inner.name)
            .field("addr", &self.inner.entry.addr)
            .finish()
    }
}

impl Member {
    /// Publishes `engine` under `name` in `dir` (its address and device, `product`, and the
    /// `segments` it offers) and starts watching the directory.
    ///
    /// # Errors
    /// [`DirectoryError::BadName`]; [`DirectoryError::BadOption`] for an engine that does not
    /// listen (no port); as [`Directory::watch`] and [`Directory::publish`]
    /// ([`DirectoryError::NameTaken`] when a live engine holds the name);
    /// [`DirectoryError::Runtime`] if the watch thread cannot start.
    pub fn join(
        engine: &Engine,
        dir: Arc<dyn Directory>,
        name: &str,
        product: &str,
        segments: Vec<SegmentInfo>,
    ) -> Result<Member, DirectoryError> {
        check_name(name)?;
        let addr = engine.local_addr();
        if !addr.listens() {
            return Err(DirectoryError::BadOption {
                what: "engine address",
                value: addr.as_str().to_owned(),
                reason: "a published engine must listen (give it a port)",
            });
        }
        let entry = EngineEntry::new(addr.as_str(), engine.device().id(), product, segments);
        // Watching first: no departure after the publication goes unseen.
        let watch = dir.watch()?;
        let publication = dir.publish(name, &entry)?;
        let inner = Arc::new(Inner {
            engine: engine.clone(),
            dir,
            name: name.to_owned(),
            entry,
            peers: Mutex::new(HashMap::new()),
            subscribers: Mutex::new(Vec::new()),
            metrics: MemberMetrics::new(name),
        });
        let cancel = watch.canceller();
        let thread = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(format!("fabric-dir-{name}"))
                .spawn(move || run(&inner, watch))
                .map_err(DirectoryError::Runtime)?
        };
        Ok(Member {
            inner,
            publication: Some(publication),
            cancel,
            thread: Some(thread),
        })
    }

    /// The name this engine is published under.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The entry published.
    pub fn entry(&self) -> &EngineEntry {
        &self.inner.entry
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The directory.
    pub fn directory(&self) -> &Arc<dyn Directory> {
        &self.inner.dir
    }

    /// The entry published under `name`, if any ([`Directory::lookup`]).
    ///
    /// # Errors
    /// As [`Directory::lookup`].
    pub fn lookup(&self, name: &str) -> Result<Option<EngineEntry>, DirectoryError> {
        self.inner.dir.lookup(name)
    }

    /// Engines whose names start with `name_prefix` ([`Directory::list`]).
    ///
    /// # Errors
    /// As [`Directory::list`].
    pub fn list(&self, name_prefix: &str) -> Result<Vec<(String, EngineEntry)>, DirectoryError> {
        self.inner.dir.list(name_prefix)
    }

    /// Looks `name` up and connects the engine to the address its entry gives (see
    /// [`Engine::connect`]); from then on the channel ends when `name` leaves the directory.
    /// Returns the entry (its segments name what the peer offers).
    ///
    /// # Errors
    /// [`DirectoryError::BadName`]; [`DirectoryError::NotFound`]; as [`Directory::lookup`];
    /// [`DirectoryError::Engine`] with the connect's error; [`DirectoryError::Left`] when the
    /// peer left the directory while connecting (the channel is ended again).
    pub fn connect_by_name(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<EngineEntry, DirectoryError> {
        let inner = &self.inner;
        let entry = inner
            .dir
            .lookup(name)?
            .ok_or_else(|| DirectoryError::NotFound {
                name: name.to_owned(),
            })?;
        // Entered before connecting: a departure seen meanwhile removes it, and is then
        // noticed below.
        inner
            .peers
            .lock()
            .insert(name.to_owned(), entry.addr.clone());
        if let Err(e) = inner.engine.connect(&entry.addr, timeout) {
            let mut peers = inner.peers.lock();
            if peers.get(name) == Some(&entry.addr) && !inner.engine.is_connected(&entry.addr) {
                peers.remove(name);
            }
            return Err(e.into());
        }
        let still = inner.peers.lock().get(name) == Some(&entry.addr);
        if !still {
            inner
                .engine
                .lose_peer(&entry.addr, LostReason::DirectoryLeft);
            return Err(DirectoryError::Left {
                name: name.to_owned(),
            });
        }
        tracing::info!(engine = %inner.name, peer = name, addr = %entry.addr, "connected by name");
        Ok(entry)
    }

    /// Peers connected by name, with their addresses.
    pub fn connected(&self) -> Vec<(String, String)> {
        let peers = self.inner.peers.lock();
        let mut v: Vec<_> = peers
            .iter()
            .filter(|(_, a)| self.inner.engine.is_connected(a))
            .map(|(n, a)| (n.clone(), a.clone()))
            .collect();
        v.sort();
        v
    }

    /// Directory events from now on, each delivered after the member has acted on it (a
    /// departed peer's channel is already ended when its [`DirectoryEvent::Left`] arrives).
    /// The receiver sees the stream end when the member is dropped.
    pub fn subscribe(&self) -> mpsc::Receiver<DirectoryEvent> {
        let (tx, rx) = mpsc::channel();
        self.inner.subscribers.lock().push(tx);
        rx
    }
}

/// The watch thread: acts on each event, then hands it to the subscribers.
fn run(inner: &Inner, watch: Watch) {
    // The names in the directory, for the metrics (a changed entry is no arrival).
    let mut present = std::collections::HashSet::new();
    while let Some(ev) = watch.recv() {
        match &ev {
            DirectoryEvent::Left { name } if present.remove(name) => {
                inner.metrics.departed(present.len())
            }
            DirectoryEvent::Joined { name, .. } if present.insert(name.clone()) => {
                inner.metrics.arrived(present.len())
            }
            _ => {}
        }
        match &ev {
            DirectoryEvent::Left { name } => {
                if *name == inner.name {
                    tracing::warn!(name, "this engine's own entry left the directory");
                }
                let addr = inner.peers.lock().remove(name);
                if let Some(addr) = addr {
                    end(inner, name, &addr);
                }
            }
            DirectoryEvent::Joined { name, entry } => {
                // Another engine took the name: the one connected to has left.
                let mut peers = inner.peers.lock();
                let gone = peers.get(name).filter(|a| **a != entry.addr).cloned();
                if gone.is_some() {
                    peers.remove(name);
                }
                drop(peers);
                if let Some(addr) = gone {
                    end(inner, name, &addr);
                }
            }
        }
        inner
            .subscribers
            .lock()
            .retain(|s| s.send(ev.clone()).is_ok());
    }
}

fn end(inner: &Inner, name: &str, addr: &str) {
    if inner.engine.lose_peer(addr, LostReason::DirectoryLeft) {
        tracing::warn!(engine = %inner.name, peer = name, addr, "peer left the directory: channel ended");
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        drop(self.publication.take());
        self.cancel.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
