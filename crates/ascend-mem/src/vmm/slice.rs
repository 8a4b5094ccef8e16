//! [`MappingSlice`]: a borrowed byte range of a mapping, and the one implementation of the
//! synchronous byte copies (the public verbs are [`MemView`](crate::MemView)'s, which forward
//! here).

use std::ffi::c_void;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::mapping::{MapInner, Mapping};
use crate::addr::Addr;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::handle::MappedRef;

/// Resolves a range against a length.
fn resolve(
    range: impl RangeBounds<usize>,
    len: usize,
    what: &'static str,
) -> Result<(usize, usize)> {
    resolve_units(range, len, 1, what)
}

/// Resolves a range of units (bytes, or elements of `unit` bytes) against a length of `len`
/// units into `(start, count)`; the error reports the range in bytes.
pub(crate) fn resolve_units(
    range: impl RangeBounds<usize>,
    len: usize,
    unit: usize,
    what: &'static str,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::OutOfBounds {
            what,
            offset: start.saturating_mul(unit),
            len: end.saturating_sub(start).saturating_mul(unit),
            size: len.saturating_mul(unit),
        });
    }
    Ok((start, end - start))
}

impl Mapping {
    /// The whole mapping as a view (what [`MemView::as_slice`](crate::MemView::as_slice)
    /// gives for a mapping).
    pub(crate) fn whole(&self) -> MappingSlice<'_> {
        MappingSlice {
            map: self,
            offset: 0,
            len: self.inner.len,
        }
    }
}

/// A borrowed byte range of a [`Mapping`] (or of a buffer): the unit copies work on.
///
/// The copies are [`MemView`](crate::MemView)'s (`use ascend_mem::prelude::*`), as on every
/// other memory type; the methods here are what a view is: its address, length, offset and
/// mapping, and narrower or typed views that borrow the mapping for as long as this view does
/// (not just for as long as this value), so `buf.slice(..)?.slice(2..4)?` outlives the middle
/// view. It cannot outlive the mapping it views:
///
/// ```compile_fail,E0505
/// # use ascend_mem::prelude::*;
/// # fn f(m: ascend_mem::Mapping) {
/// let view = m.slice(..).unwrap();
/// drop(m);
/// view.len();
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct MappingSlice<'a> {
    map: &'a Mapping,
    offset: usize,
    len: usize,
}

impl fmt::Debug for MappingSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappingSlice")
            .field("addr", &self.as_raw())
            .field("len", &self.len)
            .finish()
    }
}

/// The memcpy kind between two sides; `true` = host memory, `false` = device memory.
///
/// Callers pass `false` for any mapped VMM memory when it is the address that counts: HBM
/// and host DRAM mapped in device VA alike are device-side for a single copy, as HIXL issues
/// them (device to device). A batch names its copies' directions by what each side holds
/// (host DRAM is host), which is where the host kinds come from.
pub(crate) fn memcpy_kind(dst_host_slice: bool, src_host_slice: bool) -> acl::aclrtMemcpyKind {
    match (dst_host_slice, src_host_slice) {
        (false, false) => acl::ACL_MEMCPY_DEVICE_TO_DEVICE,
        (false, true) => acl::ACL_MEMCPY_HOST_TO_DEVICE,
        (true, false) => acl::ACL_MEMCPY_DEVICE_TO_HOST,
        (true, true) => acl::ACL_MEMCPY_HOST_TO_HOST,
    }
}

impl<'a> MappingSlice<'a> {
    /// The first address of the view.
    pub fn addr(&self) -> Addr {
        Addr::from_ptr(self.as_raw())
    }

    /// The first address of the view as the C calls take it (prefer [`MappingSlice::addr`]).
    pub fn as_raw(&self) -> *mut c_void {
        (self.map.inner.map.addr() as usize + self.offset) as *mut c_void
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The offset of the view in its mapping.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The mapping viewed.
    pub fn mapping(&self) -> &'a Mapping {
        self.map
    }

    pub(crate) fn map_inner(&self) -> &Arc<MapInner> {
        &self.map.inner
    }

    /// A narrower view; `range` is relative to this view. It borrows the mapping for `'a`
    /// (what [`MemView::slice`](crate::MemView::slice) does, with the longer lifetime).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<MappingSlice<'a>> {
        let (o, l) = resolve(range, self.len, "MappingSlice::slice")?;
        Ok(MappingSlice {
            map: self.map,
            offset: self.offset + o,
            len: l,
        })
    }

    fn check(&self, offset: usize, len: usize, what: &'static str) -> Result<()> {
        if offset.checked_add(len).map_or(true, |e| e > self.len) {
            return Err(Error::OutOfBounds {
                what,
                offset,
                len,
                size: self.len,
            });
        }
        Ok(())
    }

    /// `len` bytes at `offset` of the view, as a borrowed live range (bounds already checked;
    /// an unmapped mapping, which a borrowed view never sees, is reported out of bounds).
    fn mapped(&self, offset: usize, len: usize, what: &'static str) -> Result<MappedRef<'a>> {
        self.map
            .inner
            .map
            .range(self.offset + offset, len)
            .ok_or(Error::OutOfBounds {
                what,
                offset,
                len,
                size: self.len,
            })
    }

    /// The whole view as a borrowed live range, for a stream's queue (which then keeps the
    /// mapping's owner until its work is done); `api` names the call in the (unreachable for a
    /// borrowed view) error.
    pub(crate) fn live_range(&self, api: &'static str) -> Result<MappedRef<'a>> {
        self.mapped(0, self.len, api)
    }

    fn dev(&self) -> &Device {
        self.map.device()
    }

    /// Copies `dst.len()` bytes at `offset` of the view into `dst` (`aclrtMemcpy`): the code of
    /// [`MemView::read_into`](crate::MemView::read_into), which documents the errors.
    pub(crate) fn read_bytes(&self, dst: &mut [u8], offset: usize) -> Result<()> {
        self.check(offset, dst.len(), "read_into")?;
        if dst.is_empty() {
            return Ok(());
        }
        let src = self.mapped(offset, dst.len(), "read_into")?;
        self.dev().enter()?;
        src.read_into(self.dev().lib(), dst)
    }

    /// Copies `src` to `offset` of the view (`aclrtMemcpy`): the code of
    /// [`MemView::write_from`](crate::MemView::write_from).
    pub(crate) fn write_bytes(&self, src: &[u8], offset: usize) -> Result<()> {
        self.check(offset, src.len(), "write_from")?;
        if src.is_empty() {
            return Ok(());
        }
        let dst = self.mapped(offset, self.len - offset, "write_from")?;
        self.dev().enter()?;
        dst.write_from(self.dev().lib(), src)
    }

    /// Sets every byte of the view to `value` (`aclrtMemset`): the code of
    /// [`MemView::fill`](crate::MemView::fill).
    pub(crate) fn fill_bytes(&self, value: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let dst = self.mapped(0, self.len, "fill")?;
        self.dev().enter()?;
        dst.fill(self.dev().lib(), value)
    }

    /// Copies all of `src` into the start of this view (`aclrtMemcpy`, device to device): the
    /// code of [`MemView::copy_from`](crate::MemView::copy_from).
    pub(crate) fn copy_bytes(&self, src: &MappingSlice<'_>) -> Result<()> {
        self.check(0, src.len, "copy_from")?;
        if !std::ptr::eq(src.dev().lib(), self.dev().lib()) {
            return Err(Error::WrongDevice {
                what: "aclrtMemcpy across runtimes",
                expected: self.dev().id(),
                found: src.dev().id(),
            });
        }
        if src.len == 0 {
            return Ok(());
        }
        let (to, from) = (
            self.mapped(0, self.len, "copy_from")?,
            src.mapped(0, src.len, "copy_from")?,
        );
        self.dev().enter()?;
        to.copy_from(self.dev().lib(), from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_with_bounds() {
        assert_eq!(resolve(.., 10, "t").unwrap(), (0, 10));
        assert_eq!(resolve(2..5, 10, "t").unwrap(), (2, 3));
        assert_eq!(resolve(2..=5, 10, "t").unwrap(), (2, 4));
        assert_eq!(resolve(10.., 10, "t").unwrap(), (10, 0));
        assert!(matches!(
            resolve(5..11, 10, "t"),
            Err(Error::OutOfBounds {
                offset: 5,
                len: 6,
                size: 10,
                ..
            })
        ));
        let (start, end) = (6, 5);
        assert!(resolve(start..end, 10, "t").is_err());
        assert!(resolve(..=usize::MAX, 10, "t").is_err());
    }

    #[test]
    fn memcpy_kinds() {
        assert_eq!(memcpy_kind(false, false), acl::ACL_MEMCPY_DEVICE_TO_DEVICE);
        assert_eq!(memcpy_kind(false, true), acl::ACL_MEMCPY_HOST_TO_DEVICE);
        assert_eq!(memcpy_kind(true, false), acl::ACL_MEMCPY_DEVICE_TO_HOST);
    }
}
