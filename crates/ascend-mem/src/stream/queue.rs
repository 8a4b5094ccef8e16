//! [`Stream`]: a queue of device work, what it keeps alive for pending work, and its
//! teardown.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::device::Device;
use crate::error::{CloseError, Error, Result};
use crate::ffi;
use crate::handle::RawHandle;
use crate::table::TableInner;
use crate::vmm::MapInner;

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

/// What a stream keeps alive for its pending work.
pub(super) enum Keep {
    Map(#[allow(dead_code)] Arc<MapInner>),
    Table(#[allow(dead_code)] Arc<TableInner>),
    /// Anything else pending work uses (an event, an HCCL communicator, a symmetric window).
    Other(#[allow(dead_code)] Arc<dyn std::any::Any + Send + Sync>),
}

/// A queue of device work (`aclrtCreateStreamWithConfig`); destroyed on drop after waiting
/// for its work.
///
/// `Send` but not `Sync`: ACL does not document concurrent use of one stream from several
/// threads, so a stream is used by one thread at a time.
///
/// ```compile_fail
/// fn share<T: Sync>(_: &T) {}
/// fn f(s: ascend_mem::Stream) { share(&s); }
/// ```
#[must_use = "dropping a Stream waits for its work and destroys it"]
pub struct Stream {
    pub(super) dev: Device,
    pub(super) raw: RawHandle,
    pub(super) keep: Vec<Keep>,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.dev.id())
            .field("raw", &self.raw.get())
            .field("pending_keepalives", &self.keep.len())
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
        // SAFETY: plain values on a bound device; the stream is owned by the value below.
        let raw = unsafe { ffi::stream::create(dev.lib(), priority, flags.bits()) }?;
        Ok(Stream {
            dev: dev.clone(),
            raw: RawHandle::new(raw),
            keep: Vec::new(),
            _not_sync: PhantomData,
        })
    }

    /// The raw handle (borrowed: do not destroy it).
    pub fn as_raw(&self) -> acl::aclrtStream {
        self.raw.get()
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
        // SAFETY: the stream is live (owned by self).
        unsafe { ffi::stream::synchronize(self.dev.lib(), self.raw.get()) }?;
        self.keep.clear();
        Ok(())
    }

    /// Waits up to `timeout` for all queued work.
    ///
    /// # Errors
    /// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT` (kind [`Timeout`](crate::ErrorKind::Timeout)) when
    /// time runs out; other `aclrtSynchronizeStreamWithTimeout` failures.
    #[doc(alias = "aclrtSynchronizeStreamWithTimeout")]
    pub fn synchronize_timeout(&mut self, timeout: Duration) -> Result<()> {
        self.dev.enter()?;
        // SAFETY: the stream is live.
        unsafe {
            ffi::stream::synchronize_timeout(self.dev.lib(), self.raw.get(), timeout_ms(timeout))
        }?;
        self.keep.clear();
        Ok(())
    }

    /// Whether all queued work is done (`aclrtStreamQuery`); releases kept memory if so.
    ///
    /// # Errors
    /// An `aclrtStreamQuery` failure.
    #[doc(alias = "aclrtStreamQuery")]
    pub fn is_complete(&mut self) -> Result<bool> {
        self.dev.enter()?;
        // SAFETY: the stream is live.
        let st = unsafe { ffi::stream::query(self.dev.lib(), self.raw.get()) }?;
        let done = st == acl::ACL_STREAM_STATUS_COMPLETE;
        if done {
            self.keep.clear();
        }
        Ok(done)
    }

    /// Discards queued work (`aclrtStreamAbort`). Memory kept alive by pending copies stays
    /// held until a later successful synchronize or the stream's drop.
    ///
    /// # Errors
    /// An `aclrtStreamAbort` failure.
    #[doc(alias = "aclrtStreamAbort")]
    pub fn abort(&mut self) -> Result<()> {
        self.dev.enter()?;
        // SAFETY: the stream is live.
        unsafe { ffi::stream::abort(self.dev.lib(), self.raw.get()) }
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
        // SAFETY: the stream is live.
        unsafe { ffi::stream::set_failure_mode(self.dev.lib(), self.raw.get(), u64::from(m)) }
    }

    /// Keeps `map` alive until this stream is synchronized past the work just queued.
    pub(crate) fn keep_mapping(&mut self, map: &Arc<MapInner>) {
        self.keep.push(Keep::Map(map.clone()));
    }

    /// Keeps `obj` alive until this stream is synchronized past the work just queued.
    pub(crate) fn keep_other(&mut self, obj: Arc<dyn std::any::Any + Send + Sync>) {
        self.keep.push(Keep::Other(obj));
    }

    pub(super) fn same_runtime(&self, other: &Device, what: &'static str) -> Result<()> {
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
    pub fn close(mut self) -> std::result::Result<(), CloseError<Stream>> {
        let _span = tracing::debug_span!("destroy_stream", dev = self.dev.id()).entered();
        let r = self.dev.bind().and_then(|()| {
            // SAFETY: the stream is live (owned by self).
            unsafe { ffi::stream::synchronize(self.dev.lib(), self.raw.get()) }
        });
        if let Err(e) = r {
            return Err(CloseError::new(e, self));
        }
        // SAFETY: we own the stream; its work is done; it is not used again (raw is nulled,
        // so Drop skips it).
        match unsafe { ffi::stream::destroy(self.dev.lib(), self.raw.get()) } {
            Ok(()) => {
                self.raw = RawHandle::new(std::ptr::null_mut());
                self.keep.clear();
                Ok(())
            }
            Err(e) => Err(CloseError::new(e, self)),
        }
    }

    fn destroy_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: we own the stream; waiting first keeps pending copies inside kept memory.
        if let Err(e) = unsafe { ffi::stream::synchronize(self.dev.lib(), self.raw.get()) } {
            tracing::warn!(error = %e, "stream work failed before destroy");
        }
        // SAFETY: we own the stream and do not use it again.
        unsafe { ffi::stream::destroy(self.dev.lib(), self.raw.get()) }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.raw.get().is_null() {
            return; // destroyed by `close`
        }
        let _span = tracing::debug_span!("destroy_stream", dev = self.dev.id()).entered();
        match self.destroy_now() {
            Ok(()) => self.keep.clear(),
            Err(e) => {
                tracing::error!(error = %e, "destroying a stream failed; leaking what its work uses");
                self.dev.record_sticky(e);
                // The stream may still run: never release memory it may touch.
                std::mem::forget(std::mem::take(&mut self.keep));
            }
        }
    }
}
