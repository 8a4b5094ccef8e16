//! The engine's progress thread: observes every asynchronous request (transfer futures,
//! `transfer_async`, completion queues) from its submission until it ends, so a finished
//! request gives its slot back, its future's waker is woken and its completion queue filled,
//! whether or not anyone looks at it. A synchronous transfer is observed by its waiting caller
//! alone.
//!
//! Started with the engine's first asynchronous request, it polls every watched request (its
//! completion flags, asking a stream whose flag is not there yet); after a round that
//! finished nothing it keeps polling for a short while ([`SPIN`]), then blocks on the streams
//! of the oldest request nobody else holds, in slices (1 ms, growing to
//! [`MAX_SLICE`] while nothing ends, and never past a stall deadline), so a completion wakes
//! it at once. When every watched request is held by someone else (a waiter blocked on its
//! streams), it waits the slice on its condition variable instead. With nothing to watch it
//! parks on that condition variable: no core is used while idle. Requests are held weakly: a
//! dropped request leaves the list by itself.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::request::{ReqInner, SPIN};

/// The first blocking slice after a quiet spell (the runtime's event wait counts in ms).
const MIN_SLICE: Duration = Duration::from_millis(1);
/// The longest slice: a completion other than the oldest request's is seen within it.
const MAX_SLICE: Duration = Duration::from_millis(4);

#[derive(Default)]
struct State {
    /// Requests handed over since the thread last looked.
    incoming: Vec<Weak<ReqInner>>,
    thread: Option<JoinHandle<()>>,
    stop: bool,
    /// Parked on `cv` with nothing to watch.
    idle: bool,
}

/// One engine's progress thread and the requests handed to it.
#[derive(Default)]
pub(crate) struct Progress {
    st: Mutex<State>,
    cv: Condvar,
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

    /// Observes `r` until it ends (once per request; later calls do nothing). Returns false
    /// if nobody will: the engine is shutting down (every request of it is failed by then)
    /// or the thread could not be started; the caller then polls again itself.
    pub(crate) fn watch(self: &Arc<Self>, r: &Arc<ReqInner>) -> bool {
        if r.watched.swap(true, Ordering::AcqRel) {
            return true;
        }
        let mut st = self.st.lock();
        if st.stop {
            r.watched.store(false, Ordering::Release);
            return false;
        }
        st.incoming.push(Arc::downgrade(r));
        if st.thread.is_none() {
            let me = self.clone();
            match std::thread::Builder::new()
                .name("fabric-progress".into())
                .spawn(move || run(&me))
            {
                Ok(t) => st.thread = Some(t),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the progress thread");
                    st.incoming.clear();
                    r.watched.store(false, Ordering::Release);
                    return false;
                }
            }
        } else if st.idle {
            self.cv.notify_one();
        }
        true
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

    /// Adds the requests handed over to `watched`; blocks while there is none. `None`: stop;
    /// else whether any was new.
    fn take_incoming(&self, watched: &mut Vec<Weak<ReqInner>>) -> Option<bool> {
        let mut st = self.st.lock();
        loop {
            if st.stop {
                return None;
            }
            let new = !st.incoming.is_empty();
            watched.append(&mut st.incoming);
            if !watched.is_empty() {
                return Some(new);
            }
            st.idle = true;
            self.cv.wait(&mut st);
            st.idle = false;
        }
    }
}

fn run(p: &Progress) {
    let mut watched: Vec<Weak<ReqInner>> = Vec::new();
    let mut last_end = Instant::now();
    let mut slice = MIN_SLICE;
    while let Some(new) = p.take_incoming(&mut watched) {
        if new {
            last_end = Instant::now();
            slice = MIN_SLICE;
        }
        let before = watched.len();
        watched.retain(|w| w.upgrade().is_some_and(|r| r.observe(true) != Some(true)));
        if watched.len() < before {
            last_end = Instant::now();
            slice = MIN_SLICE;
            continue;
        }
        if last_end.elapsed() < SPIN {
            std::thread::yield_now();
            continue;
        }
        park(p, &watched, slice);
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
        st.idle = true;
        p.cv.wait_for(&mut st, slice);
        st.idle = false;
    }
}
