//! A connected peer's segments growing: the peer's registrations made after the connect
//! become reachable without a reconnect ([`Engine::refresh_segments`], and on a miss by the
//! blocking calls), asked for with the segments request of this crate's control plane.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::channel::Channel;
use crate::connect::timed_out;
use crate::control::{self, ClientError};
use crate::engine::{Engine, AUTO_CONNECT_TIMEOUT};
use crate::error::{Error, Result};
use crate::remote::Remote;
use crate::wire::WireError;

impl Engine {
    /// Asks `remote` for the segments it offers now and imports those it registered since
    /// this engine connected (or last asked), without reconnecting: transfers in flight go
    /// on untouched, submissions wait only while the new imports are swapped in, and
    /// prepared lists stay valid. Returns how many segments were added. Names the peer gave
    /// its registrations are refreshed too (for
    /// [`SegmentRef::Name`](crate::SegmentRef::Name)).
    ///
    /// [`Engine::prepare_remote`] does this by itself when a segment it is given is not
    /// known, and so do [`Engine::transfer_sync`] and [`Engine::transfer_async`] when a
    /// descriptor's remote range is in no known segment (then the transfer is checked again).
    /// A future ([`Engine::post`], [`Engine::transfer`]) never does, so that a poll never
    /// waits on the network: call this first.
    ///
    /// A C++ HIXL peer has no such request: its segments are those it offered at the
    /// connect (HIXL's rule: register before peers connect, or reconnect to see more); this
    /// returns [`Error::SegmentsFixed`] and the channel stays as it was.
    ///
    /// # Errors
    /// [`Error::NotConnected`]; [`Error::SegmentsFixed`]; [`Error::Timeout`] when the peer did
    /// not answer within `timeout`; [`Error::Control`] for any other failed exchange;
    /// [`Error::BadEntry`] or [`Error::Mem`] when a new segment cannot be imported (then
    /// none of this answer's new segments is).
    pub fn refresh_segments(&self, remote: &str, timeout: Duration) -> Result<usize> {
        let ch = self.inner.channel(remote)?;
        self.refresh_channel(&ch, timeout)
    }

    pub(crate) fn refresh_channel(&self, ch: &Arc<Channel>, timeout: Duration) -> Result<usize> {
        let inner = &self.inner;
        let fixed = || Error::SegmentsFixed {
            peer: ch.peer.clone(),
        };
        if ch.is_fixed() {
            return Err(fixed());
        }
        let secret = inner.opts.shared_secret.as_deref();
        let (entries, names) = match control::segments(ch.addr, &inner.channel_id, timeout, secret)
        {
            Ok(x) => x,
            // A server that knows no segments request closes the connection before a byte of
            // an answer (HIXL's rule for a type it does not know); any other failure may pass.
            Err(
                e @ ClientError::Wire {
                    source: WireError::Truncated { got: 0, .. },
                    ..
                },
            ) if !ch.peer_closed() => {
                tracing::debug!(peer = %ch.peer, error = %e, "no segments request at the peer");
                ch.set_fixed();
                return Err(fixed());
            }
            Err(e) => {
                return Err(timed_out(
                    e,
                    "refresh_segments: the control exchange",
                    timeout,
                ))
            }
        };
        let grow = |old: &Remote| old.extend(&inner.dev, &inner.pool, &ch.peer, &entries, &names);
        let added = ch.grow(grow).ok_or_else(|| Error::NotConnected {
            peer: ch.peer.clone(),
        })??;
        if added > 0 {
            tracing::info!(peer = %ch.peer, added, "peer segments refreshed");
        }
        Ok(added)
    }

    /// After a lookup that missed the peer's known segments: refreshes them (within
    /// [`AUTO_CONNECT_TIMEOUT`] and `deadline`) unless the peer's are fixed; whether any were
    /// added.
    pub(crate) fn refresh_on_miss(&self, ch: &Arc<Channel>, deadline: Option<Instant>) -> bool {
        if ch.is_fixed() {
            return false;
        }
        let left = deadline.map_or(AUTO_CONNECT_TIMEOUT, |d| {
            AUTO_CONNECT_TIMEOUT.min(d.saturating_duration_since(Instant::now()))
        });
        if left.is_zero() {
            return false;
        }
        match self.refresh_channel(ch, left) {
            Ok(added) => added > 0,
            Err(e) => {
                tracing::debug!(peer = %ch.peer, error = %e, "segments not refreshed");
                false
            }
        }
    }
}
