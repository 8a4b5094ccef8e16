//! Stream-ordered copies and fills between mappings, tables and (unchecked) host memory.
//!
//! The one file outside `ffi` and `handle` that still allows `unsafe`: queuing an async copy
//! is sound only while the memory outlives the queued work, which the stream's keep list (a
//! field of `Stream`, cleared only after a synchronize proves the work done) guarantees.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::Arc;

use super::queue::{Keep, Stream};
use crate::error::{Error, Result};
use crate::ffi;
use crate::table::{CopySide, MappingTable, TableCopy};
use crate::typed::TypedSlice;
use crate::vmm::{memcpy_kind, MappingSlice};

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
                self.live()?,
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
                    self.live()?,
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
                self.live()?,
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
                self.live()?,
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
                self.live()?,
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
}
