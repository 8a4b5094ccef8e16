//! Connecting to peers and letting them go: `connect` (importing what a peer offers),
//! `disconnect` and the loss of a peer on request, `AutoConnect`'s disconnect after a failed
//! transfer, and notifies (the engine's side of the control-plane client).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::channel::{self, Channel};
use crate::control;
use crate::engine::{Engine, EngineInner};
use crate::error::{Error, LostReason, Result};
use crate::metrics::PeerMetrics;
use crate::options::{EngineAddr, OptionError};
use crate::remote::Remote;
use crate::stats::Window;
use crate::wire::NotifyMsg;

/// A control exchange's error: [`Error::Timeout`] naming `what` when its time ran out (the
/// server could not be reached in time, or did not answer), [`Error::Control`] otherwise.
pub(crate) fn timed_out(e: control::ClientError, what: &'static str, after: Duration) -> Error {
    if e.is_timeout() {
        tracing::debug!(error = %e, "{what} timed out");
        Error::Timeout { what, after }
    } else {
        e.into()
    }
}

impl EngineInner {
    /// The channel to `peer`, if connected.
    ///
    /// # Errors
    /// [`Error::NotConnected`].
    pub(crate) fn channel(&self, peer: &str) -> Result<Arc<Channel>> {
        self.channels
            .read()
            .get(peer)
            .cloned()
            .ok_or_else(|| Error::NotConnected {
                peer: peer.to_owned(),
            })
    }

    /// `AutoConnect`'s disconnect after a failed transfer on `ch` (bounded by the connect
    /// timeout; a channel made since is left alone).
    pub(crate) fn auto_disconnect(&self, ch: &Arc<Channel>) {
        tracing::info!(peer = %ch.peer, "AutoConnect: disconnecting after a failed transfer");
        if let Err(e) = self.disconnect(&ch.peer, Some(ch), self.opts.connect_timeout) {
            tracing::debug!(peer = %ch.peer, error = %e, "AutoConnect: already disconnected");
        }
    }

    /// [`Engine::disconnect`]; with `only`, only if the channel to `remote` is that one (a
    /// channel made since, by a reconnect, stays).
    pub(crate) fn disconnect(
        &self,
        remote: &str,
        only: Option<&Arc<Channel>>,
        timeout: Duration,
    ) -> Result<()> {
        let _span = tracing::info_span!("disconnect", engine = %self.addr, peer = remote).entered();
        // Serialised with connects, request to the peer included: a connect to the same peer
        // made after this disconnect reaches the peer after the disconnect request, so the
        // request cannot close the new session (it names the channel, not the session).
        let _serial = self.connect_lock.lock();
        let ch = match self.channels.read().get(remote) {
            Some(c) if only.map_or(true, |o| Arc::ptr_eq(o, c)) => c.clone(),
            _ => {
                return Err(Error::NotConnected {
                    peer: remote.to_owned(),
                })
            }
        };
        // In-flight transfers fail, imports are unmapped, then the channel leaves the map.
        if channel::lose(&self.channels, &ch, LostReason::Disconnected) {
            if let Err(e) = control::disconnect(
                ch.addr,
                &self.channel_id,
                timeout,
                self.opts.shared_secret.as_deref(),
            ) {
                tracing::debug!(peer = remote, error = %e, "disconnect request not delivered");
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Connects to the engine at `remote` (`ip:port`, the peer's own address string), imports
    /// every segment it offers into this engine's VA pool, and keeps a keepalive channel.
    ///
    /// A channel to `remote` that is going is not in the way: one whose teardown is under way
    /// is waited for, and one whose peer has closed the keepalive socket (its process died,
    /// and its reader has not noticed yet) is torn down first, so a reconnect right after a
    /// peer died needs no retry loop once the peer's close has reached this host (a peer
    /// whose host vanished sends none: its channel ends when a heartbeat goes unacknowledged
    /// for [`EngineOptions::peer_timeout`](crate::EngineOptions::peer_timeout)).
    ///
    /// # Errors
    /// [`Error::AlreadyConnected`] for a channel that is open; [`Error::Option`] for an address
    /// without a port; [`Error::Timeout`] when the peer could not be reached, or did not
    /// answer, within `timeout`;
    /// [`Error::Control`] (unreachable, refused, malformed reply); [`Error::BadEntry`] or
    /// [`Error::Mem`] for an entry that cannot be imported or mapped (everything imported so
    /// far is undone); [`Error::ResourceExhausted`] when the VA pool is full;
    /// [`Error::Listen`] when the keepalive socket cannot be set up (its peer timeout set,
    /// or its reader's copy made: out of descriptors or threads).
    pub fn connect(&self, remote: &str, timeout: Duration) -> Result<()> {
        self.connect_by(remote, timeout, None)
    }

    /// [`Engine::connect`]; with `until`, the whole call (waiting for another connect or
    /// disconnect of this engine included) ends by then.
    pub(crate) fn connect_by(
        &self,
        remote: &str,
        timeout: Duration,
        until: Option<Instant>,
    ) -> Result<()> {
        let _span =
            tracing::info_span!("connect", engine = %self.inner.addr, peer = remote).entered();
        let r = self.try_connect(remote, timeout, until);
        if let Err(e) = &r {
            self.inner.connect_failures.increment(1);
            tracing::debug!(error = %e, "connect failed");
        }
        r
    }

    /// What a channel to `remote` records into: its metrics handles and summary figures.
    fn telemetry(&self, remote: &str) -> (PeerMetrics, Window) {
        let summary = self.inner.opts.summary_interval.is_some();
        (
            PeerMetrics::new(&self.inner.channel_id, remote),
            Window::new(summary),
        )
    }

    fn try_connect(&self, remote: &str, timeout: Duration, until: Option<Instant>) -> Result<()> {
        let addr = EngineAddr::parse(remote)?;
        if !addr.listens() {
            return Err(OptionError::BadAddress {
                value: remote.to_owned(),
                reason: "a peer address needs a port",
            }
            .into());
        }
        let inner = &self.inner;
        let (_serial, timeout) = match until {
            None => (inner.connect_lock.lock(), timeout),
            Some(d) => {
                let g = inner.connect_lock.try_lock_until(d).ok_or(Error::Timeout {
                    what: "connect on demand (waiting for another connect to finish)",
                    after: timeout,
                })?;
                let left = timeout.min(d.saturating_duration_since(Instant::now()));
                if left.is_zero() {
                    return Err(Error::Timeout {
                        what: "connect on demand (no time left after another connect)",
                        after: timeout,
                    });
                }
                (g, left)
            }
        };
        let existing = inner.channels.read().get(remote).cloned();
        if let Some(ch) = existing {
            // A channel whose peer has gone is torn down first (or its teardown, already
            // under way, waited for), so a reconnect right after a peer died connects.
            if ch.peer_closed() {
                channel::lose(&inner.channels, &ch, LostReason::KeepaliveClosed);
            } else if ch.is_open() {
                return Err(Error::AlreadyConnected {
                    peer: remote.to_owned(),
                });
            }
        }
        let sa = addr.socket_addr();
        let c = control::connect(
            sa,
            &inner.channel_id,
            timeout,
            inner.opts.shared_secret.as_deref(),
        )
        .map_err(|e| timed_out(e, "connect: the control exchange with the peer", timeout))?;
        let keepalive = c.keepalive;
        let made = Remote::import_entries(&inner.dev, &inner.pool, remote, &c.entries, &c.names)
            .and_then(|rem| {
                let io = |source| Error::Listen { addr: sa, source };
                channel::set_peer_timeout(&keepalive, inner.opts.peer_timeout).map_err(io)?;
                let reader = keepalive.try_clone().map_err(io)?;
                Ok((
                    Channel::new(remote, sa, rem, keepalive, self.telemetry(remote)).map_err(io)?,
                    reader,
                ))
            });
        let (ch, reader_sock) = match made {
            Ok(x) => x,
            Err(e) => {
                // The peer has opened a session for us: end it (its socket is closed already)
                // and wait for its answer, so a retry is not refused as a duplicate.
                let secret = inner.opts.shared_secret.as_deref();
                if let Err(d) = control::disconnect(sa, &inner.channel_id, timeout, secret) {
                    tracing::debug!(peer = remote, error = %d, "disconnect after a failed connect");
                }
                return Err(e);
            }
        };
        // In the map before the reader starts, so a peer that closes at once is taken out
        // of it again by the reader (not left there, lost, after it).
        inner.channels.write().insert(remote.to_owned(), ch.clone());
        if let Err(source) = channel::start(reader_sock, &ch, Arc::downgrade(&inner.channels)) {
            channel::lose(&inner.channels, &ch, LostReason::Disconnected);
            return Err(Error::Listen { addr: sa, source });
        }
        ch.subscribe();
        ch.book.metrics.connected();
        tracing::info!(peer = remote, segments = ch.stats().segments, "connected");
        Ok(())
    }

    /// Disconnects from `remote`: in-flight transfers to it fail with [`Error::PeerLost`]
    /// (reason [`LostReason::Disconnected`]) after their streams are aborted, a disconnect
    /// request goes to the peer on a new connection (its result is ignored, as in HIXL), and
    /// every import is unmapped and freed with its VA returned to the pool. Streams of
    /// transfers dropped earlier whose aborts are still draining (a copy the device had
    /// started) are waited for before the unmap.
    ///
    /// # Errors
    /// [`Error::NotConnected`].
    pub fn disconnect(&self, remote: &str, timeout: Duration) -> Result<()> {
        self.inner.disconnect(remote, None, timeout)
    }

    /// Ends the channel to `remote` for `reason`, as a closed keepalive socket does: its
    /// in-flight transfers fail with [`Error::PeerLost`] carrying `reason` after their streams
    /// are aborted, and its imports are unmapped, all before it leaves [`Engine::peers`]; the
    /// peer sees the keepalive socket close. No disconnect request is sent (for a peer known
    /// to be gone, e.g. one that left the engine directory). Returns whether a channel was
    /// ended here (false: none, or it was being lost already).
    pub fn lose_peer(&self, remote: &str, reason: LostReason) -> bool {
        let ch = self.inner.channels.read().get(remote).cloned();
        ch.is_some_and(|ch| channel::lose(&self.inner.channels, &ch, reason))
    }

    /// Sends a notify to `remote` (HIXL's `SendNotify`, on a new connection, no reply: a
    /// notify the peer's server drops, for example over its connection cap, is not reported).
    ///
    /// # Errors
    /// [`Error::Control`] (unreachable peer, name or message over
    /// [`MAX_NOTIFY_FIELD`](crate::MAX_NOTIFY_FIELD) bytes, HIXL's limit);
    /// [`Error::Timeout`] when the peer could not be reached within `timeout`.
    pub fn send_notify(
        &self,
        remote: &str,
        name: &str,
        msg: &str,
        timeout: Duration,
    ) -> Result<()> {
        let addr = EngineAddr::parse(remote)?;
        control::send_notify(
            addr.socket_addr(),
            &NotifyMsg {
                name: name.to_owned(),
                notify_msg: msg.to_owned(),
            },
            timeout,
            self.inner.opts.shared_secret.as_deref(),
        )
        .map_err(|e| {
            timed_out(
                e,
                "send_notify: the control exchange with the peer",
                timeout,
            )
        })?;
        Ok(())
    }

    /// Drains the notifies received (`GetNotifies`).
    pub fn take_notifies(&self) -> Vec<(String, String)> {
        self.inner
            .server
            .lock()
            .as_ref()
            .map(|s| {
                s.take_notifies()
                    .into_iter()
                    .map(|n| (n.name, n.notify_msg))
                    .collect()
            })
            .unwrap_or_default()
    }
}
