//! The HCCL handles: a communicator ([`OwnedComm`]) and a registered symmetric window
//! ([`OwnedWindow`]), with the safe calls their ownership justifies. Collectives queue work
//! on raw buffers and stay with the communicator (`hccl/comm.rs`).

use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

use acl::AclLib;
use hccl_sys::{HcclComm, HcclCommConfig, HcclCommSymWindow, HcclLib, HcclRootInfo};

use super::RawHandle;
use crate::error::{Error, Result};
use crate::hccl::table::hcall;
use crate::vmm::MapInner;

/// The error for a call on a communicator or window already destroyed.
fn gone(api: &'static str) -> Error {
    Error::InvalidArgument {
        api,
        what: "handle (already destroyed)",
        value: 0,
    }
}

/// `HcclGetRootInfo` on the calling thread's device.
pub(crate) fn root_info(h: &HcclLib, acl: &AclLib) -> Result<HcclRootInfo> {
    let mut raw = HcclRootInfo::default();
    // SAFETY: `raw` is a writable root info.
    unsafe { hcall!(h, acl, HcclGetRootInfo(&mut raw)) }?;
    Ok(raw)
}

/// An HCCL communicator this value owns.
#[derive(Debug)]
pub(crate) struct OwnedComm {
    raw: RawHandle,
    live: bool,
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
        })
    }

    /// The raw handle (borrowed: do not destroy it).
    pub(crate) fn as_raw(&self) -> HcclComm {
        self.raw.get()
    }

    /// Whether the communicator is still alive.
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    fn live(&self, api: &'static str) -> Result<HcclComm> {
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
        // communicator's owner), and queued collectives were promised their communicator
        // until synchronized (see `hccl/comm.rs`).
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

    /// `HcclCommSymWinRegister` of `len` bytes at `offset` of `map` (collective: every rank
    /// calls it). The window holds `map`, so the memory stays mapped while it is registered.
    pub(crate) fn register_window(
        &self,
        h: &HcclLib,
        acl: &AclLib,
        map: &Arc<MapInner>,
        offset: usize,
        len: usize,
    ) -> Result<OwnedWindow> {
        let c = self.live("HcclCommSymWinRegister")?;
        let Some(range) = map.map.range(offset, len) else {
            return Err(Error::OutOfBounds {
                what: "HcclCommSymWinRegister: mapping",
                offset,
                len,
                size: map.len,
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
    /// Keeps the memory mapped while registered.
    _map: Arc<MapInner>,
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
