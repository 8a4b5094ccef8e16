//! [`ReservedVa`]: a range of device virtual addresses, and the claims that keep mappings
//! in it from overlapping.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::addr::Addr;
use crate::device::{Device, Granular};
use crate::error::{close_last, CloseError, Error, Result};
use crate::handle::OwnedVa;

pub(crate) struct VaInner {
    pub(crate) dev: Device,
    /// The reservation (released by `close` or Drop).
    pub(super) va: OwnedVa,
    pub(super) len: usize,
    /// Ranges mapped (or being mapped) in this reservation: offset -> length.
    pub(super) claims: Mutex<BTreeMap<usize, usize>>,
}

impl VaInner {
    fn release_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        // Nothing is mapped in it: every Mapping holds an Arc to this struct, so none exists
        // when it is being dropped or closed.
        self.va.release(self.dev.lib())
    }
}

impl Drop for VaInner {
    fn drop(&mut self) {
        if !self.va.is_live() {
            return;
        }
        let _span =
            tracing::debug_span!("release_va", base = ?self.va.base(), len = self.len).entered();
        if let Err(e) = self.release_now() {
            tracing::error!(error = %e, "releasing reserved VA failed");
            self.dev.record_sticky(e);
        }
    }
}

/// A range of device virtual addresses (`aclrtReserveMemAddress`), released on drop.
///
/// Map [`PhysicalMem`](crate::PhysicalMem) into it with [`ReservedVa::map`]. Cheap to clone
/// (an `Arc`); the reservation is released when the last clone and the last
/// [`Mapping`](crate::Mapping) in it are gone.
#[derive(Clone)]
#[must_use = "dropping the last ReservedVa handle releases the address range (once nothing is mapped in it)"]
pub struct ReservedVa {
    pub(crate) inner: Arc<VaInner>,
}

impl fmt::Debug for ReservedVa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReservedVa")
            .field("device", &self.inner.dev.id())
            .field("base", &self.inner.va.base())
            .field("len", &self.inner.len)
            .finish()
    }
}

impl ReservedVa {
    /// Reserves `len` bytes of device VA.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero size; an `aclrtReserveMemAddress` failure
    /// (`ACL_ERROR_INVALID_PARAM`, out of VA space, …); a sticky error of the device.
    #[doc(alias = "aclrtReserveMemAddress")]
    pub fn new(dev: &Device, len: Granular) -> Result<ReservedVa> {
        if len.is_zero() {
            return Err(Error::InvalidArgument {
                api: "aclrtReserveMemAddress",
                what: "size",
                value: 0,
            });
        }
        let _span = tracing::debug_span!("reserve_va", dev = dev.id(), len = len.get()).entered();
        dev.enter()?;
        let va = OwnedVa::reserve(dev.lib(), len.get())?;
        Ok(Self::owning(dev, va, len.get()))
    }

    /// Reserves `len` bytes at the fixed address `at` for memory used without the
    /// unified-cache path (`aclrtReserveMemAddressNoUCMemory`, rule R4): what HIXL's Fabric
    /// Mem VA pool reserves on an A3. Only A3 products have it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero `at` or size (the runtime itself answers a NULL
    /// `expectPtr` with `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`; a caller that wants HIXL's
    /// fallback uses [`ReservedVa::new`] for "anywhere"); [`Error::Misaligned`] when `at` or
    /// `len` is not a multiple of 1 GiB; `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` (kind
    /// [`NotSupported`](crate::ErrorKind::NotSupported)) on other products; other
    /// `aclrtReserveMemAddressNoUCMemory` failures (the range is in use, ...).
    #[doc(alias = "aclrtReserveMemAddressNoUCMemory")]
    pub fn new_no_uc(dev: &Device, len: Granular, at: Addr) -> Result<ReservedVa> {
        const GIB: usize = 1 << 30;
        let at = at.get() as usize;
        for (what, full, value) in [
            ("size", "aclrtReserveMemAddressNoUCMemory size", len.get()),
            (
                "expectPtr",
                "aclrtReserveMemAddressNoUCMemory expectPtr",
                at,
            ),
        ] {
            if value == 0 {
                return Err(Error::InvalidArgument {
                    api: "aclrtReserveMemAddressNoUCMemory",
                    what,
                    value: 0,
                });
            }
            if value % GIB != 0 {
                return Err(Error::Misaligned {
                    what: full,
                    value,
                    granule: GIB,
                });
            }
        }
        let _span =
            tracing::debug_span!("reserve_va_no_uc", dev = dev.id(), len = len.get(), at).entered();
        dev.enter()?;
        let va = OwnedVa::reserve_no_uc(dev.lib(), len.get(), at)?;
        Ok(Self::owning(dev, va, len.get()))
    }

    fn owning(dev: &Device, va: OwnedVa, len: usize) -> ReservedVa {
        ReservedVa {
            inner: Arc::new(VaInner {
                dev: dev.clone(),
                va,
                len,
                claims: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// The first address.
    pub fn addr(&self) -> Addr {
        Addr::from_ptr(self.as_raw())
    }

    /// The first address as the C calls take it (prefer [`ReservedVa::addr`]).
    pub fn as_raw(&self) -> *mut c_void {
        self.inner.va.base()
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Always false (reservations are never empty).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The device it was reserved on.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Releases the reservation now, returning the error (and the reservation) on failure.
    ///
    /// # Errors
    /// [`Error::Busy`] while a mapping or clone holds it; an `aclrtReleaseMemAddress` failure.
    #[doc(alias = "aclrtReleaseMemAddress")]
    pub fn close(self) -> std::result::Result<(), CloseError<ReservedVa>> {
        close_last(self.inner, "ReservedVa", |inner| inner.release_now())
            .map_err(|(e, inner)| CloseError::new(e, ReservedVa { inner }))
    }
}
