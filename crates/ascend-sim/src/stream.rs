//! Streams, events and the test hold.
//!
//! A stream is a FIFO of tasks. In `threaded` mode one worker thread per stream runs them (it
//! spins briefly when idle, then parks on a condition variable); in `deterministic` mode the
//! queue runs on the caller's thread at synchronize, query and wait points. Blocking tasks (an
//! event wait, a test hold) poll the stream's abort epoch so `aclrtStreamAbort` can cancel them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use acl_sys::*;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::config::{config, StreamMode};
use crate::counters::{dec, inc, Ctr};
use crate::device::{self, Context};
use crate::handles::{self, Kind};
use crate::rt::{self, AclErr, Out, Res};

const POLL: Duration = Duration::from_millis(2);
const SPIN: Duration = Duration::from_micros(50);

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
}

impl Task {
    /// Called for a task that will never run: completes event records so no waiter hangs.
    fn discard(self) {
        if let Task::Record { ev, gen } = self {
            ev.complete(gen, false);
        }
    }
}

enum Step {
    Done(Res),
    Blocked,
}

struct Queue {
    tasks: VecDeque<Task>,
    running: bool,
    err: Option<AclErr>,
    abort_report: bool,
    stop_on_failure: bool,
    shutdown: bool,
}

/// A stream.
pub(crate) struct Stream {
    pub id: u64,
    pub device: u32,
    #[allow(dead_code)] // kept for debugging; no flag changes behaviour
    pub flags: u32,
    q: Mutex<Queue>,
    work_cv: Condvar,
    done_cv: Condvar,
    epoch: AtomicU64,
    queued: AtomicU64,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({:#x}, device {})", self.id, self.device)
    }
}

static STREAMS: RwLock<BTreeMap<u64, Arc<Stream>>> = RwLock::new(BTreeMap::new());
static EVENTS: RwLock<BTreeMap<u64, Arc<Event>>> = RwLock::new(BTreeMap::new());

fn deterministic() -> bool {
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
        if deterministic() {
            drive(self, None, &|| false);
        }
        {
            let mut q = self.q.lock();
            q.shutdown = true;
        }
        self.work_cv.notify_all();
        let h = self.worker.lock().take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    fn finish(&self, q: &mut Queue, r: Res, epoch: u64) {
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
    fn sync(&self, deadline: Option<Instant>) -> Res {
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

    fn timeout_err(&self) -> AclErr {
        rt::err(
            ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
            format!("stream {:#x} still has work after the timeout", self.id),
        )
    }

    fn busy(&self) -> bool {
        if deterministic() {
            drive(self, Some(Instant::now()), &|| false);
        }
        let q = self.q.lock();
        !q.tasks.is_empty() || q.running
    }

    fn abort(&self) {
        let tasks = {
            let mut q = self.q.lock();
            self.epoch.fetch_add(1, Ordering::AcqRel);
            q.abort_report = true;
            q.err = None;
            std::mem::take(&mut q.tasks)
        };
        self.work_cv.notify_all();
        for t in tasks {
            t.discard();
        }
        let mut q = self.q.lock();
        while q.running {
            self.done_cv.wait_for(&mut q, POLL);
        }
    }
}

/// Most tasks a worker takes off its queue under one lock.
const TAKE: usize = 64;
/// Most bytes a worker copies under one hold of the address table's read lock (a run of
/// queued copies shares one hold; an unmap waits at most this long for it).
const HOLD_BYTES: usize = 1 << 20;

/// Polls up to [`SPIN`] for new work before parking: a few busy rounds, then yielding the
/// core between polls. A busy spin for the whole time takes the core from the thread that
/// produces the work whenever threads outnumber cores (four copy streams and a submitting
/// thread on two cores spent most of their time spinning); yielding keeps the quick pickup
/// without that.
fn spin_for_work(s: &Stream) {
    let seen = s.queued.load(Ordering::Acquire);
    for _ in 0..64 {
        if s.queued.load(Ordering::Acquire) != seen {
            return;
        }
        std::hint::spin_loop();
    }
    let t0 = Instant::now();
    while s.queued.load(Ordering::Acquire) == seen && t0.elapsed() < SPIN {
        std::thread::yield_now();
    }
}

fn worker(s: Arc<Stream>) {
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
fn run_batch(s: &Stream, batch: &mut VecDeque<Task>, epoch: u64) {
    while !batch.is_empty() {
        wait_hold_all(s, epoch);
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
            // Consecutive copies run under one read guard of the address table.
            let mem = crate::vmm::MEM.read();
            let mut bytes = 0usize;
            let mut r = Ok(());
            while let Some(&Task::Copy { dst, src, n, kind }) = batch.front() {
                if bytes > 0 && bytes.saturating_add(n) > HOLD_BYTES {
                    break;
                }
                batch.pop_front();
                r = crate::vmm::exec_copy_in(&mem, dst, src, n, kind);
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
fn drive(s: &Stream, deadline: Option<Instant>, stop: &dyn Fn() -> bool) -> bool {
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

fn aborted(s: &Stream, epoch: u64) -> bool {
    s.epoch.load(Ordering::Acquire) != epoch
}

fn run_task(t: &Task, s: &Stream, deadline: Option<Instant>, epoch: u64) -> Step {
    match t {
        Task::Copy { dst, src, n, kind } => {
            Step::Done(crate::vmm::exec_copy(*dst, *src, *n, *kind))
        }
        Task::Set { dst, value, n } => Step::Done(crate::vmm::exec_set(*dst, *value, *n)),
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
        Task::Ext(x) => Step::Done(x.run(&|| aborted(s, epoch))),
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

// ---------------------------------------------------------------------------------------------
// Events

struct EvState {
    recorded: u64,
    done: u64,
    stamp: Option<Instant>,
    stream: Weak<Stream>,
}

/// An event.
pub(crate) struct Event {
    pub id: u64,
    #[allow(dead_code)] // kept for debugging; no flag changes behaviour
    pub flags: u32,
    st: Mutex<EvState>,
    cv: Condvar,
}

impl Event {
    fn done_gen(&self) -> u64 {
        self.st.lock().done
    }

    fn complete(&self, gen: u64, stamp: bool) {
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
    fn is_complete(&self) -> bool {
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

    fn sync(&self, deadline: Option<Instant>) -> Res {
        let (gen, src) = {
            let st = self.st.lock();
            (st.recorded, st.stream.upgrade())
        };
        if deterministic() {
            if let Some(src) = src {
                drive(&src, deadline, &|| self.done_gen() >= gen);
            }
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

// ---------------------------------------------------------------------------------------------
// Test hold

/// Shared state of a [`crate::testing::Hold`].
#[derive(Debug, Default)]
pub(crate) struct HoldInner {
    released: Mutex<bool>,
    cv: Condvar,
}

impl HoldInner {
    pub(crate) fn release(&self) {
        *self.released.lock() = true;
        self.cv.notify_all();
    }

    fn is_released(&self) -> bool {
        *self.released.lock()
    }
}

/// The hold every threaded-mode stream waits on before its next task, if one is set.
static HOLD_ALL: Mutex<Option<Arc<HoldInner>>> = Mutex::new(None);
/// Fast check for [`HOLD_ALL`] on the workers' path.
static HOLD_ALL_SET: AtomicBool = AtomicBool::new(false);

/// Sets a hold that every threaded-mode stream waits on before running its next task, until
/// it is released or the stream is aborted.
pub(crate) fn hold_all() -> Arc<HoldInner> {
    let h = Arc::new(HoldInner::default());
    *HOLD_ALL.lock() = Some(h.clone());
    HOLD_ALL_SET.store(true, Ordering::Release);
    h
}

/// Waits while a process-wide hold is set and unreleased, unless `s` is aborted.
fn wait_hold_all(s: &Stream, epoch: u64) {
    if !HOLD_ALL_SET.load(Ordering::Acquire) {
        return;
    }
    let Some(h) = HOLD_ALL.lock().clone() else {
        return;
    };
    while !h.is_released() && !aborted(s, epoch) {
        let mut r = h.released.lock();
        if !*r {
            h.cv.wait_for(&mut r, POLL);
        }
    }
    if h.is_released() {
        let mut g = HOLD_ALL.lock();
        if g.as_ref().is_some_and(|x| Arc::ptr_eq(x, &h)) {
            *g = None;
            HOLD_ALL_SET.store(false, Ordering::Release);
        }
    }
}

/// Enqueues a hold on `stream` (NULL: the current context's default stream).
pub(crate) fn hold(stream: aclrtStream) -> Res<Arc<HoldInner>> {
    let s = resolve(stream, "stream")?;
    let h = Arc::new(HoldInner::default());
    s.push(Task::Hold(h.clone()));
    Ok(h)
}

// ---------------------------------------------------------------------------------------------
// Lookups

/// Resolves a stream argument; NULL means the current context's default stream.
pub(crate) fn resolve(p: aclrtStream, what: &str) -> Res<Arc<Stream>> {
    if p.is_null() {
        let c: Arc<Context> = device::require_current()?;
        return c.default_stream();
    }
    let id = handles::decode(p, Kind::Stream, what)?;
    STREAMS
        .read()
        .get(&id)
        .cloned()
        .ok_or_else(|| handles::stale(p, Kind::Stream, what))
}

fn event(p: aclrtEvent, what: &str) -> Res<Arc<Event>> {
    ensure!(!p.is_null(), ACL_ERROR_INVALID_PARAM, "{what} is NULL");
    let id = handles::decode(p, Kind::Event, what)?;
    EVENTS
        .read()
        .get(&id)
        .cloned()
        .ok_or_else(|| handles::stale(p, Kind::Event, what))
}

fn deadline_of(timeout: i32) -> Res<Option<Instant>> {
    ensure!(
        timeout >= -1,
        ACL_ERROR_INVALID_PARAM,
        "timeout {timeout} must be -1 (forever), 0 (check once) or a number of milliseconds"
    );
    Ok(if timeout == -1 {
        None
    } else {
        Some(Instant::now() + Duration::from_millis(timeout as u64))
    })
}

const STREAM_FLAGS: u32 = ACL_STREAM_FAST_LAUNCH
    | ACL_STREAM_FAST_SYNC
    | ACL_STREAM_PERSISTENT
    | ACL_STREAM_HUGE
    | ACL_STREAM_CPU_SCHEDULE
    | ACL_STREAM_DEVICE_USE_ONLY;

const EVENT_FLAGS: u32 = ACL_EVENT_SYNC
    | ACL_EVENT_CAPTURE_STREAM_PROGRESS
    | ACL_EVENT_TIME_LINE
    | ACL_EVENT_DEVICE_USE_ONLY
    | ACL_EVENT_EXTERNAL
    | ACL_EVENT_IPC;

fn create_stream(out: *mut aclrtStream, flag: u32) -> Res {
    // SAFETY: out-pointer per the C contract of the calling export.
    let out = unsafe { Out::new(out, "stream") }?;
    ensure!(
        flag & !STREAM_FLAGS == 0,
        ACL_ERROR_INVALID_PARAM,
        "flag {flag:#x} has bits outside ACL_STREAM_* ({STREAM_FLAGS:#x})"
    );
    let c = device::require_current()?;
    let s = Stream::new(c.device, flag, true)?;
    STREAMS.write().insert(s.id, s.clone());
    out.set(handles::to_ptr(s.id));
    Ok(())
}

export! { Acl;
    /// Creates a stream on the current device.
    fn aclrtCreateStream(stream: *mut aclrtStream) {
        create_stream(stream, 0)
    }
}

export! { Acl;
    /// Creates a stream with `ACL_STREAM_*` flags.
    fn aclrtCreateStreamWithConfig(stream: *mut aclrtStream, priority: u32, flag: u32) {
        ensure!(priority <= 7, ACL_ERROR_INVALID_PARAM, "priority {priority} is outside 0..=7");
        create_stream(stream, flag)
    }
}

export! { Acl;
    /// Destroys a stream after its queued work has run (a held stream makes this wait).
    fn aclrtDestroyStream(stream: aclrtStream) {
        ensure!(!stream.is_null(), ACL_ERROR_INVALID_PARAM, "stream is NULL");
        let id = handles::decode(stream, Kind::Stream, "stream")?;
        let s = STREAMS
            .write()
            .remove(&id)
            .ok_or_else(|| handles::stale(stream, Kind::Stream, "stream"))?;
        s.shutdown();
        dec(Ctr::Streams);
        Ok(())
    }
}

export! { Acl;
    /// Waits for the stream's work and reports the first failed task (or an abort, once).
    fn aclrtSynchronizeStream(stream: aclrtStream) {
        resolve(stream, "stream")?.sync(None)
    }
}

export! { Acl;
    /// As aclrtSynchronizeStream with a timeout in ms (-1 forever, 0 check once): 507046.
    fn aclrtSynchronizeStreamWithTimeout(stream: aclrtStream, timeout: i32) {
        let d = deadline_of(timeout)?;
        resolve(stream, "stream")?.sync(d)
    }
}

export! { Acl;
    /// COMPLETE when no work is queued or running.
    fn aclrtStreamQuery(stream: aclrtStream, status: *mut aclrtStreamStatus) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(status, "status") }?;
        let s = resolve(stream, "stream")?;
        out.set(if s.busy() { ACL_STREAM_STATUS_NOT_READY } else { ACL_STREAM_STATUS_COMPLETE });
        Ok(())
    }
}

export! { Acl;
    /// Discards queued work; the next synchronize returns 107023 once.
    fn aclrtStreamAbort(stream: aclrtStream) {
        ensure!(!stream.is_null(), ACL_ERROR_INVALID_PARAM, "stream is NULL");
        resolve(stream, "stream")?.abort();
        Ok(())
    }
}

export! { Acl;
    /// ACL_CONTINUE_ON_FAILURE (0) or ACL_STOP_ON_FAILURE (1).
    fn aclrtSetStreamFailureMode(stream: aclrtStream, mode: u64) {
        ensure!(
            mode <= u64::from(ACL_STOP_ON_FAILURE),
            ACL_ERROR_INVALID_PARAM,
            "mode {mode} is neither ACL_CONTINUE_ON_FAILURE (0) nor ACL_STOP_ON_FAILURE (1)"
        );
        let s = resolve(stream, "stream")?;
        s.q.lock().stop_on_failure = mode == u64::from(ACL_STOP_ON_FAILURE);
        Ok(())
    }
}

fn create_event(out: *mut aclrtEvent, flag: u32) -> Res {
    // SAFETY: out-pointer per the C contract of the calling export.
    let out = unsafe { Out::new(out, "event") }?;
    ensure!(
        flag & !EVENT_FLAGS == 0,
        ACL_ERROR_INVALID_PARAM,
        "flag {flag:#x} has bits outside ACL_EVENT_* ({EVENT_FLAGS:#x})"
    );
    device::require_current()?;
    let e = Arc::new(Event {
        id: handles::new_id(Kind::Event),
        flags: flag,
        st: Mutex::new(EvState {
            recorded: 0,
            done: 0,
            stamp: None,
            stream: Weak::new(),
        }),
        cv: Condvar::new(),
    });
    EVENTS.write().insert(e.id, e.clone());
    inc(Ctr::Events);
    out.set(handles::to_ptr(e.id));
    Ok(())
}

export! { Acl;
    /// Creates an event.
    fn aclrtCreateEvent(event: *mut aclrtEvent) {
        create_event(event, ACL_EVENT_SYNC)
    }
}

export! { Acl;
    /// Creates an event with `ACL_EVENT_*` flags.
    fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) {
        create_event(event, flag)
    }
}

export! { Acl;
    /// Creates an event with `ACL_EVENT_*` flags.
    fn aclrtCreateEventExWithFlag(event: *mut aclrtEvent, flag: u32) {
        create_event(event, flag)
    }
}

export! { Acl;
    /// Records `event` on `stream`.
    fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) {
        let e = event_arg(event)?;
        let s = resolve(stream, "stream")?;
        let gen = {
            let mut st = e.st.lock();
            st.recorded += 1;
            st.stream = Arc::downgrade(&s);
            st.recorded
        };
        s.push(Task::Record { ev: e, gen });
        Ok(())
    }
}

fn event_arg(p: aclrtEvent) -> Res<Arc<Event>> {
    event(p, "event")
}

export! { Acl;
    /// Makes `stream` wait for the event's latest record.
    fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) {
        let e = event_arg(event)?;
        let s = resolve(stream, "stream")?;
        let gen = e.st.lock().recorded;
        if gen > 0 {
            s.push(Task::Wait { ev: e, gen });
        }
        Ok(())
    }
}

export! { Acl;
    /// NOT_READY 0 / COMPLETE 1 (an event never recorded is COMPLETE).
    fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(status, "status") }?;
        let e = event_arg(event)?;
        out.set(if e.is_complete() {
            ACL_EVENT_RECORDED_STATUS_COMPLETE
        } else {
            ACL_EVENT_RECORDED_STATUS_NOT_READY
        });
        Ok(())
    }
}

export! { Acl;
    /// COMPLETE 0 / NOT_READY 1 (the older, inverted enum).
    fn aclrtQueryEvent(event: aclrtEvent, status: *mut aclrtEventStatus) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(status, "status") }?;
        let e = event_arg(event)?;
        out.set(if e.is_complete() { ACL_EVENT_STATUS_COMPLETE } else { ACL_EVENT_STATUS_NOT_READY });
        Ok(())
    }
}

export! { Acl;
    /// Waits for the event's latest record.
    fn aclrtSynchronizeEvent(event: aclrtEvent) {
        event_arg(event)?.sync(None)
    }
}

export! { Acl;
    /// Waits with a timeout in ms (-1 forever, 0 check once): 507047.
    fn aclrtSynchronizeEventWithTimeout(event: aclrtEvent, timeout: i32) {
        let e = event_arg(event)?;
        let d = deadline_of(timeout)?;
        e.sync(d)
    }
}

export! { Acl;
    /// Resets the event (stream-ordered): its timestamp is cleared.
    fn aclrtResetEvent(event: aclrtEvent, stream: aclrtStream) {
        let e = event_arg(event)?;
        let s = resolve(stream, "stream")?;
        s.push(Task::Reset { ev: e });
        Ok(())
    }
}

export! { Acl;
    /// Milliseconds between two completed records.
    fn aclrtEventElapsedTime(ms: *mut f32, startEvent: aclrtEvent, endEvent: aclrtEvent) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(ms, "ms") }?;
        let a = event(startEvent, "startEvent")?;
        let b = event(endEvent, "endEvent")?;
        let ta = stamp(&a, "startEvent")?;
        let tb = stamp(&b, "endEvent")?;
        let d = if tb >= ta {
            tb.duration_since(ta).as_secs_f64() * 1e3
        } else {
            -(ta.duration_since(tb).as_secs_f64() * 1e3)
        };
        out.set(d as f32);
        Ok(())
    }
}

fn stamp(e: &Event, what: &str) -> Res<Instant> {
    ensure!(
        e.is_complete(),
        ACL_ERROR_RT_EVENT_NOT_COMPLETE,
        "{what} {:#x} has not completed",
        e.id
    );
    let st = e.st.lock();
    ensure!(
        st.recorded > 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} {:#x} was never recorded",
        e.id
    );
    st.stamp.ok_or_else(|| {
        rt::err(
            ACL_ERROR_RT_PARAM_INVALID,
            format!(
                "{what} {:#x} has no timestamp (reset, or its record was discarded)",
                e.id
            ),
        )
    })
}

export! { Acl;
    /// Destroys an event (pending records and waits still complete).
    fn aclrtDestroyEvent(event: aclrtEvent) {
        ensure!(!event.is_null(), ACL_ERROR_INVALID_PARAM, "event is NULL");
        let id = handles::decode(event, Kind::Event, "event")?;
        EVENTS
            .write()
            .remove(&id)
            .ok_or_else(|| handles::stale(event, Kind::Event, "event"))?;
        dec(Ctr::Events);
        Ok(())
    }
}
