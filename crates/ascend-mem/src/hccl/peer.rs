//! [`PeerView`]: a typed view of a peer's part of a symmetric window, reached through
//! `HcclSymWinGetPeerPointer`, and the window's signal area.
//!
//! Makes only safe calls: the two lookups are the window handle's (`handle::OwnedWindow::
//! peer_part`), which gives the peer's part as a value the stream's queue checks and keeps the
//! window for.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;

use super::state::WinInner;
use super::window::SymWindow;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::handle::PeerPart;
use crate::stream::ValueWord;
use crate::view::MemView;
use crate::vmm::Mapping;

/// Signal words per rank's part of a window (64-bit each), kept in the part's tail.
pub const SIGNAL_SLOTS: usize = 256;

/// Bytes of the signal area at the tail of every rank's part of a window.
pub const SIGNAL_AREA_BYTES: usize = SIGNAL_SLOTS * 8;

/// Where the signal area starts, as a byte offset from the window's first registered address
/// (8-byte aligned in absolute terms), or `None` when the window is too small to hold it.
pub(crate) fn signal_offset(addr: usize, len: usize) -> Option<usize> {
    let start = (addr.checked_add(len)?.checked_sub(SIGNAL_AREA_BYTES)?) & !7;
    (start >= addr).then(|| start - addr)
}

/// A typed view of peer `rank`'s part of a [`SymWindow`]: the data area (the window minus its
/// signal area), as elements of `T`, through the address `HcclSymWinGetPeerPointer` gives.
///
/// Made by [`SymWindow::peer`]; used by the one-sided stream calls
/// ([`Stream::put`](crate::Stream::put), [`Stream::get`](crate::Stream::get),
/// [`Stream::signal`](crate::Stream::signal), [`Stream::put_signal`](crate::Stream::put_signal)).
/// It holds the window (so it stays registered and mapped while the view lives: a
/// [`SymWindow::close`] meanwhile is refused with [`Error::Busy`]); queued work holds it
/// again until its stream is synchronized.
pub struct PeerView<T> {
    pub(crate) win: Arc<WinInner>,
    pub(crate) rank: u32,
    /// The peer's part of the registered range, in this process.
    pub(crate) part: PeerPart,
    /// Where the signal area starts, in bytes from the part's start.
    pub(crate) sig: usize,
    /// Elements of `T` in the data area.
    pub(crate) len: usize,
    _elem: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for PeerView<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerView")
            .field("rank", &self.rank)
            .field("addr", &(self.part.addr() as *const c_void))
            .field("elem", &std::any::type_name::<T>())
            .field("len", &self.len)
            .finish()
    }
}

impl<T> PeerView<T> {
    /// The peer's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Elements of `T` in the peer's data area.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the data area holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The peer's first data byte in this process (only for passing to device work: the host
    /// must not read or write it directly).
    pub fn addr(&self) -> Addr {
        Addr::from_ptr(self.as_raw())
    }

    /// [`PeerView::addr`] as the C calls take it (only for passing to device work: the host
    /// must not read or write it directly).
    pub fn as_raw(&self) -> *mut c_void {
        self.part.addr() as *mut c_void
    }
}

impl SymWindow {
    /// The size of this rank's data area in bytes: the registered size minus the signal area
    /// ([`SIGNAL_AREA_BYTES`] and up to 7 bytes of alignment). 0 when the window is too small
    /// to hold the signal area (no one-sided calls then).
    pub fn data_len(&self) -> usize {
        signal_offset(self.inner.addr, self.inner.len).unwrap_or(0)
    }

    /// A typed view of peer `rank`'s part (`HcclCommSymWinGet` for the registered range's
    /// offset in HCCL's window, then `HcclSymWinGetPeerPointer`). Any rank may be viewed, this
    /// one too; the view's length is [`data_len`](SymWindow::data_len) in whole elements.
    ///
    /// # Errors
    /// Checked before any C call: [`Error::InvalidArgument`] for a rank not below the rank
    /// size, a window too small for the signal area, or a window no longer registered;
    /// [`Error::MisalignedElements`] when the window's start is not aligned for `T`;
    /// [`Error::NotWholeElements`] for a zero-sized `T`. Failures of the two HCCL calls.
    #[doc(alias = "HcclSymWinGetPeerPointer")]
    pub fn peer<T: Pod>(&self, rank: u32) -> Result<PeerView<T>> {
        const API: &str = "HcclSymWinGetPeerPointer";
        let w = &self.inner;
        if rank >= w.comm.size {
            return Err(Error::InvalidArgument {
                api: API,
                what: "peer rank (must be below the rank size)",
                value: i128::from(rank),
            });
        }
        let Some(sig) = signal_offset(w.addr, w.len) else {
            return Err(Error::InvalidArgument {
                api: API,
                what: "window size in bytes (too small for the signal area)",
                value: w.len as i128,
            });
        };
        let (size, align) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
        if size == 0 {
            return Err(Error::NotWholeElements {
                what: "SymWindow::peer",
                len: sig,
                elem_size: 0,
                elem: std::any::type_name::<T>(),
            });
        }
        if w.addr % align != 0 {
            return Err(Error::MisalignedElements {
                what: "SymWindow::peer",
                addr: Addr::new(w.addr as u64),
                align,
                elem: std::any::type_name::<T>(),
            });
        }
        let part = peer_part(w, rank)?;
        Ok(PeerView {
            win: w.clone(),
            rank,
            part,
            sig,
            len: sig / size,
            _elem: PhantomData,
        })
    }

    /// This rank's signal word `slot` now (a host load of a word the stream may write).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad slot or a window too small for the signal area.
    pub fn signal_value(&self, slot: usize) -> Result<u64> {
        let (map, off) = self.signal_at(slot, "SymWindow::signal_value")?;
        ValueWord::at(&map, off)?.load()
    }

    /// Sets every signal word of this rank to 0 (host stores). Memory fresh from the emulator
    /// is zero, device memory need not be: reset before first use, on every rank, and make
    /// sure every rank has (e.g. [`Comm::barrier`](super::Comm::barrier) and a synchronize)
    /// before any peer signals.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a window too small for the signal area; a store failure.
    pub fn reset_signals(&self) -> Result<()> {
        let (map, off) = self.signal_at(0, "SymWindow::reset_signals")?;
        map.slice(off..off + SIGNAL_AREA_BYTES)?.fill(0)
    }

    /// The window's mapping and the byte offset in it of this rank's signal word `slot`.
    pub(crate) fn signal_at(&self, slot: usize, api: &'static str) -> Result<(Mapping, usize)> {
        let addr = self.own_signal(slot, api)?;
        let map = self.mapping();
        let off = addr - map.as_raw() as usize;
        Ok((map, off))
    }

    /// This rank's signal word `slot` in this process (checked against [`SIGNAL_SLOTS`]).
    pub(crate) fn own_signal(&self, slot: usize, api: &'static str) -> Result<usize> {
        let w = &self.inner;
        let sig = signal_offset(w.addr, w.len).ok_or(Error::InvalidArgument {
            api,
            what: "window size in bytes (too small for the signal area)",
            value: w.len as i128,
        })?;
        check_slot(slot, api)?;
        Ok(w.addr + sig + slot * 8)
    }
}

/// Checks a signal slot number.
pub(crate) fn check_slot(slot: usize, api: &'static str) -> Result<()> {
    if slot >= SIGNAL_SLOTS {
        return Err(Error::InvalidArgument {
            api,
            what: "signal slot (must be below SIGNAL_SLOTS)",
            value: slot as i128,
        });
    }
    Ok(())
}

/// Peer `rank`'s part of the window, with the device bound and the communicator locked.
fn peer_part(w: &WinInner, rank: u32) -> Result<PeerPart> {
    let c = &w.comm;
    c.dev.enter()?;
    let _g = c.lock.lock();
    if !w.win.is_live() || !w.still_registered() {
        return Err(Error::InvalidArgument {
            api: "HcclSymWinGetPeerPointer",
            what: "window (no longer registered)",
            value: w.addr as i128,
        });
    }
    w.win.peer_part(c.h, c.dev.lib(), &c.comm, rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_area_is_the_aligned_tail() {
        assert_eq!(signal_offset(0x1000, SIGNAL_AREA_BYTES - 1), None);
        assert_eq!(signal_offset(0x1000, SIGNAL_AREA_BYTES), Some(0));
        assert_eq!(signal_offset(0x1000, 8192), Some(8192 - SIGNAL_AREA_BYTES));
        // An odd end rounds the area's start down to a word.
        let off = signal_offset(0x1003, 8192).unwrap();
        assert_eq!((0x1003 + off) % 8, 0);
        assert!(off + SIGNAL_AREA_BYTES <= 8192);
        assert_eq!(signal_offset(usize::MAX - 4, 8192), None);
    }
}
