//! A completion queue over many requests, as HIXL's batched `GetTransferStatus`: each request
//! carries user data, and one call returns the ended ones with their outcome and data, in the
//! order they ended, so one loop (or several threads) can drive thousands of transfers with no
//! head-of-line blocking.
//!
//! A request's end is observed by the engine's progress thread (or anyone who polls), which
//! appends its id to the queue's ready list once the request's lock is released; the
//! consumers take ids from that list. A request tells the queue only after releasing its own
//! lock, and no request is dropped (cancelled) under the queue's lock.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::progress::Urgency;
use crate::request::{spin_until, Sink};
use crate::transfer::TransferStatus;
use crate::transfer_request::TransferRequest;

/// A request that ended, taken from a [`CompletionQueue`].
///
/// Dropping it only discards the outcome (the transfer is over).
#[must_use = "a completion carries its transfer's outcome"]
#[derive(Debug)]
pub struct Completion<T> {
    /// The request's id ([`TransferRequest::id`]).
    pub id: u64,
    /// The peer.
    pub peer: String,
    /// What was given with the request.
    pub user_data: T,
    /// The outcome, as [`TransferRequest::wait`] would have returned it.
    pub result: Result<()>,
}

impl<T> Completion<T> {
    /// [`TransferStatus::Completed`] or [`TransferStatus::Failed`].
    pub fn status(&self) -> TransferStatus {
        match self.result {
            Ok(()) => TransferStatus::Completed,
            Err(_) => TransferStatus::Failed,
        }
    }
}

struct Entry<T> {
    req: TransferRequest,
    data: T,
}

struct State<T> {
    entries: HashMap<u64, Entry<T>>,
    /// Ids of ended requests, in the order they ended.
    ready: VecDeque<u64>,
    /// Tasks waiting in [`CompletionQueue::next`].
    wakers: Vec<Waker>,
}

struct Shared<T> {
    st: Mutex<State<T>>,
    cv: Condvar,
}

impl<T: Send> Sink for Shared<T> {
    fn completed(&self, id: u64) {
        let wakers = {
            let mut st = self.st.lock();
            if !st.entries.contains_key(&id) {
                // Cancelled: taken out before it ended.
                return;
            }
            st.ready.push_back(id);
            std::mem::take(&mut st.wakers)
        };
        self.cv.notify_one();
        for w in wakers {
            w.wake();
        }
    }
}

/// Requests with user data, and the ones that ended (HIXL's `TransferArgs::user_data` and
/// batched `GetTransferStatus`).
///
/// `Send + Sync` for `T: Send`: any number of threads may push and take at once (share it by
/// reference or in an `Arc`). Requests of several engines may share one queue.
///
/// ```no_run
/// # use ascend_fabric::{CompletionQueue, Engine, TransferDesc, TransferOp};
/// # use std::time::Duration;
/// # fn f(engine: &Engine, blocks: &[TransferDesc]) -> ascend_fabric::Result<()> {
/// let queue = CompletionQueue::new();
/// for (i, d) in blocks.iter().enumerate() {
///     queue.push(engine.transfer_async("10.0.0.2:26000", TransferOp::Write, &[*d])?, i);
/// }
/// while !queue.is_empty() {
///     for c in queue.wait(64, Duration::from_secs(5)) {
///         c.result?; // block c.user_data is in place
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the queue cancels every request still in it (aborting its copies)"]
pub struct CompletionQueue<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for CompletionQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.st.lock();
        f.debug_struct("CompletionQueue")
            .field("requests", &st.entries.len())
            .field("ready", &st.ready.len())
            .finish()
    }
}

impl<T: Send + 'static> Default for CompletionQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + 'static> CompletionQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        CompletionQueue {
            shared: Arc::new(Shared {
                st: Mutex::new(State {
                    entries: HashMap::new(),
                    ready: VecDeque::new(),
                    wakers: Vec::new(),
                }),
                cv: Condvar::new(),
            }),
        }
    }

    /// Adds `req` with `user_data`; returns its id. The queue owns the request from now on:
    /// it is reported once it ends, or cancelled by [`CompletionQueue::cancel`] or by dropping
    /// the queue.
    pub fn push(&self, req: TransferRequest, user_data: T) -> u64 {
        let id = req.id();
        let inner = req.inner.clone();
        let progress = req.progress.clone();
        let entry = Entry {
            req,
            data: user_data,
        };
        let replaced = self.shared.st.lock().entries.insert(id, entry);
        // Ids are unique in the process, so nothing is replaced; were anything, it is dropped
        // (cancelled, which may call back into this queue) only after the lock is released.
        drop(replaced);
        let sink: Weak<dyn Sink> = Arc::downgrade(&self.shared) as Weak<Shared<T>>;
        if !inner.set_sink(sink) {
            // Ended and told already (before it was pushed).
            self.shared.completed(id);
        } else {
            progress.watch(&inner, Urgency::Now);
        }
        id
    }

    /// Requests in the queue, running or ended and not taken yet.
    pub fn len(&self) -> usize {
        self.shared.st.lock().entries.len()
    }

    /// Whether the queue holds no request.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ended requests not taken yet.
    pub fn ready(&self) -> usize {
        self.shared.st.lock().ready.len()
    }

    /// Takes up to `max` ended requests, in the order they ended, without waiting
    /// (`GetTransferStatus` with `skip_waiting`).
    pub fn completed(&self, max: usize) -> Vec<Completion<T>> {
        let taken: Vec<Entry<T>> = {
            let mut st = self.shared.st.lock();
            let n = max.min(st.ready.len());
            let ids: Vec<u64> = st.ready.drain(..n).collect();
            if !st.ready.is_empty() {
                // More for another waiting thread.
                self.shared.cv.notify_one();
            }
            ids.iter().filter_map(|id| st.entries.remove(id)).collect()
        };
        if !taken.is_empty() {
            self.wake_if_empty();
        }
        taken.into_iter().map(Self::complete).collect()
    }

    /// Takes up to `max` ended requests, waiting up to `timeout` for the first one (a short
    /// poll, then parked until one ends). Returns at once, empty, when the queue holds no
    /// request.
    pub fn wait(&self, max: usize, timeout: Duration) -> Vec<Completion<T>> {
        let deadline = Instant::now().checked_add(timeout);
        spin_until(|| self.ready() > 0 || self.is_empty());
        let mut st = self.shared.st.lock();
        while st.ready.is_empty() && !st.entries.is_empty() {
            match deadline {
                Some(d) => {
                    if self.shared.cv.wait_until(&mut st, d).timed_out() {
                        break;
                    }
                }
                None => self.shared.cv.wait(&mut st),
            }
        }
        drop(st);
        self.completed(max)
    }

    /// The next request to end, as a future; `None` when the queue holds no request.
    pub fn next(&self) -> Next<'_, T> {
        Next { queue: self }
    }

    /// Every request in the queue with its status and user data, the ended ones included
    /// (`GetTransferStatus` without `skip_waiting`): nothing is taken; `f` runs under the
    /// queue's lock (push or take nothing from it there).
    pub fn for_each(&self, mut f: impl FnMut(u64, TransferStatus, &T)) {
        let st = self.shared.st.lock();
        for id in &st.ready {
            if let Some(e) = st.entries.get(id) {
                f(*id, e.req.inner.ended(), &e.data);
            }
        }
        for (id, e) in &st.entries {
            if !st.ready.contains(id) {
                f(*id, TransferStatus::Waiting, &e.data);
            }
        }
    }

    /// Takes request `id` out of the queue and cancels it (its copies aborted, without waiting,
    /// as dropping a request does); returns its user data. `None` if it
    /// is not in the queue (taken already, or never pushed).
    pub fn cancel(&self, id: u64) -> Option<T> {
        let e = {
            let mut st = self.shared.st.lock();
            let e = st.entries.remove(&id)?;
            st.ready.retain(|x| *x != id);
            e
        };
        drop(e.req);
        self.wake_if_empty();
        Some(e.data)
    }

    /// With no request left, `next` and `wait` return at once.
    fn wake_if_empty(&self) {
        let wakers = {
            let mut st = self.shared.st.lock();
            if !st.entries.is_empty() {
                return;
            }
            std::mem::take(&mut st.wakers)
        };
        self.shared.cv.notify_all();
        for w in wakers {
            w.wake();
        }
    }

    fn complete(e: Entry<T>) -> Completion<T> {
        let Entry { req, data } = e;
        let result = req.inner.wait(None).unwrap_or(Err(crate::Error::Aborted));
        req.inner.disconnect_if_due(false);
        Completion {
            id: req.id(),
            peer: req.peer().to_owned(),
            user_data: data,
            result,
        }
    }
}

impl<T> Drop for CompletionQueue<T> {
    fn drop(&mut self) {
        // Taken out under the lock, dropped (cancelled) outside it.
        let entries: Vec<Entry<T>> = {
            let mut st = self.shared.st.lock();
            st.ready.clear();
            st.entries.drain().map(|(_, e)| e).collect()
        };
        drop(entries);
    }
}

/// [`CompletionQueue::next`]'s future. Dropping it stops waiting; nothing is taken.
#[must_use = "futures do nothing unless polled"]
pub struct Next<'a, T> {
    queue: &'a CompletionQueue<T>,
}

impl<T> std::fmt::Debug for Next<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next").finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Future for Next<'_, T> {
    type Output = Option<Completion<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let q = self.queue;
        let e = {
            let mut st = q.shared.st.lock();
            match st.ready.pop_front() {
                Some(id) => st.entries.remove(&id),
                None if st.entries.is_empty() => return Poll::Ready(None),
                None => {
                    if !st.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                        st.wakers.push(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        };
        match e {
            Some(e) => Poll::Ready(Some(CompletionQueue::complete(e))),
            None => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}
