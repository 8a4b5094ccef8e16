//! [`Stream`], [`Event`], [`StreamPool`], and stream-ordered (async) copies.
//!
//! Async copies only run between memory this crate owns ([`MappingSlice`]s of mappings and
//! buffers): the stream keeps an `Arc` of every mapping it has pending work on until a
//! synchronize (or query) proves the work done, or the stream is destroyed. Dropping a
//! buffer while a copy into it is queued is therefore fine: the unmap waits for the stream.
//! Copies to or from host slices (`&[u8]`, `&mut [u8]`) are synchronous, or `unsafe`: a guard
//! that synchronizes on drop could be leaked with `mem::forget`, ending the borrow while the
//! copy still runs.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::device::Device;
use crate::error::{close_last, CloseError, Error, Result};
use crate::ffi;
use crate::table::{CopySide, MappingTable, TableCopy, TableInner};
use crate::typed::TypedSlice;
use crate::vmm::{memcpy_kind, MapInner, MappingSlice};

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

/// What a stream does after a task fails (`aclrtSetStreamFailureMode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FailureMode {
    /// `ACL_CONTINUE_ON_FAILURE`: later tasks still run.
    Continue,
    /// `ACL_STOP_ON_FAILURE`: the stream stops at the first failure.
    Stop,
}

/// A timeout in the milliseconds ACL takes: saturated at `i32::MAX` (about 24 days).
fn timeout_ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Checks that `len` bytes fit at the start of a side of `size` bytes.
fn fits(len: usize, size: usize, what: &'static str) -> Result<()> {
    if len > size {
        return Err(Error::OutOfBounds {
            what,
            offset: 0,
            len,
            size,
        });
    }
    Ok(())
}

/// `len` elements of `T` in bytes; an overflow is reported as not fitting in `size` bytes.
fn elems_to_bytes<T>(len: usize, size: usize, what: &'static str) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or(Error::OutOfBounds {
            what,
            offset: 0,
            len: usize::MAX,
            size,
        })
}

/// What a stream keeps alive for its pending work.
enum Keep {
    Map(#[allow(dead_code)] Arc<MapInner>),
    Event(#[allow(dead_code)] Arc<EventInner>),
    Table(#[allow(dead_code)] Arc<TableInner>),
    /// Anything else pending work uses (an HCCL communicator, a symmetric window).
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
    dev: Device,
    raw: acl::aclrtStream,
    keep: Vec<Keep>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: the stream handle is an id, not tied to the creating thread; every method and Drop
// binds `dev` on the calling thread before calling ACL; the kept Arcs are Send + Sync.
unsafe impl Send for Stream {}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.dev.id())
            .field("raw", &self.raw)
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
            raw,
            keep: Vec::new(),
            _not_sync: PhantomData,
        })
    }

    /// The raw handle (borrowed: do not destroy it).
    pub fn as_raw(&self) -> acl::aclrtStream {
        self.raw
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
        unsafe { ffi::stream::synchronize(self.dev.lib(), self.raw) }?;
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
        unsafe { ffi::stream::synchronize_timeout(self.dev.lib(), self.raw, timeout_ms(timeout)) }?;
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
        let st = unsafe { ffi::stream::query(self.dev.lib(), self.raw) }?;
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
        unsafe { ffi::stream::abort(self.dev.lib(), self.raw) }
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
        unsafe { ffi::stream::set_failure_mode(self.dev.lib(), self.raw, u64::from(m)) }
    }

    /// Makes later work on this stream wait for `event`'s recorded point.
    ///
    /// # Errors
    /// An `aclrtStreamWaitEvent` failure.
    #[doc(alias = "aclrtStreamWaitEvent")]
    pub fn wait_event(&mut self, event: &Event) -> Result<()> {
        self.same_runtime(&event.inner.dev, "aclrtStreamWaitEvent")?;
        self.dev.enter()?;
        // SAFETY: both handles are live; the stream keeps the event alive until synchronized.
        unsafe { ffi::stream::wait_event(self.dev.lib(), self.raw, event.inner.raw) }?;
        self.keep.push(Keep::Event(event.inner.clone()));
        Ok(())
    }

    /// Keeps `map` alive until this stream is synchronized past the work just queued.
    pub(crate) fn keep_mapping(&mut self, map: &Arc<MapInner>) {
        self.keep.push(Keep::Map(map.clone()));
    }

    /// Keeps `obj` alive until this stream is synchronized past the work just queued.
    pub(crate) fn keep_other(&mut self, obj: Arc<dyn std::any::Any + Send + Sync>) {
        self.keep.push(Keep::Other(obj));
    }

    fn same_runtime(&self, other: &Device, what: &'static str) -> Result<()> {
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

    /// Queues a copy of all of `src` into the start of `dst` (`aclrtMemcpyAsync`, device to
    /// device). The stream keeps both mappings alive until it is synchronized.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `src` is longer than `dst`; [`Error::WrongDevice`] across
    /// runtimes; an `aclrtMemcpyAsync` failure.
    #[doc(alias = "aclrtMemcpyAsync")]
    pub fn copy_async(&mut self, dst: &MappingSlice<'_>, src: &MappingSlice<'_>) -> Result<()> {
        fits(src.len(), dst.len(), "aclrtMemcpyAsync: destination")?;
        self.same_runtime(dst.mapping().device(), "aclrtMemcpyAsync dst")?;
        self.same_runtime(src.mapping().device(), "aclrtMemcpyAsync src")?;
        if src.is_empty() {
            return Ok(());
        }
        self.dev.enter()?;
        // SAFETY: both ranges lie inside live mappings; the Arcs pushed below keep them mapped
        // until the stream is synchronized past this copy or destroyed.
        unsafe {
            ffi::copy::memcpy_async(
                self.dev.lib(),
                dst.as_raw(),
                dst.len(),
                src.as_raw(),
                src.len(),
                memcpy_kind(false, false),
                self.raw,
            )
        }?;
        self.keep.push(Keep::Map(dst.map_inner().clone()));
        self.keep.push(Keep::Map(src.map_inner().clone()));
        Ok(())
    }

    /// Queues a copy of all of `src` into the start of `dst`, element-typed
    /// (`aclrtMemcpyAsync`, device to device): [`Stream::copy_async`] on the byte views, with
    /// the same guarantee that the stream keeps both mappings alive until it is synchronized.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `src` has more elements than `dst` (`what` =
    /// `"Stream::copy_typed_async: destination"`, lengths in bytes); otherwise as
    /// [`Stream::copy_async`].
    #[doc(alias = "aclrtMemcpyAsync")]
    pub fn copy_typed_async<T: bytemuck::Pod>(
        &mut self,
        dst: &TypedSlice<'_, T>,
        src: &TypedSlice<'_, T>,
    ) -> Result<()> {
        let (dst, src) = (dst.as_bytes(), src.as_bytes());
        fits(
            src.len(),
            dst.len(),
            "Stream::copy_typed_async: destination",
        )?;
        self.copy_async(&dst, &src)
    }

    /// Queues a batch of copies between entries of two [`MappingTable`]s (`aclrtMemcpyAsync`
    /// per copy, device to device), in order. `dst` and `src` may be the same table.
    ///
    /// Every copy is checked before any is queued; zero-length copies are skipped. The device
    /// is bound once for the batch, and the stream keeps each table (not each mapping) alive
    /// until it is synchronized past the batch or dropped. Use it where one batch touches many
    /// mappings: see [`MappingTable`].
    ///
    /// # Errors
    /// [`Error::WrongDevice`] when a table belongs to another runtime;
    /// [`Error::NoTableEntry`] or [`Error::TableRange`] naming the first copy whose entry or
    /// range is not in its table (nothing is queued);
    /// an `aclrtMemcpyAsync` failure (the copies before it stay queued).
    #[doc(alias = "aclrtMemcpyAsync")]
    pub fn copy_table_async(
        &mut self,
        dst: &MappingTable,
        src: &MappingTable,
        copies: &[TableCopy],
    ) -> Result<()> {
        self.same_runtime(&dst.inner.dev, "aclrtMemcpyAsync (table batch) dst")?;
        self.same_runtime(&src.inner.dev, "aclrtMemcpyAsync (table batch) src")?;
        let (d, s) = (&*dst.inner, &*src.inner);
        let mut any = false;
        for (i, c) in copies.iter().enumerate() {
            d.addr(i, CopySide::Dst, c.dst, c.dst_offset, c.len)?;
            s.addr(i, CopySide::Src, c.src, c.src_offset, c.len)?;
            any |= c.len != 0;
        }
        if !any {
            return Ok(());
        }
        self.dev.enter()?;
        // Kept before queuing, so copies queued ahead of a failure are covered too.
        self.keep.push(Keep::Table(dst.inner.clone()));
        if !Arc::ptr_eq(&dst.inner, &src.inner) {
            self.keep.push(Keep::Table(src.inner.clone()));
        }
        let kind = memcpy_kind(false, false);
        for c in copies.iter().filter(|c| c.len != 0) {
            let to = d.spans[c.dst].0 + c.dst_offset;
            let from = s.spans[c.src].0 + c.src_offset;
            // SAFETY: both ranges were checked above to lie inside entries of live tables,
            // whose mappings the references pushed above keep mapped until the stream is
            // synchronized past this copy or destroyed.
            unsafe {
                ffi::copy::memcpy_async(
                    self.dev.lib(),
                    to as *mut c_void,
                    c.len,
                    from as *const c_void,
                    c.len,
                    kind,
                    self.raw,
                )
            }?;
        }
        Ok(())
    }

    /// Queues setting every byte of `dst` to `value` (`aclrtMemsetAsync`).
    ///
    /// # Errors
    /// [`Error::WrongDevice`] across runtimes; an `aclrtMemsetAsync` failure.
    #[doc(alias = "aclrtMemsetAsync")]
    pub fn fill_async(&mut self, dst: &MappingSlice<'_>, value: u8) -> Result<()> {
        self.same_runtime(dst.mapping().device(), "aclrtMemsetAsync")?;
        if dst.is_empty() {
            return Ok(());
        }
        self.dev.enter()?;
        // SAFETY: the range lies inside a live mapping kept alive below.
        unsafe {
            ffi::copy::memset_async(
                self.dev.lib(),
                dst.as_raw(),
                dst.len(),
                value,
                dst.len(),
                self.raw,
            )
        }?;
        self.keep.push(Keep::Map(dst.map_inner().clone()));
        Ok(())
    }

    /// Queues a copy of `len` host bytes at `src` into the start of `dst`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpyAsync` failure.
    ///
    /// # Safety
    /// `src..src+len` stays readable and unchanged until this stream is synchronized past
    /// the copy (a `&[u8]` borrow does not guarantee that: it can end first).
    #[doc(alias = "aclrtMemcpyAsync")]
    pub unsafe fn write_async_unchecked(
        &mut self,
        dst: &MappingSlice<'_>,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        fits(len, dst.len(), "aclrtMemcpyAsync: destination")?;
        self.dev.enter()?;
        // SAFETY: `dst` lies inside a live mapping kept alive below; `src` forwarded to the
        // caller.
        unsafe {
            ffi::copy::memcpy_async(
                self.dev.lib(),
                dst.as_raw(),
                dst.len(),
                src.cast(),
                len,
                memcpy_kind(false, true),
                self.raw,
            )
        }?;
        self.keep.push(Keep::Map(dst.map_inner().clone()));
        Ok(())
    }

    /// Queues a copy of the start of `src` into `len` host bytes at `dst`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpyAsync` failure.
    ///
    /// # Safety
    /// `dst..dst+len` stays writable, and is neither read nor written by anyone else, until
    /// this stream is synchronized past the copy.
    #[doc(alias = "aclrtMemcpyAsync")]
    pub unsafe fn read_async_unchecked(
        &mut self,
        dst: *mut u8,
        len: usize,
        src: &MappingSlice<'_>,
    ) -> Result<()> {
        fits(len, src.len(), "aclrtMemcpyAsync: source")?;
        self.dev.enter()?;
        // SAFETY: `src` lies inside a live mapping kept alive below; `dst` forwarded to the
        // caller.
        unsafe {
            ffi::copy::memcpy_async(
                self.dev.lib(),
                dst.cast(),
                len,
                src.as_raw(),
                len,
                memcpy_kind(true, false),
                self.raw,
            )
        }?;
        self.keep.push(Keep::Map(src.map_inner().clone()));
        Ok(())
    }

    /// Queues a copy of `len` host elements at `src` into the start of `dst`: element-typed
    /// [`Stream::write_async_unchecked`], which it calls with the byte length.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `len` elements do not fit in `dst` (`what` =
    /// `"Stream::write_slice_async_unchecked: destination"`, lengths in bytes); otherwise as
    /// [`Stream::write_async_unchecked`].
    ///
    /// # Safety
    /// `src..src+len` (elements) stays readable and unchanged until this stream is
    /// synchronized past the copy, as for [`Stream::write_async_unchecked`].
    #[doc(alias = "aclrtMemcpyAsync")]
    pub unsafe fn write_slice_async_unchecked<T: bytemuck::Pod>(
        &mut self,
        dst: &TypedSlice<'_, T>,
        src: *const T,
        len: usize,
    ) -> Result<()> {
        let what = "Stream::write_slice_async_unchecked: destination";
        let bytes = elems_to_bytes::<T>(len, dst.as_bytes().len(), what)?;
        fits(bytes, dst.as_bytes().len(), what)?;
        // SAFETY: forwarded to the caller (`bytes` is exactly `len` elements of `T`).
        unsafe { self.write_async_unchecked(&dst.as_bytes(), src.cast(), bytes) }
    }

    /// Queues a copy of the first `len` elements of `src` into host elements at `dst`:
    /// element-typed [`Stream::read_async_unchecked`], which it calls with the byte length.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `src` has fewer than `len` elements (`what` =
    /// `"Stream::read_slice_async_unchecked: source"`, lengths in bytes); otherwise as
    /// [`Stream::read_async_unchecked`].
    ///
    /// # Safety
    /// `dst..dst+len` (elements) stays writable, and is neither read nor written by anyone
    /// else, until this stream is synchronized past the copy, as for
    /// [`Stream::read_async_unchecked`].
    #[doc(alias = "aclrtMemcpyAsync")]
    pub unsafe fn read_slice_async_unchecked<T: bytemuck::Pod>(
        &mut self,
        dst: *mut T,
        len: usize,
        src: &TypedSlice<'_, T>,
    ) -> Result<()> {
        let what = "Stream::read_slice_async_unchecked: source";
        let bytes = elems_to_bytes::<T>(len, src.as_bytes().len(), what)?;
        fits(bytes, src.as_bytes().len(), what)?;
        // SAFETY: forwarded to the caller (`bytes` is exactly `len` elements of `T`).
        unsafe { self.read_async_unchecked(dst.cast(), bytes, &src.as_bytes()) }
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
            unsafe { ffi::stream::synchronize(self.dev.lib(), self.raw) }
        });
        if let Err(e) = r {
            return Err(CloseError::new(e, self));
        }
        // SAFETY: we own the stream; its work is done; it is not used again (raw is nulled,
        // so Drop skips it).
        match unsafe { ffi::stream::destroy(self.dev.lib(), self.raw) } {
            Ok(()) => {
                self.raw = std::ptr::null_mut();
                self.keep.clear();
                Ok(())
            }
            Err(e) => Err(CloseError::new(e, self)),
        }
    }

    fn destroy_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: we own the stream; waiting first keeps pending copies inside kept memory.
        if let Err(e) = unsafe { ffi::stream::synchronize(self.dev.lib(), self.raw) } {
            tracing::warn!(error = %e, "stream work failed before destroy");
        }
        // SAFETY: we own the stream and do not use it again.
        unsafe { ffi::stream::destroy(self.dev.lib(), self.raw) }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.raw.is_null() {
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

// ---------------------------------------------------------------------------------------------
// Events

pub(crate) struct EventInner {
    dev: Device,
    raw: acl::aclrtEvent,
    /// False once destroyed by `Event::close`.
    live: bool,
}

impl EventInner {
    fn destroy_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: we own the event; streams that waited on or recorded it hold this Arc, so
        // none has pending work on it when it is dropped or closed.
        unsafe { ffi::event::destroy(self.dev.lib(), self.raw) }?;
        self.live = false;
        Ok(())
    }
}

// SAFETY: the event handle is an id, not tied to the creating thread; Drop binds `dev` first.
unsafe impl Send for EventInner {}
// SAFETY: shared only between its one `Event` (which is not Sync, and not Clone) and streams
// that merely keep it alive; no method runs through a shared `&EventInner` concurrently.
unsafe impl Sync for EventInner {}

impl Drop for EventInner {
    fn drop(&mut self) {
        if !self.live {
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
            .field("raw", &self.inner.raw)
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
        // SAFETY: out-parameter call on a bound device; owned by the value below.
        let raw = unsafe { ffi::event::create_default(dev.lib()) }?;
        Ok(Self::wrap(dev, raw))
    }

    /// An event with flags.
    ///
    /// # Errors
    /// An `aclrtCreateEventWithFlag` failure.
    #[doc(alias = "aclrtCreateEventWithFlag")]
    pub fn with_flags(dev: &Device, flags: EventFlags) -> Result<Event> {
        dev.enter()?;
        // SAFETY: as `new`.
        let raw = unsafe { ffi::event::create(dev.lib(), flags.bits()) }?;
        Ok(Self::wrap(dev, raw))
    }

    fn wrap(dev: &Device, raw: acl::aclrtEvent) -> Event {
        Event {
            inner: Arc::new(EventInner {
                dev: dev.clone(),
                raw,
                live: true,
            }),
            _not_sync: PhantomData,
        }
    }

    /// The raw handle (borrowed).
    pub fn as_raw(&self) -> acl::aclrtEvent {
        self.inner.raw
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
        // SAFETY: both handles are live; the stream keeps the event alive until synchronized.
        unsafe { ffi::event::record(stream.dev.lib(), self.inner.raw, stream.raw) }?;
        stream.keep.push(Keep::Event(self.inner.clone()));
        Ok(())
    }

    /// Whether the recorded work is done (`aclrtQueryEventStatus`).
    ///
    /// # Errors
    /// An `aclrtQueryEventStatus` failure.
    #[doc(alias = "aclrtQueryEventStatus")]
    pub fn is_complete(&self) -> Result<bool> {
        self.inner.dev.enter()?;
        // SAFETY: the event is live.
        let st = unsafe { ffi::event::query(self.inner.dev.lib(), self.inner.raw) }?;
        Ok(st == acl::ACL_EVENT_RECORDED_STATUS_COMPLETE)
    }

    /// Waits for the recorded work.
    ///
    /// # Errors
    /// An `aclrtSynchronizeEvent` failure.
    #[doc(alias = "aclrtSynchronizeEvent")]
    pub fn synchronize(&self) -> Result<()> {
        self.inner.dev.enter()?;
        // SAFETY: the event is live.
        unsafe { ffi::event::synchronize(self.inner.dev.lib(), self.inner.raw) }
    }

    /// Waits up to `timeout` for the recorded work.
    ///
    /// # Errors
    /// `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT` (kind [`Timeout`](crate::ErrorKind::Timeout));
    /// other `aclrtSynchronizeEventWithTimeout` failures.
    #[doc(alias = "aclrtSynchronizeEventWithTimeout")]
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<()> {
        self.inner.dev.enter()?;
        // SAFETY: the event is live.
        unsafe {
            ffi::event::synchronize_timeout(
                self.inner.dev.lib(),
                self.inner.raw,
                timeout_ms(timeout),
            )
        }
    }

    /// Milliseconds between `start` and this event, both recorded and complete.
    ///
    /// # Errors
    /// An `aclrtEventElapsedTime` failure (e.g. not complete).
    #[doc(alias = "aclrtEventElapsedTime")]
    pub fn elapsed_since(&self, start: &Event) -> Result<f32> {
        self.inner.dev.enter()?;
        // SAFETY: both events are live.
        unsafe { ffi::event::elapsed(self.inner.dev.lib(), start.inner.raw, self.inner.raw) }
    }
}

// ---------------------------------------------------------------------------------------------
// Stream pool

struct PoolInner {
    free: Mutex<VecDeque<Stream>>,
    cv: Condvar,
    size: usize,
}

/// A fixed set of streams created up front and leased round-robin; a lease returns its
/// stream on drop. `Send + Sync`: share it between threads by reference or in an `Arc`.
#[derive(Clone)]
#[must_use = "dropping the StreamPool destroys its streams"]
pub struct StreamPool {
    inner: Arc<PoolInner>,
}

impl fmt::Debug for StreamPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPool")
            .field("size", &self.inner.size)
            .field("free", &self.inner.free.lock().len())
            .finish()
    }
}

impl StreamPool {
    /// Creates `n` streams with `flags` on `dev`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `n == 0`; a stream creation failure (streams made so
    /// far are destroyed).
    pub fn new(dev: &Device, n: usize, flags: StreamFlags) -> Result<StreamPool> {
        if n == 0 {
            return Err(Error::InvalidArgument {
                api: "StreamPool::new",
                what: "stream count",
                value: 0,
            });
        }
        let streams = (0..n)
            .map(|_| Stream::with_config(dev, 0, flags))
            .collect::<Result<VecDeque<_>>>()?;
        Ok(StreamPool {
            inner: Arc::new(PoolInner {
                free: Mutex::new(streams),
                cv: Condvar::new(),
                size: n,
            }),
        })
    }

    /// The number of streams.
    pub fn len(&self) -> usize {
        self.inner.size
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.inner.size == 0
    }

    /// Leases the next stream in turn, waiting while all are leased.
    pub fn lease(&self) -> StreamLease {
        let mut free = self.inner.free.lock();
        loop {
            if let Some(s) = free.pop_front() {
                return self.wrap(s);
            }
            self.inner.cv.wait(&mut free);
        }
    }

    /// Leases the next stream if one is free now.
    pub fn try_lease(&self) -> Option<StreamLease> {
        self.inner.free.lock().pop_front().map(|s| self.wrap(s))
    }

    /// Leases the next stream, waiting at most `timeout`.
    pub fn lease_timeout(&self, timeout: Duration) -> Option<StreamLease> {
        let deadline = Instant::now() + timeout;
        let mut free = self.inner.free.lock();
        loop {
            if let Some(s) = free.pop_front() {
                return Some(self.wrap(s));
            }
            if self.inner.cv.wait_until(&mut free, deadline).timed_out() {
                return free.pop_front().map(|s| self.wrap(s));
            }
        }
    }

    fn wrap(&self, s: Stream) -> StreamLease {
        StreamLease {
            stream: Some(s),
            pool: self.inner.clone(),
        }
    }
}

/// A stream leased from a [`StreamPool`]; derefs to [`Stream`] and goes back to the pool
/// (at the end of the rotation) on drop.
#[must_use = "dropping a StreamLease returns the stream to its pool"]
pub struct StreamLease {
    stream: Option<Stream>,
    pool: Arc<PoolInner>,
}

impl fmt::Debug for StreamLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StreamLease").field(&self.stream).finish()
    }
}

impl std::ops::Deref for StreamLease {
    type Target = Stream;
    fn deref(&self) -> &Stream {
        // Invariant: `stream` is Some until drop.
        self.stream
            .as_ref()
            .expect("lease holds its stream until drop")
    }
}

impl std::ops::DerefMut for StreamLease {
    fn deref_mut(&mut self) -> &mut Stream {
        self.stream
            .as_mut()
            .expect("lease holds its stream until drop")
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            self.pool.free.lock().push_back(s);
            self.pool.cv.notify_one();
        }
    }
}
