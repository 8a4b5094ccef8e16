//! Stream slots: `task_stream_num` streams leased from a [`StreamPool`] plus one pinned host
//! completion flag per stream (HIXL's host-mode slot has such a flag; its streams fill it
//! with a copy, ours with `aclrtValueWrite`), or one event per stream in the slot that finds
//! flags do not work and every slot made after (no `aclrtMallocHost` or `aclrtValueWrite`, a
//! flag allocation or write refused as unsupported, or, before any flag was ever seen
//! written, a stream that finishes cleanly without writing its flag). A transfer takes a slot for itself, deals
//! its pieces round-robin to the slot's streams and queues each stream's share in turn, a
//! few copies at a time, from one thread or several (`plan::issue`, through
//! [`ascend_mem::Stream::copy_table_async`] over the channel's imports and the local
//! segments: `aclrtMemcpyAsync`, kind DEVICE_TO_DEVICE for every direction, as HIXL does, and
//! `aclrtMemcpyBatchAsync` for a stream's host-device copies), has each used stream write the
//! transfer's number into its flag (or record its event), and is complete when every used
//! flag holds it (a stream short of its flag is asked whether it stopped on a failure; a
//! waiter blocks on the unfinished streams with one call each, outside the request's lock:
//! [`StreamWaits`]);
//! the streams are then synchronized (instantly) to surface copy errors, and the slot goes back
//! to the pool. A slot whose transfer failed or was aborted is destroyed, not reused. Slots are
//! created lazily, up to a budget of 512 streams per engine. When all are busy, callers that
//! wait (a synchronous transfer within its deadline, an async submission) queue in order, and
//! a slot given back (or room left by a destroyed one) goes to the first of them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use ascend_mem::acl;
use ascend_mem::{
    Device, Event, FailureMode, PinnedWords, StreamFlags, StreamLease, StreamPool, StreamWaiter,
};
use metrics::Histogram;
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// HIXL's per-engine stream budget.
pub const STREAM_BUDGET: usize = 512;

/// A slot: streams, and how it learns that a transfer's copies are done. Dropping it destroys
/// them; return it to its [`SlotPool`] instead (or let a [`SlotGuard`] do it).
pub(crate) struct Slot {
    pub(crate) streams: Vec<StreamLease>,
    marks: Marks,
    /// What the pool learned about flags.
    flags: Arc<FlagState>,
    _pool: StreamPool,
}

/// The codes of a stream or event synchronize whose time ran out.
const SYNC_TIMEOUTS: [i32; 2] = [
    acl::ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
    acl::ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
];

/// Shortest wait asked of the runtime (its waits take whole milliseconds).
const MIN_WAIT: Duration = Duration::from_millis(1);

/// Longest single wait asked of the runtime by a waiter outside the request's lock (see
/// [`StreamWaits::wait`]).
pub(crate) const WAIT_CALL_MAX: Duration = Duration::from_secs(1);

/// What an engine has learned about completion flags, shared by its slots.
#[derive(Debug, Default)]
pub(crate) struct FlagState {
    /// Flags were found not to work: slots made from now on use events.
    off: AtomicBool,
    /// A flag was seen holding its transfer's number: this runtime writes them.
    proven: AtomicBool,
}

/// Whether a refused flag allocation or write says the runtime cannot do flags (so events
/// are used), rather than that this transfer failed.
fn unsupported(e: &ascend_mem::Error) -> bool {
    matches!(e, ascend_mem::Error::MissingSymbol { .. })
        || e.code()
            .is_some_and(|c| c.0 == acl::ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
}

/// The indices of the streams that bit set `used` names, among `n`.
fn used_streams(n: usize, used: u32) -> impl Iterator<Item = usize> {
    (0..n).filter(move |i| used & (1 << i) != 0)
}

/// Streams a waiter blocks on, one blocking call each with the time left, as HIXL's
/// synchronous transfer does; made by [`Slot::waits`] under the request's lock and waited on
/// outside it.
pub(crate) struct StreamWaits(Vec<StreamWaiter>);

impl StreamWaits {
    /// Waits for each stream in turn until `until` (no limit: `None`). True when all are
    /// idle; false when time ran out first. A copy's failure (or an abort of the streams by
    /// someone failing the request meanwhile) is the error.
    ///
    /// No call is longer than [`WAIT_CALL_MAX`]: a stream that stays busy is waited on again
    /// while time is left, so a wake-up the runtime missed (an abort by another thread)
    /// costs at most that long, never the whole timeout.
    pub(crate) fn wait(&self, until: Option<Instant>) -> Result<bool> {
        for w in &self.0 {
            loop {
                let call = match until {
                    None => WAIT_CALL_MAX,
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Ok(false);
                        }
                        // The runtime waits whole milliseconds: never ask it for none.
                        left.clamp(MIN_WAIT, WAIT_CALL_MAX)
                    }
                };
                match w.synchronize_timeout(call) {
                    Ok(()) => break,
                    // Only the call's time running out: a copy's own timeout (a task
                    // timeout) is its failure, which a stream reports once.
                    Err(e) if e.code().is_some_and(|c| SYNC_TIMEOUTS.contains(&c.0)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(true)
    }
}

/// How a slot learns that the copies queued on its streams are done.
enum Marks {
    /// One pinned host word per stream (`aclrtMallocHost`), as HIXL's completion flags: after a
    /// transfer's copies each used stream writes the transfer's number `seq` into its word
    /// (`aclrtValueWrite`), which the host reads with no runtime call. A word still short of
    /// it sends the host to the stream itself (`aclrtStreamQuery`): an idle stream short of
    /// its flag stopped on a failed copy (never writing it), which its synchronize reports.
    Flags { words: PinnedWords, seq: u64 },
    /// One event per stream, recorded after the copies: where flags do not work (the runtime
    /// lacks `aclrtMallocHost` or `aclrtValueWrite`, refuses a flag allocation or write as
    /// unsupported, or, before any flag was seen written, finishes a stream's work without
    /// writing its flag), for the slot and every slot made after.
    Events(Vec<Event>),
}

impl Slot {
    /// `n` streams, completed through flags unless they were found not to work.
    fn new(dev: &Device, n: usize, flags: &Arc<FlagState>) -> Result<Slot> {
        let pool = StreamPool::new(dev, n, StreamFlags::FAST_LAUNCH | StreamFlags::FAST_SYNC)?;
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            let mut s = pool.try_lease().ok_or_else(|| Error::ResourceExhausted {
                what: "streams",
                detail: "a new stream pool had no free stream".into(),
            })?;
            s.set_failure_mode(FailureMode::Stop)?;
            streams.push(s);
        }
        let words = match flags.off.load(Ordering::Acquire) {
            true => None,
            false => match PinnedWords::new(dev, n) {
                Ok(w) => Some(w),
                Err(e) if unsupported(&e) => {
                    tracing::warn!(error = %e, "no completion flags: completion by events");
                    flags.off.store(true, Ordering::Release);
                    None
                }
                Err(e) => return Err(e.into()),
            },
        };
        let marks = match words {
            Some(words) => Marks::Flags { words, seq: 0 },
            None => Self::events(dev, n)?,
        };
        Ok(Slot {
            streams,
            marks,
            flags: flags.clone(),
            _pool: pool,
        })
    }

    /// One event per stream.
    fn events(dev: &Device, n: usize) -> Result<Marks> {
        let events = (0..n)
            .map(|_| Event::new(dev))
            .collect::<ascend_mem::Result<Vec<_>>>()?;
        Ok(Marks::Events(events))
    }

    /// Flags do not work (`why`): this slot and every slot made after complete by events.
    fn fall_back(&mut self, why: &dyn std::fmt::Display) -> Result<()> {
        tracing::warn!(%why, "completion flags do not work: completion by events");
        self.flags.off.store(true, Ordering::Release);
        let dev = self.streams[0].device().clone();
        self.marks = Self::events(&dev, self.streams.len())?;
        Ok(())
    }

    /// The slot's streams.
    pub(crate) fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Marks the end of a transfer's copies on every used stream (bit i of `used`: stream i
    /// got work): its flag write, or its event.
    /// A flag write the runtime refuses as unsupported (or lacks) means events, for this
    /// transfer too; any other refusal fails the transfer.
    pub(crate) fn record(&mut self, used: u32) -> Result<()> {
        let streams = self.streams.iter_mut().enumerate();
        let refused = match &mut self.marks {
            Marks::Flags { words, seq } => {
                *seq += 1;
                streams
                    .filter(|(i, _)| used & (1 << i) != 0)
                    .find_map(|(i, s)| s.value_write_pinned(words, i, *seq).err())
            }
            Marks::Events(events) => {
                for (i, s) in streams.filter(|(i, _)| used & (1 << i) != 0) {
                    events[i].record(s)?;
                }
                None
            }
        };
        match refused {
            None => Ok(()),
            Some(e) if unsupported(&e) => {
                self.fall_back(&e)?;
                self.record(used)
            }
            Some(e) => Err(e.into()),
        }
    }

    /// Whether stream `i`'s flag holds the current transfer's number (which proves that this
    /// runtime writes flags).
    fn flagged(words: &PinnedWords, seq: u64, i: usize, st: &FlagState) -> bool {
        let hit = words.load(i).is_ok_and(|v| v == seq);
        if hit && !st.proven.load(Ordering::Relaxed) {
            st.proven.store(true, Ordering::Relaxed);
        }
        hit
    }

    /// What a waiter blocks on, outside the request's lock: the used streams whose flag is
    /// not there yet (every used stream, with events: a stream idle past its event is past
    /// its copies too).
    pub(crate) fn waits(&self, used: u32) -> StreamWaits {
        let ws = used_streams(self.streams.len(), used)
            .filter(|&i| match &self.marks {
                Marks::Flags { words, seq } => !Self::flagged(words, *seq, i, &self.flags),
                Marks::Events(_) => true,
            })
            .map(|i| self.streams[i].waiter())
            .collect();
        StreamWaits(ws)
    }

    /// Whether every used stream's mark is reached (or a stream short of its flag is idle),
    /// without waiting: flags are read directly, and a stream whose flag is not there yet is
    /// asked only with `ask` (events are always asked).
    pub(crate) fn poll_done(&mut self, used: u32, ask: bool) -> Result<bool> {
        for i in used_streams(self.streams.len(), used) {
            let done = match &self.marks {
                Marks::Flags { words, seq } => {
                    Self::flagged(words, *seq, i, &self.flags)
                        || (ask && self.streams[i].is_complete()?)
                }
                Marks::Events(events) => events[i].is_complete()?,
            };
            if !done {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// After the marks: synchronizes the used streams (done already) to surface copy errors
    /// and release what they kept. A stream that synchronizes without an error but did not
    /// write its flag: on a runtime whose flags were seen written, its work was discarded
    /// ([`Error::Aborted`]); on one where no flag ever landed, the runtime does not write
    /// them, so the transfer is done and completion falls back to events.
    pub(crate) fn sync_streams(&mut self, used: u32) -> Result<()> {
        let mut first = None;
        for i in used_streams(self.streams.len(), used) {
            if let Err(e) = self.streams[i].synchronize() {
                first.get_or_insert(e);
            }
        }
        if let Some(e) = first {
            return Err(e.into());
        }
        if let Marks::Flags { words, seq } = &self.marks {
            let unwritten = used_streams(self.streams.len(), used)
                .find(|&i| !Self::flagged(words, *seq, i, &self.flags));
            if let Some(i) = unwritten {
                if self.flags.proven.load(Ordering::Relaxed) {
                    return Err(Error::Aborted);
                }
                let why = format!("stream {i} finished its work without writing its flag");
                // Done either way; should events fail to be made, the slot keeps its flags and
                // the next transfer on it comes here again.
                let _ = self.fall_back(&why);
            }
        }
        Ok(())
    }

    /// Aborts the used streams' work and consumes the abort report, so the slot can be
    /// destroyed quietly: when this returns, no copy of the slot runs any more.
    pub(crate) fn abort(&mut self, used: u32) {
        self.abort_nowait(used);
        self.settle(used);
    }

    /// Aborts the used streams' work without waiting: queued copies are discarded, one the
    /// device is running may still touch memory until [`Slot::streams_done`].
    pub(crate) fn abort_nowait(&mut self, used: u32) {
        for (i, s) in self.streams.iter_mut().enumerate() {
            if used & (1 << i) != 0 {
                if let Err(e) = s.abort() {
                    tracing::warn!(error = %e, "aclrtStreamAbort failed");
                }
            }
        }
    }

    /// Whether the runtime says every used stream is done (`aclrtStreamQuery`, not
    /// waiting); `None` when a stream cannot be asked (ask again later, or
    /// [`Slot::settle`]).
    pub(crate) fn streams_done(&mut self, used: u32) -> Option<bool> {
        for i in used_streams(self.streams.len(), used) {
            match self.streams[i].is_complete() {
                Ok(true) => {}
                Ok(false) => return Some(false),
                Err(e) => {
                    tracing::debug!(error = %e, "aclrtStreamQuery failed on an aborted stream");
                    return None;
                }
            }
        }
        Some(true)
    }

    /// Synchronizes the used streams, ignoring what they report (an abort's report is
    /// expected): when this returns, they are idle.
    pub(crate) fn settle(&mut self, used: u32) {
        for i in used_streams(self.streams.len(), used) {
            // An error recorded by an earlier drop on the device is returned before the wait:
            // wait again (it is taken once), so the stream is idle when this returns.
            for _ in 0..4 {
                match self.streams[i].synchronize() {
                    Err(e @ ascend_mem::Error::Sticky { .. }) => {
                        tracing::warn!(error = %e, "an earlier failure, seen while settling a stream");
                    }
                    _ => break,
                }
            }
        }
    }
}

struct SlotState {
    free: Vec<Slot>,
    created: usize,
    /// Callers waiting for a slot (futures and threads), served in order: a slot given back
    /// goes to the first of them, never to the free list while one waits.
    waiters: VecDeque<Arc<SlotWaiter>>,
}

/// What a waiter is handed: a slot, or room for one more (already counted in `created`; the
/// waiter makes it, or gives the room back).
pub(crate) enum Grant {
    Slot(Slot),
    Room,
}

/// One caller waiting for a slot: a future (woken through its waker) or a thread (unparked).
pub(crate) struct SlotWaiter {
    st: Mutex<WaiterState>,
    /// When it began to wait (for the slot-wait metric).
    since: Instant,
}

impl SlotWaiter {
    fn new(waker: Waker) -> Arc<SlotWaiter> {
        Arc::new(SlotWaiter {
            st: Mutex::new(WaiterState {
                waker: Some(waker),
                ..WaiterState::default()
            }),
            since: Instant::now(),
        })
    }
}

#[derive(Default)]
struct WaiterState {
    grant: Option<Grant>,
    waker: Option<Waker>,
    /// Withdrawn: skipped when a slot is given back.
    gone: bool,
}

/// Wakes a thread parked in [`SlotPool::acquire`].
struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// The engine's slots: free ones, how many exist (within [`STREAM_BUDGET`]), and who waits.
pub(crate) struct SlotPool {
    dev: Device,
    per_slot: usize,
    max_slots: usize,
    /// What the engine learned about completion flags.
    flags: Arc<FlagState>,
    st: Mutex<SlotState>,
    /// `ascend_fabric_slot_wait_seconds`: how long each caller that had to wait waited.
    waited: Histogram,
}

impl SlotPool {
    pub(crate) fn new(dev: &Device, per_slot: usize, waited: Histogram) -> Arc<SlotPool> {
        Arc::new(SlotPool {
            waited,
            dev: dev.clone(),
            per_slot,
            max_slots: (STREAM_BUDGET / per_slot).max(1),
            flags: Arc::default(),
            st: Mutex::new(SlotState {
                free: Vec::new(),
                created: 0,
                waiters: VecDeque::new(),
            }),
        })
    }

    /// A free slot or room for a new one, unless someone waits already or all are busy.
    fn try_take(&self, st: &mut SlotState) -> Option<Grant> {
        if !st.waiters.is_empty() {
            return None;
        }
        if let Some(s) = st.free.pop() {
            return Some(Grant::Slot(s));
        }
        if st.created < self.max_slots {
            st.created += 1;
            return Some(Grant::Room);
        }
        None
    }

    /// The slot of a grant: made now for [`Grant::Room`] (the room goes on to the next waiter
    /// if that fails).
    pub(crate) fn realize(&self, g: Grant) -> Result<Slot> {
        match g {
            Grant::Slot(s) => Ok(s),
            Grant::Room => Slot::new(&self.dev, self.per_slot, &self.flags)
                .inspect_err(|_| self.give(Grant::Room)),
        }
    }

    fn exhausted(&self) -> Error {
        Error::ResourceExhausted {
            what: "stream slots",
            detail: format!(
                "{} slots of {} streams in use (budget {STREAM_BUDGET} streams)",
                self.max_slots, self.per_slot
            ),
        }
    }

    /// A free slot, a new one within budget, or (with a deadline) waits for one in turn.
    pub(crate) fn acquire(&self, wait_until: Option<Instant>) -> Result<Slot> {
        let t0 = Instant::now();
        let w = {
            let mut st = self.st.lock();
            if let Some(g) = self.try_take(&mut st) {
                drop(st);
                return self.realize(g);
            }
            let Some(_) = wait_until else {
                return Err(self.exhausted());
            };
            let w = SlotWaiter::new(Arc::new(ThreadWaker(std::thread::current())).into());
            st.waiters.push_back(w.clone());
            w
        };
        let deadline = wait_until.unwrap_or(t0);
        loop {
            if let Some(g) = w.st.lock().grant.take() {
                self.waited.record(w.since.elapsed().as_secs_f64());
                return self.realize(g);
            }
            let now = Instant::now();
            if now >= deadline {
                // A grant handed over meanwhile is taken, not lost.
                return match self.withdraw(&w) {
                    Some(g) => self.realize(g),
                    None => Err(Error::Timeout {
                        what: "waiting for a free stream slot",
                        after: t0.elapsed(),
                    }),
                };
            }
            std::thread::park_timeout(deadline - now);
        }
    }

    /// For a future: a slot now, or `Pending` with `waiter` queued (woken through `cx` when a
    /// slot is handed to it). Keep polling with the same `waiter`; withdraw it
    /// ([`SlotPool::withdraw`]) if the future goes away.
    pub(crate) fn poll_acquire(
        &self,
        waiter: &mut Option<Arc<SlotWaiter>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Slot>> {
        if let Some(w) = waiter {
            let mut ws = w.st.lock();
            if let Some(g) = ws.grant.take() {
                drop(ws);
                self.waited.record(w.since.elapsed().as_secs_f64());
                *waiter = None;
                return Poll::Ready(self.realize(g));
            }
            if !ws.waker.as_ref().is_some_and(|k| k.will_wake(cx.waker())) {
                ws.waker = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
        let mut st = self.st.lock();
        if let Some(g) = self.try_take(&mut st) {
            drop(st);
            return Poll::Ready(self.realize(g));
        }
        let w = SlotWaiter::new(cx.waker().clone());
        st.waiters.push_back(w.clone());
        *waiter = Some(w);
        Poll::Pending
    }

    /// Takes `w` out of the queue; returns what it was handed meanwhile, if anything (the
    /// caller uses it or gives it back with [`SlotPool::give`]).
    /// The wait ends here, slot or not: it counts in the slot-wait metric.
    pub(crate) fn withdraw(&self, w: &Arc<SlotWaiter>) -> Option<Grant> {
        self.waited.record(w.since.elapsed().as_secs_f64());
        let mut st = self.st.lock();
        let mut ws = w.st.lock();
        ws.gone = true;
        let g = ws.grant.take();
        drop(ws);
        if g.is_none() {
            st.waiters.retain(|x| !Arc::ptr_eq(x, w));
        }
        g
    }

    /// Hands `g` to the first waiter, or puts it back (a slot to the free list, room to the
    /// budget), and wakes the waiter.
    pub(crate) fn give(&self, g: Grant) {
        if let Some(k) = self.hand(g) {
            k.wake();
        }
    }

    /// [`SlotPool::give`] without the wake: returns the waiter's waker, for a caller holding
    /// a lock to wake once it has released it (a waker may run the woken task at once).
    #[must_use = "the waiter handed the grant must be woken"]
    fn hand(&self, g: Grant) -> Option<Waker> {
        let mut st = self.st.lock();
        while let Some(w) = st.waiters.pop_front() {
            let mut ws = w.st.lock();
            if ws.gone {
                continue;
            }
            ws.grant = Some(g);
            return ws.waker.take();
        }
        match g {
            Grant::Slot(s) => st.free.push(s),
            Grant::Room => st.created -= 1,
        }
        None
    }

    /// Returns `slot`, its streams idle, for reuse.
    pub(crate) fn release(&self, slot: Slot) {
        self.give(Grant::Slot(slot));
    }

    /// Destroys `slot` (its transfer failed or was aborted), making room for a new one.
    pub(crate) fn discard(&self, slot: Slot) {
        drop(slot);
        self.give(Grant::Room);
    }

    /// [`SlotPool::release`] (`ok`) or [`SlotPool::discard`], returning the waker of the
    /// waiter handed the slot or the room, to wake without the caller's locks.
    #[must_use = "the waiter handed the grant must be woken"]
    pub(crate) fn put_back_deferred(&self, slot: Slot, ok: bool) -> Option<Waker> {
        if ok {
            self.hand(Grant::Slot(slot))
        } else {
            drop(slot);
            self.hand(Grant::Room)
        }
    }

    /// Slots created and not destroyed.
    pub(crate) fn created(&self) -> usize {
        self.st.lock().created
    }
}

/// Where a submission's slot comes from.
pub(crate) enum SlotFrom {
    /// Taken by the submission: failing at once when all are busy, or waiting in turn until
    /// the deadline.
    Acquire(Option<Instant>),
    /// Taken by a future already.
    Given(SlotGuard),
}

/// A slot taken for a submission, until the submission hands it to its request
/// ([`SlotGuard::into_parts`]). Dropped before that (an error or a panic on the way), it
/// gives the slot back: released for reuse while no stream has work, else aborted and
/// destroyed.
#[must_use = "dropping the guard gives the slot back at once"]
pub(crate) struct SlotGuard {
    pool: Arc<SlotPool>,
    slot: Option<Slot>,
    /// Bit i: stream i may have work queued.
    used: u32,
}

impl SlotGuard {
    /// Takes a slot of `pool` (see [`SlotPool::acquire`]).
    pub(crate) fn acquire(pool: &Arc<SlotPool>, wait_until: Option<Instant>) -> Result<SlotGuard> {
        let slot = pool.acquire(wait_until)?;
        Ok(SlotGuard {
            pool: pool.clone(),
            slot: Some(slot),
            used: 0,
        })
    }

    /// A guard over `slot`, taken from `pool` already (by a future).
    pub(crate) fn from_slot(pool: &Arc<SlotPool>, slot: Slot) -> SlotGuard {
        SlotGuard {
            pool: pool.clone(),
            slot: Some(slot),
            used: 0,
        }
    }

    /// The slot's streams.
    pub(crate) fn streams(&self) -> usize {
        self.slot.as_ref().map_or(0, Slot::streams)
    }

    /// The slot's streams, those of bit set `used` marked used first: work queued on them,
    /// even part of it, is aborted if the guard drops.
    pub(crate) fn streams_mut(&mut self, used: u32) -> &mut [StreamLease] {
        self.used |= used;
        let slot = self
            .slot
            .as_mut()
            .expect("a guard holds its slot until consumed");
        &mut slot.streams
    }

    /// The slot, the streams that got work, and the pool it goes back to.
    pub(crate) fn into_parts(mut self) -> (Slot, u32, Arc<SlotPool>) {
        let slot = self
            .slot
            .take()
            .expect("a guard holds its slot until consumed");
        (slot, self.used, self.pool.clone())
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        if self.used == 0 {
            self.pool.release(slot);
        } else {
            slot.abort(self.used);
            self.pool.discard(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(pool: &SlotPool) -> usize {
        pool.st.lock().free.len()
    }

    #[test]
    fn a_guard_gives_its_slot_back_on_every_exit() {
        let rt = ascend_mem::Runtime::emulated().unwrap();
        let dev = rt.device(0).unwrap();
        let pool = SlotPool::new(&dev, 2, metrics::Histogram::noop());

        // Dropped before any work (an error on the way): released for reuse.
        drop(SlotGuard::acquire(&pool, None).unwrap());
        assert_eq!((pool.created(), free(&pool)), (1, 1));

        // Dropped with a stream marked used: aborted and destroyed, room for a new one.
        let mut g = SlotGuard::acquire(&pool, None).unwrap();
        assert_eq!((g.streams(), free(&pool)), (2, 0));
        let _ = g.streams_mut(1 << 1);
        drop(g);
        assert_eq!((pool.created(), free(&pool)), (0, 0));

        // Handed on: the holder returns it, the guard does nothing more.
        let mut g = SlotGuard::acquire(&pool, None).unwrap();
        let _ = g.streams_mut(1);
        let (slot, used, back) = g.into_parts();
        assert_eq!((used, pool.created(), free(&pool)), (0b01, 1, 0));
        back.release(slot);
        assert_eq!((pool.created(), free(&pool)), (1, 1));
    }
}
