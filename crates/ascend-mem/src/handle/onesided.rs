//! Queuing one-sided work through a peer's part of a symmetric window on a [`StreamQueue`]:
//! copies between local memory and the peer's part, and value writes into it. The peer address
//! is derived from a [`PeerPart`] of the window the queue then keeps (so the window stays
//! registered and mapped until the stream is done), after checking the range lies inside it.

use std::ffi::c_void;
use std::sync::Arc;

use acl::AclLib;

use super::hccl::{PeerPart, WindowOwner};
use crate::error::{Error, Result};
use crate::ffi;
use crate::stream::StreamQueue;
use crate::vmm::MappingSlice;

/// Which way a one-sided copy goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum PeerDir {
    /// Local memory into the peer's part.
    Put,
    /// The peer's part into local memory.
    Get,
}

/// The peer address `offset` bytes into `part`, after checking that `part` came from the live
/// window `owner` owns and that `len` bytes from there lie inside it.
fn peer_addr<W: WindowOwner>(
    owner: &Arc<W>,
    part: &PeerPart,
    offset: usize,
    len: usize,
    api: &'static str,
) -> Result<usize> {
    let win = owner.window();
    if !win.is_live() || !part.is_of(win) {
        return Err(Error::InvalidArgument {
            api,
            what: "peer part (not of this registered window)",
            value: part.addr() as i128,
        });
    }
    if !matches!(offset.checked_add(len), Some(end) if end <= part.len()) {
        return Err(Error::OutOfBounds {
            what: api,
            offset,
            len,
            size: part.len(),
        });
    }
    Ok(part.addr() + offset)
}

impl StreamQueue {
    /// Queues `aclrtMemcpyAsync` (device to device) of all of `local` to or from `offset`
    /// bytes into `part`, a peer's part of the window `owner` owns; then keeps `local`'s
    /// mapping and `owner` until the stream is synchronized past it. Nothing for an empty
    /// `local`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a part of another window or a window no longer
    /// registered; [`Error::OutOfBounds`] when the range does not fit in the part; an
    /// `aclrtMemcpyAsync` failure.
    pub(crate) fn enqueue_peer_copy<W: WindowOwner>(
        &mut self,
        lib: &AclLib,
        owner: &Arc<W>,
        part: &PeerPart,
        offset: usize,
        local: &MappingSlice<'_>,
        dir: PeerDir,
    ) -> Result<()> {
        const API: &str = "aclrtMemcpyAsync";
        let here = local.live_range(API)?;
        let n = here.len();
        if n == 0 {
            return Ok(());
        }
        let there = peer_addr(owner, part, offset, n, API)? as *mut c_void;
        let (dst, src) = match dir {
            PeerDir::Put => (there, here.addr()),
            PeerDir::Get => (here.addr(), there),
        };
        // SAFETY: `dst..dst+n` and `src..src+n` lie in the local mapping (borrowed from the
        // owner kept below) and in the peer's part of a window that is registered and mapped
        // in this process (checked by `peer_addr`), whose owner is kept below: both stay valid
        // until the stream is synchronized past the copy. The runtime writes at most `n` bytes.
        unsafe {
            ffi::copy::memcpy_async(
                lib,
                dst,
                n,
                src,
                n,
                acl::ACL_MEMCPY_DEVICE_TO_DEVICE,
                self.live()?,
            )
        }?;
        self.keep_mapping(local.map_inner());
        self.keep_other(owner.clone());
        Ok(())
    }

    /// Queues `aclrtValueWrite` of `value` into the word `offset` bytes into `part`, a peer's
    /// part of the window `owner` owns; then keeps `owner` until the stream is synchronized
    /// past it.
    ///
    /// # Errors
    /// As [`StreamQueue::enqueue_peer_copy`]; [`Error::BadValueWord`] for a word that is not
    /// 8-byte aligned; an `aclrtValueWrite` failure.
    pub(crate) fn enqueue_peer_value_write<W: WindowOwner>(
        &mut self,
        lib: &AclLib,
        owner: &Arc<W>,
        part: &PeerPart,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        const API: &str = "aclrtValueWrite";
        let addr = peer_addr(owner, part, offset, 8, API)?;
        if addr % 8 != 0 {
            return Err(Error::BadValueWord {
                what: API,
                addr,
                len: 8,
            });
        }
        // SAFETY: an aligned 8-byte word (checked above) in the peer's part of a window that
        // is registered and mapped in this process (checked by `peer_addr`), whose owner is
        // kept below until the stream is synchronized past the write.
        unsafe { ffi::value::write(lib, addr as *mut c_void, value, self.live()?) }?;
        self.keep_other(owner.clone());
        Ok(())
    }
}
