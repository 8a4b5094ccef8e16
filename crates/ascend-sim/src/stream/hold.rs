//! The test holds: a [`HoldInner`] a stream task waits on (one stream), the process-wide
//! hold every threaded-mode stream waits on before its next task, and the hold a copy waits on
//! once it has started running (which an abort does not end); and the armed failure of the
//! next queued copy to run.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acl_sys::aclError;
use parking_lot::{Condvar, Mutex};

use crate::rt::Res;

/// How often a held waiter rechecks whether its stream was aborted.
const POLL: Duration = Duration::from_millis(2);

/// Shared state of a [`crate::testing::Hold`].
#[derive(Debug, Default)]
pub(crate) struct HoldInner {
    pub(crate) released: Mutex<bool>,
    pub(crate) cv: Condvar,
}

impl HoldInner {
    pub(crate) fn release(&self) {
        *self.released.lock() = true;
        self.cv.notify_all();
    }

    pub(crate) fn is_released(&self) -> bool {
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

/// Waits while a process-wide hold is set and unreleased, unless `stopped` (the stream was
/// aborted).
pub(crate) fn wait_hold_all(stopped: &dyn Fn() -> bool) {
    if !HOLD_ALL_SET.load(Ordering::Acquire) {
        return;
    }
    let Some(h) = HOLD_ALL.lock().clone() else {
        return;
    };
    while !h.is_released() && !stopped() {
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

/// The hold a copy that has started waits on ([`crate::testing::hold_running_copies`]).
static COPY_HOLD: Mutex<Option<Arc<HoldInner>>> = Mutex::new(None);
/// Fast check for [`COPY_HOLD`] on the workers' path.
static COPY_HOLD_SET: AtomicBool = AtomicBool::new(false);
/// Copies waiting at [`COPY_HOLD`] right now.
static HELD_COPIES: AtomicUsize = AtomicUsize::new(0);

/// Sets the hold every copy a threaded-mode stream starts from now on waits at, until the
/// hold is released; an abort of its stream does not end the wait.
pub(crate) fn hold_copies() -> Arc<HoldInner> {
    let h = Arc::new(HoldInner::default());
    *COPY_HOLD.lock() = Some(h.clone());
    COPY_HOLD_SET.store(true, Ordering::Release);
    h
}

/// Copies waiting at the running-copy hold now.
pub(crate) fn held_copies() -> usize {
    HELD_COPIES.load(Ordering::Acquire)
}

/// Called by a threaded-mode worker as a copy (or a batch of copies) starts, outside the
/// address table's lock: waits while the running-copy hold is set and unreleased. The copy
/// has started: it runs once released, whether or not its stream was aborted meanwhile.
pub(crate) fn wait_copy_hold() {
    if !COPY_HOLD_SET.load(Ordering::Acquire) {
        return;
    }
    let Some(h) = COPY_HOLD.lock().clone() else {
        return;
    };
    if !h.is_released() {
        HELD_COPIES.fetch_add(1, Ordering::AcqRel);
        let mut r = h.released.lock();
        while !*r {
            h.cv.wait(&mut r);
        }
        drop(r);
        HELD_COPIES.fetch_sub(1, Ordering::AcqRel);
    }
    let mut g = COPY_HOLD.lock();
    if g.as_ref().is_some_and(|x| Arc::ptr_eq(x, &h)) {
        *g = None;
        COPY_HOLD_SET.store(false, Ordering::Release);
    }
}

/// The status the next queued copy to run fails with instead of copying, if one is armed
/// ([`crate::testing::fail_next_queued_copy`]).
static COPY_FAULT: Mutex<Option<aclError>> = Mutex::new(None);
/// Fast check for [`COPY_FAULT`] on the workers' path.
static COPY_FAULT_SET: AtomicBool = AtomicBool::new(false);

/// Arms (`Some`) or disarms a failure of the next queued copy to run.
pub(crate) fn arm_copy_fault(code: Option<aclError>) {
    let mut g = COPY_FAULT.lock();
    *g = code;
    COPY_FAULT_SET.store(code.is_some(), Ordering::Release);
}

/// The armed failure of a queued copy about to run, taken (it fires once); `Ok` when none is.
pub(crate) fn take_copy_fault() -> Res {
    if !COPY_FAULT_SET.load(Ordering::Acquire) {
        return Ok(());
    }
    let code = {
        let mut g = COPY_FAULT.lock();
        let code = g.take();
        COPY_FAULT_SET.store(false, Ordering::Release);
        code
    };
    let Some(code) = code else {
        return Ok(());
    };
    bail!(
        code,
        "injected failure of a queued copy (testing::fail_next_queued_copy)"
    )
}
