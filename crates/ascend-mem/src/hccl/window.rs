//! [`SymWindow`]: a symmetric window over a [`Mapping`], registered collectively.

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use hccl_sys::HcclCommSymWindow;

use super::comm::Comm;
use super::state::WinInner;
use super::HcclCode;
use crate::addr::Addr;
use crate::device::same_device;
use crate::error::{CloseError, Error, Result};
use crate::view::MemView;
use crate::vmm::{Mapping, MappingSlice};

/// A symmetric window: a range of a VMM [`Mapping`] of device HBM registered with a
/// communicator (`HcclCommSymWinRegister`), so collectives whose buffers lie in windows on
/// every rank read the peers' memory directly instead of staging it through HCCL's buffer.
///
/// # The every-rank rule
/// Registration and deregistration are **collective**: every rank of the communicator calls
/// [`SymWindow::register`] at the same point of its program, with the **same size**, and
/// later deregisters (drop or [`SymWindow::close`]) its window at the same point. A size that
/// differs between ranks is an `E_PARA` error on every rank (not a hang); a rank that never
/// comes makes the others fail with `E_TIMEOUT` after the exec timeout (which breaks the
/// communicator).
///
/// The other rules (CANN, `HcclCommSymWinRegister`): size above 0 and at most the
/// communicator's [`sym_window_max_per_rank`](Comm::sym_window_max_per_rank) (checked here
/// before any C call); the range within memory mapped with `aclrtMapMem` from
/// `aclrtMallocPhysical` device memory (a [`MappingSlice`] cannot exceed its mapping; host
/// memory is refused by HCCL with `E_PARA` on every rank); the window is rounded to the whole
/// physical allocation; Atlas A3 and 950 only (`E_NOT_SUPPORT` elsewhere); communication
/// operators expanded on the AI CPU (config [`OpExpansion::Default`](super::OpExpansion) or
/// [`AiCpu`](super::OpExpansion::AiCpu), else `E_NOT_SUPPORT`).
///
/// # Ownership
/// The window holds its [`Mapping`] (the memory stays mapped while registered) and its
/// [`Comm`] (which is destroyed only after every window on it). A stream with collectives over
/// the window queued holds it too, so the deregistration of a dropped window waits for that
/// stream's next synchronize (where every rank, following the same program, reaches it);
/// [`SymWindow::close`] deregisters now and reports failure. Drop never panics: a failed
/// deregistration is logged and recorded as the device's sticky error.
#[must_use = "dropping a SymWindow deregisters the window (collectively)"]
pub struct SymWindow {
    pub(super) inner: Arc<WinInner>,
}

impl fmt::Debug for SymWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymWindow")
            .field("rank", &self.inner.comm.rank)
            .field("addr", &(self.inner.addr as *const c_void))
            .field("len", &self.inner.len)
            .field("raw", &self.inner.win.as_raw())
            .finish()
    }
}

impl SymWindow {
    /// Registers `range` as this rank's window of `comm` (collective: see the every-rank
    /// rule above). The window keeps `range`'s mapping alive.
    ///
    /// # Errors
    /// Checked before any C call (these do not involve the other ranks, as in HCCL):
    /// [`Error::InvalidArgument`] for an empty range or one above the symmetric-window
    /// maximum per rank; [`Error::WrongDevice`] for memory of another device. From
    /// `HcclCommSymWinRegister` ([`Error::Hccl`]): `E_NOT_SUPPORT` on products without
    /// symmetric memory (A2) or with a non-AI-CPU op expansion mode; `E_PARA` on every rank
    /// when the sizes differ between ranks or a rank's memory is not VMM-mapped device HBM;
    /// `E_TIMEOUT` when a rank does not register in time.
    #[doc(alias = "HcclCommSymWinRegister")]
    pub fn register(comm: &Comm, range: &MappingSlice<'_>) -> Result<SymWindow> {
        const API: &str = "HcclCommSymWinRegister";
        if range.is_empty() {
            return Err(Error::InvalidArgument {
                api: API,
                what: "size (must be above 0)",
                value: 0,
            });
        }
        if range.len() > comm.sym_window_max_per_rank() {
            return Err(Error::InvalidArgument {
                api: API,
                what: "size in bytes (above hcclSymWinMaxMemSizePerRank)",
                value: range.len() as i128,
            });
        }
        let dev = range.mapping().device();
        if !same_device(dev, comm.device()) {
            return Err(Error::WrongDevice {
                what: API,
                expected: comm.device().id(),
                found: dev.id(),
            });
        }
        let (addr, len) = (range.as_raw(), range.len());
        let _span = tracing::debug_span!("hccl_sym_win_register", ?addr, len).entered();
        let map = range.map_inner();
        let win = comm.with_comm(|h, c| {
            c.register_window(h, comm.device().lib(), map, range.offset(), len)
        })?;
        let inner = Arc::new(WinInner {
            comm: comm.inner.clone(),
            win,
            addr: addr as usize,
            len,
            map: map.clone(),
        });
        comm.inner.windows.lock().push(Arc::downgrade(&inner));
        comm.inner.metrics.windows.increment(1.0);
        Ok(SymWindow { inner })
    }

    /// Registers all of `map` (see [`SymWindow::register`]).
    ///
    /// # Errors
    /// As [`SymWindow::register`].
    #[doc(alias = "HcclCommSymWinRegister")]
    pub fn register_mapping(comm: &Comm, map: &Mapping) -> Result<SymWindow> {
        Self::register(comm, &map.as_slice())
    }

    /// The raw handle (borrowed: do not deregister it).
    pub fn as_raw(&self) -> HcclCommSymWindow {
        self.inner.win.as_raw()
    }

    /// The first registered address.
    pub fn addr(&self) -> Addr {
        Addr::new(self.inner.addr as u64)
    }

    /// The size requested at registration (HCCL rounds the window up to the whole physical
    /// allocation).
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Always false (an empty window cannot be registered).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The mapping the window lies in (a new handle on it).
    pub fn mapping(&self) -> Mapping {
        Mapping {
            inner: self.inner.map.clone(),
        }
    }

    /// The communicator (a new handle on it).
    pub fn comm(&self) -> Comm {
        Comm {
            inner: self.inner.comm.clone(),
        }
    }

    /// Whether HCCL still has this window registered (`HcclCommSymWinGet` at its start).
    ///
    /// # Errors
    /// A device bind failure.
    pub fn is_registered(&self) -> Result<bool> {
        if !self.inner.win.is_live() {
            return Ok(false);
        }
        self.inner.comm.dev.enter()?;
        let _g = self.inner.comm.lock.lock();
        Ok(self.inner.still_registered())
    }

    /// Deregisters now (`HcclCommSymWinDeregister`, collective: every rank closes the same
    /// window at the same point), returning the error and the window on failure.
    ///
    /// # Errors
    /// [`Error::Busy`] while another handle (from [`Comm::window_of`]), a
    /// [`PeerView`](super::PeerView) of it, or a stream with queued collectives or one-sided
    /// operations over the window holds it (drop those, or synchronize the stream, first). From `HcclCommSymWinDeregister`:
    /// `E_PARA` when the ranks name different windows (the window stays registered: close the
    /// matching one and retry); `E_TIMEOUT` or `E_REMOTE` when a peer does not come or is
    /// gone, in which case the window is removed locally anyway (the returned window then
    /// reports [`is_registered`](SymWindow::is_registered) false and its drop does nothing).
    #[doc(alias = "HcclCommSymWinDeregister")]
    pub fn close(self) -> std::result::Result<(), CloseError<SymWindow>> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => match inner.deregister_now() {
                Ok(()) => Ok(()),
                Err(e) => {
                    let inner = Arc::new(inner);
                    inner.comm.windows.lock().push(Arc::downgrade(&inner));
                    Err(CloseError::new(e, SymWindow { inner }))
                }
            },
            Err(inner) => Err(CloseError::new(
                Error::Busy {
                    what: "SymWindow",
                    refs: Arc::strong_count(&inner) - 1,
                },
                SymWindow { inner },
            )),
        }
    }
}

impl Comm {
    /// The window of this communicator holding `range`, and `range`'s offset in it
    /// (`HcclCommSymWinGet`); `None` when no window holds all of it. The window returned is
    /// another handle on the one [`SymWindow::register`] returned.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty range, or when the window found was registered
    /// outside this API (raw calls); other `HcclCommSymWinGet` failures.
    #[doc(alias = "HcclCommSymWinGet")]
    pub fn window_of(&self, range: &MappingSlice<'_>) -> Result<Option<(SymWindow, usize)>> {
        self.window_of_raw(range.addr(), range.len())
    }

    /// As [`Comm::window_of`] for a raw address range `[addr, addr + len)` (only looked up,
    /// never accessed).
    ///
    /// # Errors
    /// As [`Comm::window_of`].
    #[doc(alias = "HcclCommSymWinGet")]
    pub fn window_of_raw(&self, addr: Addr, len: usize) -> Result<Option<(SymWindow, usize)>> {
        const API: &str = "HcclCommSymWinGet";
        if len == 0 {
            return Err(Error::InvalidArgument {
                api: API,
                what: "size (must be above 0)",
                value: 0,
            });
        }
        let found = self.with_comm(|h, c| {
            match c.window_at(h, self.device().lib(), addr.get() as usize, len) {
                Ok((w, off)) if !w.is_null() => Ok(Some((w, off))),
                Ok(_) => Ok(None),
                Err(Error::Hccl { code, .. }) if code == HcclCode::E_NOT_FOUND => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        let Some((w, off)) = found else {
            return Ok(None);
        };
        let inner = self
            .inner
            .windows
            .lock()
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .find(|i| i.win.as_raw() == w);
        match inner {
            Some(inner) => Ok(Some((SymWindow { inner }, off))),
            None => Err(Error::InvalidArgument {
                api: API,
                what: "window (registered outside the safe API)",
                value: w as usize as i128,
            }),
        }
    }
}
