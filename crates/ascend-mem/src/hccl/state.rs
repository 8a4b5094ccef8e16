//! The live HCCL objects and their teardown: [`CommInner`] (a communicator and the windows
//! registered on it) and [`WinInner`] (one registered symmetric window).
//!
//! Both the public communicator (`comm.rs`) and the public window (`window.rs`) hold these;
//! keeping them here lets a window hold its communicator and a communicator list its windows
//! without the two files importing each other.

use std::sync::{Arc, Weak};

use hccl_sys::HcclLib;
use parking_lot::Mutex;

use super::metrics::CommMetrics;
use crate::device::Device;
use crate::error::Result;
use crate::handle::{OwnedComm, OwnedWindow};
use crate::vmm::{MapInner, MappingSlice};

pub(crate) struct CommInner {
    pub(crate) dev: Device,
    pub(crate) h: &'static HcclLib,
    /// HCCL does not document concurrent calls on one communicator, so every call made
    /// through a shared `&CommInner` (collective enqueue, window register/deregister/lookup,
    /// rank and name queries) holds `lock`; every call binds `dev` first, Drop included.
    pub(crate) comm: OwnedComm,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    /// `hcclSymWinMaxMemSizePerRank` in bytes, as configured.
    pub(crate) sym_max: usize,
    /// Serialises the HCCL calls made on this communicator through the safe API.
    pub(crate) lock: Mutex<()>,
    /// The windows registered through [`SymWindow::register`](super::SymWindow::register).
    pub(crate) windows: Mutex<Vec<Weak<WinInner>>>,
    /// Its handles of the installed metrics recorder.
    pub(crate) metrics: CommMetrics,
}

impl CommInner {
    pub(crate) fn destroy_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        // Every window holds this Arc and so has already deregistered, and every stream with
        // queued collectives on it holds this Arc too, so none is pending.
        self.comm.destroy(self.h, self.dev.lib())
    }
}

impl Drop for CommInner {
    fn drop(&mut self) {
        if !self.comm.is_live() {
            return;
        }
        let _span = tracing::debug_span!("hccl_comm_destroy", rank = self.rank).entered();
        if let Err(e) = self.destroy_now() {
            tracing::error!(error = %e, "destroying an HCCL communicator failed");
            self.dev.record_sticky(e);
        }
    }
}

pub(crate) struct WinInner {
    // Field order: Drop deregisters first; then the communicator reference goes, then the
    // mapping (so the memory stays mapped for as long as it is registered).
    pub(crate) comm: Arc<CommInner>,
    /// Every call on it binds the communicator's device first and holds the communicator's
    /// lock (Drop included).
    pub(crate) win: OwnedWindow,
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) map: Arc<MapInner>,
}

impl WinInner {
    /// Whether `b` lies in this window's mapping or overlaps its registered range.
    pub(crate) fn holds(&self, b: &MappingSlice<'_>) -> bool {
        let start = b.as_raw() as usize;
        Arc::ptr_eq(&self.map, b.map_inner())
            || (start < self.addr + self.len && self.addr < start + b.len().max(1))
    }

    /// Whether HCCL still knows this window (`HcclCommSymWinGet` at its start). Call with
    /// the device bound and the communicator locked.
    pub(crate) fn still_registered(&self) -> bool {
        let found = self
            .comm
            .comm
            .window_at(self.comm.h, self.comm.dev.lib(), self.addr, 1);
        matches!(found, Ok((w, _)) if w == self.win.as_raw())
    }

    pub(crate) fn deregister_now(&mut self) -> Result<()> {
        let dev = &self.comm.dev;
        dev.bind()?;
        let _g = self.comm.lock.lock();
        let was_live = self.win.is_live();
        // Collectives queued over the window hold this Arc, so none is pending.
        let r = match self.win.deregister(self.comm.h, dev.lib()) {
            Ok(()) => Ok(()),
            Err(e) => {
                // A timeout or a dead peer removes the window locally anyway: do not retry.
                if !self.still_registered() {
                    self.win.forget_registration();
                }
                Err(e)
            }
        };
        if was_live && !self.win.is_live() {
            self.comm.metrics.windows.decrement(1.0);
        }
        r
    }
}

impl Drop for WinInner {
    fn drop(&mut self) {
        if !self.win.is_live() {
            return;
        }
        let _span = tracing::debug_span!("hccl_sym_win_deregister", addr = self.addr).entered();
        if let Err(e) = self.deregister_now() {
            tracing::error!(error = %e, "deregistering a symmetric window failed");
            self.comm.dev.record_sticky(e);
        }
    }
}
