//! A transfer request's state from submission to its outcome: what it holds while pending
//! (its slot, the registrations it uses), its completion through the slot's flags or events,
//! its stall
//! deadline, failing it from outside (`fail_all`, for a lost channel), who is told when it
//! ends (a future's waker, a completion queue), the per-channel table of requests in flight,
//! and the public [`TransferRequest`].
//!
//! Whoever observes the end (a waiter, a status call, a future's poll, the engine's progress
//! thread, a teardown) finishes the request under its lock and, once the lock is released,
//! tells the waker and the queue: so nobody learns of an end before what it releases is
//! released (for a lost channel: before the imports are unmapped).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::metrics::{self, PeerMetrics};
use crate::registry::RegUse;
use crate::remote::SegMask;
use crate::slots::{Slot, SlotPool};
use crate::stats::{Counters, Window};
use crate::transfer::TransferStatus;

/// How a transfer's result reads in the metrics' `outcome` label.
fn outcome_of(r: &Result<()>) -> metrics::Outcome {
    use metrics::Outcome;
    match r {
        Ok(()) => Outcome::Ok,
        Err(Error::Timeout { .. }) => Outcome::Timeout,
        Err(Error::Cancelled { .. }) => Outcome::Cancelled,
        Err(Error::Aborted) => Outcome::Aborted,
        Err(Error::PeerLost { .. }) => Outcome::PeerLost,
        Err(_) => Outcome::Failed,
    }
}

/// Who observes a submitted request until it ends.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Observer {
    /// The submitting thread waits for it at once (a synchronous transfer): the progress
    /// thread is not told, so it spends no core polling a request someone already waits on.
    Caller,
    /// The engine's progress thread watches it from its submission.
    Progress,
}

/// What a request does under `AutoConnect` after a failed copy: disconnect the channel it
/// used (and only that one).
pub(crate) type AutoDisconnect = Box<dyn Fn() + Send + Sync>;

/// The next request id: unique in the process, so requests of several engines can share a
/// completion queue (keyed by id).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A new request id, never given before in this process.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A channel's requests in flight, by id, its counters (what a request updates when it
/// finishes), and what dropped requests still hold while their aborted streams finish.
/// Shared by the channel and its pending requests.
pub(crate) struct InFlight {
    reqs: Mutex<HashMap<u64, Weak<ReqInner>>>,
    pub(crate) counters: Counters,
    /// The channel's handles of the installed metrics recorder.
    pub(crate) metrics: PeerMetrics,
    /// Its figures for the periodic summary.
    pub(crate) summary: Window,
    draining: Mutex<Vec<Drain>>,
    /// Held while the drain list's entries are out of it being asked (by the progress
    /// thread) or settled (by a teardown), so a teardown never misses one.
    scan: Mutex<()>,
}

/// What a dropped request still holds after its streams were aborted (queued copies
/// discarded), until the runtime says they are done: a copy the device was running may still
/// touch the slot's streams' memory, the local registrations and (through the channel, whose
/// teardown drains first) the peer's imports.
pub(crate) struct Drain {
    slot: Slot,
    used: u32,
    regs: RegUse,
    slots: Arc<SlotPool>,
    /// Rounds in a row its streams could not be asked.
    errors: u32,
}

/// Rounds in a row a drained request's streams may fail to answer a query before they are
/// waited for instead (synchronize), so a slot is never kept out of the budget for good.
const DRAIN_QUERY_FAILURES: u32 = 64;

impl Drain {
    /// Releases it once its streams are done: the slot is destroyed (room for a new one,
    /// whose waiter's waker is returned) and the registrations let go.
    fn release(mut self) -> Option<Waker> {
        self.slot.settle(self.used);
        let w = self.slots.put_back_deferred(self.slot, false);
        drop(self.regs);
        w
    }
}

impl InFlight {
    pub(crate) fn new(metrics: PeerMetrics, summary: Window) -> InFlight {
        InFlight {
            reqs: Mutex::default(),
            counters: Counters::default(),
            metrics,
            summary,
            draining: Mutex::default(),
            scan: Mutex::default(),
        }
    }

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

    /// Releases what dropped requests hold whose streams the runtime says are done (asking
    /// each, without waiting; streams that fail to answer [`DRAIN_QUERY_FAILURES`] rounds in
    /// a row are waited for). Returns how many are left.
    ///
    /// The list's lock is held only to take entries out and put them back (a drop pushing
    /// one never waits for the runtime); the entries are asked under `scan`, which a
    /// teardown takes first ([`InFlight::settle_all`]), so it never misses one that is out
    /// being asked. An entry leaves `scan` only with its streams idle.
    pub(crate) fn drain(&self) -> usize {
        let mut done = Vec::new();
        let left = {
            let Some(_scan) = self.scan.try_lock() else {
                // A teardown is settling them.
                return 1;
            };
            let mut out = std::mem::take(&mut *self.draining.lock());
            let mut i = 0;
            while i < out.len() {
                let d = &mut out[i];
                let idle = match d.slot.streams_done(d.used) {
                    Some(done) => done,
                    None => {
                        d.errors += 1;
                        if d.errors >= DRAIN_QUERY_FAILURES {
                            d.slot.settle(d.used);
                        }
                        d.errors >= DRAIN_QUERY_FAILURES
                    }
                };
                if idle {
                    done.push(out.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            let mut list = self.draining.lock();
            list.append(&mut out);
            list.len()
        };
        for w in done.into_iter().filter_map(Drain::release) {
            w.wake();
        }
        left
    }

    /// Waits for the streams of everything in the drain list and releases it (a teardown,
    /// before it unmaps the imports). Returns the wakers of the slot waiters handed the room,
    /// for the caller to wake once it holds no lock.
    #[must_use = "the slot waiters handed the room must be woken"]
    pub(crate) fn settle_all(&self) -> Vec<Waker> {
        let _scan = self.scan.lock();
        let all = std::mem::take(&mut *self.draining.lock());
        all.into_iter()
            .filter_map(|mut d| {
                d.slot.settle(d.used);
                d.release()
            })
            .collect()
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
    /// Bit i: stream i got work (and its end was marked: its flag write or its event).
    pub(crate) used: u32,
    pub(crate) regs: RegUse,
    /// The peer's segments its copies touch.
    pub(crate) segs: SegMask,
    /// The in-flight table and counters of the request's channel.
    pub(crate) book: Arc<InFlight>,
    pub(crate) slots: Arc<SlotPool>,
    pub(crate) write: bool,
    pub(crate) bytes: u64,
    pub(crate) descs: u64,
    /// When the submission began (for the duration metric).
    pub(crate) submitted: Instant,
    /// The request's tracing span (disabled unless `debug` is on for this crate): it closes
    /// when the request ends, with the pending state.
    pub(crate) span: tracing::Span,
}

impl Pending {
    /// Marks the end of the copies on every used stream (its completion flag or event).
    pub(crate) fn record(&mut self) -> Result<()> {
        self.slot.record(self.used)
    }

    fn poll_done(&mut self, ask: bool) -> Result<bool> {
        self.slot.poll_done(self.used, ask)
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

/// Told when a request ends (a completion queue), by id.
pub(crate) trait Sink: Send + Sync {
    fn completed(&self, id: u64);
}

/// Who is told when the request ends.
#[derive(Default)]
struct Notify {
    waker: Option<Waker>,
    sink: Option<Weak<dyn Sink>>,
    /// Told already: later registrations see the request done instead.
    delivered: bool,
}

pub(crate) struct ReqInner {
    pub(crate) id: u64,
    state: Mutex<ReqState>,
    /// With `AutoConnect`: disconnects the request's channel after a failed copy.
    auto: Option<AutoDisconnect>,
    /// Set when the request failed in a way that disconnects under `AutoConnect`; taken by
    /// the first caller to see the failure, after it released the state lock.
    auto_due: AtomicBool,
    /// The stall deadline and the time it was given: pending then, the request fails with a
    /// timeout (its streams aborted) when next observed.
    stall: Option<(Instant, Duration)>,
    notify: Mutex<Notify>,
    /// Set by `finish`, last; the next `flush` on any thread (each caller flushes once it has
    /// unlocked) tells `notify` and wakes `slot_wake`.
    notify_due: AtomicBool,
    /// The waker of the task handed this request's slot (or its room) by `finish`, woken by
    /// `flush` (a waker may run its task at once: never under the state lock).
    slot_wake: Mutex<Option<Waker>>,
    /// In the progress thread's list (or was).
    pub(crate) watched: AtomicBool,
    /// Small enough for a waiter to poll its flags before blocking ([`SPIN_BYTES`]).
    spin: bool,
    /// A thread is blocked on the request's streams outside the state lock (changed only
    /// under it): until it is back, only that thread finishes the request normally, and
    /// nobody else asks the streams (the waiter may take a failed stream's one report).
    blocked: AtomicBool,
    /// Signalled, under the state lock, when the blocked thread is back.
    unblocked: Condvar,
}

/// How long a waiter polls a request's completion flags before blocking on its streams: a
/// short transfer is seen done with no sleeping hand-off; a long one costs a few polls.
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// Requests of at least this many bytes are not polled before blocking: their copies take
/// longer than [`SPIN`] even at the host's memory bandwidth (as HIXL, the wait blocks at once).
const SPIN_BYTES: u64 = 1 << 20;

/// Polls `done` for up to [`SPIN`]: a few busy rounds, then yielding the core between polls
/// (a busy spin would take the core from the stream worker on a small machine).
pub(crate) fn spin_until(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..16 {
        if done() {
            return true;
        }
        std::hint::spin_loop();
    }
    let t0 = Instant::now();
    while t0.elapsed() < SPIN {
        if done() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

impl ReqInner {
    /// A request for the work queued in `p`, entered in `p`'s in-flight table.
    /// With `stall`, the request fails with [`Error::Timeout`] if still pending that long
    /// after now.
    pub(crate) fn new(
        id: u64,
        p: Pending,
        auto: Option<AutoDisconnect>,
        stall: Option<Duration>,
    ) -> Arc<ReqInner> {
        let book = p.book.clone();
        let spin = p.bytes < SPIN_BYTES;
        book.metrics.submitted();
        let req = Arc::new(ReqInner {
            id,
            state: Mutex::new(ReqState::Pending(Box::new(p))),
            auto,
            auto_due: AtomicBool::new(false),
            stall: stall.and_then(|d| Some((Instant::now().checked_add(d)?, d))),
            notify: Mutex::default(),
            notify_due: AtomicBool::new(false),
            slot_wake: Mutex::new(None),
            watched: AtomicBool::new(false),
            spin,
            blocked: AtomicBool::new(false),
            unblocked: Condvar::new(),
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
    /// The caller calls [`ReqInner::flush`] once it has released the lock.
    ///
    /// `notify_due` is set last, once everything `flush` hands on is in place: another
    /// thread's `flush` (it released this lock a moment ago) may run while this one is still
    /// here, and must find either nothing due or all of it (the slot waiter's waker above all).
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
            self.notify_due.store(true, Ordering::Release);
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
            submitted,
            span,
            ..
        } = *p;
        let took = submitted.elapsed();
        let outcome = outcome_of(&result);
        book.metrics.ended(write, (bytes, descs), took, outcome);
        if result.is_ok() {
            book.summary.completed(write, bytes, took);
        }
        match &result {
            Ok(()) => {
                tracing::debug!(parent: &span, took_us = took.as_micros() as u64, "completed")
            }
            Err(e) => {
                tracing::debug!(parent: &span, outcome = outcome.label(), error = %e, took_us = took.as_micros() as u64, "ended")
            }
        }
        if result.is_err() {
            slot.abort(used);
        }
        // Woken by `flush`, after the caller released the state lock.
        *self.slot_wake.lock() = slots.put_back_deferred(slot, result.is_ok());
        match &result {
            Ok(()) => book.counters.finished(Some((write, bytes, descs))),
            Err(e) => {
                book.counters.finished(None);
                if self.auto.is_some()
                    && matches!(
                        e,
                        Error::Mem(_) | Error::CopyRefused { .. } | Error::Timeout { .. }
                    )
                {
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
        self.notify_due.store(true, Ordering::Release);
    }

    /// Aborts the request if still pending without waiting for its streams (a dropped
    /// request): they are aborted, the request ends as [`Error::Aborted`], and its slot and
    /// registrations go to its channel's drain list, which is returned: someone must
    /// [`InFlight::drain`] it. `None` when the request had ended.
    pub(crate) fn abort_detached(&self) -> Option<Arc<InFlight>> {
        self.abort_detached_locked(self.state.lock())
    }

    /// [`ReqInner::abort_detached`] if nobody holds the request's lock right now (`None` if
    /// someone does: a status call or the progress thread for a moment, a teardown failing
    /// it; a thread blocked on its streams does not hold it).
    pub(crate) fn try_abort_detached(&self) -> Option<Option<Arc<InFlight>>> {
        Some(self.abort_detached_locked(self.state.try_lock()?))
    }

    fn abort_detached_locked(&self, mut st: MutexGuard<'_, ReqState>) -> Option<Arc<InFlight>> {
        let ReqState::Pending(p) =
            std::mem::replace(&mut *st, ReqState::Done(Outcome::Err(Error::Aborted)))
        else {
            return None;
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
            submitted,
            span,
            ..
        } = *p;
        slot.abort_nowait(used);
        book.counters.finished(None);
        let took = submitted.elapsed();
        book.metrics
            .ended(write, (bytes, descs), took, metrics::Outcome::Aborted);
        tracing::debug!(parent: &span, took_us = took.as_micros() as u64, "dropped while pending: aborted");
        // In the drain list before it leaves the in-flight table (both under the state lock):
        // a teardown that finds it in neither has it failed already or drains it.
        book.draining.lock().push(Drain {
            slot,
            used,
            regs,
            slots,
            errors: 0,
        });
        book.remove(self.id);
        self.notify_due.store(true, Ordering::Release);
        drop(st);
        self.flush();
        Some(book)
    }

    /// Whether the request is pending with copies in any of the peer's segments `slots`.
    pub(crate) fn uses_any(&self, slots: &[usize]) -> bool {
        match &*self.state.lock() {
            ReqState::Pending(p) => p.segs.any(slots),
            ReqState::Done(_) => false,
        }
    }

    /// Fails a pending request (aborting its streams); no effect once done. Whether it was
    /// still pending.
    pub(crate) fn fail(&self, e: Error) -> bool {
        let mut st = self.state.lock();
        let pending = matches!(*st, ReqState::Pending(_));
        if pending {
            self.finish(&mut st, Err(e));
        }
        drop(st);
        self.flush();
        pending
    }

    /// Tells the waker and the queue, once, after `finish` (call without the state lock);
    /// first wakes the task handed this request's slot, if any.
    pub(crate) fn flush(&self) {
        if !self.notify_due.swap(false, Ordering::AcqRel) {
            return;
        }
        let slot_wake = self.slot_wake.lock().take();
        if let Some(w) = slot_wake {
            w.wake();
        }
        let (waker, sink) = {
            let mut n = self.notify.lock();
            n.delivered = true;
            (n.waker.take(), n.sink.take())
        };
        if let Some(w) = waker {
            w.wake();
        }
        if let Some(s) = sink.and_then(|s| s.upgrade()) {
            s.completed(self.id);
        }
    }

    /// Wakes `w` when the request ends; false if it has ended and been told already.
    pub(crate) fn set_waker(&self, w: &Waker) -> bool {
        let mut n = self.notify.lock();
        if n.delivered {
            return false;
        }
        if !n.waker.as_ref().is_some_and(|x| x.will_wake(w)) {
            n.waker = Some(w.clone());
        }
        true
    }

    /// Tells `s` when the request ends; false if it has ended and been told already.
    pub(crate) fn set_sink(&self, s: Weak<dyn Sink>) -> bool {
        let mut n = self.notify.lock();
        if n.delivered {
            return false;
        }
        n.sink = Some(s);
        true
    }

    /// The stall deadline, if any.
    pub(crate) fn stall_deadline(&self) -> Option<Instant> {
        self.stall.map(|(d, _)| d)
    }

    /// The stall timeout, once the deadline has passed.
    fn stalled(&self, now: Instant) -> Option<Error> {
        match self.stall {
            Some((d, after)) if now >= d => Some(Error::Timeout {
                what: "transfer (stall deadline)",
                after,
            }),
            _ => None,
        }
    }

    /// Moves a pending request on without blocking: done when its streams' marks are reached,
    /// failed when a copy failed or its stall deadline passed. Returns whether it is done.
    /// Without `ask`, a stream whose completion flag is not there yet is not asked (no
    /// runtime call: a caller about to block on the streams anyway polls this way).
    ///
    /// While another thread is blocked on the streams ([`ReqInner::block`]) nothing is done
    /// here (that thread finishes the request, and only it: a synchronize here could take a
    /// failed stream's one report from it, and a slot given back could be reused under it).
    fn advance(&self, st: &mut MutexGuard<'_, ReqState>, ask: bool) -> bool {
        if let ReqState::Pending(p) = &mut **st {
            if self.blocked.load(Ordering::Relaxed) {
                return false;
            }
            match p.poll_done(ask) {
                Ok(false) => {
                    if let Some(e) = self.stalled(Instant::now()) {
                        self.finish(st, Err(e));
                    }
                }
                Ok(true) => {
                    let r = p.sync_streams();
                    self.finish(st, r);
                }
                Err(e) => self.finish(st, Err(e)),
            }
        }
        matches!(**st, ReqState::Done(_))
    }

    /// Whether the copies of a pending request another thread is blocked on have ended
    /// (every flag there, or every stream short of its flag idle: asking a stream takes no
    /// report from it), so that thread is about to finish it with their outcome.
    fn ended_under_waiter(&self, st: &mut MutexGuard<'_, ReqState>) -> bool {
        match &mut **st {
            ReqState::Pending(p) if self.blocked.load(Ordering::Relaxed) => {
                p.poll_done(true).unwrap_or(true)
            }
            _ => false,
        }
    }

    /// Observes the request without blocking (asking its streams as [`ReqInner::advance`]
    /// says); `None` when someone else holds it right now (they tell the waker and the queue
    /// if they see it end).
    pub(crate) fn observe(&self, ask: bool) -> Option<bool> {
        let mut st = self.state.try_lock()?;
        let done = self.advance(&mut st, ask);
        drop(st);
        self.flush();
        Some(done)
    }

    /// The outcome if the request is done (observing it first, without blocking); taken,
    /// as by `wait`. `None` while pending or held by someone else.
    pub(crate) fn try_take(&self) -> Option<Result<()>> {
        let mut st = self.state.try_lock()?;
        self.advance(&mut st, true);
        let r = match &mut *st {
            ReqState::Done(o) => Some(Self::take(o)),
            ReqState::Pending(_) => None,
        };
        drop(st);
        self.flush();
        r
    }

    /// Blocks up to `slice` on the request's streams (the progress thread's park), outside
    /// its lock. Returns false at once, having done nothing, if someone else holds the
    /// request or is blocked on its streams.
    pub(crate) fn park(&self, slice: Duration) -> bool {
        let Some(mut st) = self.state.try_lock() else {
            return false;
        };
        if self.blocked.load(Ordering::Relaxed) {
            return false;
        }
        self.block(&mut st, Instant::now().checked_add(slice));
        if matches!(*st, ReqState::Pending(_)) {
            if let Some(e) = self.stalled(Instant::now()) {
                self.finish(&mut st, Err(e));
            }
        }
        drop(st);
        self.flush();
        true
    }

    /// Blocks on the pending request's streams until they are idle or `until` (no limit:
    /// `None`), outside the state lock, with one blocking call per stream whose flag is not
    /// there yet (HIXL's wait); then finishes the request if its copies ended or one failed.
    /// Meanwhile a status call, the progress thread and a cancellation take the lock as
    /// usual: failing the request aborts the streams, which ends the wait. When another
    /// thread is blocked already, waits for it to be back instead (it finishes the request).
    /// The caller calls [`ReqInner::flush`] once it has released the lock.
    fn block(&self, st: &mut MutexGuard<'_, ReqState>, until: Option<Instant>) {
        let ReqState::Pending(p) = &mut **st else {
            return;
        };
        if self.blocked.load(Ordering::Relaxed) {
            match until {
                Some(d) => {
                    self.unblocked.wait_until(st, d);
                }
                None => self.unblocked.wait(st),
            }
            return;
        }
        let waits = p.slot.waits(p.used);
        self.blocked.store(true, Ordering::Relaxed);
        let r = MutexGuard::unlocked(st, || waits.wait(until));
        self.blocked.store(false, Ordering::Relaxed);
        self.unblocked.notify_all();
        // Ended meanwhile (failed from outside): the wait's error was that abort's.
        if let ReqState::Pending(p) = &mut **st {
            match r {
                Ok(true) => {
                    let r = p.sync_streams();
                    self.finish(st, r);
                }
                Ok(false) => {}
                Err(e) => self.finish(st, Err(e)),
            }
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
        self.advance(&mut st, true);
        let r = match &*st {
            ReqState::Done(Outcome::Ok) => TransferStatus::Completed,
            ReqState::Done(_) => TransferStatus::Failed,
            ReqState::Pending(_) => TransferStatus::Waiting,
        };
        drop(st);
        self.flush();
        r
    }

    /// Waits until done or `deadline`; `None` on timeout (the request keeps running). Polls
    /// the completion flags for a short while first ([`SPIN`]; not for a request of
    /// [`SPIN_BYTES`] or more), then blocks on the streams
    /// outside the request's lock ([`ReqInner::block`]).
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Option<Result<()>> {
        // Completion flags only: the blocking wait below asks the streams.
        if self.spin {
            spin_until(|| self.observe(false) == Some(true));
        }
        let until = match (deadline, self.stall_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut st = self.state.lock();
        loop {
            if let ReqState::Done(o) = &mut *st {
                let r = Self::take(o);
                drop(st);
                self.flush();
                return Some(r);
            }
            let now = Instant::now();
            if let Some(e) = self.stalled(now) {
                self.finish(&mut st, Err(e));
                continue;
            }
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            self.block(&mut st, until);
        }
    }

    /// The status as last observed, without polling: `Waiting` while pending.
    pub(crate) fn ended(&self) -> TransferStatus {
        match &*self.state.lock() {
            ReqState::Done(Outcome::Ok) => TransferStatus::Completed,
            ReqState::Done(_) => TransferStatus::Failed,
            ReqState::Pending(_) => TransferStatus::Waiting,
        }
    }

    /// Cancels the request if its copies have not ended, as `TransferRequest::cancel`: the
    /// streams are asked first, so copies that ended unobserved keep their outcome.
    pub(crate) fn cancel(&self, peer: &str) -> bool {
        let mut st = self.state.lock();
        let running = !self.advance(&mut st, true) && !self.ended_under_waiter(&mut st);
        if running {
            let e = Error::Cancelled {
                peer: peer.to_owned(),
                id: self.id,
            };
            self.finish(&mut st, Err(e));
        }
        drop(st);
        self.flush();
        running
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
    for r in reqs {
        r.flush();
    }
}
