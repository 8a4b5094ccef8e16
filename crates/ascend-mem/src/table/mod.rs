//! [`MappingTable`]: many mapped ranges held as one, for batched copies addressed by index; the
//! copies between two tables' entries, queued on a stream, are in [`copy`].

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{CopySide, Error, Result};
use crate::view::MemView;
use crate::vmm::{Mapping, MappingSlice};

mod copy;

/// An immutable list of mapped ranges (each a [`MappingSlice`] when the table was made), kept
/// mapped together for as long as the table or any copy queued from it lives.
///
/// It is the translation table of a transfer engine: a peer's imported segments, or the local
/// registrations, numbered once. [`Stream::copy_table_async`] then queues a batch of copies
/// addressed as *(entry, offset)*: each copy is checked against a dense array of entry
/// addresses and lengths, and the batch keeps its tables alive with one reference each,
/// where [`Stream::copy_async`] clones a reference per mapping per copy. With thousands of
/// entries, a copy costs a read of one 16-byte entry instead of the mapping's own state.
///
/// Cloning is cheap (a shared reference).
///
/// ```
/// # #[cfg(not(feature = "emulator"))] fn main() {}
/// # #[cfg(feature = "emulator")]
/// # fn main() -> ascend_mem::Result<()> {
/// use ascend_mem::prelude::*;
/// use ascend_mem::{DeviceBuffer, MappingTable, Runtime, Stream, TableCopy};
///
/// let rt = Runtime::emulated()?; // or Runtime::from_env()? on an NPU host
/// let dev = rt.device(0)?;
/// let a = DeviceBuffer::new(&dev, 2 << 20)?;
/// let b = DeviceBuffer::new(&dev, 2 << 20)?;
/// a.write_from(b"hello", 0)?;
/// // Entry 0: all of `a`; entry 1: bytes 4096..8192 of `b`.
/// let table = MappingTable::new(&dev, [a.as_slice(), b.slice(4096..8192)?])?;
/// let mut s = Stream::new(&dev)?;
/// let copy = TableCopy { dst: 1, dst_offset: 16, src: 0, src_offset: 0, len: 5 };
/// s.copy_table_async(&table, &table, &[copy])?;
/// s.synchronize()?;
/// let mut got = [0u8; 5];
/// b.read_into(&mut got, 4096 + 16)?;
/// assert_eq!(&got, b"hello");
/// # Ok(())
/// # }
/// ```
///
/// [`Stream::copy_table_async`]: crate::Stream::copy_table_async
/// [`Stream::copy_async`]: crate::Stream::copy_async
#[derive(Clone)]
pub struct MappingTable {
    pub(crate) inner: Arc<TableInner>,
}

pub(crate) struct TableInner {
    /// `(first address, length)` of each entry, dense.
    pub(crate) spans: Box<[(usize, usize)]>,
    /// The mappings, one per entry (the same mapping may appear more than once).
    maps: Box<[Mapping]>,
    /// Whether each entry is host DRAM (for the batch call's direction rule).
    pub(crate) host: Box<[bool]>,
    /// The device whose memory each entry is (a batch's DEVICE location names it; not always
    /// the device its address range was reserved on: see `PhysicalMem::retain`).
    pub(crate) devs: Box<[u32]>,
    /// Dropped after `maps` (see [`MappingTable::with_keepalive`]).
    _keep: Option<Box<dyn Any + Send + Sync>>,
    pub(crate) dev: Device,
}

impl fmt::Debug for MappingTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappingTable")
            .field("device", &self.inner.dev.id())
            .field("entries", &self.inner.spans.len())
            .finish()
    }
}

impl MappingTable {
    /// A table of `entries`, numbered from 0 in order, on `dev`'s runtime.
    ///
    /// # Errors
    /// [`Error::WrongDevice`] when an entry's mapping belongs to another runtime than `dev`.
    pub fn new<'a>(
        dev: &Device,
        entries: impl IntoIterator<Item = MappingSlice<'a>>,
    ) -> Result<MappingTable> {
        Self::build(dev, entries, None)
    }

    /// As [`MappingTable::new`], and the table owns `keep` until its own references to the
    /// mappings are gone: for what must outlive the mappings, such as the lease on the
    /// address range they are mapped at when that lease is released after an unmap.
    ///
    /// # Errors
    /// As [`MappingTable::new`].
    pub fn with_keepalive<'a>(
        dev: &Device,
        entries: impl IntoIterator<Item = MappingSlice<'a>>,
        keep: impl Any + Send + Sync,
    ) -> Result<MappingTable> {
        Self::build(dev, entries, Some(Box::new(keep)))
    }

    fn build<'a>(
        dev: &Device,
        entries: impl IntoIterator<Item = MappingSlice<'a>>,
        keep: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<MappingTable> {
        let mut spans = Vec::new();
        let mut maps = Vec::new();
        let mut host = Vec::new();
        let mut devs = Vec::new();
        for e in entries {
            let m = e.mapping();
            if !std::ptr::eq(m.device().lib(), dev.lib()) {
                return Err(Error::WrongDevice {
                    what: "MappingTable::new: an entry's mapping belongs to another runtime",
                    expected: dev.id(),
                    found: m.device().id(),
                });
            }
            spans.push((e.as_raw() as usize, e.len()));
            host.push(m.is_host());
            devs.push(m.memory().home_device());
            // A second owner of the mapping, as `Mapping::hold` makes.
            maps.push(Mapping {
                inner: m.inner.clone(),
            });
        }
        Ok(MappingTable {
            inner: Arc::new(TableInner {
                spans: spans.into_boxed_slice(),
                maps: maps.into_boxed_slice(),
                host: host.into_boxed_slice(),
                devs: devs.into_boxed_slice(),
                _keep: keep,
                dev: dev.clone(),
            }),
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.inner.spans.len()
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.inner.spans.is_empty()
    }

    /// Entry `index` as a view, or `None` past the end.
    pub fn get(&self, index: usize) -> Option<MappingSlice<'_>> {
        let (addr, len) = *self.inner.spans.get(index)?;
        let m = &self.inner.maps[index];
        let start = addr - m.as_raw() as usize;
        m.slice(start..start + len).ok()
    }

    /// Whether entry `index` is host DRAM (what decides whether a copy can be batched, see
    /// [`Stream::copy_table_async`](crate::Stream::copy_table_async)), or `None` past the
    /// end.
    pub fn is_host(&self, index: usize) -> Option<bool> {
        self.inner.host.get(index).copied()
    }

    /// The device the table was made on.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }
}

/// One copy of a [`Stream::copy_table_async`] batch: `len` bytes from `src_offset` in source
/// entry `src` to `dst_offset` in destination entry `dst` (offsets from the entry's start).
///
/// [`Stream::copy_table_async`]: crate::Stream::copy_table_async
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TableCopy {
    /// Destination entry.
    pub dst: usize,
    /// Offset in the destination entry.
    pub dst_offset: usize,
    /// Source entry.
    pub src: usize,
    /// Offset in the source entry.
    pub src_offset: usize,
    /// Bytes to copy.
    pub len: usize,
}

impl TableInner {
    /// The address of `[offset, offset + len)` of entry `entry`, checked.
    #[inline]
    pub(crate) fn addr(
        &self,
        copy: usize,
        side: CopySide,
        entry: usize,
        offset: usize,
        len: usize,
    ) -> Result<usize> {
        let Some(&(base, size)) = self.spans.get(entry) else {
            return Err(Error::NoTableEntry {
                copy,
                side,
                entry,
                entries: self.spans.len(),
            });
        };
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(base + offset),
            _ => Err(Error::TableRange {
                copy,
                side,
                entry,
                offset,
                len,
                size,
            }),
        }
    }
}
