//! The HCCL handles: a communicator ([`OwnedComm`]) and a registered symmetric window
//! ([`OwnedWindow`]), with the safe calls their ownership justifies, including the lookup of a
//! peer's part of a window ([`PeerPart`]). The work a stream queues with them (collectives,
//! one-sided copies and signals) is in `hccl/collective.rs` and `hccl/onesided.rs`.

use std::any::Any;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

use acl::AclLib;
use hccl_sys::{HcclComm, HcclCommConfig, HcclCommSymWindow, HcclLib, HcclRootInfo};

use super::MapOwner;
use crate::error::{Error, Result};
use crate::ffi::hcall;
use crate::ffi::RawHandle;

/// The error for a call on a communicator or window already destroyed.
fn gone(api: &'static str) -> Error {
    Error::InvalidArgument {
        api,
        what: "handle (already destroyed)",
        value: 0,
    }
}

/// An HCCL communicator this value owns.
#[derive(Debug)]
pub(crate) struct OwnedComm {
    raw: RawHandle,
    live: bool,
    /// The rank count it was made with.
    size: u32,
}

impl OwnedComm {
    /// `HcclCommInitRootInfoConfig` on the calling thread's device.
    pub(crate) fn init(
        h: &HcclLib,
        acl: &AclLib,
        size: u32,
        root: &HcclRootInfo,
        rank: u32,
        cfg: &HcclCommConfig,
    ) -> Result<OwnedComm> {
        let mut raw: HcclComm = std::ptr::null_mut();
        // SAFETY: `root` and `cfg` are live C structs of the declared layouts, `raw` is a
        // writable out-slot. The communicator is owned by the value returned.
        unsafe {
            hcall!(
                h,
                acl,
                HcclCommInitRootInfoConfig(size, root, rank, cfg, &mut raw)
            )
        }?;
        Ok(OwnedComm {
            raw: RawHandle::new(raw),
            live: true,
            size,
        })
    }

    /// The rank count it was made with.
    pub(crate) fn ranks(&self) -> u32 {
        self.size
    }

    /// The raw handle (borrowed: do not destroy it).
    pub(crate) fn as_raw(&self) -> HcclComm {
        self.raw.get()
    }

    /// Whether the communicator is still alive.
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    pub(crate) fn live(&self, api: &'static str) -> Result<HcclComm> {
        if self.live {
            Ok(self.raw.get())
        } else {
            Err(gone(api))
        }
    }

    /// `HcclCommDestroy`; nothing once destroyed.
    pub(crate) fn destroy(&mut self, h: &HcclLib, acl: &AclLib) -> Result<()> {
        if !self.live {
            return Ok(());
        }
        // SAFETY: we own the live communicator and mark it destroyed on success. Windows
        // registered on it are deregistered first by their owners (which hold this
        // communicator's owner), and queued work keeps the communicator's owner until the
        // stream is done with it (`hccl/collective.rs`), so none is pending while we hold
        // `&mut`.
        unsafe { hcall!(h, acl, HcclCommDestroy(self.raw.get())) }?;
        self.live = false;
        Ok(())
    }

    /// `HcclGetRankSize`.
    pub(crate) fn rank_size(&self, h: &HcclLib, acl: &AclLib) -> Result<u32> {
        let c = self.live("HcclGetRankSize")?;
        let mut n = 0u32;
        // SAFETY: live communicator; `n` is writable.
        unsafe { hcall!(h, acl, HcclGetRankSize(c, &mut n)) }?;
        Ok(n)
    }

    /// `HcclGetRankId`.
    pub(crate) fn rank_id(&self, h: &HcclLib, acl: &AclLib) -> Result<u32> {
        let c = self.live("HcclGetRankId")?;
        let mut r = 0u32;
        // SAFETY: live communicator; `r` is writable.
        unsafe { hcall!(h, acl, HcclGetRankId(c, &mut r)) }?;
        Ok(r)
    }

    /// `HcclGetCommName`.
    pub(crate) fn name(&self, h: &HcclLib, acl: &AclLib) -> Result<String> {
        let c = self.live("HcclGetCommName")?;
        let mut buf = [0 as c_char; hccl_sys::COMM_NAME_MAX_LENGTH as usize + 1];
        // SAFETY: live communicator; `buf` holds at least the 128 bytes HCCL writes.
        unsafe { hcall!(h, acl, HcclGetCommName(c, buf.as_mut_ptr())) }?;
        let last = buf.len() - 1;
        buf[last] = 0;
        // SAFETY: NUL-terminated (the last byte is 0).
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Ok(s.to_string_lossy().into_owned())
    }

    /// `HcclGetCommAsyncError`: the raw code (0 = none).
    pub(crate) fn async_error(&self, h: &HcclLib, acl: &AclLib) -> Result<u32> {
        let c = self.live("HcclGetCommAsyncError")?;
        let mut code = 0;
        // SAFETY: live communicator; `code` is writable.
        unsafe { hcall!(h, acl, HcclGetCommAsyncError(c, &mut code)) }?;
        Ok(code)
    }

    /// `HcclCommSymWinGet`: the window holding `[addr, addr + len)` and the offset in it (a
    /// null window when none does).
    pub(crate) fn window_at(
        &self,
        h: &HcclLib,
        acl: &AclLib,
        addr: usize,
        len: usize,
    ) -> Result<(HcclCommSymWindow, usize)> {
        let c = self.live("HcclCommSymWinGet")?;
        let mut w: HcclCommSymWindow = std::ptr::null_mut();
        let mut off = 0usize;
        // SAFETY: live communicator; the address is only looked up; the out-slots are
        // writable.
        unsafe {
            hcall!(
                h,
                acl,
                HcclCommSymWinGet(c, addr as *mut c_void, len, &mut w, &mut off)
            )
        }?;
        Ok((w, off))
    }

    /// `HcclCommSymWinRegister` of `len` bytes at `offset` of the mapping `map` owns
    /// (collective: every rank calls it). The window holds `map`, so the memory stays mapped
    /// while it is registered.
    pub(crate) fn register_window<M: MapOwner>(
        &self,
        h: &HcclLib,
        acl: &AclLib,
        map: &Arc<M>,
        offset: usize,
        len: usize,
    ) -> Result<OwnedWindow> {
        let c = self.live("HcclCommSymWinRegister")?;
        let Some(range) = map.mapping().range(offset, len) else {
            return Err(Error::OutOfBounds {
                what: "HcclCommSymWinRegister: mapping",
                offset,
                len,
                size: map.mapping().len(),
            });
        };
        let mut w: HcclCommSymWindow = std::ptr::null_mut();
        // SAFETY: live communicator; the range lies in a live mapping that the window holds
        // (below) until it is dropped; `w` is a writable out-slot; flag 1 is the only value
        // HCCL accepts (registration flag rule: only 1 is accepted).
        unsafe {
            hcall!(
                h,
                acl,
                HcclCommSymWinRegister(
                    c,
                    range.addr(),
                    len as u64,
                    &mut w,
                    hccl_sys::HCCL_WIN_COLL_SYMMETRIC
                )
            )
        }?;
        Ok(OwnedWindow {
            raw: RawHandle::new(w),
            live: true,
            addr: range.addr() as usize,
            len,
            _map: map.clone(),
        })
    }
}

/// A symmetric window this value registered, holding the mapping under it.
///
/// Dropping it without a successful deregistration releases the mapping anyway (the owner
/// logs the failure as a sticky error): a failed deregistration has usually removed the window
/// locally, and destroying the communicator removes all of its windows.
pub(crate) struct OwnedWindow {
    raw: RawHandle,
    live: bool,
    /// The registered range, in this process.
    addr: usize,
    len: usize,
    /// The owner of the mapping under it: keeps the memory mapped while registered.
    _map: Arc<dyn Any + Send + Sync>,
}

impl OwnedWindow {
    /// The raw handle (borrowed).
    pub(crate) fn as_raw(&self) -> HcclCommSymWindow {
        self.raw.get()
    }

    /// Whether the window is still registered (as far as this value knows).
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    /// `HcclCommSymWinDeregister` (collective); nothing once deregistered.
    pub(crate) fn deregister(&mut self, h: &HcclLib, acl: &AclLib) -> Result<()> {
        if !self.live {
            return Ok(());
        }
        // SAFETY: we registered `raw` and have not deregistered it; the communicator is alive
        // (the window's owner holds its owner); queued collectives over it hold the window's
        // owner, so none is pending.
        unsafe { hcall!(h, acl, HcclCommSymWinDeregister(self.raw.get())) }?;
        self.live = false;
        Ok(())
    }

    /// Records that HCCL no longer has the window (removed locally after a failed
    /// deregistration).
    pub(crate) fn forget_registration(&mut self) {
        self.live = false;
    }
}

/// Peer `rank`'s part of a registered window, as `HcclSymWinGetPeerPointer` gave it: only made
/// by [`OwnedWindow::peer_part`], and usable for queued work only with the window it came from
/// (checked by the queue calls, which keep that window).
#[derive(Copy, Clone, Debug)]
pub(crate) struct PeerPart {
    win: RawHandle,
    base: RawHandle,
    /// The registered size (the same on every rank).
    len: usize,
}

impl PeerPart {
    /// The peer's first registered byte, in this process.
    pub(crate) fn addr(&self) -> usize {
        self.base.addr()
    }

    /// The registered size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether this part was looked up in `win`.
    pub(crate) fn is_of(&self, win: &OwnedWindow) -> bool {
        self.win == win.raw
    }
}

impl OwnedWindow {
    /// Peer `rank`'s part of this window (`HcclCommSymWinGet` for the registered range's
    /// offset in HCCL's window, then `HcclSymWinGetPeerPointer`), with `comm`, the
    /// communicator it is registered on. Call with the device bound and the communicator
    /// locked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the window is no longer registered (as far as this value
    /// or HCCL knows); failures of the two calls.
    pub(crate) fn peer_part(
        &self,
        h: &HcclLib,
        acl: &AclLib,
        comm: &OwnedComm,
        rank: u32,
    ) -> Result<PeerPart> {
        const API: &str = "HcclSymWinGetPeerPointer";
        let unregistered = Error::InvalidArgument {
            api: API,
            what: "window (no longer registered)",
            value: self.addr as i128,
        };
        if !self.live {
            return Err(unregistered);
        }
        let (found, off) = comm.window_at(h, acl, self.addr, self.len)?;
        if found != self.raw.get() {
            return Err(unregistered);
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: a window this value registered and has not deregistered (checked above, and
        // HCCL found it at its range); `off` is the offset HCCL gave for that range; `p` is a
        // writable local. The call only writes the out-slot.
        unsafe {
            hcall!(
                h,
                acl,
                HcclSymWinGetPeerPointer(self.raw.get(), off, rank, &mut p)
            )
        }?;
        Ok(PeerPart {
            win: self.raw,
            base: RawHandle::new(p),
            len: self.len,
        })
    }
}
