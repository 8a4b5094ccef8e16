//! Copies between the entries of two mapping tables: [`Stream::copy_table_async`] and
//! [`Stream::copy_table_each_async`] (the host-side checks), and the stream's queue side
//! ([`StreamQueue::enqueue_table_copies`]), which keeps both tables until the stream is
//! synchronized past the copies.
//!
//! A run of consecutive copies that go host to device (or device to host) reaches the runtime
//! as one `aclrtMemcpyBatchAsync`: one call and one stream task for the whole run instead of
//! one per copy. The runtime documents a batch as one of those two directions only, so copies
//! between two device-side entries (the usual case of imported peer memory and HBM) stay one
//! `aclrtMemcpyAsync` each, as does every copy on a runtime without the batch call and a run
//! of a single copy. A batch the runtime refuses as a whole (no `failIndex`) is queued again
//! one copy at a time; a refusal naming one copy is reported. Copies are queued in the
//! caller's order, and a run's DEVICE location is its device-side entries' device.

use std::ffi::c_void;
use std::sync::Arc;

use acl::AclLib;

use super::{MappingTable, TableCopy, TableInner};
use crate::error::{CopySide, Result};
use crate::ffi;
use crate::ffi::batch::BatchArgs;
use crate::ffi::StreamRef;
use crate::stream::{BatchFailure, Stream, StreamQueue, BATCH_API, EACH_API};
use crate::vmm::memcpy_kind;

impl Stream {
    /// Queues a batch of copies between entries of two [`MappingTable`]s, in order. `dst` and
    /// `src` may be the same table. A run of two or more consecutive copies from host DRAM
    /// into device memory (or back) goes to the runtime as one `aclrtMemcpyBatchAsync`, one
    /// call and one stream task for the run; the runtime documents batches as host to device
    /// or device to host only, so any other copy (device to device above all) is one
    /// `aclrtMemcpyAsync`, as is every copy on a runtime without the batch call, and of a run
    /// the runtime refuses as a whole (no `failIndex`).
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
    /// [`Error::BatchCopy`] naming the copy the runtime refused, as an index in `copies`:
    /// the batch call's `failIndex` (nothing of that run is queued), or the copy whose own
    /// `aclrtMemcpyAsync` failed (the copies before it stay queued).
    ///
    /// [`Error::WrongDevice`]: crate::Error::WrongDevice
    /// [`Error::NoTableEntry`]: crate::Error::NoTableEntry
    /// [`Error::TableRange`]: crate::Error::TableRange
    /// [`Error::BatchCopy`]: crate::Error::BatchCopy
    #[doc(alias = "aclrtMemcpyAsync")]
    #[doc(alias = "aclrtMemcpyBatchAsync")]
    pub fn copy_table_async(
        &mut self,
        dst: &MappingTable,
        src: &MappingTable,
        copies: &[TableCopy],
    ) -> Result<()> {
        self.copy_table(dst, src, copies, true)
    }

    /// As [`Stream::copy_table_async`], with one `aclrtMemcpyAsync` per copy whatever its
    /// memory (never a batch call), for a runtime whose batch call refuses copies the host
    /// cannot tell apart from good ones (memory locations it sees otherwise, say).
    ///
    /// # Errors
    /// As [`Stream::copy_table_async`], without the batch call's.
    #[doc(alias = "aclrtMemcpyAsync")]
    pub fn copy_table_each_async(
        &mut self,
        dst: &MappingTable,
        src: &MappingTable,
        copies: &[TableCopy],
    ) -> Result<()> {
        self.copy_table(dst, src, copies, false)
    }

    fn copy_table(
        &mut self,
        dst: &MappingTable,
        src: &MappingTable,
        copies: &[TableCopy],
        batch: bool,
    ) -> Result<()> {
        self.same_runtime(&dst.inner.dev, "aclrtMemcpyAsync (table batch) dst")?;
        self.same_runtime(&src.inner.dev, "aclrtMemcpyAsync (table batch) src")?;
        let Some(checked) = Checked::new(&dst.inner, &src.inner, copies)? else {
            return Ok(());
        };
        self.dev.enter()?;
        self.queue
            .enqueue_table_copies(self.dev.lib(), checked, batch)
            .map_err(|f| f.into_error(Some))
    }
}

/// Copies between entries of two tables whose every range was checked to lie inside its
/// entry: made only by [`Checked::new`], which does the check, so queuing them needs none.
pub(crate) struct Checked<'a> {
    dst: &'a Arc<TableInner>,
    src: &'a Arc<TableInner>,
    copies: &'a [TableCopy],
}

impl<'a> Checked<'a> {
    /// Checks every copy of `copies` (entry and range, on both sides); `None` when none has
    /// bytes to copy.
    ///
    /// # Errors
    /// [`Error::NoTableEntry`](crate::Error::NoTableEntry) or
    /// [`Error::TableRange`](crate::Error::TableRange) naming the first copy outside its
    /// table.
    pub(crate) fn new(
        dst: &'a Arc<TableInner>,
        src: &'a Arc<TableInner>,
        copies: &'a [TableCopy],
    ) -> Result<Option<Checked<'a>>> {
        let mut any = false;
        for (i, c) in copies.iter().enumerate() {
            dst.addr(i, CopySide::Dst, c.dst, c.dst_offset, c.len)?;
            src.addr(i, CopySide::Src, c.src, c.src_offset, c.len)?;
            any |= c.len != 0;
        }
        Ok(any.then_some(Checked { dst, src, copies }))
    }

    /// The (destination, source) addresses of copy `c` (checked when this value was made).
    #[inline]
    fn addrs(&self, c: &TableCopy) -> (usize, usize) {
        (
            self.dst.spans[c.dst].0 + c.dst_offset,
            self.src.spans[c.src].0 + c.src_offset,
        )
    }
}

/// Fewest copies of one direction sent as one batch call (a lone copy is cheaper alone).
const BATCH_MIN: usize = 2;

/// Which way a copy goes, for the batch call's rule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Way {
    /// Host DRAM into device memory: batchable.
    ToDevice,
    /// Device memory into host DRAM: batchable.
    ToHost,
    /// Anything else (device to device above all): one call per copy.
    Single,
}

fn way(dst_host: bool, src_host: bool) -> Way {
    match (dst_host, src_host) {
        (false, true) => Way::ToDevice,
        (true, false) => Way::ToHost,
        _ => Way::Single,
    }
}

/// A run of copies going one batchable way with one device: the arrays of one batch call, and
/// each copy's index in the caller's slice.
struct Run {
    /// The way and the device of the device-side entries (the batch's DEVICE location).
    way: Option<(Way, u32)>,
    dsts: Vec<*mut c_void>,
    srcs: Vec<*mut c_void>,
    sizes: Vec<usize>,
    index: Vec<usize>,
}

impl Run {
    /// An empty run (allocating only once a batchable copy comes: copies between two
    /// device-side entries never make one).
    fn new() -> Run {
        Run {
            way: None,
            dsts: Vec::new(),
            srcs: Vec::new(),
            sizes: Vec::new(),
            index: Vec::new(),
        }
    }

    fn push(&mut self, w: (Way, u32), to: usize, from: usize, len: usize, i: usize) {
        self.way = Some(w);
        self.dsts.push(to as *mut c_void);
        self.srcs.push(from as *mut c_void);
        self.sizes.push(len);
        self.index.push(i);
    }

    fn clear(&mut self) {
        self.way = None;
        self.dsts.clear();
        self.srcs.clear();
        self.sizes.clear();
        self.index.clear();
    }
}

impl StreamQueue {
    /// Queues each non-empty copy of `checked`, in order (with `batch`, runs of host-to-device
    /// or device-to-host copies as one batch call each), keeping each table once, before the
    /// first copy, so the copies queued ahead of a failure are covered too.
    ///
    /// # Errors
    /// The batch call's refusal of one copy (its index in the copies; a refusal of the whole
    /// run is retried one copy at a time); an `aclrtMemcpyAsync` failure, with the index of its
    /// copy (the copies before it stay queued).
    #[allow(unsafe_code)]
    pub(crate) fn enqueue_table_copies(
        &mut self,
        lib: &AclLib,
        checked: Checked<'_>,
        batch: bool,
    ) -> std::result::Result<(), BatchFailure> {
        let (dst, src, copies) = (checked.dst, checked.src, checked.copies);
        self.keep_other_once(dst);
        if !Arc::ptr_eq(dst, src) {
            self.keep_other_once(src);
        }
        let mut run = Run::new();
        for (i, c) in copies.iter().enumerate().filter(|(_, c)| c.len != 0) {
            let (to, from) = checked.addrs(c);
            let w = if batch {
                way(dst.host[c.dst], src.host[c.src])
            } else {
                Way::Single
            };
            // The device side's device: a batch names one per run.
            let dev = match w {
                Way::ToHost => src.devs[c.src],
                _ => dst.devs[c.dst],
            };
            if run.way.is_some_and(|r| r != (w, dev)) {
                self.flush(lib, &mut run)?;
            }
            if w == Way::Single {
                let s = self
                    .live()
                    .map_err(|e| BatchFailure::new(e, EACH_API, None))?;
                // SAFETY: both ranges lie inside entries of the tables (`Checked` proves it),
                // whose mappings the tables own; the tables kept above keep them mapped until
                // the stream is synchronized past this copy or destroyed.
                unsafe { copy_one(lib, to, from, c.len, s) }
                    .map_err(|e| BatchFailure::new(e, EACH_API, Some(i)))?;
                continue;
            }
            run.push((w, dev), to, from, c.len, i);
        }
        self.flush(lib, &mut run)
    }

    /// Queues `run` (one batch call, or one call per copy for a lone copy, a runtime without
    /// the batch call, or a batch the runtime refused as a whole) and empties it.
    #[allow(unsafe_code)]
    fn flush(&self, lib: &AclLib, run: &mut Run) -> std::result::Result<(), BatchFailure> {
        let Some((w, dev)) = run.way else {
            return Ok(());
        };
        let s = self
            .live()
            .map_err(|e| BatchFailure::new(e, BATCH_API, None))?;
        if run.sizes.len() >= BATCH_MIN {
            let device = acl::aclrtMemLocation {
                id: dev,
                type_: acl::ACL_MEM_LOCATION_TYPE_DEVICE,
            };
            let host = acl::aclrtMemLocation {
                id: 0,
                type_: acl::ACL_MEM_LOCATION_TYPE_HOST,
            };
            let (dst_loc, src_loc) = match w {
                Way::ToHost => (host, device),
                _ => (device, host),
            };
            let mut attrs = [acl::aclrtMemcpyBatchAttr {
                dstLoc: dst_loc,
                srcLoc: src_loc,
                rsv: [0; 16],
            }];
            let mut maxs = run.sizes.clone();
            let args = BatchArgs {
                dsts: &mut run.dsts,
                dest_maxs: &mut maxs,
                srcs: &mut run.srcs,
                sizes: &mut run.sizes,
                attrs: &mut attrs,
                attrs_indexes: &mut [0],
            };
            // SAFETY: every range lies inside an entry of the tables the queue keeps until the
            // stream is synchronized past the batch; the runtime writes `sizes[i]` bytes.
            match unsafe { ffi::batch::memcpy_batch_async(lib, args, s) } {
                (Ok(()), _) => {
                    run.clear();
                    return Ok(());
                }
                // The runtime refused one copy: report it (nothing of the run was queued).
                (Err(e), Some(k)) => {
                    return Err(BatchFailure::new(e, BATCH_API, run.index.get(k).copied()));
                }
                // An older runtime (no such call), or a refusal of the whole batch (a runtime
                // that does not batch these, say): one call per copy below, whose own error
                // is the one reported if the copies fail too.
                (Err(e), None) => {
                    tracing::debug!(error = %e, copies = run.sizes.len(), "batch refused; copying one by one");
                }
            }
        }
        for k in 0..run.sizes.len() {
            let (to, from) = (run.dsts[k] as usize, run.srcs[k] as usize);
            // SAFETY: as for the batch above.
            unsafe { copy_one(lib, to, from, run.sizes[k], s) }
                .map_err(|e| BatchFailure::new(e, EACH_API, run.index.get(k).copied()))?;
        }
        run.clear();
        Ok(())
    }
}

/// One `aclrtMemcpyAsync` of `len` bytes from `from` to `to` (device-side: mapped memory,
/// HBM or host DRAM, lives in device VA).
///
/// # Safety
/// Both ranges stay mapped until the stream is synchronized past the copy.
#[allow(unsafe_code)]
unsafe fn copy_one(
    lib: &AclLib,
    to: usize,
    from: usize,
    len: usize,
    s: StreamRef<'_>,
) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe {
        ffi::copy::memcpy_async(
            lib,
            to as *mut c_void,
            len,
            from as *const c_void,
            len,
            memcpy_kind(false, false),
            s,
        )
    }
}
