//! Batched async copies: [`BatchCopy`] and [`Stream::copy_batch_async`]
//! (`aclrtMemcpyBatchAsync`, or one `aclrtMemcpyAsync` per copy on a runtime without it).
//!
//! Here: the host-side checks and the location attributes. The queued copies touch the
//! mappings after the call returns; the stream's queue (`enqueue.rs`) derives their
//! addresses from the mappings it keeps until a synchronize proves the work done.

use super::enqueue::{BatchPair, BATCH_API as API};
use super::queue::Stream;
use crate::error::{Error, Result};
use crate::vmm::{memcpy_kind, MappingSlice};

/// One copy of a [`Stream::copy_batch_async`] batch: all of `src` into the start of `dst`.
/// One side is host memory (a [`HostBuffer`](crate::HostBuffer) or another mapping of host
/// DRAM), the other device memory.
#[derive(Clone, Copy, Debug)]
pub struct BatchCopy<'a> {
    /// Where the bytes go.
    pub dst: MappingSlice<'a>,
    /// Where they come from (its whole length is copied).
    pub src: MappingSlice<'a>,
}

impl<'a> BatchCopy<'a> {
    /// A copy of all of `src` into the start of `dst`.
    pub fn new(dst: MappingSlice<'a>, src: MappingSlice<'a>) -> BatchCopy<'a> {
        BatchCopy { dst, src }
    }

    /// The copy's location pair (dst, src) for the batch attribute.
    fn locations(&self) -> (acl::aclrtMemLocation, acl::aclrtMemLocation) {
        let loc = |s: &MappingSlice<'_>| {
            let m = s.mapping();
            if m.is_host() {
                acl::aclrtMemLocation {
                    id: 0,
                    type_: acl::ACL_MEM_LOCATION_TYPE_HOST,
                }
            } else {
                acl::aclrtMemLocation {
                    id: u32::try_from(m.device().id()).unwrap_or(u32::MAX),
                    type_: acl::ACL_MEM_LOCATION_TYPE_DEVICE,
                }
            }
        };
        (loc(&self.dst), loc(&self.src))
    }
}

fn at(copy: usize, source: Error) -> Error {
    Error::BatchCopy {
        api: API,
        copy,
        source: Box::new(source),
    }
}

/// A checked batch, without its zero-length copies; `index[k]` is the caller's index of
/// `pairs[k]`.
#[derive(Default)]
struct Arrays<'a> {
    pairs: Vec<BatchPair<'a>>,
    attrs: Vec<acl::aclrtMemcpyBatchAttr>,
    attrs_indexes: Vec<usize>,
    index: Vec<usize>,
}

/// The host-side checks of every copy, before any C call: bounds, runtime, and one direction
/// (host to device or device to host) for the whole batch.
fn check<'a>(s: &Stream, copies: &[BatchCopy<'a>]) -> Result<Arrays<'a>> {
    let mut a = Arrays::default();
    let mut kind = None;
    for (i, c) in copies.iter().enumerate() {
        if c.src.len() > c.dst.len() {
            return Err(at(
                i,
                Error::OutOfBounds {
                    what: "aclrtMemcpyBatchAsync: destination",
                    offset: 0,
                    len: c.src.len(),
                    size: c.dst.len(),
                },
            ));
        }
        s.same_runtime(c.dst.mapping().device(), "aclrtMemcpyBatchAsync dst")
            .and_then(|()| s.same_runtime(c.src.mapping().device(), "aclrtMemcpyBatchAsync src"))
            .map_err(|e| at(i, e))?;
        let k = memcpy_kind(c.dst.mapping().is_host(), c.src.mapping().is_host());
        let bad = |what| {
            at(
                i,
                Error::InvalidArgument {
                    api: API,
                    what,
                    value: i128::from(k),
                },
            )
        };
        if k != acl::ACL_MEMCPY_HOST_TO_DEVICE && k != acl::ACL_MEMCPY_DEVICE_TO_HOST {
            return Err(bad(
                "copy kind (ACL_MEMCPY_*; a batch copies host to device or device to host)",
            ));
        }
        if *kind.get_or_insert(k) != k {
            return Err(bad(
                "copy kind (ACL_MEMCPY_*; differs from copy 0's: a batch is one direction)",
            ));
        }
        if !c.src.is_empty() {
            a.push(i, c);
        }
    }
    Ok(a)
}

impl<'a> Arrays<'a> {
    fn push(&mut self, i: usize, c: &BatchCopy<'a>) {
        let (dst_loc, src_loc) = c.locations();
        let same = self
            .attrs
            .last()
            .is_some_and(|l| l.dstLoc == dst_loc && l.srcLoc == src_loc);
        if !same {
            self.attrs_indexes.push(self.pairs.len());
            self.attrs.push(acl::aclrtMemcpyBatchAttr {
                dstLoc: dst_loc,
                srcLoc: src_loc,
                rsv: [0; 16],
            });
        }
        self.pairs.push((c.dst, c.src));
        self.index.push(i);
    }
}

impl Stream {
    /// Queues a batch of copies (`aclrtMemcpyBatchAsync`, one task for the batch), in order:
    /// each copies all of its `src` into the start of its `dst`. A batch goes one way: every
    /// copy host to device, or every copy device to host (the C call's rule), where host means
    /// a mapping of host DRAM such as a [`HostBuffer`](crate::HostBuffer).
    ///
    /// Every copy is checked before any C call; zero-length copies are skipped. The stream
    /// keeps every mapping of the batch alive until it is synchronized past it. On a runtime
    /// without `aclrtMemcpyBatchAsync` (an older CANN) the batch is queued as one
    /// `aclrtMemcpyAsync` per copy instead, with the same result.
    ///
    /// # Errors
    /// [`Error::BatchCopy`] naming the copy's index in `copies` and wrapping what is wrong:
    /// [`Error::OutOfBounds`] (its `src` is longer than its `dst`), [`Error::WrongDevice`]
    /// (another runtime), [`Error::InvalidArgument`] (a copy that is not host to device or
    /// device to host, or goes the other way from copy 0), or the runtime's refusal of that
    /// copy (`failIndex`, or the failing `aclrtMemcpyAsync` of the fallback, after which the
    /// copies before it stay queued). A runtime error not tied to one copy comes as it is.
    #[doc(alias = "aclrtMemcpyBatchAsync")]
    pub fn copy_batch_async(&mut self, copies: &[BatchCopy<'_>]) -> Result<()> {
        let mut a = check(self, copies)?;
        if a.pairs.is_empty() {
            return Ok(());
        }
        self.dev.enter()?;
        let r =
            self.queue
                .enqueue_batch(self.dev.lib(), &a.pairs, &mut a.attrs, &mut a.attrs_indexes);
        r.map_err(|f| f.into_error(|k| a.index.get(k).copied()))
    }
}
