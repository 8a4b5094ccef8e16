//! [`StreamQueue`]: a live stream together with what its queued work uses, and the safe calls
//! that queue device work on memory.
//!
//! Queuing a copy, fill, value write or wait is sound only while the memory it touches stays
//! mapped until the work is done. This type makes that local: every `enqueue_*` call derives
//! the addresses it passes to C from the objects it then keeps (a mapping's owner, a table,
//! pinned words), and the keep list is released only here, after a synchronize, a query or a
//! destroy proved the work done. Dropping a `StreamQueue` whose stream was not destroyed leaks
//! the list. The work of other concepts is queued the same way, by `enqueue_*` calls next to
//! them: table copies (`table/copy.rs`), HCCL collectives and one-sided copies and signals
//! (`hccl/`).

use std::any::Any;
use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard};

use acl::AclLib;

use crate::error::{Error, Result};
use crate::ffi;
use crate::ffi::batch::BatchArgs;
use crate::ffi::{OwnedStream, RawHandle, StreamRef};
use crate::pinned::PinnedInner;
use crate::vmm::{memcpy_kind, MapInner, MappingSlice};

/// What a stream keeps alive for its pending work.
enum Keep {
    Map(#[allow(dead_code)] Arc<MapInner>),
    /// Anything else pending work uses (a mapping table, pinned words, an event, an HCCL
    /// communicator, a symmetric window).
    Other(#[allow(dead_code)] Arc<dyn Any + Send + Sync>),
}

/// Checks that `slice` is one 8-byte, 8-byte aligned word (what `aclrtValueWrite` and
/// `aclrtValueWait` need).
///
/// # Errors
/// [`Error::BadValueWord`] naming `what`.
pub(crate) fn check_word(slice: &MappingSlice<'_>, what: &'static str) -> Result<()> {
    let addr = slice.addr();
    if slice.len() != 8 || addr.get() % 8 != 0 {
        return Err(Error::BadValueWord {
            what,
            addr,
            len: slice.len(),
        });
    }
    Ok(())
}

/// One copy of a batch given to [`StreamQueue::enqueue_batch`]: all of `src` into the start
/// of `dst`, or the part that fits.
pub(crate) type BatchPair<'a> = (MappingSlice<'a>, MappingSlice<'a>);

/// Why a batch given to [`StreamQueue::enqueue_batch`] failed: the error, the C call that
/// failed, and the index into the pairs of the copy it refused (when tied to one).
pub(crate) struct BatchFailure {
    pub(crate) error: Error,
    pub(crate) api: &'static str,
    pub(crate) copy: Option<usize>,
}

impl BatchFailure {
    pub(crate) fn new(error: Error, api: &'static str, copy: Option<usize>) -> BatchFailure {
        BatchFailure { error, api, copy }
    }

    /// The error to report, with `index` mapping the copy's index in the batch to the caller's
    /// ([`Error::BatchCopy`] when the failure is tied to a copy).
    pub(crate) fn into_error(self, index: impl FnOnce(usize) -> Option<usize>) -> Error {
        match self.copy.and_then(index) {
            Some(copy) => Error::BatchCopy {
                api: self.api,
                copy,
                source: Box::new(self.error),
            },
            None => self.error,
        }
    }
}

/// The raw handle of a live stream, shared by its owner and its waiters
/// ([`StreamWaiter`](super::StreamWaiter)); `None` once the
/// owner destroys the stream.
#[derive(Debug)]
pub(crate) struct WaitGate {
    raw: RwLock<Option<RawHandle>>,
}

impl WaitGate {
    /// A gate over the live stream `raw`.
    pub(crate) fn new(raw: RawHandle) -> Arc<WaitGate> {
        Arc::new(WaitGate {
            raw: RwLock::new(Some(raw)),
        })
    }

    /// Closes the gate before the owner destroys the stream: waits for the waiters' calls in
    /// progress to return, and fails later ones. Returns the handle, to open it again should
    /// the destroy fail.
    pub(crate) fn close(&self) -> Option<RawHandle> {
        self.raw.write().take()
    }

    /// Opens the gate again (the destroy failed: the stream lives on).
    pub(crate) fn reopen(&self, raw: RawHandle) {
        *self.raw.write() = Some(raw);
    }

    /// Whether the stream is live.
    pub(crate) fn is_open(&self) -> bool {
        self.raw.read().is_some()
    }

    /// The handle, read-locked for a waiter's call: while the guard lives the owner cannot
    /// close the gate (and so cannot destroy the stream).
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Option<RawHandle>> {
        self.raw.read()
    }
}

/// A live stream (`None` only once destroyed) and the owners of the memory its queued work
/// uses.
pub(crate) struct StreamQueue {
    raw: Option<OwnedStream>,
    keep: Vec<Keep>,
    /// The handle as its waiters see it, closed before the stream is destroyed.
    gate: Arc<WaitGate>,
}

impl StreamQueue {
    /// `aclrtCreateStreamWithConfig`, on the device bound to the calling thread.
    ///
    /// # Errors
    /// As [`ffi::stream::create`].
    pub(crate) fn create(lib: &AclLib, priority: u32, flags: u32) -> Result<StreamQueue> {
        let raw = ffi::stream::create(lib, priority, flags)?;
        let gate = WaitGate::new(RawHandle::new(raw.as_raw()));
        Ok(StreamQueue {
            raw: Some(raw),
            keep: Vec::new(),
            gate,
        })
    }

    /// The gate a [`StreamWaiter`](super::StreamWaiter) waits through.
    pub(crate) fn gate(&self) -> &Arc<WaitGate> {
        &self.gate
    }

    /// The raw handle (null once destroyed).
    pub(crate) fn as_raw(&self) -> acl::aclrtStream {
        self.raw
            .as_ref()
            .map_or(std::ptr::null_mut(), OwnedStream::as_raw)
    }

    /// Whether the stream has not been destroyed.
    pub(crate) fn is_live(&self) -> bool {
        self.raw.is_some()
    }

    /// How many owners pending work holds.
    pub(crate) fn pending(&self) -> usize {
        self.keep.len()
    }

    /// The live stream, borrowed; an error once destroyed.
    pub(crate) fn live(&self) -> Result<StreamRef<'_>> {
        // A match, not `ok_or`: an error built for every copy and dropped showed in profiles.
        match &self.raw {
            Some(s) => Ok(s.borrow()),
            None => Err(Error::InvalidArgument {
                api: "aclrtStream",
                what: "stream (already destroyed)",
                value: 0,
            }),
        }
    }

    /// Keeps `map` alive until the stream is synchronized past the work just queued.
    pub(crate) fn keep_mapping(&mut self, map: &Arc<MapInner>) {
        self.keep.push(Keep::Map(map.clone()));
    }

    /// Keeps `obj` alive until the stream is synchronized past the work just queued.
    pub(crate) fn keep_other(&mut self, obj: Arc<dyn Any + Send + Sync>) {
        self.keep.push(Keep::Other(obj));
    }

    /// Keeps `obj` alive as [`StreamQueue::keep_other`] does, unless one of the last two
    /// objects kept is `obj` already (a batch queued in several calls keeps its tables once).
    pub(crate) fn keep_other_once<T: Any + Send + Sync>(&mut self, obj: &Arc<T>) {
        let held = self.keep.iter().rev().take(2).any(|k| match k {
            Keep::Other(o) => std::ptr::addr_eq(Arc::as_ptr(o), Arc::as_ptr(obj)),
            Keep::Map(_) => false,
        });
        if !held {
            self.keep.push(Keep::Other(obj.clone()));
        }
    }

    /// `aclrtSynchronizeStream`; on success the queued work is done, so its owners go.
    ///
    /// # Errors
    /// As [`ffi::stream::synchronize`] (the owners stay).
    pub(crate) fn synchronize(&mut self, lib: &AclLib) -> Result<()> {
        ffi::stream::synchronize(lib, self.live()?)?;
        self.keep.clear();
        Ok(())
    }

    /// `aclrtSynchronizeStreamWithTimeout`; on success the owners go.
    ///
    /// # Errors
    /// As [`ffi::stream::synchronize_timeout`] (the owners stay).
    pub(crate) fn synchronize_timeout(&mut self, lib: &AclLib, ms: i32) -> Result<()> {
        ffi::stream::synchronize_timeout(lib, self.live()?, ms)?;
        self.keep.clear();
        Ok(())
    }

    /// `aclrtStreamQuery`: whether all queued work is done; if so the owners go.
    ///
    /// # Errors
    /// As [`ffi::stream::query`].
    pub(crate) fn query(&mut self, lib: &AclLib) -> Result<bool> {
        let done = ffi::stream::query(lib, self.live()?)? == acl::ACL_STREAM_STATUS_COMPLETE;
        if done {
            self.keep.clear();
        }
        Ok(done)
    }

    /// Waits for the queued work, then destroys the stream; on failure of either the stream
    /// and its owners stay.
    ///
    /// # Errors
    /// An `aclrtSynchronizeStream` or `aclrtDestroyStream` failure.
    pub(crate) fn close(&mut self, lib: &AclLib) -> Result<()> {
        ffi::stream::synchronize(lib, self.live()?)?;
        self.destroy(lib)
    }

    /// Waits for the queued work (a failure is only logged), then destroys the stream; on a
    /// destroy failure the stream and its owners stay (and are leaked if this value drops).
    ///
    /// # Errors
    /// An `aclrtDestroyStream` failure.
    pub(crate) fn close_logged(&mut self, lib: &AclLib) -> Result<()> {
        let Some(raw) = self.raw.as_ref() else {
            return Ok(());
        };
        // Waiting first keeps pending work inside the memory `keep` holds.
        if let Err(e) = ffi::stream::synchronize(lib, raw.borrow()) {
            tracing::warn!(error = %e, "stream work failed before destroy");
        }
        self.destroy(lib)
    }

    /// `aclrtDestroyStream` after its owner waited; the owners go once it succeeds.
    fn destroy(&mut self, lib: &AclLib) -> Result<()> {
        let Some(raw) = self.raw.take() else {
            return Ok(());
        };
        // No waiter's call may reach C with the handle once it is destroyed.
        let shared = self.gate.close();
        match ffi::stream::destroy(lib, raw) {
            Ok(()) => {
                // Its work is done, so nothing queued on it still uses the memory `keep` holds.
                self.keep.clear();
                Ok(())
            }
            Err((e, raw)) => {
                if let Some(h) = shared {
                    self.gate.reopen(h);
                }
                self.raw = Some(raw);
                Err(e)
            }
        }
    }

    /// Queues `aclrtMemcpyAsync` of all of `src` into the start of `dst` (device to device),
    /// keeping both mappings.
    ///
    /// # Errors
    /// An `aclrtMemcpyAsync` failure.
    #[allow(unsafe_code)]
    pub(crate) fn enqueue_copy(
        &mut self,
        lib: &AclLib,
        dst: &MappingSlice<'_>,
        src: &MappingSlice<'_>,
    ) -> Result<()> {
        let (to, from) = (
            dst.live_range("aclrtMemcpyAsync dst")?,
            src.live_range("aclrtMemcpyAsync src")?,
        );
        // SAFETY: both ranges lie inside live mappings (borrowed from the owners pushed below,
        // which keep them mapped until the stream is synchronized past this copy or
        // destroyed); the runtime writes at most `dst.len()` bytes (dstMax).
        unsafe {
            ffi::copy::memcpy_async(
                lib,
                to.addr(),
                to.len(),
                from.addr(),
                from.len(),
                memcpy_kind(false, false),
                self.live()?,
            )
        }?;
        self.keep_mapping(dst.map_inner());
        self.keep_mapping(src.map_inner());
        Ok(())
    }

    /// Queues `aclrtMemsetAsync` of all of `dst` to `value`, keeping its mapping.
    ///
    /// # Errors
    /// An `aclrtMemsetAsync` failure.
    #[allow(unsafe_code)]
    pub(crate) fn enqueue_fill(
        &mut self,
        lib: &AclLib,
        dst: &MappingSlice<'_>,
        value: u8,
    ) -> Result<()> {
        let to = dst.live_range("aclrtMemsetAsync")?;
        // SAFETY: the range lies inside a live mapping whose owner is pushed below.
        unsafe {
            ffi::copy::memset_async(lib, to.addr(), to.len(), value, to.len(), self.live()?)
        }?;
        self.keep_mapping(dst.map_inner());
        Ok(())
    }

    /// Queues `aclrtValueWrite` of `value` into `word`, keeping its mapping.
    ///
    /// # Errors
    /// [`Error::BadValueWord`] when `word` is not an aligned 8-byte word; an
    /// `aclrtValueWrite` failure.
    #[allow(unsafe_code)]
    pub(crate) fn enqueue_value_write(
        &mut self,
        lib: &AclLib,
        word: &MappingSlice<'_>,
        value: u64,
    ) -> Result<()> {
        check_word(word, "aclrtValueWrite")?;
        let at = word.live_range("aclrtValueWrite")?;
        // SAFETY: an aligned 8-byte word (checked above) inside a live mapping, whose owner
        // pushed below keeps it mapped until the stream is synchronized past the write.
        unsafe { ffi::value::write(lib, at.addr(), value, self.live()?) }?;
        self.keep_mapping(word.map_inner());
        Ok(())
    }

    /// Queues `aclrtValueWrite` of `value` into word `i` of `words` (`i` in bounds, checked
    /// by the caller), keeping the block.
    ///
    /// # Errors
    /// An `aclrtValueWrite` failure.
    #[allow(unsafe_code)]
    pub(crate) fn enqueue_pinned_write(
        &mut self,
        lib: &AclLib,
        words: &Arc<PinnedInner>,
        i: usize,
        value: u64,
    ) -> Result<()> {
        // SAFETY: an aligned word of a live pinned block, which the clone pushed below keeps
        // allocated until the stream is synchronized past the write; the host only touches
        // it with atomics.
        unsafe { ffi::value::write(lib, words.words.addr(i), value, self.live()?) }?;
        self.keep.push(Keep::Other(words.clone()));
        Ok(())
    }

    /// Queues `aclrtValueWait` on `word` with `flag` against `value`, keeping its mapping.
    ///
    /// # Errors
    /// [`Error::BadValueWord`] when `word` is not an aligned 8-byte word; an
    /// `aclrtValueWait` failure.
    #[allow(unsafe_code)]
    pub(crate) fn enqueue_value_wait(
        &mut self,
        lib: &AclLib,
        word: &MappingSlice<'_>,
        value: u64,
        flag: u32,
    ) -> Result<()> {
        check_word(word, "aclrtValueWait")?;
        let at = word.live_range("aclrtValueWait")?;
        // SAFETY: as in `enqueue_value_write`.
        unsafe { ffi::value::wait(lib, at.addr(), value, flag, self.live()?) }?;
        self.keep_mapping(word.map_inner());
        Ok(())
    }

    /// Queues one `aclrtMemcpyBatchAsync` over `pairs` (each all of its source into the start
    /// of its destination), with the location attributes given, keeping each mapping once
    /// (before the call). On a runtime without that call, queues one `aclrtMemcpyAsync` per
    /// pair instead (device to device), in order.
    ///
    /// # Errors
    /// A [`BatchFailure`]: the batch call's failure (with `failIndex`), or the first failing
    /// copy of the fallback (the copies before it stay queued).
    #[allow(unsafe_code)]
    pub(crate) fn enqueue_batch(
        &mut self,
        lib: &AclLib,
        pairs: &[BatchPair<'_>],
        attrs: &mut [acl::aclrtMemcpyBatchAttr],
        attrs_indexes: &mut [usize],
    ) -> std::result::Result<(), BatchFailure> {
        let fail = BatchFailure::new;
        let n = pairs.len();
        let (mut dsts, mut maxs) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut srcs, mut sizes) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (k, (d, s)) in pairs.iter().enumerate() {
            let (to, from) = d
                .live_range(BATCH_API)
                .and_then(|to| Ok((to, s.live_range(BATCH_API)?)))
                .map_err(|e| fail(e, BATCH_API, Some(k)))?;
            dsts.push(to.addr());
            maxs.push(to.len());
            srcs.push(from.addr());
            sizes.push(from.len());
        }
        self.keep_pairs(pairs);
        let stream = self.live().map_err(|e| fail(e, BATCH_API, None))?;
        let args = BatchArgs {
            dsts: &mut dsts,
            dest_maxs: &mut maxs,
            srcs: &mut srcs,
            sizes: &mut sizes,
            attrs,
            attrs_indexes,
        };
        // SAFETY: every range lies inside a live mapping (borrowed from the owners kept
        // above, which keep them mapped until the stream is synchronized past the batch); the
        // runtime writes at most `destMax` bytes per copy.
        match unsafe { ffi::batch::memcpy_batch_async(lib, args, stream) } {
            (Ok(()), _) => Ok(()),
            (Err(Error::MissingSymbol { .. }), _) => {
                for (k, (d, s)) in pairs.iter().enumerate() {
                    self.enqueue_kept_pair(lib, d, s)
                        .map_err(|e| fail(e, EACH_API, Some(k)))?;
                }
                Ok(())
            }
            (Err(e), k) => Err(fail(e, BATCH_API, k)),
        }
    }

    /// One `aclrtMemcpyAsync` of the batch fallback, whose mappings `enqueue_batch` kept.
    #[allow(unsafe_code)]
    fn enqueue_kept_pair(
        &self,
        lib: &AclLib,
        d: &MappingSlice<'_>,
        s: &MappingSlice<'_>,
    ) -> Result<()> {
        let (to, from) = (d.live_range(EACH_API)?, s.live_range(EACH_API)?);
        // SAFETY: both ranges lie inside live mappings whose owners `enqueue_batch` kept until
        // the stream is synchronized past the copy; the runtime writes at most `dst_max`.
        unsafe {
            ffi::copy::memcpy_async(
                lib,
                to.addr(),
                to.len(),
                from.addr(),
                from.len(),
                memcpy_kind(false, false),
                self.live()?,
            )
        }
    }

    /// Keeps each mapping of `pairs` (once) until the stream is synchronized.
    fn keep_pairs(&mut self, pairs: &[BatchPair<'_>]) {
        let mut seen = HashSet::new();
        for (d, s) in pairs {
            for m in [d.map_inner(), s.map_inner()] {
                if seen.insert(Arc::as_ptr(m)) {
                    self.keep_mapping(m);
                }
            }
        }
    }

    /// Queues `aclrtMemcpyAsync` of `len` host bytes at `src` into the start of `dst` (host to
    /// device), keeping its mapping.
    ///
    /// # Errors
    /// An `aclrtMemcpyAsync` failure.
    ///
    /// # Safety
    /// `src..src+len` stays readable and unchanged until the stream is synchronized past the
    /// copy.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn enqueue_host_write(
        &mut self,
        lib: &AclLib,
        dst: &MappingSlice<'_>,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        let to = dst.live_range("aclrtMemcpyAsync dst")?;
        // SAFETY: `dst` lies inside a live mapping kept below (the runtime writes at most its
        // length); `src` forwarded to the caller.
        unsafe {
            ffi::copy::memcpy_async(
                lib,
                to.addr(),
                to.len(),
                src.cast(),
                len,
                memcpy_kind(false, true),
                self.live()?,
            )
        }?;
        self.keep_mapping(dst.map_inner());
        Ok(())
    }

    /// Queues `aclrtMemcpyAsync` of the first `len` bytes of `src` into host bytes at `dst`
    /// (device to host), keeping its mapping.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `src` is shorter than `len`; an `aclrtMemcpyAsync`
    /// failure.
    ///
    /// # Safety
    /// `dst..dst+len` stays writable, and is neither read nor written by anyone else, until
    /// the stream is synchronized past the copy.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn enqueue_host_read(
        &mut self,
        lib: &AclLib,
        dst: *mut u8,
        len: usize,
        src: &MappingSlice<'_>,
    ) -> Result<()> {
        let from = src.live_range("aclrtMemcpyAsync src")?;
        if len > from.len() {
            return Err(Error::OutOfBounds {
                what: "aclrtMemcpyAsync: source",
                offset: 0,
                len,
                size: from.len(),
            });
        }
        // SAFETY: `len` bytes of `src` (checked above) lie inside a live mapping kept below;
        // `dst` forwarded to the caller.
        unsafe {
            ffi::copy::memcpy_async(
                lib,
                dst.cast(),
                len,
                from.addr(),
                len,
                memcpy_kind(true, false),
                self.live()?,
            )
        }?;
        self.keep_mapping(src.map_inner());
        Ok(())
    }
}

/// The C call of a batch (and the `api` of its errors).
pub(crate) const BATCH_API: &str = "aclrtMemcpyBatchAsync";
/// The call of the batch fallback, one per copy.
pub(crate) const EACH_API: &str = "aclrtMemcpyAsync";

impl Drop for StreamQueue {
    fn drop(&mut self) {
        if self.raw.is_some() {
            // The stream was not destroyed, so it may still run work on what `keep` holds:
            // never release it (the owner logged why).
            std::mem::forget(std::mem::take(&mut self.keep));
        }
    }
}
