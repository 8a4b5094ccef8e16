//! Transfers and connects as futures, for any executor (the crate depends on no runtime):
//! [`TransferRequest`] is a future of its outcome; [`Engine::post`] waits for a free stream
//! slot instead of failing (back-pressure) and resolves to the running request;
//! [`Engine::transfer`] does both; [`Engine::connect_async`] connects on a helper thread.
//!
//! Who wakes them: a request's waker is woken by whoever sees it end, in practice the
//! engine's progress thread (see `progress.rs`), or a teardown that fails it; a slot waiter's
//! by whoever gives a slot back; a connect's by its helper thread.
//!
//! Cancellation is dropping, and a drop never waits: a running request's copies are aborted,
//! and what they touch stays alive until the engine's progress thread sees their streams done
//! (see [`TransferRequest`]); a submission still waiting for a slot leaves the queue (a slot
//! handed to it meanwhile goes on to the next waiter); nothing is queued before a slot is held.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::engine::{Engine, AUTO_CONNECT_TIMEOUT};
use crate::error::{Error, Result};
use crate::plan;
use crate::prepared::{LocalBlocks, RemoteBlocks};
use crate::progress::Urgency;
use crate::request::{Observer, ReqInner};
use crate::slots::{SlotFrom, SlotGuard, SlotPool, SlotWaiter};
use crate::transfer::{TransferDesc, TransferOp, TransferOptions};
use crate::transfer_request::TransferRequest;

impl Future for TransferRequest {
    type Output = Result<()>;

    /// Ready with the transfer's outcome, as [`TransferRequest::wait`] returns it (a second
    /// poll after that gives [`Error::AlreadyReported`] for a failure). Each poll also checks
    /// the request's completion flags (or events) itself; while pending, the engine's progress thread watches the request and
    /// wakes the task when it ends. With `AutoConnect`, the poll that returns a failed copy
    /// disconnects the peer first (a request to it, bounded by the connect timeout).
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if let Some(r) = this.inner.try_take() {
            this.inner.disconnect_if_due(false);
            return Poll::Ready(r);
        }
        if !this.inner.set_waker(cx.waker()) {
            // Ended and told already: the outcome is there (blocking only on a short hold).
            let r = this.inner.wait(None).unwrap_or(Err(Error::Aborted));
            this.inner.disconnect_if_due(false);
            return Poll::Ready(r);
        }
        if !this.progress.watch(&this.inner, Urgency::Now) {
            // Nobody else will look: ask to be polled again.
            cx.waker().wake_by_ref();
        }
        if let Some(r) = this.inner.try_take() {
            this.inner.disconnect_if_due(false);
            return Poll::Ready(r);
        }
        Poll::Pending
    }
}

/// What a connect's helper thread and its future share.
#[derive(Default)]
struct ConnectShared {
    result: Option<Result<()>>,
    waker: Option<Waker>,
    /// What was returned (an error as its text): a later poll gets it again (an error as
    /// `AlreadyReported`), as a finished request's does, never `Pending` forever.
    returned: Option<std::result::Result<(), String>>,
}

/// [`Engine::connect_async`]'s future: `Ok(())` once connected.
///
/// The connect runs on a helper thread started at the first poll (the control exchange is
/// blocking I/O). Dropping the future stops waiting, not the connect: that runs to its end
/// (within its timeout) and, if it succeeds, the channel stays (disconnect to undo it). Until
/// then the helper keeps the engine alive. Polled again once finished, it gives its outcome
/// again (an error as [`Error::AlreadyReported`] with its text), as a finished request does.
#[must_use = "futures do nothing unless polled; dropping it stops waiting (a connect already started runs to its end)"]
pub struct Connect {
    engine: Engine,
    remote: String,
    timeout: Duration,
    /// With `until`, as an on-demand connect: `AlreadyConnected` counts as done.
    until: Option<Instant>,
    shared: Option<Arc<Mutex<ConnectShared>>>,
}

impl std::fmt::Debug for Connect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connect")
            .field("remote", &self.remote)
            .field("started", &self.shared.is_some())
            .finish()
    }
}

impl Connect {
    fn start(&mut self, cx: &Context<'_>) -> Result<Arc<Mutex<ConnectShared>>> {
        let shared = Arc::new(Mutex::new(ConnectShared {
            result: None,
            waker: Some(cx.waker().clone()),
            returned: None,
        }));
        let (engine, remote, timeout, until) = (
            self.engine.clone(),
            self.remote.clone(),
            self.timeout,
            self.until,
        );
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("fabric-connect".into())
            .spawn(move || {
                let r = match engine.connect_by(&remote, timeout, until) {
                    Err(Error::AlreadyConnected { .. }) if until.is_some() => Ok(()),
                    r => r,
                };
                drop(engine);
                let waker = {
                    let mut s = theirs.lock();
                    s.result = Some(r);
                    s.waker.take()
                };
                if let Some(w) = waker {
                    w.wake();
                }
            })
            .map_err(|source| Error::Listen {
                addr: self.engine.local_addr().socket_addr(),
                source,
            })?;
        Ok(shared)
    }
}

impl Future for Connect {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let shared = match &this.shared {
            Some(s) => s.clone(),
            None => match this.start(cx) {
                Ok(s) => {
                    this.shared = Some(s.clone());
                    s
                }
                Err(e) => {
                    // Remembered, so a later poll gives it again instead of starting anew.
                    this.shared = Some(Arc::new(Mutex::new(ConnectShared {
                        result: None,
                        waker: None,
                        returned: Some(Err(e.to_string())),
                    })));
                    return Poll::Ready(Err(e));
                }
            },
        };
        let mut s = shared.lock();
        if let Some(r) = s.result.take() {
            s.returned = Some(r.as_ref().map(|_| ()).map_err(ToString::to_string));
            return Poll::Ready(r);
        }
        if let Some(r) = &s.returned {
            return Poll::Ready(r.clone().map_err(Error::AlreadyReported));
        }
        if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

enum Stage {
    Start,
    /// `AutoConnect`: connecting on demand first.
    Connecting(Connect),
    /// Queued for a slot (`None` until the first poll that found none free).
    Slot(Option<Arc<SlotWaiter>>),
    Done,
}

/// What a [`Post`] submits.
enum What {
    /// Raw descriptors (copied).
    Raw(Vec<TransferDesc>),
    /// (local block, remote block) pairs of two prepared lists (shared, pairs copied).
    Prepared {
        local: LocalBlocks,
        remote: RemoteBlocks,
        pairs: Vec<(usize, usize)>,
    },
}

/// [`Engine::post`]'s (or [`Engine::post_prepared`]'s) future: the running [`TransferRequest`] once the copies are queued.
///
/// It checks the descriptors and the channel at its first poll, connects first under
/// `AutoConnect`, then waits in turn for a free stream slot (woken when one is given back),
/// and queues the copies in the poll that gets it. No poll blocks on a connect: under
/// `AutoConnect` the connect runs on a helper thread (as [`Engine::connect_async`]), also
/// when the channel went away while the future waited for its slot (the slot goes on to
/// the next waiter, and the future queues again once connected); without it, that ends the
/// future with [`Error::NotConnected`]. (A prepared list is bound to its channel: there is no
/// connect, and a lost channel ends the future with the list's error.) Dropping it before
/// then cancels the submission: nothing was queued, it leaves the slot queue, and a slot handed to it
/// meanwhile goes on to the next waiter.
#[must_use = "futures do nothing unless polled; dropping it cancels the submission (nothing is queued)"]
pub struct Post {
    engine: Engine,
    remote: String,
    op: TransferOp,
    what: What,
    opts: TransferOptions,
    stage: Stage,
}

impl std::fmt::Debug for Post {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Post")
            .field("remote", &self.remote)
            .field("op", &self.op)
            .field(
                "descs",
                &match &self.what {
                    What::Raw(d) => d.len(),
                    What::Prepared { pairs, .. } => pairs.len(),
                },
            )
            .finish()
    }
}

impl Post {
    /// The first poll: early errors, then connect on demand or queue for a slot.
    fn begin(&mut self) -> Result<Stage> {
        match &self.what {
            What::Raw(descs) => {
                plan::check_descs(descs)?;
            }
            // Bound to its channel: no connect; the submission reports a lost one.
            What::Prepared { pairs, .. } if pairs.is_empty() => return Err(Error::EmptyBatch),
            What::Prepared { .. } => return Ok(Stage::Slot(None)),
        }
        if self.engine.is_connected(&self.remote) {
            return Ok(Stage::Slot(None));
        }
        self.connecting()
    }

    /// Queues the copies on the slot `guard` holds.
    fn submit(&self, guard: SlotGuard) -> Result<Arc<ReqInner>> {
        let how = (SlotFrom::Given(guard), &self.opts, Observer::Progress);
        match &self.what {
            What::Raw(descs) => {
                let (slot, opts, observer) = how;
                self.engine
                    .submit(&self.remote, self.op, descs, slot, opts, observer)
            }
            What::Prepared {
                local,
                remote,
                pairs,
            } => self
                .engine
                .submit_prepared(self.op, local, remote, pairs, how),
        }
    }

    /// Under `AutoConnect`, the stage that connects on a helper thread; else `NotConnected`.
    fn connecting(&self) -> Result<Stage> {
        if !self.engine.options().auto_connect {
            return Err(Error::NotConnected {
                peer: self.remote.clone(),
            });
        }
        Ok(Stage::Connecting(Connect {
            engine: self.engine.clone(),
            remote: self.remote.clone(),
            timeout: AUTO_CONNECT_TIMEOUT,
            until: Some(Instant::now() + AUTO_CONNECT_TIMEOUT),
            shared: None,
        }))
    }

    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Result<TransferRequest>> {
        loop {
            match &mut self.stage {
                Stage::Start => self.stage = self.begin()?,
                Stage::Connecting(c) => {
                    std::task::ready!(Pin::new(c).poll(cx))?;
                    self.stage = Stage::Slot(None);
                }
                Stage::Slot(w) => {
                    let pool = self.engine.slot_pool().clone();
                    let slot = std::task::ready!(pool.poll_acquire(w, cx))?;
                    self.stage = Stage::Done;
                    let guard = SlotGuard::from_slot(&pool, slot);
                    match self.submit(guard) {
                        // The channel went away while waiting for the slot (given back by
                        // now): connect again on the helper thread, never inside the poll.
                        Err(Error::NotConnected { .. }) if matches!(self.what, What::Raw(_)) => {
                            self.stage = self.connecting()?
                        }
                        r => return Poll::Ready(Ok(self.engine.request(r?, &self.remote))),
                    }
                }
                Stage::Done => {
                    return Poll::Ready(Err(Error::AlreadyReported(
                        "the submission was returned already".into(),
                    )))
                }
            }
        }
    }
}

impl Future for Post {
    type Output = Result<TransferRequest>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<TransferRequest>> {
        let this = self.get_mut();
        let r = this.step(cx);
        if let Poll::Ready(Err(_)) = &r {
            this.leave_queue();
            this.stage = Stage::Done;
        }
        r
    }
}

impl Post {
    /// Leaves the slot queue; a slot handed over meanwhile goes on to the next waiter.
    fn leave_queue(&mut self) {
        if let Stage::Slot(Some(w)) = &self.stage {
            let pool = self.engine.slot_pool();
            if let Some(g) = pool.withdraw(w) {
                pool.give(g);
            }
        }
    }
}

impl Drop for Post {
    fn drop(&mut self) {
        self.leave_queue();
    }
}

/// [`Engine::transfer`]'s future: [`Post`], then the [`TransferRequest`] it gives.
///
/// Dropping it cancels the transfer at whatever point it is, and returns at once: before a
/// slot is held nothing was queued; after, the copies are aborted and everything they touch
/// stays alive until the runtime says their streams are done (as for a dropped
/// [`TransferRequest`], whose docs say what that means for the memory and the slot).
#[must_use = "futures do nothing unless polled; dropping it cancels the transfer"]
#[derive(Debug)]
pub struct Transfer {
    post: Option<Post>,
    req: Option<TransferRequest>,
}

impl Future for Transfer {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if let Some(post) = &mut this.post {
            let req = std::task::ready!(Pin::new(post).poll(cx));
            this.post = None;
            this.req = Some(req?);
        }
        match &mut this.req {
            Some(req) => Pin::new(req).poll(cx),
            None => Poll::Ready(Err(Error::AlreadyReported(
                "the transfer's outcome was returned already".into(),
            ))),
        }
    }
}

impl Engine {
    /// The public request over `inner`.
    pub(crate) fn request(&self, inner: Arc<ReqInner>, remote: &str) -> TransferRequest {
        TransferRequest {
            inner,
            peer: remote.to_owned(),
            progress: self.inner.progress.clone(),
        }
    }

    /// The engine's stream slots.
    pub(crate) fn slot_pool(&self) -> &Arc<SlotPool> {
        &self.inner.slots
    }

    /// Connects to `remote` without blocking the caller: [`Engine::connect`] on a helper
    /// thread, started at the first poll.
    ///
    /// # Errors
    /// The future resolves to [`Engine::connect`]'s errors, or [`Error::Listen`] if the helper
    /// thread cannot be started.
    pub fn connect_async(&self, remote: &str, timeout: Duration) -> Connect {
        Connect {
            engine: self.clone(),
            remote: remote.to_owned(),
            timeout,
            until: None,
            shared: None,
        }
    }

    /// Submits a transfer, waiting in turn for a free stream slot instead of failing
    /// (back-pressure; [`Engine::transfer_async`] still fails at once). Resolves to the
    /// running request once its copies are queued: await it, or hand it to a
    /// [`CompletionQueue`](crate::CompletionQueue). The descriptors are copied.
    ///
    /// # Errors
    /// The future resolves to [`Engine::transfer_async`]'s errors, but not
    /// [`Error::ResourceExhausted`] for busy slots.
    pub fn post(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
        opts: TransferOptions,
    ) -> Post {
        Post {
            engine: self.clone(),
            remote: remote.to_owned(),
            op,
            what: What::Raw(descs.to_vec()),
            opts,
            stage: Stage::Start,
        }
    }

    /// [`Engine::post`] for prepared lists: submits the (local block, remote block) `pairs`
    /// as [`Engine::transfer_prepared_async`] does, waiting in turn for a free stream slot
    /// instead of failing. The lists are shared (cheap clones), the pairs copied.
    ///
    /// # Errors
    /// The future resolves to [`Engine::transfer_prepared_async`]'s errors, but not
    /// [`Error::ResourceExhausted`] for busy slots.
    pub fn post_prepared(
        &self,
        op: TransferOp,
        local: &LocalBlocks,
        remote: &RemoteBlocks,
        pairs: &[(usize, usize)],
        opts: TransferOptions,
    ) -> Post {
        Post {
            engine: self.clone(),
            remote: remote.peer().to_owned(),
            op,
            what: What::Prepared {
                local: local.clone(),
                remote: remote.clone(),
                pairs: pairs.to_vec(),
            },
            opts,
            stage: Stage::Start,
        }
    }

    /// Copies the blocks `pairs` names as a future: [`Engine::post_prepared`], then the
    /// request (the prepared-list [`Engine::transfer`]).
    ///
    /// # Errors
    /// As [`Engine::post_prepared`], then the transfer's own ([`TransferRequest::wait`]'s).
    pub fn transfer_prepared(
        &self,
        op: TransferOp,
        local: &LocalBlocks,
        remote: &RemoteBlocks,
        pairs: &[(usize, usize)],
    ) -> Transfer {
        self.transfer_prepared_with(op, local, remote, pairs, TransferOptions::default())
    }

    /// [`Engine::transfer_prepared`] with per-request options (a stall deadline).
    ///
    /// # Errors
    /// As [`Engine::transfer_prepared`].
    pub fn transfer_prepared_with(
        &self,
        op: TransferOp,
        local: &LocalBlocks,
        remote: &RemoteBlocks,
        pairs: &[(usize, usize)],
        opts: TransferOptions,
    ) -> Transfer {
        Transfer {
            post: Some(self.post_prepared(op, local, remote, pairs, opts)),
            req: None,
        }
    }

    /// Copies `descs` to or from `remote` as a future: [`Engine::post`], then the request.
    ///
    /// # Errors
    /// As [`Engine::post`], then the transfer's own ([`TransferRequest::wait`]'s).
    pub fn transfer(&self, remote: &str, op: TransferOp, descs: &[TransferDesc]) -> Transfer {
        self.transfer_with(remote, op, descs, TransferOptions::default())
    }

    /// [`Engine::transfer`] with per-request options (a stall deadline).
    ///
    /// # Errors
    /// As [`Engine::transfer`].
    pub fn transfer_with(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
        opts: TransferOptions,
    ) -> Transfer {
        Transfer {
            post: Some(self.post(remote, op, descs, opts)),
            req: None,
        }
    }
}
