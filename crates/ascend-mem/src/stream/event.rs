//! [`Event`]: a recorded point in a stream, and streams waiting on events.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::queue::{timeout_ms, Stream};
use crate::device::Device;
use crate::error::{close_last, CloseError, Error, Result};
use crate::ffi;
use crate::ffi::{EventRef, OwnedEvent};

bitflags::bitflags! {
    /// Event creation flags (`ACL_EVENT_*`).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub struct EventFlags: u32 {
        /// `ACL_EVENT_SYNC`.
        const SYNC = acl::ACL_EVENT_SYNC;
        /// `ACL_EVENT_CAPTURE_STREAM_PROGRESS`.
        const CAPTURE_STREAM_PROGRESS = acl::ACL_EVENT_CAPTURE_STREAM_PROGRESS;
        /// `ACL_EVENT_TIME_LINE`: needed for [`Event::elapsed_since`].
        const TIME_LINE = acl::ACL_EVENT_TIME_LINE;
        /// `ACL_EVENT_DEVICE_USE_ONLY`.
        const DEVICE_USE_ONLY = acl::ACL_EVENT_DEVICE_USE_ONLY;
        /// `ACL_EVENT_EXTERNAL`.
        const EXTERNAL = acl::ACL_EVENT_EXTERNAL;
        /// `ACL_EVENT_IPC`.
        const IPC = acl::ACL_EVENT_IPC;
    }
}

pub(crate) struct EventInner {
    dev: Device,
    /// `None` once destroyed by `Event::close`.
    raw: Option<OwnedEvent>,
}

impl EventInner {
    fn destroy_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        let Some(raw) = self.raw.take() else {
            return Ok(());
        };
        // Streams that waited on or recorded the event hold this Arc, so none has pending
        // work on it when it is dropped or closed.
        ffi::event::destroy(self.dev.lib(), raw).map_err(|(e, raw)| {
            self.raw = Some(raw);
            e
        })
    }

    /// The live event, borrowed. Always `Ok` for an event a caller can reach (only the value
    /// `close` consumed has none).
    fn live(&self) -> Result<EventRef<'_>> {
        self.raw
            .as_ref()
            .map(OwnedEvent::borrow)
            .ok_or(Error::InvalidArgument {
                api: "aclrtEvent",
                what: "event (already destroyed)",
                value: 0,
            })
    }
}

impl Drop for EventInner {
    fn drop(&mut self) {
        if self.raw.is_none() {
            return;
        }
        if let Err(e) = self.destroy_now() {
            tracing::error!(error = %e, "destroying an event failed");
            self.dev.record_sticky(e);
        }
    }
}

/// A point in a stream's work (`aclrtCreateEvent`); destroyed on drop.
///
/// `Send`, not `Sync` (as [`Stream`]).
#[must_use = "dropping an Event destroys it"]
pub struct Event {
    inner: Arc<EventInner>,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.inner.dev.id())
            .field("raw", &self.as_raw())
            .finish()
    }
}

impl Event {
    /// An event with default flags.
    ///
    /// # Errors
    /// An `aclrtCreateEvent` failure.
    #[doc(alias = "aclrtCreateEvent")]
    pub fn new(dev: &Device) -> Result<Event> {
        dev.enter()?;
        let raw = ffi::event::create_default(dev.lib())?;
        Ok(Self::wrap(dev, raw))
    }

    /// An event with flags.
    ///
    /// # Errors
    /// An `aclrtCreateEventWithFlag` failure.
    #[doc(alias = "aclrtCreateEventWithFlag")]
    pub fn with_flags(dev: &Device, flags: EventFlags) -> Result<Event> {
        dev.enter()?;
        let raw = ffi::event::create(dev.lib(), flags.bits())?;
        Ok(Self::wrap(dev, raw))
    }

    fn wrap(dev: &Device, raw: OwnedEvent) -> Event {
        Event {
            inner: Arc::new(EventInner {
                dev: dev.clone(),
                raw: Some(raw),
            }),
            _not_sync: PhantomData,
        }
    }

    /// The raw handle (borrowed).
    pub fn as_raw(&self) -> acl::aclrtEvent {
        self.inner
            .raw
            .as_ref()
            .map_or(std::ptr::null_mut(), OwnedEvent::as_raw)
    }

    /// Destroys the event now, returning the error (and the event) on failure.
    ///
    /// # Errors
    /// [`Error::Busy`] while a stream that recorded or waited on it has not been synchronized
    /// past that point; an `aclrtDestroyEvent` failure.
    #[doc(alias = "aclrtDestroyEvent")]
    pub fn close(self) -> std::result::Result<(), CloseError<Event>> {
        close_last(self.inner, "Event", |inner| inner.destroy_now()).map_err(|(e, inner)| {
            CloseError::new(
                e,
                Event {
                    inner,
                    _not_sync: PhantomData,
                },
            )
        })
    }

    /// Records the current end of `stream`'s work.
    ///
    /// # Errors
    /// [`Error::WrongDevice`] across runtimes; an `aclrtRecordEvent` failure.
    #[doc(alias = "aclrtRecordEvent")]
    pub fn record(&self, stream: &mut Stream) -> Result<()> {
        stream.same_runtime(&self.inner.dev, "aclrtRecordEvent")?;
        stream.dev.enter()?;
        // The stream keeps the event alive until synchronized.
        ffi::event::record(stream.dev.lib(), self.inner.live()?, stream.live()?)?;
        stream.keep_other(self.inner.clone());
        Ok(())
    }

    /// Whether the recorded work is done (`aclrtQueryEventStatus`).
    ///
    /// # Errors
    /// An `aclrtQueryEventStatus` failure.
    #[doc(alias = "aclrtQueryEventStatus")]
    pub fn is_complete(&self) -> Result<bool> {
        self.inner.dev.enter()?;
        let st = ffi::event::query(self.inner.dev.lib(), self.inner.live()?)?;
        Ok(st == acl::ACL_EVENT_RECORDED_STATUS_COMPLETE)
    }

    /// Waits for the recorded work.
    ///
    /// # Errors
    /// An `aclrtSynchronizeEvent` failure.
    #[doc(alias = "aclrtSynchronizeEvent")]
    pub fn synchronize(&self) -> Result<()> {
        self.inner.dev.enter()?;
        ffi::event::synchronize(self.inner.dev.lib(), self.inner.live()?)
    }

    /// Waits up to `timeout` for the recorded work.
    ///
    /// # Errors
    /// `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT` (kind [`Timeout`](crate::ErrorKind::Timeout));
    /// other `aclrtSynchronizeEventWithTimeout` failures.
    #[doc(alias = "aclrtSynchronizeEventWithTimeout")]
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<()> {
        self.inner.dev.enter()?;
        ffi::event::synchronize_timeout(
            self.inner.dev.lib(),
            self.inner.live()?,
            timeout_ms(timeout),
        )
    }

    /// Milliseconds between `start` and this event, both recorded and complete.
    ///
    /// # Errors
    /// An `aclrtEventElapsedTime` failure (e.g. not complete).
    #[doc(alias = "aclrtEventElapsedTime")]
    pub fn elapsed_since(&self, start: &Event) -> Result<f32> {
        self.inner.dev.enter()?;
        ffi::event::elapsed(
            self.inner.dev.lib(),
            start.inner.live()?,
            self.inner.live()?,
        )
    }
}

impl Stream {
    /// Makes later work on this stream wait for `event`'s recorded point.
    ///
    /// # Errors
    /// An `aclrtStreamWaitEvent` failure.
    #[doc(alias = "aclrtStreamWaitEvent")]
    pub fn wait_event(&mut self, event: &Event) -> Result<()> {
        self.same_runtime(&event.inner.dev, "aclrtStreamWaitEvent")?;
        self.dev.enter()?;
        // The stream keeps the event alive until synchronized.
        ffi::stream::wait_event(self.dev.lib(), self.live()?, event.inner.live()?)?;
        self.keep_other(event.inner.clone());
        Ok(())
    }
}
