//! Batched copies: `aclrtMemcpyBatch`, `aclrtMemcpyBatchV2`, `aclrtMemcpyBatchAsync`,
//! `aclrtMemcpyBatchAsyncV2`.
//!
//! The arrays are passed as one [`BatchArgs`]; the forms with `failIndex` return it next to
//! the result: the index (into the arrays given) of the copy that failed, or `None` when all
//! succeeded or the failure is not tied to one copy (`SIZE_MAX`).

use std::ffi::c_void;

use acl::AclLib;

use super::StreamRef;
use crate::error::{Error, Result};

/// The arrays of one batch call: copy `i` moves `sizes[i]` bytes from `srcs[i]` to `dsts[i]`
/// (room `dest_maxs[i]`); `attrs[n]` applies to copies `attrs_indexes[n]` up to the next
/// index (the last to the end).
#[derive(Debug)]
pub struct BatchArgs<'a> {
    /// Destinations.
    pub dsts: &'a mut [*mut c_void],
    /// Room at each destination.
    pub dest_maxs: &'a mut [usize],
    /// Sources.
    pub srcs: &'a mut [*mut c_void],
    /// Bytes per copy.
    pub sizes: &'a mut [usize],
    /// Attribute sets (locations) for runs of copies.
    pub attrs: &'a mut [acl::aclrtMemcpyBatchAttr],
    /// Where each attribute's run starts (the first is 0, strictly increasing).
    pub attrs_indexes: &'a mut [usize],
}

impl BatchArgs<'_> {
    /// Checks that the copy arrays have one length and the attribute arrays another
    /// (`InvalidArgument` naming `api` otherwise), so the counts passed to C are right.
    fn counts(&self, api: &'static str) -> Result<(usize, usize)> {
        let n = self.dsts.len();
        for (what, len) in [
            ("destMaxs length", self.dest_maxs.len()),
            ("srcs length", self.srcs.len()),
            ("sizes length", self.sizes.len()),
        ] {
            if len != n {
                return Err(Error::InvalidArgument {
                    api,
                    what,
                    value: len as i128,
                });
            }
        }
        if self.attrs_indexes.len() != self.attrs.len() {
            return Err(Error::InvalidArgument {
                api,
                what: "attrsIndexes length",
                value: self.attrs_indexes.len() as i128,
            });
        }
        Ok((n, self.attrs.len()))
    }
}

fn fail_index(i: usize) -> Option<usize> {
    (i != usize::MAX).then_some(i)
}

/// `aclrtMemcpyBatch(…, &failIndex)`: synchronous.
///
/// # Errors
/// [`Error::InvalidArgument`] when the array lengths disagree; [`Error::Acl`] with the
/// returned status; [`Error::MissingSymbol`].
///
/// # Safety
/// Every copy's ranges are valid for its direction and no Rust reference covers a
/// destination while the copy runs.
pub unsafe fn memcpy_batch(lib: &AclLib, a: BatchArgs<'_>) -> (Result<()>, Option<usize>) {
    let (n, na) = match a.counts("aclrtMemcpyBatch") {
        Ok(c) => c,
        Err(e) => return (Err(e), None),
    };
    let mut fail = usize::MAX;
    // SAFETY: the arrays hold `n` and `na` elements (checked above) and live for the call;
    // the ranges they name are forwarded to the caller.
    let r = unsafe {
        call!(
            lib,
            aclrtMemcpyBatch(
                a.dsts.as_mut_ptr(),
                a.dest_maxs.as_mut_ptr(),
                a.srcs.as_mut_ptr(),
                a.sizes.as_mut_ptr(),
                n,
                a.attrs.as_mut_ptr(),
                a.attrs_indexes.as_mut_ptr(),
                na,
                &mut fail,
            )
        )
    };
    (r, fail_index(fail))
}

/// `aclrtMemcpyBatchV2`: [`memcpy_batch`] without `failIndex`.
///
/// # Errors
/// As [`memcpy_batch`].
///
/// # Safety
/// As [`memcpy_batch`].
pub unsafe fn memcpy_batch_v2(lib: &AclLib, a: BatchArgs<'_>) -> Result<()> {
    let (n, na) = a.counts("aclrtMemcpyBatchV2")?;
    // SAFETY: as in `memcpy_batch`.
    unsafe {
        call!(
            lib,
            aclrtMemcpyBatchV2(
                a.dsts.as_mut_ptr(),
                a.dest_maxs.as_mut_ptr(),
                a.srcs.as_mut_ptr(),
                a.sizes.as_mut_ptr(),
                n,
                a.attrs.as_mut_ptr(),
                a.attrs_indexes.as_mut_ptr(),
                na,
            )
        )
    }
}

/// `aclrtMemcpyBatchAsync(…, &failIndex, stream)`: the batch is queued on `stream`.
///
/// # Errors
/// As [`memcpy_batch`].
///
/// # Safety
/// As [`memcpy_batch`], and every range stays valid (destinations unobserved) until the
/// stream has been synchronized past the batch.
pub unsafe fn memcpy_batch_async(
    lib: &AclLib,
    a: BatchArgs<'_>,
    stream: StreamRef<'_>,
) -> (Result<()>, Option<usize>) {
    let (n, na) = match a.counts("aclrtMemcpyBatchAsync") {
        Ok(c) => c,
        Err(e) => return (Err(e), None),
    };
    let mut fail = usize::MAX;
    // SAFETY: as in `memcpy_batch`; the stream is live by the borrow.
    let r = unsafe {
        call!(
            lib,
            aclrtMemcpyBatchAsync(
                a.dsts.as_mut_ptr(),
                a.dest_maxs.as_mut_ptr(),
                a.srcs.as_mut_ptr(),
                a.sizes.as_mut_ptr(),
                n,
                a.attrs.as_mut_ptr(),
                a.attrs_indexes.as_mut_ptr(),
                na,
                &mut fail,
                stream.as_raw(),
            )
        )
    };
    (r, fail_index(fail))
}

/// `aclrtMemcpyBatchAsyncV2`: [`memcpy_batch_async`] without `failIndex`.
///
/// # Errors
/// As [`memcpy_batch`].
///
/// # Safety
/// As [`memcpy_batch_async`].
pub unsafe fn memcpy_batch_async_v2(
    lib: &AclLib,
    a: BatchArgs<'_>,
    stream: StreamRef<'_>,
) -> Result<()> {
    let (n, na) = a.counts("aclrtMemcpyBatchAsyncV2")?;
    // SAFETY: as in `memcpy_batch`; the stream is live by the borrow.
    unsafe {
        call!(
            lib,
            aclrtMemcpyBatchAsyncV2(
                a.dsts.as_mut_ptr(),
                a.dest_maxs.as_mut_ptr(),
                a.srcs.as_mut_ptr(),
                a.sizes.as_mut_ptr(),
                n,
                a.attrs.as_mut_ptr(),
                a.attrs_indexes.as_mut_ptr(),
                na,
                stream.as_raw(),
            )
        )
    }
}
