//! The engine's progress thread: observes every asynchronous request (transfer futures,
//! `transfer_async`, completion queues) from its submission until it ends, so a finished
//! request gives its slot back, its future's waker is woken and its completion queue filled,
//! whether or not anyone looks at it. A synchronous transfer is observed by its waiting caller
//! alone.
//!
//! Started with the engine's first asynchronous request, it polls every watched request (its
//! completion flags, asking a stream whose flag is not there yet); after a round that
//! finished nothing it keeps polling for a short while ([`SPIN`]), then blocks on the streams
//! of the oldest request nobody else blocks on, in slices (1 ms, growing to
//! [`MAX_SLICE`] while nothing ends, and never past a stall deadline), so a completion wakes
//! it at once. When every watched request is held by someone else (a waiter blocked on its
//! streams), it waits the slice on its condition variable instead. With nothing to watch it
//! polls for a moment ([`SPIN`]) for the next request, then lingers ([`LINGER`]: waits on
//! that condition variable in slices of [`MIN_SLICE`], looking for hand-overs between them),
//! then parks on it: no core is used while idle.
//!
//! Waking the thread costs the submitter a system call (and on a virtual machine an
//! interrupt to the other core): about as much as queuing a thousand copies. So a hand-over
//! says how soon it must be seen ([`Urgency`]). A request a caller may yet wait on itself (a
//! `transfer_async` request) is handed over [`Urgency::Soon`]: it wakes a parked thread but
//! not a lingering one, or one waiting out a slice, which sees it within that slice. A
//! request that someone is waiting for through the thread (a future that registered its
//! waker, a completion queue) is [`Urgency::Now`]: it wakes the thread whatever it is doing
//! short of blocking on another request's streams. Requests are held weakly: a
//! dropped request leaves the list by itself, its aborted streams handed over as its
//! channel's drain list, which the thread asks each round (never waiting on those streams)
//! until the runtime says they are done, then releases what the request held.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::request::{spin_until, InFlight, ReqInner, SPIN};

/// The first blocking slice after a quiet spell (the runtime's event wait counts in ms).
const MIN_SLICE: Duration = Duration::from_millis(1);
/// The longest slice: a completion other than the oldest request's is seen within it.
const MAX_SLICE: Duration = Duration::from_millis(4);
/// How long the thread lingers with nothing to watch before it parks for good (until a
/// hand-over wakes it).
pub(crate) const LINGER: Duration = Duration::from_millis(20);

/// How soon the progress thread must see what is handed to it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Urgency {
    /// Within a slice ([`MAX_SLICE`]): the thread is woken only if it parked for good. For
    /// work whose completion nobody waits for through the thread yet (the submitter may still
    /// wait on it itself), and for dropped requests' clean-up.
    Soon,
    /// At once: someone waits for the thread to report it (a waker, a completion queue).
    Now,
}

/// What the thread is doing, as far as a hand-over cares.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
enum Sleep {
    /// Running: it looks at the hand-overs before it sleeps again.
    #[default]
    Awake,
    /// Waiting a slice on the condition variable (lingering, or every watched request held
    /// by a waiter): it looks again within [`MAX_SLICE`].
    Slice,
    /// Parked with nothing to watch, until woken.
    Parked,
}

#[derive(Default)]
struct State {
    /// Requests handed over since the thread last looked.
    incoming: Vec<Weak<ReqInner>>,
    /// Channels' drain lists handed over since (a dropped request's aborted streams).
    drains: Vec<Arc<InFlight>>,
    /// Dropped requests someone held when they were dropped, to abort.
    aborts: Vec<Arc<ReqInner>>,
    thread: Option<JoinHandle<()>>,
    stop: bool,
    /// Whether (and how) the thread waits on `cv`.
    sleep: Sleep,
}

/// One engine's progress thread and the requests handed to it.
#[derive(Default)]
pub(crate) struct Progress {
    st: Mutex<State>,
    cv: Condvar,
    /// Bumped under `st`'s lock whenever something is handed over: what the thread polls for
    /// a moment before it parks, so a request submitted right after the last one ended needs
    /// no wake-up (a futex call, and on a virtual machine an interrupt to the other core).
    handed: AtomicU64,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress").finish_non_exhaustive()
    }
}

impl Progress {
    pub(crate) fn new() -> Arc<Progress> {
        Arc::default()
    }

    /// Observes `r` until it ends (once per request; a later call only wakes the thread
    /// when `urgency` is [`Urgency::Now`]). Returns false if nobody will: the engine is
    /// shutting down (every request of it is failed by then) or the thread could not be
    /// started; the caller then polls again itself.
    pub(crate) fn watch(self: &Arc<Self>, r: &Arc<ReqInner>, urgency: Urgency) -> bool {
        if r.watched.swap(true, Ordering::AcqRel) {
            if urgency == Urgency::Now {
                let st = self.st.lock();
                if st.sleep != Sleep::Awake {
                    self.cv.notify_one();
                }
            }
            return true;
        }
        let mut st = self.st.lock();
        if st.stop || !self.running(&mut st, urgency) {
            r.watched.store(false, Ordering::Release);
            return false;
        }
        st.incoming.push(Arc::downgrade(r));
        self.handed.fetch_add(1, Ordering::Release);
        true
    }

    /// Drains `book` (a dropped request's aborted streams) until nothing is left in it, asking
    /// its streams between other work, never waiting on them. When the thread cannot (the
    /// engine is shutting down, the thread could not be started), drains it here, waiting.
    pub(crate) fn drain(self: &Arc<Self>, book: Arc<InFlight>) {
        let mut st = self.st.lock();
        if st.stop || !self.running(&mut st, Urgency::Soon) {
            drop(st);
            book.settle_all().into_iter().for_each(Waker::wake);
            return;
        }
        add_book(&mut st.drains, book);
        self.handed.fetch_add(1, Ordering::Release);
    }

    /// Aborts `r` (dropped while someone held its lock) as [`ReqInner::abort_detached`]
    /// does, and drains it. When the thread cannot,
    /// does both here, waiting.
    pub(crate) fn abort(self: &Arc<Self>, r: Arc<ReqInner>) {
        let mut st = self.st.lock();
        if st.stop || !self.running(&mut st, Urgency::Soon) {
            drop(st);
            if let Some(book) = r.abort_detached() {
                book.settle_all().into_iter().for_each(Waker::wake);
            }
            return;
        }
        st.aborts.push(r);
        self.handed.fetch_add(1, Ordering::Release);
    }

    /// Starts the thread if it is not running, else wakes it if it sleeps longer than
    /// `urgency` allows (what is handed over next is pushed under the same lock); false if
    /// it cannot be started.
    fn running(self: &Arc<Self>, st: &mut State, urgency: Urgency) -> bool {
        if st.thread.is_some() {
            let wake = match st.sleep {
                Sleep::Awake => false,
                Sleep::Slice => urgency == Urgency::Now,
                Sleep::Parked => true,
            };
            if wake {
                self.cv.notify_one();
            }
            return true;
        }
        let me = self.clone();
        match std::thread::Builder::new()
            .name("fabric-progress".into())
            .spawn(move || run(&me))
        {
            Ok(t) => {
                st.thread = Some(t);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the progress thread");
                false
            }
        }
    }

    /// Stops the thread and joins it (unless called on it).
    pub(crate) fn stop(&self) {
        let t = {
            let mut st = self.st.lock();
            st.stop = true;
            self.cv.notify_all();
            st.thread.take()
        };
        if let Some(t) = t {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// Adds the requests and drain lists handed over to `w`; blocks while there is none
    /// (lingering first, [`LINGER`]). `None`: stop; else whether any was new.
    fn take_incoming(&self, w: &mut Watched) -> Option<bool> {
        let mut st = self.st.lock();
        let mut linger_until = None;
        loop {
            if st.stop {
                return None;
            }
            let new = !st.incoming.is_empty() || !st.drains.is_empty() || !st.aborts.is_empty();
            w.reqs.append(&mut st.incoming);
            for b in st.drains.drain(..) {
                add_book(&mut w.drains, b);
            }
            w.aborts.append(&mut st.aborts);
            if !w.reqs.is_empty() || !w.drains.is_empty() || !w.aborts.is_empty() {
                return Some(new);
            }
            // Nothing to watch: poll for a moment for the next hand-over, then park.
            let seen = self.handed.load(Ordering::Acquire);
            MutexGuard::unlocked(&mut st, || {
                spin_until(|| self.handed.load(Ordering::Acquire) != seen)
            });
            // Read again under the lock (hand-overs bump it under the lock): one made after
            // the poll gave up, before the lock was taken again, set no wake-up (the thread
            // was not idle), so it must be seen here.
            if self.handed.load(Ordering::Acquire) != seen || st.stop {
                continue;
            }
            let until = *linger_until.get_or_insert_with(|| Instant::now() + LINGER);
            if Instant::now() < until {
                st.sleep = Sleep::Slice;
                self.cv.wait_for(&mut st, MIN_SLICE);
            } else {
                st.sleep = Sleep::Parked;
                self.cv.wait(&mut st);
            }
            st.sleep = Sleep::Awake;
        }
    }
}

/// Adds `b` to `list` unless it is there already (a channel's drain list is asked once a
/// round however many drops it holds).
fn add_book(list: &mut Vec<Arc<InFlight>>, b: Arc<InFlight>) {
    if !list.iter().any(|x| Arc::ptr_eq(x, &b)) {
        list.push(b);
    }
}

/// What the thread watches: requests (weakly) and channels' drain lists.
#[derive(Default)]
struct Watched {
    reqs: Vec<Weak<ReqInner>>,
    drains: Vec<Arc<InFlight>>,
    aborts: Vec<Arc<ReqInner>>,
}

fn run(p: &Progress) {
    let mut w = Watched::default();
    let mut last_end = Instant::now();
    let mut slice = MIN_SLICE;
    while let Some(new) = p.take_incoming(&mut w) {
        if new {
            last_end = Instant::now();
            slice = MIN_SLICE;
        }
        // Their holder (an observation, a teardown failing them) has let go, or does soon.
        for r in std::mem::take(&mut w.aborts) {
            if let Some(b) = r.abort_detached() {
                add_book(&mut w.drains, b);
            }
        }
        let before = w.reqs.len() + w.drains.len();
        w.reqs
            .retain(|w| w.upgrade().is_some_and(|r| r.observe(true) != Some(true)));
        w.drains.retain(|b| b.drain() > 0);
        if w.reqs.len() + w.drains.len() < before {
            last_end = Instant::now();
            slice = MIN_SLICE;
            continue;
        }
        if last_end.elapsed() < SPIN {
            std::thread::yield_now();
            continue;
        }
        park(p, &w.reqs, slice);
        slice = (slice * 2).min(MAX_SLICE);
    }
}

/// Blocks up to `slice` (never past a stall deadline) on the oldest watched request nobody
/// else holds; when all are held, waits the slice on the condition variable (woken early by
/// a new request or a stop), so a held request never makes the thread spin.
fn park(p: &Progress, watched: &[Weak<ReqInner>], slice: Duration) {
    let live: Vec<Arc<ReqInner>> = watched.iter().filter_map(Weak::upgrade).collect();
    let now = Instant::now();
    let slice = live
        .iter()
        .filter_map(|r| r.stall_deadline())
        .map(|d| d.saturating_duration_since(now))
        .fold(slice, Duration::min);
    if slice.is_zero() || live.iter().any(|r| r.park(slice)) {
        return;
    }
    let mut st = p.st.lock();
    if st.incoming.is_empty() && !st.stop {
        st.sleep = Sleep::Slice;
        p.cv.wait_for(&mut st, slice);
        st.sleep = Sleep::Awake;
    }
}
