//! [`Stream`]: a queue of device work, what it keeps alive for pending work, and its
//! teardown.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::enqueue::StreamQueue;
use crate::device::Device;
use crate::error::{CloseError, Error, Result};
use crate::ffi;
use crate::ffi::StreamRef;

bitflags::bitflags! {
    /// Stream creation flags (`ACL_STREAM_*`).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub struct StreamFlags: u32 {
        /// `ACL_STREAM_FAST_LAUNCH`.
        const FAST_LAUNCH = acl::ACL_STREAM_FAST_LAUNCH;
        /// `ACL_STREAM_FAST_SYNC`.
        const FAST_SYNC = acl::ACL_STREAM_FAST_SYNC;
        /// `ACL_STREAM_PERSISTENT`.
        const PERSISTENT = acl::ACL_STREAM_PERSISTENT;
        /// `ACL_STREAM_HUGE`.
        const HUGE = acl::ACL_STREAM_HUGE;
        /// `ACL_STREAM_CPU_SCHEDULE`.
        const CPU_SCHEDULE = acl::ACL_STREAM_CPU_SCHEDULE;
        /// `ACL_STREAM_DEVICE_USE_ONLY`.
        const DEVICE_USE_ONLY = acl::ACL_STREAM_DEVICE_USE_ONLY;
    }
}

/// What a stream does after a task fails (`aclrtSetStreamFailureMode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FailureMode {
    /// `ACL_CONTINUE_ON_FAILURE`: later tasks still run.
    Continue,
    /// `ACL_STOP_ON_FAILURE`: the stream stops at the first failure.
    Stop,
}

/// A timeout in the milliseconds ACL takes: saturated at `i32::MAX` (about 24 days).
pub(super) fn timeout_ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// A queue of device work (`aclrtCreateStreamWithConfig`); destroyed on drop after waiting
/// for its work.
///
/// `Send` but not `Sync`: ACL does not document concurrent use of one stream from several
/// threads, so a stream is used by one thread at a time, except for waiting on it, which
/// other threads do through a [`StreamWaiter`](super::StreamWaiter) ([`Stream::waiter`]).
///
/// ```compile_fail
/// fn share<T: Sync>(_: &T) {}
/// fn f(s: ascend_mem::Stream) { share(&s); }
/// ```
#[must_use = "dropping a Stream waits for its work and destroys it"]
pub struct Stream {
    pub(crate) dev: Device,
    /// The stream (destroyed only by `close`, after which the value is being dropped) and
    /// what its pending work keeps alive.
    pub(crate) queue: StreamQueue,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.dev.id())
            .field("raw", &self.as_raw())
            .field("pending_keepalives", &self.queue.pending())
            .finish()
    }
}

impl Stream {
    /// A stream with default priority and flags.
    ///
    /// # Errors
    /// An `aclrtCreateStreamWithConfig` failure (out of streams: `OutOfMemory`).
    #[doc(alias = "aclrtCreateStream")]
    pub fn new(dev: &Device) -> Result<Stream> {
        Self::with_config(dev, 0, StreamFlags::empty())
    }

    /// A stream with a priority and flags.
    ///
    /// # Errors
    /// An `aclrtCreateStreamWithConfig` failure.
    #[doc(alias = "aclrtCreateStreamWithConfig")]
    pub fn with_config(dev: &Device, priority: u32, flags: StreamFlags) -> Result<Stream> {
        dev.enter()?;
        let queue = StreamQueue::create(dev.lib(), priority, flags.bits())?;
        Ok(Stream {
            dev: dev.clone(),
            queue,
            _not_sync: PhantomData,
        })
    }

    /// The raw handle (borrowed: do not destroy it).
    pub fn as_raw(&self) -> acl::aclrtStream {
        self.queue.as_raw()
    }

    /// The live stream, borrowed. Always `Ok` for a `Stream` a caller can reach (only the
    /// value `close` consumed has none).
    pub(super) fn live(&self) -> Result<StreamRef<'_>> {
        self.queue.live()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Waits for all queued work, then releases what pending copies kept alive.
    ///
    /// # Errors
    /// An `aclrtSynchronizeStream` failure (a failed task; an aborted stream).
    #[doc(alias = "aclrtSynchronizeStream")]
    pub fn synchronize(&mut self) -> Result<()> {
        self.dev.enter()?;
        self.queue.synchronize(self.dev.lib())
    }

    /// Waits up to `timeout` for all queued work.
    ///
    /// # Errors
    /// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT` (kind [`Timeout`](crate::ErrorKind::Timeout)) when
    /// time runs out; other `aclrtSynchronizeStreamWithTimeout` failures.
    #[doc(alias = "aclrtSynchronizeStreamWithTimeout")]
    pub fn synchronize_timeout(&mut self, timeout: Duration) -> Result<()> {
        self.dev.enter()?;
        self.queue
            .synchronize_timeout(self.dev.lib(), timeout_ms(timeout))
    }

    /// Whether all queued work is done (`aclrtStreamQuery`); releases kept memory if so.
    ///
    /// # Errors
    /// An `aclrtStreamQuery` failure.
    #[doc(alias = "aclrtStreamQuery")]
    pub fn is_complete(&mut self) -> Result<bool> {
        self.dev.enter()?;
        self.queue.query(self.dev.lib())
    }

    /// Discards queued work (`aclrtStreamAbort`). Memory kept alive by pending copies stays
    /// held until a later successful synchronize or the stream's drop.
    ///
    /// # Errors
    /// An `aclrtStreamAbort` failure.
    #[doc(alias = "aclrtStreamAbort")]
    pub fn abort(&mut self) -> Result<()> {
        self.dev.enter()?;
        ffi::stream::abort(self.dev.lib(), self.live()?)
    }

    /// Sets what happens after a failed task.
    ///
    /// # Errors
    /// An `aclrtSetStreamFailureMode` failure.
    #[doc(alias = "aclrtSetStreamFailureMode")]
    pub fn set_failure_mode(&mut self, mode: FailureMode) -> Result<()> {
        let m = match mode {
            FailureMode::Continue => acl::ACL_CONTINUE_ON_FAILURE,
            FailureMode::Stop => acl::ACL_STOP_ON_FAILURE,
        };
        self.dev.enter()?;
        ffi::stream::set_failure_mode(self.dev.lib(), self.live()?, u64::from(m))
    }

    /// Keeps `obj` alive until this stream is synchronized past the work just queued.
    pub(crate) fn keep_other(&mut self, obj: Arc<dyn std::any::Any + Send + Sync>) {
        self.queue.keep_other(obj);
    }

    pub(crate) fn same_runtime(&self, other: &Device, what: &'static str) -> Result<()> {
        if std::ptr::eq(other.lib(), self.dev.lib()) {
            Ok(())
        } else {
            Err(Error::WrongDevice {
                what,
                expected: self.dev.id(),
                found: other.id(),
            })
        }
    }

    /// Waits for the queued work, then destroys the stream now, returning the error (and the
    /// stream, still holding what its pending work uses) on failure, so the caller can see it,
    /// retry, or drop the stream (whose `Drop` then waits and destroys regardless).
    ///
    /// # Errors
    /// An `aclrtSynchronizeStream` failure (a failed or aborted task) or an
    /// `aclrtDestroyStream` failure.
    #[doc(alias = "aclrtDestroyStream")]
    // The error hands the stream back, as every `close` of this crate does.
    #[allow(clippy::result_large_err)]
    pub fn close(mut self) -> std::result::Result<(), CloseError<Stream>> {
        let _span = tracing::debug_span!("destroy_stream", dev = self.dev.id()).entered();
        let lib = self.dev.lib();
        match self.dev.bind().and_then(|()| self.queue.close(lib)) {
            Ok(()) => Ok(()),
            Err(e) => Err(CloseError::new(e, self)),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.queue.is_live() {
            return; // destroyed by `close`
        }
        let _span = tracing::debug_span!("destroy_stream", dev = self.dev.id()).entered();
        let lib = self.dev.lib();
        // Waits for the work (a failure is only logged), then destroys the stream and lets go
        // of what the work kept alive.
        if let Err(e) = self.dev.bind().and_then(|()| self.queue.close_logged(lib)) {
            // The stream may still run: `queue` never releases memory it may touch, and leaks
            // it when it drops undestroyed.
            tracing::error!(error = %e, "destroying a stream failed; leaking what its work uses");
            self.dev.record_sticky(e);
        }
    }
}
