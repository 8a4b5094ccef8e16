//! Stream-ordered copies and fills between mappings: the host-side checks, then
//! the stream's queue (`enqueue.rs`), which keeps the memory alive until the work is
//! done. Each side is any [`MemView`] (a mapping, a buffer, a view of either), or a
//! [`TypedSlice`] for the element-typed forms. Also the async copies to and from raw host
//! memory (`Stream::*_async_unchecked`), which are `unsafe` (the caller keeps the host memory)
//! and share the checks here.

use super::queue::Stream;
use crate::error::{Error, Result};
use crate::typed::TypedSlice;
use crate::view::MemView;

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

impl Stream {
    /// Queues a copy of all of `src` into the start of `dst` (`aclrtMemcpyAsync`, device to
    /// device); either side is any [`MemView`]. The stream keeps both mappings alive until it
    /// is synchronized.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `src` is longer than `dst`; [`Error::WrongDevice`] across
    /// runtimes; an `aclrtMemcpyAsync` failure.
    #[doc(alias = "aclrtMemcpyAsync")]
    pub fn copy_async(&mut self, dst: &impl MemView, src: &impl MemView) -> Result<()> {
        let (dst, src) = (&dst.as_slice(), &src.as_slice());
        fits(src.len(), dst.len(), "aclrtMemcpyAsync: destination")?;
        self.same_runtime(dst.mapping().device(), "aclrtMemcpyAsync dst")?;
        self.same_runtime(src.mapping().device(), "aclrtMemcpyAsync src")?;
        if src.is_empty() {
            return Ok(());
        }
        self.dev.enter()?;
        self.queue.enqueue_copy(self.dev.lib(), dst, src)
    }

    /// Queues a copy of all of `src` into the start of `dst`, element-typed
    /// (`aclrtMemcpyAsync`, device to device): [`Stream::copy_async`] on the byte views, with
    /// the same guarantee that the stream keeps both mappings alive until it is synchronized.
    /// Both sides have the element type `T` (checked at compile time), and the lengths are
    /// checked in elements.
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

    /// Queues setting every byte of `dst` (any [`MemView`]) to `value` (`aclrtMemsetAsync`).
    ///
    /// # Errors
    /// [`Error::WrongDevice`] across runtimes; an `aclrtMemsetAsync` failure.
    #[doc(alias = "aclrtMemsetAsync")]
    pub fn fill_async(&mut self, dst: &impl MemView, value: u8) -> Result<()> {
        let dst = &dst.as_slice();
        self.same_runtime(dst.mapping().device(), "aclrtMemsetAsync")?;
        if dst.is_empty() {
            return Ok(());
        }
        self.dev.enter()?;
        self.queue.enqueue_fill(self.dev.lib(), dst, value)
    }
}

// The public `unsafe` entry points: the caller keeps the host memory valid until the stream
// is synchronized past the copy (the queue keeps only the mapping).
impl Stream {
    /// Queues a copy of `len` host bytes at `src` into the start of `dst` (any [`MemView`]).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpyAsync` failure.
    ///
    /// # Safety
    /// `src..src+len` stays readable and unchanged until this stream is synchronized past
    /// the copy (a `&[u8]` borrow does not guarantee that: it can end first).
    #[doc(alias = "aclrtMemcpyAsync")]
    #[allow(unsafe_code)]
    pub unsafe fn write_async_unchecked(
        &mut self,
        dst: &impl MemView,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        let dst = &dst.as_slice();
        fits(len, dst.len(), "aclrtMemcpyAsync: destination")?;
        self.dev.enter()?;
        // SAFETY: forwarded to the caller (`src..src+len` readable and unchanged until the
        // stream is synchronized past the copy); the queue keeps `dst`'s mapping.
        unsafe { self.queue.enqueue_host_write(self.dev.lib(), dst, src, len) }
    }

    /// Queues a copy of the start of `src` (any [`MemView`]) into `len` host bytes at `dst`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpyAsync` failure.
    ///
    /// # Safety
    /// `dst..dst+len` stays writable, and is neither read nor written by anyone else, until
    /// this stream is synchronized past the copy.
    #[doc(alias = "aclrtMemcpyAsync")]
    #[allow(unsafe_code)]
    pub unsafe fn read_async_unchecked(
        &mut self,
        dst: *mut u8,
        len: usize,
        src: &impl MemView,
    ) -> Result<()> {
        let src = &src.as_slice();
        fits(len, src.len(), "aclrtMemcpyAsync: source")?;
        self.dev.enter()?;
        // SAFETY: forwarded to the caller (`dst..dst+len` writable and untouched by anyone
        // else until the stream is synchronized past the copy); the queue keeps `src`'s
        // mapping.
        unsafe { self.queue.enqueue_host_read(self.dev.lib(), dst, len, src) }
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
    #[allow(unsafe_code)]
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
    #[allow(unsafe_code)]
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
}
