//! Test hooks of the HIXL emulation: holding every client worker, and the async batch timeout.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

pub(crate) static HOLDS: Mutex<u32> = Mutex::new(0);
pub(crate) static RELEASED: Condvar = Condvar::new();

/// While alive, no client worker starts a queued batch (every client of the process):
/// async batches stay WAITING and sync ones time out. Dropping it lets them run.
#[derive(Debug)]
#[must_use = "dropping the hold releases the workers at once"]
pub struct Hold(());

impl Hold {
    /// Releases the workers (same as dropping).
    pub fn release(self) {}
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut h = HOLDS.lock();
        *h = h.saturating_sub(1);
        RELEASED.notify_all();
    }
}

/// Holds every client worker of the process (see [`Hold`]).
pub fn hold() -> Hold {
    *HOLDS.lock() += 1;
    Hold(())
}

/// Waits while held, up to `max`; returns whether still held.
pub(crate) fn wait_released(max: Duration) -> bool {
    let mut h = HOLDS.lock();
    if *h > 0 {
        RELEASED.wait_for(&mut h, max);
    }
    *h > 0
}

/// Sets how long an async batch may wait before a query reports it TIMEOUT (and it is
/// dropped unrun). Default: `ASCEND_SIM_HIXL_ASYNC_TIMEOUT_MS`, else 60 s.
pub fn set_async_timeout(t: Duration) {
    ASYNC_TIMEOUT_MS.store(t.as_millis().max(1) as u64, Relaxed);
}

/// 0 = not read from the environment yet.
static ASYNC_TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);

/// How long an async batch may wait before a query reports it TIMEOUT.
pub(crate) fn async_timeout() -> Duration {
    let mut ms = ASYNC_TIMEOUT_MS.load(Relaxed);
    if ms == 0 {
        ms = std::env::var("ASCEND_SIM_HIXL_ASYNC_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|v| *v > 0)
            .unwrap_or(60_000);
        let _ = ASYNC_TIMEOUT_MS.compare_exchange(0, ms, Relaxed, Relaxed);
        ms = ASYNC_TIMEOUT_MS.load(Relaxed);
    }
    Duration::from_millis(ms)
}
