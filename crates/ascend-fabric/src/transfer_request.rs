//! `TransferRequest`: the caller's handle of an asynchronous transfer, over the request's
//! state (`request.rs`) and the engine's progress thread that watches it (`progress.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::request::ReqInner;
use crate::transfer::TransferStatus;

/// An asynchronous transfer (`TransferAsync`'s request).
///
/// Observe it with [`TransferRequest::status`] or [`TransferRequest::wait`], await it (it is a
/// `Future` of the same outcome, for any executor: the engine's progress thread wakes the
/// task when it ends), or hand it to a [`CompletionQueue`](crate::CompletionQueue).
///
/// # How a transfer that did not complete ends
/// One outcome per cause, each naming the peer, and the request stays known until dropped
/// (never HIXL's "request not found"):
/// * this engine disconnected the peer: [`Error::PeerLost`](crate::Error::PeerLost) with
///   [`LostReason::Disconnected`](crate::LostReason::Disconnected);
/// * the peer was lost (its process died, it stopped reading heartbeats, it left the
///   directory) or the engine shut down: `PeerLost` with that [`LostReason`](crate::LostReason);
/// * a [`cancel`](TransferRequest::cancel): [`Error::Cancelled`](crate::Error::Cancelled);
/// * a copy failed: [`Error::Mem`](crate::Error::Mem) or
///   [`Error::CopyRefused`](crate::Error::CopyRefused); a sync wait's time ran out:
///   [`Error::Timeout`](crate::Error::Timeout).
///
/// [`status`](Self::status) is then `Failed`; the first [`wait`](Self::wait) (or the future,
/// or the queue's completion) returns the error, and later waits
/// [`Error::AlreadyReported`](crate::Error::AlreadyReported) with its text.
///
/// # Dropping it
/// Dropping it while the transfer runs aborts the transfer and returns at once, without
/// waiting for the runtime: its streams are aborted (`aclrtStreamAbort`: queued copies are
/// discarded; when the engine's progress thread is waiting on those streams at that moment,
/// it aborts them as soon as its wait ends, within a few milliseconds), and everything a copy
/// may still touch (its streams, the registrations it uses,
/// the peer's imports) stays alive until the engine's progress thread sees the streams done
/// and releases them; so no memory is unmapped or freed under a copy. Until then
/// [`Engine::deregister`](crate::Engine::deregister) of a registration it used reports
/// [`Error::Busy`](crate::Error::Busy) (a plain drop of the registration defers), and its
/// stream slot is not yet free. A copy the device had already started may still land after
/// the drop: to reuse the destination at once, [`cancel`](Self::cancel) first (it waits).
/// Disconnecting the peer or shutting the engine down waits for such streams.
///
/// This is also how an awaited transfer is cancelled (dropping the future), e.g. by a
/// `select!` or a timeout. So a request left unused is a transfer aborted at once, which the
/// compiler points out:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # use ascend_fabric::{Engine, TransferDesc, TransferOp};
/// # fn f(engine: &Engine, d: TransferDesc) -> ascend_fabric::Result<()> {
/// engine.transfer_async("10.0.0.2:26000", TransferOp::Write, &[d])?; // error: unused
/// # Ok(())
/// # }
/// ```
///
/// ```
/// #![deny(unused_must_use)]
/// # use ascend_fabric::{Engine, TransferDesc, TransferOp};
/// # use std::time::Duration;
/// # fn f(engine: &Engine, d: TransferDesc) -> ascend_fabric::Result<()> {
/// let req = engine.transfer_async("10.0.0.2:26000", TransferOp::Write, &[d])?;
/// req.wait(Duration::from_secs(5))?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping a TransferRequest aborts the transfer"]
pub struct TransferRequest {
    pub(crate) inner: Arc<ReqInner>,
    pub(crate) peer: String,
    /// The engine's progress thread, which observes the request while it is awaited.
    pub(crate) progress: Arc<Progress>,
}

impl std::fmt::Debug for TransferRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferRequest")
            .field("id", &self.inner.id)
            .field("peer", &self.peer)
            .finish()
    }
}

impl TransferRequest {
    /// A sequence number, unique in the process (across engines; HIXL's `TransferReq`
    /// value).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The peer.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Checks without waiting for the copies (`GetTransferStatus`). With `AutoConnect`, the
    /// call that first sees a failed copy also disconnects the peer (a request to it,
    /// bounded by the connect timeout).
    pub fn status(&self) -> TransferStatus {
        let st = self.inner.status();
        self.inner.disconnect_if_due(false);
        st
    }

    /// Waits up to `timeout` for the transfer. On timeout the transfer keeps running (wait
    /// again, or drop the request to abort it).
    ///
    /// # Errors
    /// [`Error::Timeout`]; the transfer's failure ([`Error::PeerLost`] when the peer died or
    /// was disconnected, [`Error::Mem`] for a failed copy, [`Error::CopyRefused`] for a copy
    /// the runtime refused at submission, [`Error::Cancelled`] after
    /// [`cancel`](Self::cancel)); [`Error::AlreadyReported`] when an earlier call returned the
    /// failure already.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        let r = self.inner.wait(Instant::now().checked_add(timeout));
        self.inner.disconnect_if_due(false);
        match r {
            Some(r) => r,
            None => Err(Error::Timeout {
                what: "transfer",
                after: timeout,
            }),
        }
    }
}

impl TransferRequest {
    /// Cancels the transfer if its copies have not ended: they are aborted and their streams
    /// waited for, so when this returns no copy of it touches memory any more (as when the
    /// request is dropped, but the request stays to be asked, and then reports
    /// [`Error::Cancelled`]). Returns whether it was still running; a transfer whose copies
    /// had ended, observed or not, keeps its outcome (as does one past its stall deadline,
    /// which ends as that [`Error::Timeout`]). Under `AutoConnect` a failed copy this finds
    /// disconnects the peer, as any observation does.
    pub fn cancel(&self) -> bool {
        let cancelled = self.inner.cancel(&self.peer);
        self.inner.disconnect_if_due(false);
        cancelled
    }
}

impl Drop for TransferRequest {
    fn drop(&mut self) {
        match self.inner.try_abort_detached() {
            Some(Some(book)) => self.progress.drain(book),
            Some(None) => {}
            // Held right now (a moment's observation, a teardown): the progress thread
            // aborts it as soon as the holder lets go, never this one waiting.
            None => self.progress.abort(self.inner.clone()),
        }
        // A failure seen by someone else (the progress thread) still disconnects under
        // AutoConnect.
        self.inner.disconnect_if_due(false);
    }
}
