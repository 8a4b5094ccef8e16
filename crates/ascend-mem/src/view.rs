//! [`MemView`]: the one set of synchronous copy verbs, on every byte view of mapped memory.
//!
//! A type is a [`MemView`] when it can lend its bytes as a [`MappingSlice`] (the one required
//! method, [`MemView::as_slice`]); every verb is a provided method over that view, forwarding to
//! the single implementation of the byte copies (`vmm/slice.rs`) and the typed copies
//! (`typed.rs`). [`Mapping`] and [`MappingSlice`] implement it here; the buffers and
//! [`MappingRef`](crate::MappingRef) beside their types. The stream's async verbs take any
//! `MemView` too ([`Stream::copy_async`](crate::Stream::copy_async) and the others).

use std::ops::RangeBounds;

use bytemuck::Pod;

use crate::addr::Addr;
use crate::error::Result;
use crate::typed::TypedSlice;
use crate::vmm::{Mapping, MappingSlice};

/// Memory mapped into device VA, seen as bytes: a [`Mapping`], a [`MappingSlice`] of one, a
/// [`DeviceBuffer`](crate::DeviceBuffer), a [`HostBuffer`](crate::HostBuffer), a
/// [`MappingRef`](crate::MappingRef). In scope through `use ascend_mem::prelude::*`.
///
/// Implementors give the view ([`as_slice`](MemView::as_slice)); the synchronous copies
/// (`aclrtMemcpy`, `aclrtMemset`), the typed copies and the narrower views are provided, the
/// same on every type. Copies go through ACL: a device or a peer may write the memory at any
/// time, so no `&[u8]` over it is ever formed. Offsets and lengths are in bytes, except in the
/// typed copies, whose offsets are in elements. Views borrow what they view and cannot outlive
/// it:
///
/// ```compile_fail,E0505
/// # use ascend_mem::prelude::*;
/// # fn f(buf: ascend_mem::DeviceBuffer) {
/// let view = buf.as_slice();
/// drop(buf); // error[E0505]: cannot move out of `buf` because it is borrowed
/// view.len();
/// # }
/// ```
///
/// The stream's async verbs take any `MemView`, so one call serves every pair of types:
///
/// ```
/// # #[cfg(not(feature = "emulator"))] fn main() {}
/// # #[cfg(feature = "emulator")]
/// # fn main() -> ascend_mem::Result<()> {
/// use ascend_mem::prelude::*;
/// use ascend_mem::{DeviceBuffer, HostBuffer, Runtime, Stream};
///
/// let rt = Runtime::emulated()?; // or Runtime::from_env()? on an NPU host
/// let dev = rt.device(0)?;
/// let (host, dev_buf) = (HostBuffer::new(&dev, 4096)?, DeviceBuffer::new(&dev, 4096)?);
/// host.write_from(b"hello", 0)?;
/// let mut s = Stream::new(&dev)?;
/// s.copy_async(&dev_buf, &host.slice(..5)?)?; // a buffer and a view of another
/// s.synchronize()?;
/// assert_eq!(&dev_buf.slice(..5)?.to_vec()?, b"hello");
/// dev_buf.write_slice(&[7u32, 8], 2)?; // elements 2 and 3, bytes 8..16
/// assert_eq!(dev_buf.slice(8..16)?.read_to_vec::<u32>()?, [7, 8]);
/// # Ok(())
/// # }
/// ```
pub trait MemView {
    /// The whole memory as a byte view, borrowing it.
    fn as_slice(&self) -> MappingSlice<'_>;

    /// The length in bytes.
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether there are no bytes (never for a mapping or a buffer).
    fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// The first address (device VA).
    fn addr(&self) -> Addr {
        self.as_slice().addr()
    }

    /// A view of `range` (bytes), borrowing the memory.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) when `range` exceeds the memory.
    fn slice(&self, range: impl RangeBounds<usize>) -> Result<MappingSlice<'_>> {
        self.as_slice().slice(range)
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst` (`aclrtMemcpy`, device to
    /// host).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) (`what` = `"read_into"`); an
    /// `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    fn read_into(&self, dst: &mut [u8], offset: usize) -> Result<()> {
        self.as_slice().read_bytes(dst, offset)
    }

    /// Copies `src` to `offset` (`aclrtMemcpy`, host to device).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) (`what` = `"write_from"`); an
    /// `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    fn write_from(&self, src: &[u8], offset: usize) -> Result<()> {
        self.as_slice().write_bytes(src, offset)
    }

    /// Sets every byte to `value` (`aclrtMemset`).
    ///
    /// # Errors
    /// An `aclrtMemset` failure; a sticky error.
    #[doc(alias = "aclrtMemset")]
    fn fill(&self, value: u8) -> Result<()> {
        self.as_slice().fill_bytes(value)
    }

    /// Reads all the bytes into a new `Vec`.
    ///
    /// # Errors
    /// An `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    fn to_vec(&self) -> Result<Vec<u8>> {
        self.as_slice().elems_to_vec()
    }

    /// Copies all of `src` into the start of this memory, synchronously (`aclrtMemcpy`, device
    /// to device).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) when `src` is longer;
    /// [`Error::WrongDevice`](crate::Error::WrongDevice) across runtimes; an `aclrtMemcpy`
    /// failure.
    #[doc(alias = "aclrtMemcpy")]
    fn copy_from(&self, src: &impl MemView) -> Result<()> {
        self.as_slice().copy_bytes(&src.as_slice())
    }

    /// All the memory as elements of `T` (see [`TypedSlice`]).
    ///
    /// # Errors
    /// Checked in this order, each naming `"MappingSlice::typed"`:
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a zero-sized `T`;
    /// [`Error::NotWholeElements`](crate::Error::NotWholeElements) when the length is not a
    /// whole number of `T`; [`Error::MisalignedElements`](crate::Error::MisalignedElements)
    /// when the start address is not a multiple of `align_of::<T>()`. A zero-length view is
    /// fine (no elements).
    fn typed<T: Pod>(&self) -> Result<TypedSlice<'_, T>> {
        self.as_slice().typed()
    }

    /// Copies the elements of `src` to element offset `offset_elems` (byte offset
    /// `offset_elems × size_of::<T>()`; no alignment is needed: the copy goes through
    /// `aclrtMemcpy`, never through a `&T`).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) (`what` = `"write_slice"`, the range
    /// in bytes) when the elements do not fit;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a zero-sized `T`; an
    /// `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    fn write_slice<T: Pod>(&self, src: &[T], offset_elems: usize) -> Result<()> {
        self.as_slice().write_elems(src, offset_elems)
    }

    /// Copies `dst.len()` elements starting at element offset `offset_elems` into `dst`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) (`what` = `"read_into_slice"`, the
    /// range in bytes); [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// zero-sized `T`; an `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    fn read_into_slice<T: Pod>(&self, dst: &mut [T], offset_elems: usize) -> Result<()> {
        self.as_slice().read_elems(dst, offset_elems)
    }

    /// Reads all the memory as elements of `T` into a new `Vec`.
    ///
    /// # Errors
    /// [`Error::NotWholeElements`](crate::Error::NotWholeElements) (`what` = `"read_to_vec"`,
    /// with the length and `size_of::<T>()`) when the length is not a whole number of `T`;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a zero-sized `T`; an
    /// `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    fn read_to_vec<T: Pod>(&self) -> Result<Vec<T>> {
        self.as_slice().elems_to_vec()
    }
}

impl MemView for Mapping {
    fn as_slice(&self) -> MappingSlice<'_> {
        self.whole()
    }
}

/// A view is its own byte view. Its inherent [`slice`](MappingSlice::slice) and
/// [`typed`](MappingSlice::typed), which the method syntax picks first, borrow the mapping for
/// the view's own lifetime rather than for the borrow of the view.
impl MemView for MappingSlice<'_> {
    fn as_slice(&self) -> MappingSlice<'_> {
        *self
    }
}
