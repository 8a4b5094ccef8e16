//! A stream's queue and how it runs: tasks, the worker thread (threaded mode) or the caller
//! driving it (deterministic mode), aborts, and events (recorded by and waited on in queues).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use acl_sys::*;
use parking_lot::{Condvar, Mutex};

use super::hold::{wait_hold_all, HoldInner};
use crate::config::{config, StreamMode};
use crate::counters::{inc, Ctr};
use crate::device::{Context, ContextStream};
use crate::handles::{self, Kind};
use crate::rt::{self, AclErr, Res};
use crate::vmm::copy::{exec_copy_hinted, CopyHints};

pub(crate) const POLL: Duration = Duration::from_millis(2);
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// One unit of stream work.
pub(crate) enum Task {
    Copy {
        dst: usize,
        src: usize,
        n: usize,
        kind: aclrtMemcpyKind,
    },
    Set {
        dst: usize,
        value: u8,
        n: usize,
    },
    Record {
        ev: Arc<Event>,
        gen: u64,
    },
    Wait {
        ev: Arc<Event>,
        gen: u64,
    },
    Reset {
        ev: Arc<Event>,
    },
    Hold(Arc<HoldInner>),
    /// Work of another module (the HCCL emulation).
    Ext(Arc<dyn ExtTask>),
}

/// Stream work defined outside this module (HCCL collectives). The task blocks until done; it
/// polls `cancelled` (true once the stream is aborted) and its own timeouts.
pub(crate) trait ExtTask: Send + Sync {
    /// Runs the task on the stream's thread.
    fn run(&self, cancelled: &dyn Fn() -> bool) -> Res;

    /// Runs the task as a queue step: `closing` is true once the stream is being destroyed,
    /// and a blocking task may return [`Step::Blocked`] once `deadline` passes (deterministic
    /// mode puts it back at the queue's front). By default the task runs to its end.
    fn step(
        &self,
        cancelled: &dyn Fn() -> bool,
        _closing: &dyn Fn() -> bool,
        _deadline: Option<Instant>,
    ) -> Step {
        Step::Done(self.run(cancelled))
    }
}

impl Task {
    /// Called for a task that will never run: completes event records so no waiter hangs.
    pub(crate) fn discard(self) {
        if let Task::Record { ev, gen } = self {
            ev.complete(gen, false);
        }
    }
}

pub(crate) enum Step {
    Done(Res),
    Blocked,
}

pub(crate) struct Queue {
    pub(crate) tasks: VecDeque<Task>,
    pub(crate) running: bool,
    pub(crate) err: Option<AclErr>,
    pub(crate) abort_report: bool,
    pub(crate) stop_on_failure: bool,
    pub(crate) shutdown: bool,
}

/// A stream.
pub(crate) struct Stream {
    pub id: u64,
    pub device: u32,
    #[allow(dead_code)] // kept for debugging; no flag changes behaviour
    pub flags: u32,
    pub(crate) q: Mutex<Queue>,
    pub(crate) work_cv: Condvar,
    pub(crate) done_cv: Condvar,
    pub(crate) epoch: AtomicU64,
    pub(crate) queued: AtomicU64,
    pub(crate) worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({:#x}, device {})", self.id, self.device)
    }
}

pub(crate) fn deterministic() -> bool {
    config().mode == StreamMode::Deterministic
}

impl Stream {
    /// Creates a stream (and its worker in threaded mode). `counted` streams are user streams.
    pub(crate) fn new(device: u32, flags: u32, counted: bool) -> Res<Arc<Stream>> {
        let s = Arc::new(Stream {
            id: handles::new_id(Kind::Stream),
            device,
            flags,
            q: Mutex::new(Queue {
                tasks: VecDeque::with_capacity(64),
                running: false,
                err: None,
                abort_report: false,
                stop_on_failure: false,
                shutdown: false,
            }),
            work_cv: Condvar::new(),
            done_cv: Condvar::new(),
            epoch: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            worker: Mutex::new(None),
        });
        if !deterministic() {
            let w = s.clone();
            let h = std::thread::Builder::new()
                .name(format!("ascend-sim-stream-{:x}", s.id & 0xFFFF_FFFF))
                .spawn(move || worker(w))
                .map_err(|e| {
                    rt::err(
                        ACL_ERROR_RT_NO_STREAM_RESOURCE,
                        format!("cannot start the stream worker thread: {e}"),
                    )
                })?;
            *s.worker.lock() = Some(h);
        }
        if counted {
            inc(Ctr::Streams);
        }
        Ok(s)
    }

    /// Enqueues a task.
    pub(crate) fn push(&self, t: Task) {
        let mut q = self.q.lock();
        q.tasks.push_back(t);
        self.queued.fetch_add(1, Ordering::Release);
        drop(q);
        self.work_cv.notify_one();
    }

    /// Drains the queue and stops the worker (waits for queued work).
    pub(crate) fn shutdown(&self) {
        // Set first, so a blocking task that watches for it (a value wait) ends.
        self.q.lock().shutdown = true;
        if deterministic() {
            drive(self, None, &|| false);
        }
        self.work_cv.notify_all();
        let h = self.worker.lock().take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    pub(crate) fn finish(&self, q: &mut Queue, r: Res, epoch: u64) {
        if let Err(e) = r {
            if epoch == self.epoch.load(Ordering::Acquire) {
                if q.err.is_none() {
                    q.err = Some(e);
                }
                if q.stop_on_failure {
                    for t in q.tasks.drain(..) {
                        t.discard();
                    }
                }
            }
        }
    }

    /// Waits until the queue is empty (running it in deterministic mode), then reports.
    pub(crate) fn sync(&self, deadline: Option<Instant>) -> Res {
        if deterministic() && !drive(self, deadline, &|| false) {
            return Err(self.timeout_err());
        }
        let mut q = self.q.lock();
        while !q.tasks.is_empty() || q.running {
            match deadline {
                None => self.done_cv.wait(&mut q),
                Some(d) => {
                    if Instant::now() >= d {
                        return Err(self.timeout_err());
                    }
                    self.done_cv.wait_until(&mut q, d);
                }
            }
        }
        if q.abort_report {
            q.abort_report = false;
            q.err = None;
            bail!(
                ACL_ERROR_RT_STREAM_ABORT,
                "stream {:#x} was aborted; its queued work was discarded",
                self.id
            );
        }
        if let Some(e) = q.err.take() {
            return Err(rt::err(
                e.code,
                format!("a task of stream {:#x} failed: {}", self.id, e.msg),
            ));
        }
        Ok(())
    }

    pub(crate) fn timeout_err(&self) -> AclErr {
        rt::err(
            ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
            format!("stream {:#x} still has work after the timeout", self.id),
        )
    }

    pub(crate) fn busy(&self) -> bool {
        if deterministic() {
            drive(self, Some(Instant::now()), &|| false);
        }
        let q = self.q.lock();
        !q.tasks.is_empty() || q.running
    }

    pub(crate) fn abort(&self) {
        let tasks = {
            let mut q = self.q.lock();
            self.epoch.fetch_add(1, Ordering::AcqRel);
            q.abort_report = true;
            q.err = None;
            std::mem::take(&mut q.tasks)
        };
        // A worker parked for work has none to do, and a task that blocks (an event wait, a
        // hold, a value wait) polls the epoch. A synchronize blocked in another thread is
        // woken (ACL: a synchronize after an abort returns ACL_ERROR_RT_STREAM_ABORT); with a
        // task still running it waits on for that task's end.
        for t in tasks {
            t.discard();
        }
        self.done_cv.notify_all();
    }
}

/// Most tasks a worker takes off its queue under one lock.
pub(crate) const TAKE: usize = 64;
/// Most bytes a worker copies under one hold of the address table's read lock (a run of
/// queued copies shares one hold; an unmap waits at most this long for it).
pub(crate) const HOLD_BYTES: usize = 1 << 20;

/// Polls up to [`SPIN`] for new work before parking: a few busy rounds, then yielding the
/// core between polls. A busy spin for the whole time takes the core from the thread that
/// produces the work whenever threads outnumber cores (four copy streams and a submitting
/// thread on two cores spent most of their time spinning); yielding keeps the quick pickup
/// without that.
pub(crate) fn spin_for_work(s: &Stream) {
    let seen = s.queued.load(Ordering::Acquire);
    spin_until(None, || s.queued.load(Ordering::Acquire) != seen);
}

/// Polls `ready` for up to [`SPIN`] (and not past `deadline`) the way [`spin_for_work`]
/// does; whether it became true. Waiters call it before parking, so work that completes
/// within microseconds is seen without a sleeping hand-off.
pub(crate) fn spin_until(deadline: Option<Instant>, ready: impl Fn() -> bool) -> bool {
    for _ in 0..64 {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    let t0 = Instant::now();
    let until = deadline.map_or(t0 + SPIN, |d| d.min(t0 + SPIN));
    while Instant::now() < until {
        if ready() {
            return true;
        }
        std::thread::yield_now();
    }
    ready()
}

pub(crate) fn worker(s: Arc<Stream>) {
    let mut batch: VecDeque<Task> = VecDeque::with_capacity(TAKE);
    loop {
        let mut q = s.q.lock();
        if q.tasks.is_empty() && !q.shutdown {
            drop(q);
            spin_for_work(&s);
            q = s.q.lock();
            while q.tasks.is_empty() && !q.shutdown {
                s.work_cv.wait(&mut q);
            }
        }
        if q.tasks.is_empty() {
            // Empty and shut down.
            drop(q);
            s.done_cv.notify_all();
            return;
        }
        // Take a run of tasks at once: fewer trips through the lock the submitter also takes.
        // They count as running (sync and query wait for them; an abort waits for them and
        // they are discarded here).
        let n = q.tasks.len().min(TAKE);
        batch.extend(q.tasks.drain(..n));
        q.running = true;
        let epoch = s.epoch.load(Ordering::Acquire);
        drop(q);
        run_batch(&s, &mut batch, epoch);
        let mut q = s.q.lock();
        q.running = false;
        drop(q);
        s.done_cv.notify_all();
    }
}

/// Runs the tasks a worker took, in order; stops (discarding the rest) on an abort, or on a
/// failure when the stream stops on failure.
pub(crate) fn run_batch(s: &Stream, batch: &mut VecDeque<Task>, epoch: u64) {
    while !batch.is_empty() {
        wait_hold_all(&|| aborted(s, epoch));
        let Some(front) = batch.front() else {
            return;
        };
        if aborted(s, epoch) {
            for t in batch.drain(..) {
                t.discard();
            }
            return;
        }
        let r = if matches!(front, Task::Copy { .. }) {
            // The copy has started: a running-copy hold keeps it here, abort or not.
            super::hold::wait_copy_hold();
            // Consecutive copies run under one read guard of the address table.
            let mem = crate::vmm::state::MEM.read();
            let mut hints = CopyHints::default();
            let mut bytes = 0usize;
            let mut r = Ok(());
            while let Some(&Task::Copy { dst, src, n, kind }) = batch.front() {
                if bytes > 0 && bytes.saturating_add(n) > HOLD_BYTES {
                    break;
                }
                batch.pop_front();
                r = super::hold::take_copy_fault()
                    .and_then(|()| exec_copy_hinted(&mem, (dst, src, n), kind, &mut hints));
                bytes = bytes.saturating_add(n);
                if r.is_err() || aborted(s, epoch) {
                    break;
                }
            }
            r
        } else {
            let Some(task) = batch.pop_front() else {
                return;
            };
            // Threaded mode never gives a deadline, so a task runs to its end.
            let r = match run_task(&task, s, None, epoch) {
                Step::Done(r) => r,
                Step::Blocked => Ok(()),
            };
            drop(task);
            r
        };
        if r.is_err() {
            let mut q = s.q.lock();
            s.finish(&mut q, r, epoch);
            let stop = q.stop_on_failure;
            drop(q);
            if stop && !aborted(s, epoch) {
                for t in batch.drain(..) {
                    t.discard();
                }
                return;
            }
        }
    }
}

/// Runs `s`'s queue on the calling thread (deterministic mode) until it is empty, `stop()`
/// holds, or `deadline` passes while a task blocks. Returns whether the queue is idle.
pub(crate) fn drive(s: &Stream, deadline: Option<Instant>, stop: &dyn Fn() -> bool) -> bool {
    loop {
        if stop() {
            return true;
        }
        let mut q = s.q.lock();
        while q.running {
            match deadline {
                Some(d) if Instant::now() >= d => return false,
                _ => {
                    s.done_cv.wait_for(&mut q, POLL);
                }
            }
        }
        let Some(task) = q.tasks.pop_front() else {
            return true;
        };
        q.running = true;
        let epoch = s.epoch.load(Ordering::Acquire);
        drop(q);
        let step = run_task(&task, s, deadline, epoch);
        let mut q = s.q.lock();
        q.running = false;
        match step {
            Step::Blocked => {
                if epoch == s.epoch.load(Ordering::Acquire) {
                    q.tasks.push_front(task);
                } else {
                    drop(q);
                    task.discard();
                    s.done_cv.notify_all();
                    continue;
                }
                drop(q);
                s.done_cv.notify_all();
                return false;
            }
            Step::Done(r) => s.finish(&mut q, r, epoch),
        }
        drop(q);
        s.done_cv.notify_all();
    }
}

pub(crate) fn aborted(s: &Stream, epoch: u64) -> bool {
    s.epoch.load(Ordering::Acquire) != epoch
}

pub(crate) fn run_task(t: &Task, s: &Stream, deadline: Option<Instant>, epoch: u64) -> Step {
    match t {
        Task::Copy { dst, src, n, kind } => Step::Done(
            super::hold::take_copy_fault()
                .and_then(|()| crate::vmm::copy::exec_copy(*dst, *src, *n, *kind)),
        ),
        Task::Set { dst, value, n } => Step::Done(crate::vmm::copy::exec_set(*dst, *value, *n)),
        Task::Record { ev, gen } => {
            ev.complete(*gen, true);
            Step::Done(Ok(()))
        }
        Task::Reset { ev } => {
            ev.st.lock().stamp = None;
            Step::Done(Ok(()))
        }
        Task::Wait { ev, gen } => loop {
            if ev.done_gen() >= *gen || aborted(s, epoch) {
                return Step::Done(Ok(()));
            }
            if deterministic() {
                let src = ev.st.lock().stream.upgrade();
                if let Some(src) = src {
                    if src.id != s.id {
                        drive(&src, deadline, &|| ev.done_gen() >= *gen);
                        if ev.done_gen() >= *gen {
                            return Step::Done(Ok(()));
                        }
                    }
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Step::Blocked;
            }
            let mut st = ev.st.lock();
            if st.done < *gen {
                ev.cv.wait_for(&mut st, POLL);
            }
        },
        Task::Ext(x) => x.step(&|| aborted(s, epoch), &|| s.q.lock().shutdown, deadline),
        Task::Hold(h) => loop {
            if h.is_released() || aborted(s, epoch) {
                return Step::Done(Ok(()));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Step::Blocked;
            }
            let mut r = h.released.lock();
            if !*r {
                h.cv.wait_for(&mut r, POLL);
            }
        },
    }
}

pub(crate) struct EvState {
    pub(crate) recorded: u64,
    pub(crate) done: u64,
    pub(crate) stamp: Option<Instant>,
    pub(crate) stream: Weak<Stream>,
}

/// An event.
pub(crate) struct Event {
    pub id: u64,
    #[allow(dead_code)] // kept for debugging; no flag changes behaviour
    pub flags: u32,
    pub(crate) st: Mutex<EvState>,
    pub(crate) cv: Condvar,
}

impl Event {
    pub(crate) fn done_gen(&self) -> u64 {
        self.st.lock().done
    }

    pub(crate) fn complete(&self, gen: u64, stamp: bool) {
        let mut st = self.st.lock();
        if gen > st.done {
            st.done = gen;
        }
        if stamp {
            st.stamp = Some(Instant::now());
        }
        drop(st);
        self.cv.notify_all();
    }

    /// Whether every record issued so far has completed (running deterministic work).
    pub(crate) fn is_complete(&self) -> bool {
        let (gen, src) = {
            let st = self.st.lock();
            (st.recorded, st.stream.upgrade())
        };
        if deterministic() {
            if let Some(src) = src {
                drive(&src, Some(Instant::now()), &|| self.done_gen() >= gen);
            }
        }
        self.done_gen() >= gen
    }

    pub(crate) fn sync(&self, deadline: Option<Instant>) -> Res {
        let (gen, src) = {
            let st = self.st.lock();
            (st.recorded, st.stream.upgrade())
        };
        if deterministic() {
            if let Some(src) = src {
                drive(&src, deadline, &|| self.done_gen() >= gen);
            }
        } else if spin_until(deadline, || self.done_gen() >= gen) {
            return Ok(());
        }
        let mut st = self.st.lock();
        while st.done < gen {
            match deadline {
                None => {
                    self.cv.wait_for(&mut st, POLL);
                }
                Some(d) => {
                    if Instant::now() >= d {
                        bail!(
                            ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
                            "event {:#x} not complete after the timeout",
                            self.id
                        );
                    }
                    self.cv.wait_until(&mut st, d);
                }
            }
        }
        Ok(())
    }
}

impl ContextStream for Stream {
    fn shutdown(&self) {
        Stream::shutdown(self);
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// The default stream of `ctx`, made on first use.
pub(crate) fn default_stream(ctx: &Context) -> Res<Arc<Stream>> {
    let s = ctx.default_stream(|device| {
        let s: Arc<dyn ContextStream> = Stream::new(device, 0, false)?;
        Ok(s)
    })?;
    Ok(s.into_any()
        .downcast::<Stream>()
        .expect("only this module makes default streams"))
}
