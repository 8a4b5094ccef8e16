//! Async batches: their status, the [`Completion`] that reports one, and the table of the
//! memory each outstanding batch of a client uses.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use ascend_mem::Device;
use hixl_sys as hixl;
use hixl_sys::HixlLib;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::library::{message, xcall};
use crate::memory::Keep;

/// The memory each outstanding async batch of a client uses, by completion handle: held from
/// the submission until the batch is seen finished (or leaked with the client).
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashMap<usize, Vec<Keep>>>);

impl InFlight {
    /// Holds `keep` for the batch `h`.
    pub(crate) fn insert(&self, h: hixl::CompleteHandle, keep: Vec<Keep>) {
        self.0.lock().insert(h as usize, keep);
    }

    /// The batch `h` is finished: its memory may go.
    pub(crate) fn finished(&self, h: hixl::CompleteHandle) {
        self.0.lock().remove(&(h as usize));
    }

    /// Batches still tracked.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Leaks the memory of every batch still tracked: the client could not be destroyed, so
    /// those batches may still copy into it.
    pub(crate) fn leak(&self) {
        std::mem::forget(std::mem::take(&mut *self.0.lock()));
    }
}

/// The status of an async batch (`HixlCompleteStatus`).
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompleteStatus(pub u32);

impl CompleteStatus {
    /// Still queued or running.
    pub const WAITING: CompleteStatus = CompleteStatus(hixl::HIXL_COMPLETE_STATUS_WAITING);
    /// Done.
    pub const COMPLETED: CompleteStatus = CompleteStatus(hixl::HIXL_COMPLETE_STATUS_COMPLETED);
    /// Did not start in time; will not run.
    pub const TIMEOUT: CompleteStatus = CompleteStatus(hixl::HIXL_COMPLETE_STATUS_TIMEOUT);
    /// A copy failed.
    pub const FAILED: CompleteStatus = CompleteStatus(hixl::HIXL_COMPLETE_STATUS_FAILED);

    /// Whether the batch is finished (anything but WAITING).
    pub fn is_finished(self) -> bool {
        self != Self::WAITING
    }
}

/// An async batch in flight. It borrows its client, so it cannot outlive it:
///
/// ```compile_fail,E0505
/// # fn f(c: ascend_cs::Client, ops: &[ascend_cs::Op<'_>]) {
/// let done = c.put_async(ops).unwrap();
/// drop(c); // error[E0505]: cannot move out of `c` because it is borrowed
/// drop(done);
/// # }
/// ```
///
/// Dropping it waits until the library reports the batch finished.
#[must_use = "dropping a Completion waits for the batch"]
pub struct Completion<'c> {
    lib: &'static HixlLib,
    dev: &'c Device,
    client: hixl::HixlClientHandle,
    in_flight: &'c InFlight,
    raw: hixl::CompleteHandle,
    op: &'static str,
    finished: Option<CompleteStatus>,
}

impl fmt::Debug for Completion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("op", &self.op)
            .field("finished", &self.finished)
            .finish()
    }
}

impl<'c> Completion<'c> {
    /// The completion of the batch `raw` of `client`, whose memory `in_flight` holds.
    pub(crate) fn new(
        lib: &'static HixlLib,
        dev: &'c Device,
        client: hixl::HixlClientHandle,
        in_flight: &'c InFlight,
        raw: hixl::CompleteHandle,
        op: &'static str,
    ) -> Completion<'c> {
        Completion {
            lib,
            dev,
            client,
            in_flight,
            raw,
            op,
            finished: None,
        }
    }

    /// Asks the library once. After a finished status the library forgets the request; the
    /// status is remembered here.
    ///
    /// # Errors
    /// `HixlCSClientQueryCompleteStatus` failures.
    #[doc(alias = "HixlCSClientQueryCompleteStatus")]
    #[allow(unsafe_code)]
    pub fn status(&mut self) -> Result<CompleteStatus> {
        if let Some(s) = self.finished {
            return Ok(s);
        }
        self.dev.bind()?;
        let mut st: hixl::HixlCompleteStatus = hixl::HIXL_COMPLETE_STATUS_WAITING;
        // SAFETY: live client and our outstanding request; `st` is writable.
        unsafe {
            xcall!(
                self.lib,
                HixlCSClientQueryCompleteStatus(self.client, self.raw, &mut st)
            )
        }?;
        let s = CompleteStatus(st);
        if s.is_finished() {
            self.finished = Some(s);
            self.in_flight.finished(self.raw);
        }
        Ok(s)
    }

    /// Polls until the batch finishes or `timeout` passes.
    ///
    /// # Errors
    /// [`Error::BatchFailed`] (FAILED), [`Error::Timeout`] with `reported: true` (the library
    /// reported TIMEOUT) or `reported: false` (still WAITING after `timeout`: wait again or
    /// drop, which waits); query failures.
    pub fn wait(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_micros(20);
        loop {
            match self.status()? {
                CompleteStatus::COMPLETED => return Ok(()),
                CompleteStatus::FAILED => {
                    return Err(Error::BatchFailed {
                        op: self.op,
                        msg: message(self.lib),
                    })
                }
                CompleteStatus::WAITING => {}
                _ => {
                    return Err(Error::Timeout {
                        op: self.op,
                        reported: true,
                    })
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    op: self.op,
                    reported: false,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(2));
        }
    }
}

impl Drop for Completion<'_> {
    fn drop(&mut self) {
        let mut pause = Duration::from_micros(20);
        loop {
            match self.status() {
                Ok(s) if s.is_finished() => return,
                Ok(_) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
                Err(e) => {
                    // The memory stays in the client's in-flight table (leaked with it).
                    tracing::error!(error = %e, "querying a HixlCS batch failed; leaving it in flight");
                    return;
                }
            }
        }
    }
}
