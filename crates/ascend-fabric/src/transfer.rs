//! Transfers: descriptors, stream slots, requests and their completion.
//!
//! A *slot* is `task_stream_num` streams leased from a [`StreamPool`] plus one event per stream
//! (HIXL's host-mode slot). A transfer takes a slot for itself, deals its pieces round-robin
//! to the slot's streams and queues each stream's share as one table batch
//! ([`ascend_mem::Stream::copy_table_async`] over the channel's imports and the local
//! segments: `aclrtMemcpyAsync`, kind DEVICE_TO_DEVICE for every direction, as HIXL does),
//! records each used stream's event, and is complete when every recorded event is;
//! the streams are then synchronized (instantly) to surface copy errors, and the slot goes back
//! to the engine. A slot whose transfer failed or was aborted is destroyed, not reused. Slots are
//! created lazily, up to a budget of 512 streams per engine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use ascend_mem::{Device, Event, FailureMode, StreamFlags, StreamLease, StreamPool};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::channel::Channel;
use crate::engine::EngineInner;
use crate::error::{Error, Result};
use crate::registry::RegInner;

/// HIXL's per-engine stream budget.
pub const STREAM_BUDGET: usize = 512;

/// Transfer direction (`hixl::TransferOp`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransferOp {
    /// Remote → local (`READ` 0).
    Read,
    /// Local → remote (`WRITE` 1).
    Write,
}

/// One copy of a transfer, laid out as HIXL's `TransferOpDesc` (local address first).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TransferDesc {
    /// Address in this engine's registered memory.
    pub local_addr: u64,
    /// Address in memory the peer registered (as the peer sees it).
    pub remote_addr: u64,
    /// Bytes to copy.
    pub len: u64,
}

impl TransferDesc {
    /// A descriptor.
    pub fn new(local_addr: u64, remote_addr: u64, len: u64) -> Self {
        TransferDesc {
            local_addr,
            remote_addr,
            len,
        }
    }
}

/// The state of a request (`hixl::TransferStatus`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransferStatus {
    /// Still running.
    Waiting,
    /// Done; the data is in place.
    Completed,
    /// Failed; [`TransferRequest::wait`] returns why.
    Failed,
}

// ---------------------------------------------------------------------------------------------
// Slots

pub(crate) struct Slot {
    pub(crate) streams: Vec<StreamLease>,
    events: Vec<Event>,
    _pool: StreamPool,
}

impl Slot {
    fn new(dev: &Device, n: usize) -> Result<Slot> {
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
        let events = (0..n)
            .map(|_| Event::new(dev))
            .collect::<ascend_mem::Result<Vec<_>>>()?;
        Ok(Slot {
            streams,
            events,
            _pool: pool,
        })
    }

    /// Aborts the used streams' work and consumes the abort report, so the slot can be
    /// destroyed quietly.
    fn abort(&mut self, used: u32) {
        for (i, s) in self.streams.iter_mut().enumerate() {
            if used & (1 << i) != 0 {
                if let Err(e) = s.abort() {
                    tracing::warn!(error = %e, "aclrtStreamAbort failed");
                }
                let _ = s.synchronize();
            }
        }
    }
}

struct SlotState {
    free: Vec<Slot>,
    created: usize,
}

pub(crate) struct SlotPool {
    dev: Device,
    per_slot: usize,
    max_slots: usize,
    st: Mutex<SlotState>,
    cv: Condvar,
}

impl SlotPool {
    pub(crate) fn new(dev: &Device, per_slot: usize) -> Arc<SlotPool> {
        Arc::new(SlotPool {
            dev: dev.clone(),
            per_slot,
            max_slots: (STREAM_BUDGET / per_slot).max(1),
            st: Mutex::new(SlotState {
                free: Vec::new(),
                created: 0,
            }),
            cv: Condvar::new(),
        })
    }

    /// A free slot, a new one within budget, or (with a deadline) waits for one.
    pub(crate) fn acquire(&self, wait_until: Option<Instant>) -> Result<Slot> {
        let t0 = Instant::now();
        let mut st = self.st.lock();
        loop {
            if let Some(s) = st.free.pop() {
                return Ok(s);
            }
            if st.created < self.max_slots {
                st.created += 1;
                drop(st);
                return Slot::new(&self.dev, self.per_slot).inspect_err(|_| {
                    self.st.lock().created -= 1;
                    self.cv.notify_one();
                });
            }
            match wait_until {
                None => {
                    return Err(Error::ResourceExhausted {
                        what: "stream slots",
                        detail: format!(
                            "{} slots of {} streams in use (budget {STREAM_BUDGET} streams)",
                            self.max_slots, self.per_slot
                        ),
                    })
                }
                Some(d) => {
                    if self.cv.wait_until(&mut st, d).timed_out() && st.free.is_empty() {
                        return Err(Error::Timeout {
                            what: "waiting for a free stream slot",
                            after: t0.elapsed(),
                        });
                    }
                }
            }
        }
    }

    pub(crate) fn release(&self, slot: Slot) {
        self.st.lock().free.push(slot);
        self.cv.notify_one();
    }

    pub(crate) fn discard(&self, slot: Slot) {
        drop(slot);
        self.st.lock().created -= 1;
        self.cv.notify_one();
    }

    /// Slots created and not destroyed.
    pub(crate) fn created(&self) -> usize {
        self.st.lock().created
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// Registrations a pending transfer uses; counted in their `in_flight` until dropped.
pub(crate) struct RegUse(pub(crate) Vec<Arc<RegInner>>);

impl RegUse {
    /// Adds `r` (consecutive duplicates are skipped).
    pub(crate) fn add(&mut self, r: &Arc<RegInner>) {
        if self.0.last().is_some_and(|l| Arc::ptr_eq(l, r)) {
            return;
        }
        r.in_flight.fetch_add(1, Ordering::AcqRel);
        self.0.push(r.clone());
    }
}

impl Drop for RegUse {
    fn drop(&mut self) {
        for r in &self.0 {
            r.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

pub(crate) struct Pending {
    pub(crate) slot: Slot,
    /// Bit i: stream i got work (and its event was recorded).
    pub(crate) used: u32,
    pub(crate) regs: RegUse,
    pub(crate) channel: Arc<Channel>,
    pub(crate) slots: Arc<SlotPool>,
    pub(crate) write: bool,
    pub(crate) bytes: u64,
    pub(crate) descs: u64,
}

impl Pending {
    /// Records the event of every used stream.
    pub(crate) fn record(&mut self) -> Result<()> {
        for i in 0..self.slot.streams.len() {
            if self.used & (1 << i) != 0 {
                self.slot.events[i].record(&mut self.slot.streams[i])?;
            }
        }
        Ok(())
    }

    /// Waits up to `slice` for the events; true when all are complete.
    fn wait_events(&mut self, slice: Duration) -> Result<bool> {
        let until = Instant::now() + slice;
        for i in 0..self.slot.events.len() {
            if self.used & (1 << i) == 0 {
                continue;
            }
            let ev = &self.slot.events[i];
            let left = until.saturating_duration_since(Instant::now());
            let done = if left.is_zero() {
                ev.is_complete()?
            } else {
                match ev.synchronize_timeout(left) {
                    Ok(()) => true,
                    Err(e) if e.kind() == ascend_mem::ErrorKind::Timeout => false,
                    Err(e) => return Err(e.into()),
                }
            };
            if !done {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn poll_events(&mut self) -> Result<bool> {
        for i in 0..self.slot.events.len() {
            if self.used & (1 << i) != 0 && !self.slot.events[i].is_complete()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// After the events: synchronizes the used streams (done already) to surface errors.
    fn sync_streams(&mut self) -> Result<()> {
        let mut first = None;
        for i in 0..self.slot.streams.len() {
            if self.used & (1 << i) != 0 {
                if let Err(e) = self.slot.streams[i].synchronize() {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(e.into()),
        }
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
    /// With `AutoConnect`: the engine and the channel, to disconnect after a failed copy.
    auto: Option<(Weak<EngineInner>, Weak<Channel>)>,
    /// Set when the request failed in a way that disconnects under `AutoConnect`; taken by
    /// the first caller to see the failure, after it released the state lock.
    auto_due: AtomicBool,
}

/// Longest time a waiter holds a request's lock while blocked on its events.
const SLICE: Duration = Duration::from_millis(2);

impl ReqInner {
    pub(crate) fn new(id: u64, p: Pending, engine: Option<Weak<EngineInner>>) -> Arc<ReqInner> {
        let auto = engine.map(|e| (e, Arc::downgrade(&p.channel)));
        Arc::new(ReqInner {
            id,
            state: Mutex::new(ReqState::Pending(Box::new(p))),
            auto,
            auto_due: AtomicBool::new(false),
        })
    }

    /// `AutoConnect`, as HIXL: a transfer whose copies failed disconnects its peer (the next
    /// transfer connects again). Only the channel the request used is closed, not one made
    /// since. Call without holding the state lock.
    pub(crate) fn disconnect_if_due(&self, force: bool) {
        if !(self.auto_due.swap(false, Ordering::AcqRel) || force) {
            return;
        }
        let Some((eng, ch)) = &self.auto else {
            return;
        };
        let (Some(eng), Some(ch)) = (eng.upgrade(), ch.upgrade()) else {
            return;
        };
        eng.auto_disconnect(&ch);
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
            channel,
            slots,
            write,
            bytes,
            descs,
        } = *p;
        let c = &channel.counters;
        match &result {
            Ok(()) => {
                slots.release(slot);
                if write {
                    c.writes.fetch_add(1, Ordering::Relaxed);
                    c.bytes_written.fetch_add(bytes, Ordering::Relaxed);
                } else {
                    c.reads.fetch_add(1, Ordering::Relaxed);
                    c.bytes_read.fetch_add(bytes, Ordering::Relaxed);
                }
                c.descriptors.fetch_add(descs, Ordering::Relaxed);
            }
            Err(e) => {
                slot.abort(used);
                slots.discard(slot);
                c.errors.fetch_add(1, Ordering::Relaxed);
                if self.auto.is_some() && matches!(e, Error::Mem(_)) {
                    self.auto_due.store(true, Ordering::Release);
                }
            }
        }
        channel.inflight.lock().remove(&self.id);
        drop(regs);
        drop(channel);
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
