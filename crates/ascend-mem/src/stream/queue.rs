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
use crate::ffi::{OwnedStream, StreamRef};
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
    /// `None` only once `close` destroyed it (the value is then being dropped).
    pub(super) raw: Option<OwnedStream>,
    pub(super) keep: Vec<Keep>,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.dev.id())
            .field("raw", &self.as_raw())
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
        let raw = ffi::stream::create(dev.lib(), priority, flags.bits())?;
        Ok(Stream {
            dev: dev.clone(),
            raw: Some(raw),
            keep: Vec::new(),
            _not_sync: PhantomData,
        })
    }

    /// The raw handle (borrowed: do not destroy it).
    pub fn as_raw(&self) -> acl::aclrtStream {
        self.raw
            .as_ref()
            .map_or(std::ptr::null_mut(), OwnedStream::as_raw)
    }

    /// The live stream, borrowed. Always `Ok` for a `Stream` a caller can reach (only the
    /// value `close` consumed has none).
    pub(super) fn live(&self) -> Result<StreamRef<'_>> {
        self.raw
            .as_ref()
            .map(OwnedStream::borrow)
            .ok_or(Error::InvalidArgument {
                api: "aclrtStream",
                what: "stream (already destroyed)",
                value: 0,
            })
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
        ffi::stream::synchronize(self.dev.lib(), self.live()?)?;
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
        ffi::stream::synchronize_timeout(self.dev.lib(), self.live()?, timeout_ms(timeout))?;
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
        let st = ffi::stream::query(self.dev.lib(), self.live()?)?;
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
        let r = self
            .dev
            .bind()
            .and_then(|()| ffi::stream::synchronize(self.dev.lib(), self.live()?));
        if let Err(e) = r {
            return Err(CloseError::new(e, self));
        }
        let Some(raw) = self.raw.take() else {
            return Ok(());
        };
        // Its work is done, so nothing queued on it still uses the memory `keep` holds.
        match ffi::stream::destroy(self.dev.lib(), raw) {
            Ok(()) => {
                self.keep.clear();
                Ok(())
            }
            Err((e, raw)) => {
                self.raw = Some(raw);
                Err(CloseError::new(e, self))
            }
        }
    }

    /// Waits for the queued work (a failure is only logged), then destroys the stream; on
    /// failure the stream stays owned (and is leaked by Drop).
    fn destroy_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        let Some(raw) = self.raw.take() else {
            return Ok(());
        };
        // Waiting first keeps pending copies inside the memory `keep` holds.
        if let Err(e) = ffi::stream::synchronize(self.dev.lib(), raw.borrow()) {
            tracing::warn!(error = %e, "stream work failed before destroy");
        }
        ffi::stream::destroy(self.dev.lib(), raw).map_err(|(e, raw)| {
            self.raw = Some(raw);
            e
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.raw.is_none() {
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
