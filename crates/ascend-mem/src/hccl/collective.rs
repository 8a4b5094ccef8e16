//! Queuing an HCCL collective on a [`StreamQueue`]: the buffer addresses are derived from the
//! mappings the queue then keeps, the element counts are checked against the buffers' lengths
//! here, and the communicator's owner is kept too, so the collective never touches memory or a
//! communicator that is gone before the stream is done with it.

use std::sync::Arc;

use acl::AclLib;

use super::state::CommInner;
use super::types::{HcclType, ReduceOp};
use crate::error::{Error, Result};
use crate::ffi::hcall;
use crate::handle::MappedRef;
use crate::stream::StreamQueue;
use crate::vmm::MappingSlice;

/// A collective and its buffers, with counts in elements (the API's checks made by the
/// caller; [`StreamQueue::enqueue_collective`] checks again that the buffers hold them).
pub(crate) enum Collective<'a> {
    /// `HcclAllGather`: `count` elements of `send` per rank, into `ranks × count` of `recv`.
    AllGather {
        send: &'a MappingSlice<'a>,
        recv: &'a MappingSlice<'a>,
        count: u64,
    },
    /// `HcclReduceScatter`: `ranks × count` elements of `send`, `count` into `recv`.
    ReduceScatter {
        send: &'a MappingSlice<'a>,
        recv: &'a MappingSlice<'a>,
        count: u64,
        op: ReduceOp,
    },
    /// `HcclAllReduce`: `count` elements each.
    AllReduce {
        send: &'a MappingSlice<'a>,
        recv: &'a MappingSlice<'a>,
        count: u64,
        op: ReduceOp,
    },
    /// `HcclAlltoAll`: `ranks` blocks of `count` elements each.
    AllToAll {
        send: &'a MappingSlice<'a>,
        recv: &'a MappingSlice<'a>,
        count: u64,
    },
    /// `HcclBroadcast`: `count` elements of `buf` from `root`.
    Broadcast {
        buf: &'a MappingSlice<'a>,
        count: u64,
        root: u32,
    },
    /// `HcclBarrier`.
    Barrier,
}

impl Collective<'_> {
    /// The buffers it touches, each with the number of elements it must hold.
    fn buffers(&self, ranks: u64) -> Vec<(&MappingSlice<'_>, Option<u64>)> {
        match *self {
            Collective::AllGather { send, recv, count } => {
                vec![(send, Some(count)), (recv, count.checked_mul(ranks))]
            }
            Collective::ReduceScatter {
                send, recv, count, ..
            } => vec![(send, count.checked_mul(ranks)), (recv, Some(count))],
            Collective::AllReduce {
                send, recv, count, ..
            } => vec![(send, Some(count)), (recv, Some(count))],
            Collective::AllToAll { send, recv, count } => {
                let n = count.checked_mul(ranks);
                vec![(send, n), (recv, n)]
            }
            Collective::Broadcast { buf, count, .. } => vec![(buf, Some(count))],
            Collective::Barrier => Vec::new(),
        }
    }
}

/// The live range of `b`, after checking it holds `elems` elements of `size` bytes.
fn holding<'m>(
    b: &'m MappingSlice<'_>,
    elems: Option<u64>,
    size: usize,
    api: &'static str,
) -> Result<MappedRef<'m>> {
    let r = b.live_range(api)?;
    let need = elems
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| n.checked_mul(size));
    match need {
        Some(n) if n <= r.len() => Ok(r),
        _ => Err(Error::OutOfBounds {
            what: api,
            offset: 0,
            len: need.unwrap_or(usize::MAX),
            size: r.len(),
        }),
    }
}

impl StreamQueue {
    /// Queues `coll` over elements of `T` on this stream, on the communicator `owner`, then
    /// keeps every buffer's mapping and `owner` until the stream is synchronized past it.
    /// Call with the communicator's device bound and its lock held.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when a buffer is shorter than the counts need (the caller's
    /// checks make that impossible); the collective's failure ([`Error::Hccl`]).
    #[allow(unsafe_code)]
    pub(crate) fn enqueue_collective<T: HcclType>(
        &mut self,
        lib: &AclLib,
        owner: &Arc<CommInner>,
        coll: Collective<'_>,
    ) -> Result<()> {
        let (h, oc) = (owner.h, &owner.comm);
        let api = api_of(&coll);
        let comm = oc.live(api)?;
        let size = std::mem::size_of::<T>();
        let bufs = coll.buffers(u64::from(oc.ranks()));
        let mut addrs = Vec::with_capacity(bufs.len());
        for &(b, elems) in &bufs {
            addrs.push(holding(b, elems, size, api)?.addr());
        }
        let st = self.live()?.as_raw();
        let dt = T::DATA_TYPE.0;
        // SAFETY: `comm` is live (checked above) and kept with its owner below until the
        // stream is done; `st` is this live stream; every address is the start of a range
        // inside a live mapping that holds the counts' elements of `T` (checked by `holding`;
        // `dt` is `T`'s HCCL type, and the trait is sealed), and the mappings are kept below
        // until the stream is synchronized past the collective. `ranks` is the rank count the
        // communicator was made with.
        unsafe {
            match coll {
                Collective::AllGather { count, .. } => {
                    hcall!(
                        h,
                        lib,
                        HcclAllGather(addrs[0], addrs[1], count, dt, comm, st)
                    )
                }
                Collective::ReduceScatter { count, op, .. } => hcall!(
                    h,
                    lib,
                    HcclReduceScatter(addrs[0], addrs[1], count, dt, op.raw(), comm, st)
                ),
                Collective::AllReduce { count, op, .. } => hcall!(
                    h,
                    lib,
                    HcclAllReduce(addrs[0], addrs[1], count, dt, op.raw(), comm, st)
                ),
                Collective::AllToAll { count, .. } => hcall!(
                    h,
                    lib,
                    HcclAlltoAll(addrs[0], count, dt, addrs[1], count, dt, comm, st)
                ),
                Collective::Broadcast { count, root, .. } => {
                    hcall!(h, lib, HcclBroadcast(addrs[0], count, dt, root, comm, st))
                }
                Collective::Barrier => hcall!(h, lib, HcclBarrier(comm, st)),
            }
        }?;
        for (b, _) in bufs {
            self.keep_mapping(b.map_inner());
        }
        self.keep_other(owner.clone());
        Ok(())
    }
}

/// The C name of `coll` (and the `api` of its errors).
fn api_of(coll: &Collective<'_>) -> &'static str {
    match coll {
        Collective::AllGather { .. } => "HcclAllGather",
        Collective::ReduceScatter { .. } => "HcclReduceScatter",
        Collective::AllReduce { .. } => "HcclAllReduce",
        Collective::AllToAll { .. } => "HcclAlltoAll",
        Collective::Broadcast { .. } => "HcclBroadcast",
        Collective::Barrier => "HcclBarrier",
    }
}
