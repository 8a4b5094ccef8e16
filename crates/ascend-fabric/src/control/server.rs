//! The public face of the control server: start, queries, revocation, stop.

use super::event_loop;
use super::shared::{Command, Counters, RevokeWait, Shared, LISTENER_KEY};
use super::source::Registered;
use super::{ControlHandler, ServerConfig, ServerStats};
use crate::metrics::ServerMetrics;
use crate::wire::NotifyMsg;
use parking_lot::Mutex;
use polling::Poller;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running control server. Dropping it stops the event loop, joins its thread and closes
/// every connection and session.
pub struct ControlServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ControlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlServer")
            .field("addr", &self.addr)
            .field("stats", &self.stats())
            .finish()
    }
}

impl ControlServer {
    /// Binds `addr` and starts serving on one event-loop thread.
    ///
    /// # Errors
    /// The bind error (e.g. the port is taken), or failing to create the poller or the thread.
    // Only the protocol's own tests start a server of no engine.
    #[cfg_attr(not(feature = "protocol-internals"), allow(dead_code))]
    pub fn start(
        addr: SocketAddr,
        handler: Arc<dyn ControlHandler>,
        config: ServerConfig,
    ) -> io::Result<Self> {
        Self::start_with(addr, handler, config, ServerMetrics::none())
    }

    /// As [`ControlServer::start`], recording into `metrics` (an engine's server).
    pub(crate) fn start_with(
        addr: SocketAddr,
        handler: Arc<dyn ControlHandler>,
        config: ServerConfig,
        metrics: ServerMetrics,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let poller = Arc::new(Poller::new()?);
        let listener = Registered::new(&poller, listener, LISTENER_KEY)?;
        let shared = Arc::new(Shared {
            handler,
            config,
            poller,
            stop: AtomicBool::new(false),
            commands: Mutex::new(Vec::new()),
            sessions: Mutex::new(HashMap::new()),
            notifies: Mutex::new(VecDeque::new()),
            counters: Counters::default(),
            metrics,
            loop_thread: OnceLock::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fabric-ctl-{}", addr.port()))
            .spawn(move || event_loop::run(listener, s))?;
        tracing::debug!(%addr, "control server listening");
        Ok(ControlServer {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Channel ids of the live keepalive sessions. A session is listed once the handler's
    /// [`ControlHandler::session_opened`] has returned for it, and until its
    /// [`ControlHandler::session_closed`] has.
    pub fn sessions(&self) -> Vec<String> {
        self.shared.sessions.lock().keys().cloned().collect()
    }

    /// Drains the queued notifies.
    pub fn take_notifies(&self) -> Vec<NotifyMsg> {
        self.shared.notifies.lock().drain(..).collect()
    }

    /// Connections closed because their request was malformed or refused: the sum of
    /// [`ServerStats::malformed`], [`ServerStats::auth_failures`] and
    /// [`ServerStats::refused_not_allowed`].
    pub fn rejected(&self) -> u64 {
        let s = self.stats();
        s.malformed + s.auth_failures + s.refused_not_allowed
    }

    /// The server's counters.
    pub fn stats(&self) -> ServerStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServerStats {
            open_connections: get(&c.open_connections),
            sessions: get(&c.sessions),
            refused_over_cap: get(&c.refused_over_cap),
            refused_not_allowed: get(&c.refused_not_allowed),
            closed_at_deadline: get(&c.closed_at_deadline),
            reaped: get(&c.reaped),
            auth_failures: get(&c.auth_failures),
            malformed: get(&c.malformed),
        }
    }

    /// Time since the last heartbeat of a session (since it opened, if none came yet).
    #[cfg(feature = "protocol-internals")]
    pub fn since_heartbeat(&self, channel_id: &str) -> Option<Duration> {
        self.shared
            .sessions
            .lock()
            .get(channel_id)
            .map(|s| s.last_heartbeat.elapsed())
    }

    /// Revokes `va_addrs` (the `va_addr`s of share-handle entries) at every session that was
    /// offered any of them (at its connect or a segments request), and waits up to `wait`:
    /// * a session whose client subscribed on its keepalive socket
    ///   ([`KEEPALIVE_SUBSCRIBE`](crate::wire::KEEPALIVE_SUBSCRIBE), as this crate's engines
    ///   do) is sent a [`KEEPALIVE_REVOKE`](crate::wire::KEEPALIVE_REVOKE) naming those of
    ///   them it was offered, and is waited for until it answers (or closes); it stays open;
    /// * any other has the write side of its socket shut, so the client's keepalive reader
    ///   sees EOF, and is waited for until the client has closed its side too (or the session
    ///   is otherwise gone); one not yet closed when `wait` runs out stays half-closed until
    ///   its client closes it or it is reaped.
    ///
    /// Returns how many sessions were revoked.
    ///
    /// Must not be called from a [`ControlHandler`] callback (they run on the event loop,
    /// which this waits for): it returns 0 there, with a logged error. Nor while holding a lock
    /// that [`ControlHandler::share_handles`] takes, since the loop may need it meanwhile.
    pub fn revoke(&self, va_addrs: &[u64], wait: Duration) -> usize {
        if va_addrs.is_empty() {
            return 0;
        }
        if self.shared.loop_thread.get() == Some(&std::thread::current().id()) {
            tracing::error!("ControlServer::revoke called from the event loop; nothing revoked");
            return 0;
        }
        let deadline = super::deadline_after(wait);
        let w = Arc::new(RevokeWait::default());
        {
            // Checked under the queue's lock: a loop that has stopped sets `stop` before it
            // empties the queue, so a command pushed here is either seen by that emptying or
            // not pushed at all.
            let mut commands = self.shared.commands.lock();
            if self.shared.stop.load(Ordering::SeqCst) {
                tracing::warn!("revoke: the control loop has stopped; nothing revoked");
                return 0;
            }
            commands.push(Command::Revoke {
                va_addrs: va_addrs.to_vec(),
                wait: w.clone(),
            });
        }
        if let Err(e) = self.shared.poller.notify() {
            tracing::error!(error = %e, "cannot wake the control loop; nothing revoked");
            return 0;
        }
        w.wait(deadline)
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Err(e) = self.shared.poller.notify() {
            tracing::error!(error = %e, "cannot wake the control loop to stop it");
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the control loop panicked");
            }
        }
    }
}
