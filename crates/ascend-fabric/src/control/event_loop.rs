//! The server's one thread: waits for readiness, commands or the nearest deadline; accepts
//! within the caps; moves each connection's input and output along; closes what is due.

use super::conn::{Close, Conn, Input, Phase};
use super::shared::{Command, SessionEntry, Shared, LISTENER_KEY};
use super::source::Registered;
use super::status;
use crate::wire::{self, Frame, MsgType, RevokeMsg, StatusMsg};
use polling::Events;
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long accepting pauses after the process ran out of descriptors (the listener would
/// otherwise stay ready and the loop spin).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// At most one warning per second per kind, with the number held back.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    /// `Some(held back since the last one)` when a warning may be logged now.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|t| now < t + Duration::from_secs(1)) {
            self.held += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held))
    }
}

#[derive(Default)]
struct Logs {
    over_cap: Throttle,
    not_allowed: Throttle,
    deadline: Throttle,
    auth: Throttle,
    malformed: Throttle,
    accept: Throttle,
}

pub(super) struct Loop {
    pub(super) shared: Arc<Shared>,
    listener: Registered<TcpListener>,
    accept_paused_until: Option<Instant>,
    pub(super) conns: HashMap<usize, Conn>,
    per_ip: HashMap<IpAddr, usize>,
    deadlines: BTreeSet<(Instant, usize)>,
    next_key: usize,
    logs: Logs,
}

/// Abandons queued commands when the loop ends, however it ends.
struct AbandonOnExit(Arc<Shared>);

impl Drop for AbandonOnExit {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
        self.0.abandon_commands();
    }
}

/// The thread body.
pub(super) fn run(listener: Registered<TcpListener>, shared: Arc<Shared>) {
    let _ = shared.loop_thread.set(std::thread::current().id());
    let _abandon = AbandonOnExit(shared.clone());
    let mut lp = Loop {
        shared,
        listener,
        accept_paused_until: None,
        conns: HashMap::new(),
        per_ip: HashMap::new(),
        deadlines: BTreeSet::new(),
        next_key: LISTENER_KEY + 1,
        logs: Logs::default(),
    };
    lp.serve();
    lp.shutdown();
}

impl Loop {
    fn serve(&mut self) {
        let mut events = Events::new();
        let mut scratch = vec![0u8; 16 << 10];
        while !self.shared.stop.load(Ordering::SeqCst) {
            let next = self.deadlines.first().map(|&(t, _)| t);
            let next = match (next, self.accept_paused_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timeout = next.map(|t| t.saturating_duration_since(Instant::now()));
            events.clear();
            if let Err(e) = self.shared.poller.wait(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "control poller failed; server stopping");
                    return;
                }
            }
            let ready: Vec<_> = events
                .iter()
                .map(|e| (e.key, e.readable, e.writable))
                .collect();
            for (key, readable, writable) in ready {
                if key == LISTENER_KEY {
                    self.accept_all();
                } else {
                    self.on_ready(key, readable, writable, &mut scratch);
                }
            }
            self.run_commands();
            self.expire(Instant::now(), &mut scratch);
        }
    }

    fn shutdown(&mut self) {
        let keys: Vec<usize> = self.conns.keys().copied().collect();
        for key in keys {
            self.close(key, Close::Stopping);
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.get().accept() {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // A connection that was reset before we took it: skip it.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                    ) => {}
                Err(e) => {
                    // Out of descriptors or memory: pause rather than spin on a ready listener.
                    let now = Instant::now();
                    if let Some(held) = self.logs.accept.allow(now) {
                        tracing::warn!(error = %e, held, "accept failed; pausing accepts");
                    }
                    if self.listener.set_interest(false, false).is_ok() {
                        self.accept_paused_until = Some(now + ACCEPT_PAUSE);
                    }
                    return;
                }
            }
        }
    }

    fn admit(&mut self, stream: TcpStream, peer: SocketAddr) {
        let cfg = &self.shared.config;
        let counters = &self.shared.counters;
        let now = Instant::now();
        if let Some(allowed) = &cfg.allowed_peers {
            if !allowed.contains(&peer.ip()) {
                counters.refused_not_allowed.fetch_add(1, Ordering::Relaxed);
                self.shared.metrics.not_allowed.increment(1);
                if let Some(held) = self.logs.not_allowed.allow(now) {
                    tracing::warn!(%peer, held, "control connection refused: peer not on the allow-list");
                }
                return;
            }
        }
        let from_ip = self.per_ip.get(&peer.ip()).copied().unwrap_or(0);
        if self.conns.len() >= cfg.max_connections || from_ip >= cfg.max_connections_per_ip {
            counters.refused_over_cap.fetch_add(1, Ordering::Relaxed);
            self.shared.metrics.over_cap.increment(1);
            if let Some(held) = self.logs.over_cap.allow(now) {
                tracing::warn!(%peer, open = self.conns.len(), from_ip, held, "control connection refused: over the connection cap");
            }
            let why = if from_ip >= cfg.max_connections_per_ip {
                format!(
                    "over its connection cap of {} per peer address",
                    cfg.max_connections_per_ip
                )
            } else {
                format!("over its connection cap of {}", cfg.max_connections)
            };
            refuse(stream, status::RESOURCE_EXHAUSTED, why);
            return;
        }
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1).max(LISTENER_KEY + 1);
        let registered = stream
            .set_nonblocking(true)
            .and_then(|()| stream.set_nodelay(true))
            .and_then(|()| Registered::new(&self.shared.poller, stream, key));
        let sock = match registered {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "cannot watch a control connection; closed");
                return;
            }
        };
        let secret = self.shared.config.shared_secret.is_some();
        self.conns.insert(key, Conn::new(sock, peer, now, secret));
        *self.per_ip.entry(peer.ip()).or_default() += 1;
        counters.open_connections.fetch_add(1, Ordering::Relaxed);
        self.refresh_deadline(key);
    }

    fn on_ready(&mut self, key: usize, readable: bool, writable: bool, scratch: &mut [u8]) {
        if let Err(why) = self.step(key, readable, writable, scratch) {
            self.close(key, why);
        } else {
            self.refresh_deadline(key);
        }
    }

    /// Moves one connection along; `Err` closes it.
    fn step(
        &mut self,
        key: usize,
        readable: bool,
        writable: bool,
        scratch: &mut [u8],
    ) -> Result<(), Close> {
        let Some(conn) = self.conns.get_mut(&key) else {
            return Ok(());
        };
        if writable || conn.peer_eof {
            conn.flush()?;
            if conn.peer_eof && !conn.has_pending_output() {
                return Err(Close::Done);
            }
        }
        if !readable || conn.peer_eof {
            return Ok(());
        }
        let eof = conn.read_ready(scratch)?;
        self.process(key)?;
        let Some(conn) = self.conns.get_mut(&key) else {
            return Ok(());
        };
        if eof {
            if conn.has_pending_output() {
                return conn.set_peer_eof();
            }
            return Err(conn.eof_reason());
        }
        Ok(())
    }

    /// Handles every complete input buffered on `key`.
    pub(super) fn process(&mut self, key: usize) -> Result<(), Close> {
        loop {
            let Some(conn) = self.conns.get_mut(&key) else {
                return Ok(());
            };
            match conn.next_input(&self.shared.config)? {
                None => return Ok(()),
                Some(Input::Heartbeat) => {
                    let now = Instant::now();
                    if let Phase::Session(s) = &mut conn.phase {
                        s.last_heartbeat = now;
                        if let Some(e) = self.shared.sessions.lock().get_mut(&s.channel_id) {
                            e.last_heartbeat = now;
                        }
                    }
                }
                Some(Input::Subscribe) => {
                    if let Phase::Session(s) = &mut conn.phase {
                        s.updates = true;
                    }
                }
                Some(Input::RevokeAck) => {
                    if !conn.waiters.is_empty() {
                        conn.waiters.remove(0).closed();
                    }
                }
                Some(Input::Request(frame)) => self.on_request(key, frame)?,
            }
        }
    }

    /// Reads what an existing session has sent, so a session whose client has gone is closed
    /// now (a reconnect under the same id may be racing its old socket's EOF).
    pub(super) fn probe(&mut self, key: usize) {
        let mut scratch = vec![0u8; 4096];
        self.on_ready(key, true, false, &mut scratch);
    }

    fn refresh_deadline(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(&key) else {
            return;
        };
        let want = conn.deadline(&self.shared.config).map(|(t, _)| t);
        if want != conn.indexed_deadline {
            if let Some(old) = conn.indexed_deadline {
                self.deadlines.remove(&(old, key));
            }
            if let Some(new) = want {
                self.deadlines.insert((new, key));
            }
            conn.indexed_deadline = want;
        }
    }

    fn expire(&mut self, now: Instant, scratch: &mut [u8]) {
        if self.accept_paused_until.is_some_and(|t| t <= now) {
            self.accept_paused_until = None;
            if let Err(e) = self.listener.set_interest(true, false) {
                tracing::error!(error = %e, "cannot resume accepting control connections");
            }
        }
        while let Some(&(t, key)) = self.deadlines.first() {
            if t > now {
                break;
            }
            // Read what has arrived first: a heartbeat or the last byte of a request may be
            // waiting behind this wake-up.
            self.on_ready(key, true, false, scratch);
            let Some(conn) = self.conns.get(&key) else {
                continue;
            };
            match conn.deadline(&self.shared.config) {
                Some((due, why)) if due <= now => self.close(key, why),
                _ => self.refresh_deadline(key),
            }
        }
    }

    fn run_commands(&mut self) {
        let commands: Vec<Command> = std::mem::take(&mut *self.shared.commands.lock());
        for c in commands {
            match c {
                Command::Revoke { va_addrs, wait } => {
                    let keys: Vec<usize> = self
                        .conns
                        .iter()
                        .filter(|(_, c)| match &c.phase {
                            // A session revoked before (its write side shut or being shut) is
                            // not waited for again.
                            Phase::Session(s) if !c.revoked() => {
                                va_addrs.iter().any(|a| s.offered.binary_search(a).is_ok())
                            }
                            _ => false,
                        })
                        .map(|(&k, _)| k)
                        .collect();
                    // Count first: a session may close while its write side is shut.
                    for k in &keys {
                        if let Some(c) = self.conns.get_mut(k) {
                            c.waiters.push(wait.clone());
                        }
                    }
                    wait.started(keys.len());
                    for k in keys {
                        if let Some(c) = self.conns.get_mut(&k) {
                            if let Err(why) = revoke_session(c, &va_addrs) {
                                self.close(k, why);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Closes connection `key`: counts and logs why, ends its session, frees its descriptor.
    pub(super) fn close(&mut self, key: usize, why: Close) {
        let Some(conn) = self.conns.remove(&key) else {
            return;
        };
        if let Some(t) = conn.indexed_deadline {
            self.deadlines.remove(&(t, key));
        }
        if let Some(n) = self.per_ip.get_mut(&conn.peer.ip()) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&conn.peer.ip());
            }
        }
        let shared = self.shared.clone();
        shared
            .counters
            .open_connections
            .fetch_sub(1, Ordering::Relaxed);
        self.count_and_log(&conn, &why);
        if let Phase::Session(s) = &conn.phase {
            let ours = |sessions: &HashMap<String, SessionEntry>| {
                sessions.get(&s.channel_id).is_some_and(|e| e.key == key)
            };
            // Only this thread adds and removes sessions: the entry checked here is still
            // the one removed after the handler ran (it stays listed until then).
            if ours(&shared.sessions.lock()) {
                shared.handler.session_closed(&s.channel_id);
                shared.sessions.lock().remove(&s.channel_id);
                shared.counters.sessions.fetch_sub(1, Ordering::Relaxed);
                shared.metrics.sessions.decrement(1.0);
                tracing::debug!(channel = %s.channel_id, reason = ?why, "session ended");
            }
        }
        // Dropping `conn` deletes the socket from the poller, closes it and releases any
        // revocation waiting for it.
    }

    fn count_and_log(&mut self, conn: &Conn, why: &Close) {
        let c = &self.shared.counters;
        let now = Instant::now();
        let peer = conn.peer;
        match why {
            Close::Malformed(e) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                if let Some(held) = self.logs.malformed.allow(now) {
                    tracing::error!(%peer, error = %e, held, "control connection closed: bad request");
                }
            }
            Close::Auth(what) => {
                c.auth_failures.fetch_add(1, Ordering::Relaxed);
                if let Some(held) = self.logs.auth.allow(now) {
                    tracing::warn!(%peer, held, "control connection closed: {what}");
                }
            }
            Close::Deadline | Close::Reaped => {
                let counter = if matches!(why, Close::Reaped) {
                    &c.reaped
                } else {
                    &c.closed_at_deadline
                };
                counter.fetch_add(1, Ordering::Relaxed);
                if let Some(held) = self.logs.deadline.allow(now) {
                    tracing::warn!(%peer, held, reason = ?why, "control connection closed at its deadline");
                }
            }
            Close::Io(e) => tracing::debug!(%peer, error = %e, "control connection failed"),
            Close::Done | Close::Disconnected | Close::Stopping => {}
        }
    }
}

/// Answers a connection refused at once with a status saying why, if the socket takes it
/// without waiting (a fresh socket's send buffer is empty), and closes it: the peer reads why
/// instead of a bare close. What the peer sent already is read and dropped first, so the
/// close is a FIN after the status, not a reset that could overtake it.
fn refuse(stream: TcpStream, code: u32, why: String) {
    let frame = Frame::new(
        MsgType::Status,
        &StatusMsg {
            error_code: code,
            error_message: why,
        },
    );
    let (Ok(f), Ok(())) = (frame, stream.set_nonblocking(true)) else {
        return;
    };
    let _ = (&stream).write(&f.encode());
    let mut scratch = [0u8; 4096];
    for _ in 0..16 {
        match (&stream).read(&mut scratch) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

/// Revokes `va_addrs` for one session that was offered some of them (its waiter pushed
/// already): a client that takes revocations on its keepalive socket is sent those of them
/// it was offered, and answers once it has let go of them (the session stays); any other has
/// the write side of its session shut, so it sees EOF and tears its channel down.
fn revoke_session(c: &mut Conn, va_addrs: &[u64]) -> Result<(), Close> {
    let Phase::Session(s) = &mut c.phase else {
        return Ok(());
    };
    if !s.updates {
        tracing::info!(peer = %c.peer, "session revoked");
        return c.shut_write_when_flushed();
    }
    let mine: Vec<u64> = va_addrs
        .iter()
        .copied()
        .filter(|a| s.offered.binary_search(a).is_ok())
        .collect();
    s.offered.retain(|a| !mine.contains(a));
    tracing::info!(peer = %c.peer, segments = mine.len(), "segments revoked");
    let msg = serde_json::to_vec(&RevokeMsg { va_addrs: mine }).expect("numbers serialize");
    c.queue(&wire::keepalive_bytes(wire::KEEPALIVE_REVOKE, &msg));
    c.flush()
}
