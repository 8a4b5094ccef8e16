//! [`StreamWaiter`]: waiting on a stream from a thread that does not own it.
//!
//! A [`Stream`] is used by one thread at a time. Waiting is the one exception this crate
//! makes, as HIXL does: its synchronous transfer blocks in `aclrtSynchronizeStreamWithTimeout`
//! while another thread may `aclrtStreamAbort` the same stream (its disconnect), and ACL
//! documents that a synchronize after an abort returns `ACL_ERROR_RT_STREAM_ABORT`. A waiter
//! can only wait: it queues nothing, and it never lets go of what the stream's queued work
//! keeps alive (only the owner's own synchronize does that).
//!
//! Soundness: the owner and its waiters share a gate holding the raw handle. A waiter's call
//! holds the gate's read lock for the call; the owner clears the gate under its write lock
//! before `aclrtDestroyStream`, so no waiter passes a destroyed handle to C. The owner
//! destroys only after its own synchronize, when the stream is idle and any waiter's call
//! returns at once.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::enqueue::WaitGate;
use super::queue::{timeout_ms, Stream};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ffi;
use crate::ffi::StreamRef;

/// Waits on a stream from any thread (`Send`, `Sync`, `Clone`), made by
/// [`Stream::waiter`](crate::Stream::waiter).
///
/// Its calls wait for the work queued on the stream when the call is made, as the owner's
/// synchronize does, but release nothing the work keeps alive: the owner still synchronizes
/// (or queries) to let go of that. Once the owner destroyed the stream, a call fails with
/// [`Error::InvalidArgument`] instead of reaching C. An abort of the stream by its owner
/// ends a waiter's call, with `ACL_ERROR_RT_STREAM_ABORT` (the abort's report is returned to
/// one synchronize only, the owner's or a waiter's).
///
/// A waiter follows the stream, not a lease of it: made from a [`StreamLease`], it outlives
/// the lease and, once the stream is leased again, waits for the next holder's work too.
///
/// [`StreamLease`]: crate::StreamLease
///
/// ```
/// # #[cfg(not(feature = "emulator"))] fn main() {}
/// # #[cfg(feature = "emulator")]
/// # fn main() -> ascend_mem::Result<()> {
/// use std::time::Duration;
/// use ascend_mem::prelude::*;
/// use ascend_mem::{DeviceBuffer, Runtime, Stream};
///
/// let rt = Runtime::emulated()?;
/// let dev = rt.device(0)?;
/// let (a, b) = (DeviceBuffer::new(&dev, 2 << 20)?, DeviceBuffer::new(&dev, 2 << 20)?);
/// let mut s = Stream::new(&dev)?;
/// s.copy_async(&b, &a)?;
/// let w = s.waiter();
/// std::thread::scope(|t| t.spawn(|| w.synchronize_timeout(Duration::from_secs(5))).join())
///     .expect("the waiting thread")?;
/// s.synchronize()?; // the owner lets go of what the copy kept alive
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct StreamWaiter {
    dev: Device,
    gate: Arc<WaitGate>,
}

impl fmt::Debug for StreamWaiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamWaiter")
            .field("device", &self.dev.id())
            .field("live", &self.gate.is_open())
            .finish()
    }
}

impl Stream {
    /// A handle other threads wait on this stream with (see [`StreamWaiter`]): its calls
    /// wait, and release nothing the queued work keeps alive.
    pub fn waiter(&self) -> StreamWaiter {
        StreamWaiter {
            dev: self.dev.clone(),
            gate: self.queue.gate().clone(),
        }
    }
}

impl StreamWaiter {
    /// Waits for the work queued on the stream (`aclrtSynchronizeStream`).
    ///
    /// # Errors
    /// As [`Stream::synchronize`](crate::Stream::synchronize); [`Error::InvalidArgument`]
    /// once the stream is destroyed.
    #[doc(alias = "aclrtSynchronizeStream")]
    pub fn synchronize(&self) -> Result<()> {
        self.call("aclrtSynchronizeStream", |lib, s| {
            ffi::stream::synchronize(lib, s)
        })
    }

    /// Waits up to `timeout` for the work queued on the stream
    /// (`aclrtSynchronizeStreamWithTimeout`, whole milliseconds: below 1 ms it checks once).
    ///
    /// # Errors
    /// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT` (kind [`Timeout`](crate::ErrorKind::Timeout)) when
    /// time runs out; as [`Stream::synchronize_timeout`](crate::Stream::synchronize_timeout)
    /// otherwise; [`Error::InvalidArgument`] once the stream is destroyed.
    #[doc(alias = "aclrtSynchronizeStreamWithTimeout")]
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<()> {
        let ms = timeout_ms(timeout);
        self.call("aclrtSynchronizeStreamWithTimeout", |lib, s| {
            ffi::stream::synchronize_timeout(lib, s, ms)
        })
    }

    /// Runs `f` on the live stream with the gate's read lock held, on this thread's binding
    /// of the device.
    #[allow(unsafe_code)]
    fn call(
        &self,
        api: &'static str,
        f: impl FnOnce(&acl::AclLib, StreamRef<'_>) -> Result<()>,
    ) -> Result<()> {
        self.dev.enter()?;
        let raw = self.gate.read();
        let Some(h) = *raw else {
            return Err(Error::InvalidArgument {
                api,
                what: "stream (already destroyed by its owner)",
                value: 0,
            });
        };
        // SAFETY: the gate holds the handle only while the stream lives: its owner takes it
        // out under the write lock before destroying the stream, and the read lock held for
        // the borrow's whole life keeps that from happening meanwhile.
        let s = unsafe { StreamRef::borrow_raw(h.get()) };
        f(self.dev.lib(), s)
    }
}
