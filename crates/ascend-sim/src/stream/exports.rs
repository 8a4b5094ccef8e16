//! The stream and event exports, stream-ordered copies and memsets, and the handle lookups.

use std::ffi::c_void;
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use acl_sys::*;
use parking_lot::{Condvar, Mutex, RwLock};

use super::hold::HoldInner;
use super::queue::{EvState, Event, Stream, Task};
use crate::counters::{dec, inc, Ctr};
use crate::device::{self, Context};
use crate::handles::{self, IdMap, Kind};
use crate::rt::{self, Out, Res};
use crate::vmm::copy::{check_copy_args, check_set_args, validate_copy};
use crate::vmm::state::MEM;

static STREAMS: LazyLock<RwLock<IdMap<Arc<Stream>>>> = LazyLock::new(Default::default);
static EVENTS: LazyLock<RwLock<IdMap<Arc<Event>>>> = LazyLock::new(Default::default);

/// Enqueues a hold on `stream` (NULL: the current context's default stream).
pub(crate) fn hold(stream: aclrtStream) -> Res<Arc<HoldInner>> {
    let s = resolve(stream, "stream")?;
    let h = Arc::new(HoldInner::default());
    s.push(Task::Hold(h.clone()));
    Ok(h)
}

/// Resolves a stream argument; NULL means the current context's default stream.
pub(crate) fn resolve(p: aclrtStream, what: &str) -> Res<Arc<Stream>> {
    if p.is_null() {
        let c: Arc<Context> = device::require_current()?;
        return super::queue::default_stream(&c);
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
    /// Discards queued work and wakes the stream's blocked synchronize calls (a parked worker
    /// has nothing to do): a copy already running stops at its next piece (one held by `testing::hold_running_copies` runs to its end once released),
    /// a blocked task (an event wait, a hold) sees the abort at its next poll; synchronize,
    /// query and destroy wait for them. The next synchronize returns 107023 once.
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

export! { Acl;
    /// Stream-ordered copy: checked now, re-checked and run when the stream reaches it.
    fn aclrtMemcpyAsync(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind, stream: aclrtStream) {
        check_copy_args(dst, destMax, src, count)?;
        let s = resolve(stream, "stream")?;
        validate_copy(dst as usize, src as usize, count, kind)?;
        s.push(Task::Copy { dst: dst as usize, src: src as usize, n: count, kind });
        crate::config::charge_copy_calls(1);
        Ok(())
    }
}

export! { Acl;
    /// Stream-ordered memset.
    fn aclrtMemsetAsync(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize, stream: aclrtStream) {
        check_set_args(devPtr, maxCount, count)?;
        let s = resolve(stream, "stream")?;
        {
            let mem = MEM.read();
            let dc = mem.classify(devPtr as usize, count, true, "devPtr")?;
            ensure!(dc.device_accessible(), ACL_ERROR_RT_PARAM_INVALID, "devPtr {devPtr:p} is {}", dc.describe());
        }
        s.push(Task::Set { dst: devPtr as usize, value: value as u8, n: count });
        Ok(())
    }
}
