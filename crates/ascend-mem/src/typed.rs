//! Element-typed access to device-visible memory: the view [`TypedSlice`], and the one
//! implementation of the typed copies of a byte view (`write_slice`, `read_into_slice`,
//! `read_to_vec`: [`MemView`](crate::MemView)'s verbs, which forward here).
//!
//! Everything here is built on the byte copies of [`MappingSlice`]; the element type only
//! changes units (elements instead of bytes) and adds checks. Host slices of `T` are turned
//! into bytes with `bytemuck`, which is why `T` must be [`Pod`]: every bit pattern is a valid
//! `T` (so bytes written by a device or a peer read back as some `T`) and `T` has no padding
//! (so writing it never exposes uninitialised bytes).

use std::any::type_name;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::ops::RangeBounds;

use bytemuck::Pod;

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::vmm::{Mapping, MappingSlice};

/// `size_of::<T>()`, refusing zero-sized types: a view of them has no length in elements.
fn elem_size<T>(what: &'static str) -> Result<usize> {
    match size_of::<T>() {
        0 => Err(Error::InvalidArgument {
            api: what,
            what: "element size (zero-sized element type)",
            value: 0,
        }),
        n => Ok(n),
    }
}

/// The number of `T` in `len` bytes, which must be a whole number of them.
fn whole_elems<T>(len: usize, what: &'static str) -> Result<usize> {
    let size = elem_size::<T>(what)?;
    if len % size != 0 {
        return Err(Error::NotWholeElements {
            what,
            len,
            elem_size: size,
            elem: type_name::<T>(),
        });
    }
    Ok(len / size)
}

/// The byte offset of `count` elements of `T` starting at element `offset_elems`, after
/// checking they fit in `len` bytes. The error reports the range in bytes.
fn elem_range<T>(
    offset_elems: usize,
    count: usize,
    len: usize,
    what: &'static str,
) -> Result<usize> {
    let size = elem_size::<T>(what)?;
    let out = || Error::OutOfBounds {
        what,
        offset: offset_elems.saturating_mul(size),
        len: count.saturating_mul(size),
        size: len,
    };
    let offset = offset_elems.checked_mul(size).ok_or_else(out)?;
    let bytes = count.checked_mul(size).ok_or_else(out)?;
    if offset.checked_add(bytes).map_or(true, |end| end > len) {
        return Err(out());
    }
    Ok(offset)
}

/// Resolves a range of elements against a length of `len` elements into `(start, count)`;
/// the error reports the range in bytes (`size` bytes per element).
fn resolve_elems(
    range: impl RangeBounds<usize>,
    len: usize,
    size: usize,
    what: &'static str,
) -> Result<(usize, usize)> {
    crate::vmm::resolve_units(range, len, size, what)
}

/// A borrowed view of device-visible memory as elements of `T`: a [`MappingSlice`] whose
/// start address is aligned for `T` and whose length is a whole number of `T`.
///
/// Made by [`MemView::typed`](crate::MemView::typed) on any byte view (a [`MappingSlice`], a
/// [`Mapping`], a buffer), which checks both. Lengths, offsets and ranges are in elements;
/// copies go through ACL as for bytes, so no `&[T]` over the memory is ever formed. The typed
/// verbs here forward to the byte view's code, with element units.
///
/// It is not a [`MemView`](crate::MemView) itself, because a byte view's lengths and offsets
/// are in bytes and these are in elements: [`as_bytes`](TypedSlice::as_bytes) gives the byte
/// view, which is one. HCCL collectives take typed views of their element type
/// ([`hccl::Comm::all_gather`](crate::hccl::Comm::all_gather) and the others), and
/// [`Stream::copy_typed_async`](crate::Stream::copy_typed_async) queues copies between views
/// of the same element type.
///
/// `T` must be [`Pod`]; a type that is not (here one holding a reference) is refused at
/// compile time:
///
/// ```compile_fail,E0277
/// # use ascend_mem::prelude::*;
/// # fn f(m: &ascend_mem::Mapping) {
/// let _ = m.as_slice().typed::<&'static u8>();
/// # }
/// ```
///
/// Like a [`MappingSlice`], it cannot outlive the mapping it views:
///
/// ```compile_fail,E0505
/// # use ascend_mem::prelude::*;
/// # fn f(m: ascend_mem::Mapping) {
/// let view = m.typed::<u32>().unwrap();
/// drop(m);
/// view.len();
/// # }
/// ```
///
/// ```
/// # #[cfg(not(feature = "emulator"))] fn main() {}
/// # #[cfg(feature = "emulator")]
/// # fn main() -> ascend_mem::Result<()> {
/// use ascend_mem::prelude::*;
/// use ascend_mem::{DeviceBuffer, Runtime, Stream};
///
/// let rt = Runtime::emulated()?; // or Runtime::from_env()? on an NPU host
/// let dev = rt.device(0)?;
/// let buf = DeviceBuffer::new(&dev, 4096)?;
/// let all = buf.typed::<f32>()?;                // the whole buffer as f32
/// let (a, b) = (all.slice(..4)?, all.slice(4..8)?);
/// a.write_slice(&[1.0, 2.0, 3.0, 4.0], 0)?;
/// let mut s = Stream::new(&dev)?;
/// s.copy_typed_async(&b, &a)?;                  // element-typed, stream-ordered
/// s.synchronize()?;
/// assert_eq!(b.read_to_vec()?, [1.0, 2.0, 3.0, 4.0]);
/// let mut two = [0f32; 2];
/// b.read_into_slice(&mut two, 2)?;              // elements 2 and 3 of `b`
/// assert_eq!(two, [3.0, 4.0]);
/// assert!(buf.slice(1..9)?.typed::<f32>().is_err()); // misaligned start
/// # Ok(())
/// # }
/// ```
pub struct TypedSlice<'a, T> {
    /// Invariant: `bytes.as_raw()` is aligned to `align_of::<T>()`, `size_of::<T>()` is not 0
    /// and `bytes.len()` is a multiple of it (checked by `MappingSlice::typed`; `slice` keeps it).
    bytes: MappingSlice<'a>,
    /// `fn() -> T`: the view holds no `T`, so it is `Send + Sync` whatever `T` is.
    _elem: PhantomData<fn() -> T>,
}

impl<T> Clone for TypedSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for TypedSlice<'_, T> {}

impl<T> fmt::Debug for TypedSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedSlice")
            .field("addr", &self.bytes.as_raw())
            .field("elem", &type_name::<T>())
            .field("len", &(self.bytes.len() / size_of::<T>().max(1)))
            .finish()
    }
}

impl<'a, T: Pod> TypedSlice<'a, T> {
    /// The length in elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / size_of::<T>()
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The first address of the view.
    pub fn addr(&self) -> Addr {
        self.bytes.addr()
    }

    /// The first address of the view as the C calls take it (prefer [`TypedSlice::addr`]).
    pub fn as_raw(&self) -> *mut c_void {
        self.bytes.as_raw()
    }

    /// The same memory as a byte view.
    pub fn as_bytes(&self) -> MappingSlice<'a> {
        self.bytes
    }

    /// The mapping viewed.
    pub fn mapping(&self) -> &'a Mapping {
        self.bytes.mapping()
    }

    /// A narrower view; `range` is in elements, relative to this view.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] (`what` = `"TypedSlice::slice"`, the range in bytes).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<TypedSlice<'a, T>> {
        let size = size_of::<T>();
        let (start, count) = resolve_elems(range, self.len(), size, "TypedSlice::slice")?;
        // In range, so neither product overflows; a whole number of elements from an
        // aligned start keeps the start aligned (`size` is a multiple of the alignment).
        let bytes = self.bytes.slice(start * size..(start + count) * size)?;
        Ok(TypedSlice {
            bytes,
            _elem: PhantomData,
        })
    }

    /// Copies `src` to element `offset_elems` of the view (`aclrtMemcpy`).
    ///
    /// # Errors
    /// As [`MemView::write_slice`](crate::MemView::write_slice).
    #[doc(alias = "aclrtMemcpy")]
    pub fn write_slice(&self, src: &[T], offset_elems: usize) -> Result<()> {
        self.bytes.write_elems(src, offset_elems)
    }

    /// Copies `dst.len()` elements starting at element `offset_elems` into `dst`.
    ///
    /// # Errors
    /// As [`MemView::read_into_slice`](crate::MemView::read_into_slice).
    #[doc(alias = "aclrtMemcpy")]
    pub fn read_into_slice(&self, dst: &mut [T], offset_elems: usize) -> Result<()> {
        self.bytes.read_elems(dst, offset_elems)
    }

    /// Reads the whole view into a new `Vec`.
    ///
    /// # Errors
    /// An `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    pub fn read_to_vec(&self) -> Result<Vec<T>> {
        self.bytes.elems_to_vec()
    }

    /// Copies all of `src` into the start of this view, synchronously (`aclrtMemcpy`,
    /// device to device).
    ///
    /// # Errors
    /// As [`MemView::copy_from`](crate::MemView::copy_from): [`Error::OutOfBounds`] when
    /// `src` has more elements.
    #[doc(alias = "aclrtMemcpy")]
    pub fn copy_from(&self, src: &TypedSlice<'_, T>) -> Result<()> {
        self.bytes.copy_bytes(&src.bytes)
    }

    /// Sets every element to zero (all bytes 0, a valid `T` for any [`Pod`] type).
    ///
    /// # Errors
    /// As [`MemView::fill`](crate::MemView::fill).
    #[doc(alias = "aclrtMemset")]
    pub fn fill_zero(&self) -> Result<()> {
        self.bytes.fill_bytes(0)
    }
}

impl<'a> MappingSlice<'a> {
    /// This view as elements of `T`, borrowing the mapping for `'a` (what
    /// [`MemView::typed`](crate::MemView::typed) does, with the longer lifetime).
    ///
    /// # Errors
    /// Checked in this order, each naming `"MappingSlice::typed"`:
    /// [`Error::InvalidArgument`] for a zero-sized `T`; [`Error::NotWholeElements`] when the
    /// length is not a whole number of `T`; [`Error::MisalignedElements`] when the start
    /// address is not a multiple of `align_of::<T>()`. A zero-length view is fine (no
    /// elements).
    pub fn typed<T: Pod>(&self) -> Result<TypedSlice<'a, T>> {
        const WHAT: &str = "MappingSlice::typed";
        whole_elems::<T>(self.len(), WHAT)?;
        let addr = self.addr();
        if addr.get() % align_of::<T>() as u64 != 0 {
            return Err(Error::MisalignedElements {
                what: WHAT,
                addr,
                align: align_of::<T>(),
                elem: type_name::<T>(),
            });
        }
        Ok(TypedSlice {
            bytes: *self,
            _elem: PhantomData,
        })
    }

    /// Copies the elements of `src` to element offset `offset_elems` of the view: the code of
    /// [`MemView::write_slice`](crate::MemView::write_slice), which documents the errors.
    pub(crate) fn write_elems<T: Pod>(&self, src: &[T], offset_elems: usize) -> Result<()> {
        let offset = elem_range::<T>(offset_elems, src.len(), self.len(), "write_slice")?;
        self.write_bytes(bytemuck::cast_slice(src), offset)
    }

    /// Copies `dst.len()` elements starting at element offset `offset_elems` of the view into
    /// `dst`: the code of [`MemView::read_into_slice`](crate::MemView::read_into_slice).
    pub(crate) fn read_elems<T: Pod>(&self, dst: &mut [T], offset_elems: usize) -> Result<()> {
        let offset = elem_range::<T>(offset_elems, dst.len(), self.len(), "read_into_slice")?;
        self.read_bytes(bytemuck::cast_slice_mut(dst), offset)
    }

    /// Reads the whole view as elements of `T` into a new `Vec`: the code of
    /// [`MemView::read_to_vec`](crate::MemView::read_to_vec).
    pub(crate) fn elems_to_vec<T: Pod>(&self) -> Result<Vec<T>> {
        let n = whole_elems::<T>(self.len(), "read_to_vec")?;
        let mut v = vec![T::zeroed(); n];
        self.read_bytes(bytemuck::cast_slice_mut(&mut v), 0)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_ranges() {
        assert_eq!(elem_range::<u32>(2, 3, 20, "t").unwrap(), 8);
        assert_eq!(elem_range::<u32>(5, 0, 20, "t").unwrap(), 20);
        assert!(matches!(
            elem_range::<u32>(3, 3, 20, "t"),
            Err(Error::OutOfBounds {
                offset: 12,
                len: 12,
                size: 20,
                ..
            })
        ));
        assert!(matches!(
            elem_range::<u64>(usize::MAX, 1, 20, "t"),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            elem_range::<()>(0, 0, 20, "t"),
            Err(Error::InvalidArgument { value: 0, .. })
        ));
        assert_eq!(whole_elems::<u16>(6, "t").unwrap(), 3);
        assert!(matches!(
            whole_elems::<u16>(7, "t"),
            Err(Error::NotWholeElements {
                len: 7,
                elem_size: 2,
                elem: "u16",
                ..
            })
        ));
        assert_eq!(resolve_elems(1..3, 4, 4, "t").unwrap(), (1, 2));
        assert_eq!(resolve_elems(.., 4, 4, "t").unwrap(), (0, 4));
        assert!(matches!(
            resolve_elems(2..5, 4, 4, "t"),
            Err(Error::OutOfBounds {
                offset: 8,
                len: 12,
                size: 16,
                ..
            })
        ));
    }
}
