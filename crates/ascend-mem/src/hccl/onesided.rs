//! One-sided stream calls on symmetric windows: [`Stream::put`] and [`Stream::get`] (copies
//! through a peer pointer).
//!
//! Allows `unsafe` for queuing copies on raw peer addresses: sound because every check (rank,
//! bounds, device) is made first and the stream keeps the window (and so its registration,
//! its mapping and the communicator) and the local buffer alive until it is synchronized.
#![allow(unsafe_code)]

use bytemuck::Pod;

use super::peer::PeerView;
use crate::device::same_device;
use crate::error::{Error, Result};
use crate::ffi;
use crate::ffi::StreamRef;
use crate::stream::Stream;
use crate::typed::TypedSlice;

/// Checks that `count` elements at element `offset` fit in the peer's data area.
fn fits<T>(peer: &PeerView<T>, offset: usize, count: usize, what: &'static str) -> Result<()> {
    let size = std::mem::size_of::<T>();
    if !matches!(offset.checked_add(count), Some(end) if end <= peer.len) {
        return Err(Error::OutOfBounds {
            what,
            offset: offset.saturating_mul(size),
            len: count.saturating_mul(size),
            size: peer.len * size,
        });
    }
    Ok(())
}

/// Checks that the stream and the local buffer belong to the window's device.
fn same_devices<T: Pod>(
    stream: &Stream,
    peer: &PeerView<T>,
    local: &TypedSlice<'_, T>,
    api: &'static str,
) -> Result<()> {
    let dev = &peer.win.comm.dev;
    for d in [stream.device(), local.mapping().device()] {
        if !same_device(d, dev) {
            return Err(Error::WrongDevice {
                what: api,
                expected: dev.id(),
                found: d.id(),
            });
        }
    }
    Ok(())
}

impl Stream {
    /// Queues a one-sided put: all of `src` (local memory) into `peer`'s data area from
    /// element `dst_offset` (`aclrtMemcpyAsync` to the address `HcclSymWinGetPeerPointer`
    /// gave). The peer is not told: follow with [`Stream::signal`] (or use
    /// [`Stream::put_signal`]) for it to wait on. The stream keeps the window and `src`'s
    /// mapping alive until it is synchronized.
    ///
    /// # Errors
    /// Checked before any C call: [`Error::OutOfBounds`] when the elements do not fit in the
    /// peer's data area (offsets and lengths in bytes); [`Error::WrongDevice`] when the
    /// stream or `src` is not on the communicator's device. An `aclrtMemcpyAsync` failure.
    #[doc(alias = "ncclPut")]
    pub fn put<T: Pod>(
        &mut self,
        peer: &PeerView<T>,
        src: &TypedSlice<'_, T>,
        dst_offset: usize,
    ) -> Result<()> {
        fits(peer, dst_offset, src.len(), "Stream::put: peer data area")?;
        same_devices(self, peer, src, "Stream::put")?;
        let dst = peer.base + dst_offset * std::mem::size_of::<T>();
        self.copy_peer(peer, dst, src.as_raw() as usize, src)
    }

    /// Queues a one-sided get: `dst.len()` elements of `peer`'s data area from element
    /// `src_offset` into `dst` (local memory). The stream keeps the window and `dst`'s mapping
    /// alive until it is synchronized.
    ///
    /// # Errors
    /// As [`Stream::put`].
    pub fn get<T: Pod>(
        &mut self,
        peer: &PeerView<T>,
        src_offset: usize,
        dst: &TypedSlice<'_, T>,
    ) -> Result<()> {
        fits(peer, src_offset, dst.len(), "Stream::get: peer data area")?;
        same_devices(self, peer, dst, "Stream::get")?;
        let src = peer.base + src_offset * std::mem::size_of::<T>();
        self.copy_peer(peer, dst.as_raw() as usize, src, dst)
    }

    /// Queues a device-to-device copy of `local.len()` elements between `dst` and `src`
    /// (one of them in `peer`'s part, checked by the caller), keeping both sides alive.
    fn copy_peer<T: Pod>(
        &mut self,
        peer: &PeerView<T>,
        dst: usize,
        src: usize,
        local: &TypedSlice<'_, T>,
    ) -> Result<()> {
        let n = local.as_bytes().len();
        if n == 0 {
            return Ok(());
        }
        let dev = self.device().clone();
        dev.enter()?;
        // SAFETY: `dst..dst+n` and `src..src+n` lie in the local mapping (a live TypedSlice)
        // and in the peer's part of a window that is registered (the view holds it) and mapped
        // in this process; both are kept below until the stream is synchronized past the
        // copy. The stream is live (`&mut self` of an open stream) for this call.
        unsafe {
            ffi::copy::memcpy_async(
                dev.lib(),
                dst as *mut std::ffi::c_void,
                n,
                src as *const std::ffi::c_void,
                n,
                acl::ACL_MEMCPY_DEVICE_TO_DEVICE,
                StreamRef::borrow_raw(self.as_raw()),
            )
        }?;
        self.keep_mapping(local.as_bytes().map_inner());
        self.keep_other(peer.win.clone());
        Ok(())
    }
}
