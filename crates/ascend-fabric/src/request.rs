//! A transfer request's state from submission to its outcome: what it holds while pending
//! (its slot, the registrations it uses), its completion through the slot's events, failing
//! it from outside (`fail_all`, for a lost channel), the per-channel table of requests in
//! flight, and the public [`TransferRequest`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::registry::RegUse;
use crate::slots::{Slot, SlotPool};
use crate::stats::Counters;
use crate::transfer::TransferStatus;

/// What a request does under `AutoConnect` after a failed copy: disconnect the channel it
/// used (and only that one).
pub(crate) type AutoDisconnect = Box<dyn Fn() + Send + Sync>;

/// A channel's requests in flight, by id, and its counters: what a request updates when it
/// finishes. Shared by the channel and its pending requests.
#[derive(Default)]
pub(crate) struct InFlight {
    reqs: Mutex<HashMap<u64, Weak<ReqInner>>>,
    pub(crate) counters: Counters,
}

impl InFlight {
    fn insert(&self, id: u64, req: &Arc<ReqInner>) {
        self.reqs.lock().insert(id, Arc::downgrade(req));
    }

    fn remove(&self, id: u64) {
        self.reqs.lock().remove(&id);
    }

    /// Requests in flight.
    pub(crate) fn len(&self) -> usize {
        self.reqs.lock().len()
    }

    /// The requests still alive.
    pub(crate) fn live(&self) -> Vec<Arc<ReqInner>> {
        self.reqs
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// What a request holds until it is observed finished.
pub(crate) struct Pending {
    pub(crate) slot: Slot,
    /// Bit i: stream i got work (and its event was recorded).
    pub(crate) used: u32,
    pub(crate) regs: RegUse,
    /// The in-flight table and counters of the request's channel.
    pub(crate) book: Arc<InFlight>,
    pub(crate) slots: Arc<SlotPool>,
    pub(crate) write: bool,
    pub(crate) bytes: u64,
    pub(crate) descs: u64,
}

impl Pending {
    /// Records the event of every used stream.
    pub(crate) fn record(&mut self) -> Result<()> {
        self.slot.record(self.used)
    }

    fn wait_events(&mut self, slice: Duration) -> Result<bool> {
        self.slot.wait_events(self.used, slice)
    }

    fn poll_events(&mut self) -> Result<bool> {
        self.slot.poll_events(self.used)
    }

    fn sync_streams(&mut self) -> Result<()> {
        self.slot.sync_streams(self.used)
    }
}

enum Outcome {
    Ok,
    Err(Error),
    Reported(String),
}

enum ReqState {
    Pending(Box<Pending>),
    Done(Outcome),
}

pub(crate) struct ReqInner {
    pub(crate) id: u64,
    state: Mutex<ReqState>,
    /// With `AutoConnect`: disconnects the request's channel after a failed copy.
    auto: Option<AutoDisconnect>,
    /// Set when the request failed in a way that disconnects under `AutoConnect`; taken by
    /// the first caller to see the failure, after it released the state lock.
    auto_due: AtomicBool,
}

/// Longest time a waiter holds a request's lock while blocked on its events.
const SLICE: Duration = Duration::from_millis(2);

impl ReqInner {
    /// A request for the work queued in `p`, entered in `p`'s in-flight table.
    pub(crate) fn new(id: u64, p: Pending, auto: Option<AutoDisconnect>) -> Arc<ReqInner> {
        let book = p.book.clone();
        let req = Arc::new(ReqInner {
            id,
            state: Mutex::new(ReqState::Pending(Box::new(p))),
            auto,
            auto_due: AtomicBool::new(false),
        });
        book.insert(id, &req);
        req
    }

    /// `AutoConnect`, as HIXL: a transfer whose copies failed disconnects its peer (the next
    /// transfer connects again). Only the channel the request used is closed, not one made
    /// since. Call without holding the state lock.
    pub(crate) fn disconnect_if_due(&self, force: bool) {
        if !(self.auto_due.swap(false, Ordering::AcqRel) || force) {
            return;
        }
        if let Some(disconnect) = &self.auto {
            disconnect();
        }
    }

    /// Ends a pending request: returns or destroys its slot, updates counters, forgets it.
    fn finish(&self, st: &mut MutexGuard<'_, ReqState>, result: Result<()>) {
        let prev = std::mem::replace(
            &mut **st,
            ReqState::Done(match &result {
                Ok(()) => Outcome::Ok,
                Err(_) => Outcome::Reported(String::new()),
            }),
        );
        let ReqState::Pending(p) = prev else {
            **st = prev;
            return;
        };
        let Pending {
            mut slot,
            used,
            regs,
            book,
            slots,
            write,
            bytes,
            descs,
        } = *p;
        match &result {
            Ok(()) => {
                slots.release(slot);
                book.counters.finished(Some((write, bytes, descs)));
            }
            Err(e) => {
                slot.abort(used);
                slots.discard(slot);
                book.counters.finished(None);
                if self.auto.is_some() && matches!(e, Error::Mem(_)) {
                    self.auto_due.store(true, Ordering::Release);
                }
            }
        }
        book.remove(self.id);
        drop(regs);
        drop(book);
        if let Err(e) = result {
            **st = ReqState::Done(Outcome::Err(e));
        }
    }

    /// Fails a pending request (aborting its streams); no effect once done.
    pub(crate) fn fail(&self, e: Error) {
        let mut st = self.state.lock();
        if matches!(*st, ReqState::Pending(_)) {
            self.finish(&mut st, Err(e));
        }
    }

    fn take(o: &mut Outcome) -> Result<()> {
        match std::mem::replace(o, Outcome::Ok) {
            Outcome::Ok => Ok(()),
            Outcome::Err(e) => {
                *o = Outcome::Reported(e.to_string());
                Err(e)
            }
            Outcome::Reported(m) => {
                *o = Outcome::Reported(m.clone());
                Err(Error::AlreadyReported(m))
            }
        }
    }

    pub(crate) fn status(&self) -> TransferStatus {
        let mut st = self.state.lock();
        if let ReqState::Pending(p) = &mut *st {
            match p.poll_events() {
                Ok(false) => return TransferStatus::Waiting,
                Ok(true) => {
                    let r = p.sync_streams();
                    self.finish(&mut st, r);
                }
                Err(e) => self.finish(&mut st, Err(e)),
            }
        }
        match &*st {
            ReqState::Done(Outcome::Ok) => TransferStatus::Completed,
            ReqState::Done(_) => TransferStatus::Failed,
            ReqState::Pending(_) => TransferStatus::Waiting,
        }
    }

    /// Waits until done or `deadline`; `None` on timeout (the request keeps running).
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Option<Result<()>> {
        loop {
            let mut st = self.state.lock();
            match &mut *st {
                ReqState::Done(o) => return Some(Self::take(o)),
                ReqState::Pending(p) => {
                    let slice = match deadline {
                        Some(d) => SLICE.min(d.saturating_duration_since(Instant::now())),
                        None => SLICE,
                    };
                    match p.wait_events(slice) {
                        Ok(true) => {
                            let r = p.sync_streams();
                            self.finish(&mut st, r);
                            continue;
                        }
                        Ok(false) => {}
                        Err(e) => {
                            self.finish(&mut st, Err(e));
                            continue;
                        }
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return None;
                    }
                }
            }
            MutexGuard::unlock_fair(st);
        }
    }

    /// Aborts the request if still pending (its streams are aborted and waited for).
    pub(crate) fn abort(&self) {
        self.fail(Error::Aborted);
    }
}

/// Fails every request of `reqs` still pending with `err()` (aborting its streams and
/// destroying its slot), then runs `between`, and only then lets anyone see the failures:
/// every request's lock is held from before its failure until `between` has returned.
pub(crate) fn fail_all(reqs: &[Arc<ReqInner>], err: impl Fn() -> Error, between: impl FnOnce()) {
    let mut held: Vec<_> = reqs.iter().map(|r| (r, r.state.lock())).collect();
    for (r, st) in &mut held {
        if matches!(**st, ReqState::Pending(_)) {
            r.finish(st, Err(err()));
        }
    }
    between();
    drop(held);
}

/// An asynchronous transfer (`TransferAsync`'s request).
///
/// Dropping it while the transfer runs aborts the transfer's streams and waits for them, so
/// no copy outlives the request; the memory it touched was kept alive until then. So a
/// request left unused is a transfer aborted at once, which the compiler points out:
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
#[must_use = "dropping a TransferRequest aborts the transfer and waits for its streams"]
pub struct TransferRequest {
    pub(crate) inner: Arc<ReqInner>,
    pub(crate) peer: String,
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
    /// A sequence number, unique per engine (HIXL's `TransferReq` value).
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
    /// was disconnected, [`Error::Mem`] for a failed copy); [`Error::AlreadyReported`] when an
    /// earlier call returned the failure already.
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

impl Drop for TransferRequest {
    fn drop(&mut self) {
        self.inner.abort();
    }
}
