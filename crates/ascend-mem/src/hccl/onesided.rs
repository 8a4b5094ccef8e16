//! One-sided stream calls on symmetric windows: [`Stream::put`] and [`Stream::get`] (copies
//! through a peer pointer), [`Stream::signal`] and [`Stream::wait_signal`] (stream-ordered
//! value writes into a peer's signal words and waits on our own), [`Stream::put_signal`], and
//! the bounded host wait [`Comm::synchronize_watched`].
//!
//! Every check (rank, bounds, slot, device) is made first, in the public calls; then the
//! stream's queue side here ([`StreamQueue::enqueue_peer_copy`] and
//! [`StreamQueue::enqueue_peer_value_write`], the only `unsafe` of this file) derives the peer
//! address from the view's part of the window, checks it lies inside, and keeps the window (so
//! its registration, its mapping and the communicator) and the local buffer alive until the
//! stream is synchronized.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use acl::AclLib;
use bytemuck::Pod;

use super::comm::Comm;
use super::metrics::OneSided;
use super::peer::{check_slot, PeerView};
use super::state::WinInner;
use super::window::SymWindow;
use crate::addr::Addr;
use crate::device::same_device;
use crate::error::{Error, ErrorKind, Result};
use crate::ffi;
use crate::handle::PeerPart;
use crate::stream::{Stream, StreamQueue, WaitCmp};
use crate::typed::TypedSlice;
use crate::view::MemView;
use crate::vmm::MappingSlice;

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

/// Checks that the stream belongs to the window's device.
fn stream_device<T>(stream: &Stream, peer: &PeerView<T>, api: &'static str) -> Result<()> {
    let dev = &peer.win.comm.dev;
    if !same_device(stream.device(), dev) {
        return Err(Error::WrongDevice {
            what: api,
            expected: dev.id(),
            found: stream.device().id(),
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
        self.copy_peer(peer, dst_offset, src, PeerDir::Put)
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
        self.copy_peer(peer, src_offset, dst, PeerDir::Get)
    }

    /// Queues a device-to-device copy of `local.len()` elements between `local` and `peer`'s
    /// data area from element `offset` (checked by the caller), keeping both sides alive.
    fn copy_peer<T: Pod>(
        &mut self,
        peer: &PeerView<T>,
        offset: usize,
        local: &TypedSlice<'_, T>,
        dir: PeerDir,
    ) -> Result<()> {
        if local.as_bytes().is_empty() {
            return Ok(());
        }
        let dev = self.device().clone();
        dev.enter()?;
        let bytes = local.as_bytes();
        self.queue.enqueue_peer_copy(
            dev.lib(),
            &peer.win,
            &peer.part,
            offset * std::mem::size_of::<T>(),
            &bytes,
            dir,
        )?;
        let op = match dir {
            PeerDir::Put => OneSided::Put,
            PeerDir::Get => OneSided::Get,
        };
        peer.win.comm.metrics.onesided(op, bytes.len());
        Ok(())
    }
}

impl Stream {
    /// Queues a signal: `value` stored into signal word `slot` of `peer`'s part
    /// (`aclrtValueWrite` through the peer pointer) when the stream reaches it, after the work
    /// queued before it (so after earlier puts on this stream). The peer waits for it with
    /// [`Stream::wait_signal`]. Signal words are plain 64-bit stores, not additions: give each
    /// sender its own slot, or send increasing values and wait with [`WaitCmp::Geq`].
    ///
    /// # Errors
    /// Checked before any C call: [`Error::InvalidArgument`] for a slot not below
    /// [`SIGNAL_SLOTS`](super::SIGNAL_SLOTS); [`Error::WrongDevice`] for a stream of another
    /// device. An `aclrtValueWrite` failure.
    #[doc(alias = "ncclSignal")]
    #[doc(alias = "aclrtValueWrite")]
    pub fn signal<T>(&mut self, peer: &PeerView<T>, slot: usize, value: u64) -> Result<()> {
        check_slot(slot, "Stream::signal")?;
        stream_device(self, peer, "Stream::signal")?;
        self.signal_unchecked(peer, slot, value)
    }

    /// [`Stream::signal`] after its checks.
    fn signal_unchecked<T>(&mut self, peer: &PeerView<T>, slot: usize, value: u64) -> Result<()> {
        let dev = self.device().clone();
        dev.enter()?;
        self.queue.enqueue_peer_value_write(
            dev.lib(),
            &peer.win,
            &peer.part,
            peer.sig + slot * 8,
            value,
        )?;
        peer.win.comm.metrics.onesided(OneSided::Signal, 0);
        Ok(())
    }

    /// Queues a one-sided put and then a signal (as [`Stream::put`] followed by
    /// [`Stream::signal`], in stream order: a peer that sees the signal sees the data). All
    /// checks of both are made before either is queued.
    ///
    /// # Errors
    /// As [`Stream::put`] and [`Stream::signal`].
    #[doc(alias = "ncclPutSignal")]
    pub fn put_signal<T: Pod>(
        &mut self,
        peer: &PeerView<T>,
        src: &TypedSlice<'_, T>,
        dst_offset: usize,
        slot: usize,
        value: u64,
    ) -> Result<()> {
        check_slot(slot, "Stream::put_signal")?;
        self.put(peer, src, dst_offset)?;
        self.signal_unchecked(peer, slot, value)
    }

    /// Queues a wait: the stream stops until this rank's signal word `slot` of `win`
    /// satisfies `cmp` against `value` (`aclrtValueWait`). The host waits for the stream with
    /// [`Comm::synchronize_watched`], which ends with an error when a peer dies instead of
    /// waiting forever.
    ///
    /// # Errors
    /// Checked before any C call: [`Error::InvalidArgument`] for a slot not below
    /// [`SIGNAL_SLOTS`](super::SIGNAL_SLOTS) or a window too small for the signal area;
    /// [`Error::WrongDevice`] for a stream of another device. An `aclrtValueWait` failure.
    #[doc(alias = "ncclWaitSignal")]
    #[doc(alias = "aclrtValueWait")]
    pub fn wait_signal(
        &mut self,
        win: &SymWindow,
        slot: usize,
        cmp: WaitCmp,
        value: u64,
    ) -> Result<()> {
        const API: &str = "Stream::wait_signal";
        let (map, off) = win.signal_at(slot, API)?;
        let dev = &win.inner.comm.dev;
        if !same_device(self.device(), dev) {
            return Err(Error::WrongDevice {
                what: API,
                expected: dev.id(),
                found: self.device().id(),
            });
        }
        let dev = self.device().clone();
        dev.enter()?;
        let word = map.slice(off..off + 8)?;
        self.queue
            .enqueue_value_wait(dev.lib(), &word, value, cmp.raw())?;
        self.keep_other(win.inner.clone());
        Ok(())
    }
}

/// Which way a one-sided copy goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum PeerDir {
    /// Local memory into the peer's part.
    Put,
    /// The peer's part into local memory.
    Get,
}

/// The peer address `offset` bytes into `part`, after checking that `part` came from the live
/// window `owner` owns and that `len` bytes from there lie inside it.
fn peer_addr(
    owner: &Arc<WinInner>,
    part: &PeerPart,
    offset: usize,
    len: usize,
    api: &'static str,
) -> Result<usize> {
    let win = &owner.win;
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
    #[allow(unsafe_code)]
    fn enqueue_peer_copy(
        &mut self,
        lib: &AclLib,
        owner: &Arc<WinInner>,
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
    #[allow(unsafe_code)]
    fn enqueue_peer_value_write(
        &mut self,
        lib: &AclLib,
        owner: &Arc<WinInner>,
        part: &PeerPart,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        const API: &str = "aclrtValueWrite";
        let addr = peer_addr(owner, part, offset, 8, API)?;
        if addr % 8 != 0 {
            return Err(Error::BadValueWord {
                what: API,
                addr: Addr::new(addr as u64),
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

/// How often [`Comm::synchronize_watched`] looks at the communicator while it waits.
const WATCH_EVERY: Duration = Duration::from_millis(10);

impl Comm {
    /// Waits for `stream`'s work (typically [`Stream::wait_signal`]s) for at most `timeout`,
    /// checking the communicator's health (`HcclGetCommAsyncError`) every few milliseconds. A
    /// peer that died or failed (HCCL's failure detection) or the deadline ends the wait: the
    /// stream's queued work is then aborted (`aclrtStreamAbort`, so the stream can be
    /// synchronized and dropped) and an error returned.
    ///
    /// # Errors
    /// [`Error::Hccl`] (api `HcclGetCommAsyncError`, usually `E_REMOTE`) when the
    /// communicator reports a failure; the `aclrtSynchronizeStreamWithTimeout` error of kind
    /// [`Timeout`](crate::ErrorKind::Timeout) when `timeout` passes; other synchronize or
    /// abort failures.
    pub fn synchronize_watched(&self, stream: &mut Stream, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let e = match stream.synchronize_timeout(left.min(WATCH_EVERY)) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Timeout => e,
                Err(e) => return Err(e),
            };
            let failed = self.async_error()?.map(|code| Error::Hccl {
                api: "HcclGetCommAsyncError",
                code,
                msg: format!(
                    "rank {}: the communicator reports a failure while this rank waits on its stream",
                    self.rank()
                )
                .into(),
            });
            if let Some(failed) = failed {
                abort_and_drain(stream)?;
                return Err(failed);
            }
            if left <= WATCH_EVERY {
                abort_and_drain(stream)?;
                return Err(e);
            }
        }
    }
}

/// Aborts `stream` and synchronizes it: the first synchronize after an abort reports the
/// abort (`ACL_ERROR_RT_STREAM_ABORT`), which is expected here; a second one finds the stream
/// empty and releases what the discarded work kept alive.
fn abort_and_drain(stream: &mut Stream) -> Result<()> {
    stream.abort()?;
    match stream.synchronize() {
        Err(Error::Acl { code, .. }) if code.0 == acl::ACL_ERROR_RT_STREAM_ABORT => {
            stream.synchronize()
        }
        r => r,
    }
}
