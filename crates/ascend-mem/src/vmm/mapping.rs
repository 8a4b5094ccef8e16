//! [`Mapping`]: physical memory mapped into a reservation, and the access a device has to it
//! (its copies are [`MemView`](crate::MemView)'s).

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use super::phys::{Origin, PhysInner, PhysicalMem};
use super::reserve::{ReservedVa, VaInner};
use crate::device::{Device, Granular};
use crate::error::{close_last, AclCode, CloseError, Error, Result};
use crate::ffi;
use crate::handle::{MapOwner, OwnedMap};

pub(crate) struct MapInner {
    // Field order matters: after Drop unmaps, fields drop in declaration order, so when this
    // mapping holds the last handles the memory is freed before the VA is released (R20).
    pub(super) phys: Arc<PhysInner>,
    pub(super) va: Arc<VaInner>,
    /// The mapping (unmapped by `unmap` or Drop).
    pub(crate) map: OwnedMap,
    pub(super) offset: usize,
    pub(crate) len: usize,
    /// Whether this mapping owns a claim in `va.claims` (false for unchecked maps).
    claimed: bool,
}

impl MapInner {
    fn unmap_now(&mut self) -> Result<()> {
        self.va.dev.bind()?;
        // Nothing uses it any more: host access borrows the Mapping and streams with pending
        // copies hold an Arc to us, so none is left now.
        self.map.unmap(self.va.dev.lib())?;
        if self.claimed {
            self.va.claims.lock().remove(&self.offset);
        }
        Ok(())
    }
}

impl MapOwner for MapInner {
    fn mapping(&self) -> &OwnedMap {
        &self.map
    }
}

impl Drop for MapInner {
    fn drop(&mut self) {
        if !self.map.is_live() {
            return;
        }
        let _span =
            tracing::debug_span!("unmap", addr = ?self.map.addr(), len = self.len).entered();
        if let Err(e) = self.unmap_now() {
            tracing::error!(error = %e, "unmapping failed; leaking the memory and VA so neither is freed while mapped");
            self.va.dev.record_sticky(e);
            // Never free or release under a mapping that may still exist (R20): keep both alive.
            std::mem::forget(self.va.clone());
            std::mem::forget(self.phys.clone());
        }
    }
}

/// Physical memory mapped into a reservation (`aclrtMapMem`); unmapped on drop.
///
/// Holds `Arc`s to both the reservation and the memory, so the three can be dropped in any
/// order: the unmap always comes first. Host access copies through `aclrtMemcpy`
/// ([`MemView`](crate::MemView)'s [`read_into`](crate::MemView::read_into),
/// [`write_from`](crate::MemView::write_from), [`fill`](crate::MemView::fill) and the others,
/// `use ascend_mem::prelude::*`); no `&[u8]` is ever formed over memory a device or peer may
/// write.
#[must_use = "dropping a Mapping unmaps it (once no stream has work on it)"]
pub struct Mapping {
    pub(crate) inner: Arc<MapInner>,
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("device", &self.inner.va.dev.id())
            .field("addr", &self.inner.map.addr())
            .field("len", &self.inner.len)
            .finish()
    }
}

impl Mapping {
    /// The first mapped address as the C calls take it (the low-level door: prefer
    /// [`MemView::addr`](crate::MemView::addr)).
    pub fn as_raw(&self) -> *mut c_void {
        self.inner.map.addr()
    }

    /// The offset in the reservation.
    pub fn offset(&self) -> usize {
        self.inner.offset
    }

    /// The device of the reservation.
    pub fn device(&self) -> &Device {
        &self.inner.va.dev
    }

    /// The reservation (a new handle on it).
    pub fn reservation(&self) -> ReservedVa {
        ReservedVa {
            inner: self.inner.va.clone(),
        }
    }

    /// The mapped memory (a new handle on it).
    pub fn memory(&self) -> PhysicalMem {
        PhysicalMem {
            inner: self.inner.phys.clone(),
        }
    }

    /// Whether the mapped memory is host DRAM.
    pub fn is_host(&self) -> bool {
        self.memory().is_host()
    }

    /// Sets what `dev` may do with this mapping (`aclrtMemSetAccess` with one descriptor for
    /// the device's driver-logical id). Needed after mapping host memory so a device can reach
    /// it (rule R19, as HIXL does); [`HostBuffer`](crate::HostBuffer) does it for its device.
    ///
    /// # Errors
    /// [`Error::WrongDevice`] across runtimes; `aclrtGetLogicDevIdByUserDevId` or
    /// `aclrtMemSetAccess` failures.
    #[doc(alias = "aclrtMemSetAccess")]
    pub fn set_device_access(&self, dev: &Device, access: Access) -> Result<()> {
        if !std::ptr::eq(dev.lib(), self.device().lib()) {
            return Err(Error::WrongDevice {
                what: "aclrtMemSetAccess",
                expected: self.device().id(),
                found: dev.id(),
            });
        }
        self.device().enter()?;
        let logic = ffi::device::logic_id(dev.lib(), dev.id())?;
        let desc = acl::aclrtMemAccessDesc {
            flags: access.raw(),
            location: acl::aclrtMemLocation {
                id: logic as u32,
                type_: acl::ACL_MEM_LOCATION_TYPE_DEVICE,
            },
            rsv: [0; 12],
        };
        self.inner.map.set_access(self.device().lib(), &desc)
    }

    /// Unmaps now, returning the error (and the mapping) on failure.
    ///
    /// # Errors
    /// [`Error::Busy`] while a stream still holds it for a pending copy (synchronize the
    /// stream first); an `aclrtUnmapMem` failure.
    #[doc(alias = "aclrtUnmapMem")]
    pub fn unmap(self) -> std::result::Result<(), CloseError<Mapping>> {
        close_last(self.inner, "Mapping", |inner| inner.unmap_now())
            .map_err(|(e, inner)| CloseError::new(e, Mapping { inner }))
    }
}

/// Access a device has to a mapping (`aclrtMemAccessFlags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `ACL_RT_MEM_ACCESS_FLAGS_NONE`.
    NoAccess,
    /// `ACL_RT_MEM_ACCESS_FLAGS_READ`.
    Read,
    /// `ACL_RT_MEM_ACCESS_FLAGS_READWRITE`.
    ReadWrite,
}

impl Access {
    /// The C value.
    pub fn raw(self) -> acl::aclrtMemAccessFlags {
        match self {
            Access::NoAccess => acl::ACL_RT_MEM_ACCESS_FLAGS_NONE,
            Access::Read => acl::ACL_RT_MEM_ACCESS_FLAGS_READ,
            Access::ReadWrite => acl::ACL_RT_MEM_ACCESS_FLAGS_READWRITE,
        }
    }
}

impl ReservedVa {
    /// Maps all of `phys` at offset `at` of this reservation.
    ///
    /// Checks on the host first, with typed errors: same device ([`Error::WrongDevice`]),
    /// `at` a multiple of the memory's granule ([`Error::Misaligned`]), the range inside the
    /// reservation ([`Error::OutOfBounds`]) and not overlapping another mapping
    /// ([`Error::Overlap`]). Then claims the range and calls `aclrtMapMem`.
    ///
    /// The map size is always the whole physical size (the runtime requires them equal, rule
    /// R10). For imported memory that size came from the sender's share-handle bytes; when
    /// the runtime refuses to map it, the error is [`Error::ImportSizeMismatch`] with the
    /// runtime's error as its source.
    ///
    /// # Errors
    /// The checks above; an `aclrtMapMem` failure with its ACL code; a sticky error.
    #[doc(alias = "aclrtMapMem")]
    pub fn map(&self, phys: &PhysicalMem, at: Granular) -> Result<Mapping> {
        let claim = self.claim(at.get(), phys)?;
        let r = self.map_claimed(phys, claim);
        match r {
            // Bounds, alignment and overlap were checked above, so a parameter error on an
            // imported allocation is the runtime's size check failing: the claimed size is not
            // the real one.
            Err(e @ Error::Acl { code, .. })
                if phys.inner.origin == Origin::Imported
                    && (code == AclCode::RT_PARAM_INVALID || code == AclCode::INVALID_PARAM) =>
            {
                Err(Error::ImportSizeMismatch {
                    claimed: phys.len(),
                    granule: phys.inner.granule,
                    reason: "the runtime refused to map that size (it checks the map size against the real allocation)",
                    source: Some(Box::new(e)),
                })
            }
            r => r,
        }
    }

    /// Checks and reserves `[at, at + phys.len())` for a mapping.
    fn claim(&self, at: usize, phys: &PhysicalMem) -> Result<Claim> {
        let va = &self.inner;
        let pd = phys.device();
        if pd.id() != va.dev.id() || !std::ptr::eq(pd.runtime().acl(), va.dev.lib()) {
            return Err(Error::WrongDevice {
                what: "aclrtMapMem",
                expected: va.dev.id(),
                found: pd.id(),
            });
        }
        if phys.inner.granule != 0 && at % phys.inner.granule != 0 {
            return Err(Error::Misaligned {
                what: "map offset",
                value: at,
                granule: phys.inner.granule,
            });
        }
        let len = phys.len();
        if at.checked_add(len).map_or(true, |end| end > va.len) {
            return Err(Error::OutOfBounds {
                what: "aclrtMapMem: reservation",
                offset: at,
                len,
                size: va.len,
            });
        }
        let mut claims = va.claims.lock();
        if let Some((&o, &l)) = claims.range(..at + len).next_back() {
            if o + l > at {
                return Err(Error::Overlap {
                    offset: at,
                    len,
                    existing_offset: o,
                    existing_len: l,
                });
            }
        }
        claims.insert(at, len);
        Ok(Claim {
            va: self.inner.clone(),
            offset: at,
            armed: true,
        })
    }

    /// Maps `phys` over the range `claim` holds (checked and claimed by [`ReservedVa::claim`]).
    fn map_claimed(&self, phys: &PhysicalMem, mut claim: Claim) -> Result<Mapping> {
        let m = self.map_raw(phys, claim.offset, true)?;
        claim.armed = false; // the mapping owns the claim now
        Ok(m)
    }

    /// Maps `phys` at `offset` (the runtime refuses a bad range, rule R10); `claimed` says
    /// whether a claim for the range exists.
    pub(crate) fn map_raw(
        &self,
        phys: &PhysicalMem,
        offset: usize,
        claimed: bool,
    ) -> Result<Mapping> {
        let va = &self.inner;
        let _span =
            tracing::debug_span!("map", dev = va.dev.id(), offset, len = phys.len()).entered();
        va.dev.enter()?;
        let map = OwnedMap::map(va.dev.lib(), &va.va, offset, &phys.inner.mem, phys.len())?;
        Ok(Mapping {
            inner: Arc::new(MapInner {
                phys: phys.inner.clone(),
                va: self.inner.clone(),
                map,
                offset,
                len: phys.len(),
                claimed,
            }),
        })
    }
}

impl ReservedVa {
    /// Maps `phys` at byte offset `offset` with no host-side checks: only the C call.
    ///
    /// For tests of the runtime's own checks and rare uses; prefer [`ReservedVa::map`].
    ///
    /// # Errors
    /// An `aclrtMapMem` failure.
    ///
    /// # Safety
    /// * `offset + phys.len()` lies inside this reservation;
    /// * no other mapping of this crate covers any of that range (nothing else claimed it);
    /// * if the call succeeds while a rule is broken, the resulting Mapping unmaps in Drop.
    #[doc(hidden)]
    #[allow(unsafe_code)]
    pub unsafe fn map_unchecked(&self, phys: &PhysicalMem, offset: usize) -> Result<Mapping> {
        self.map_raw(phys, offset, false)
    }
}

/// A range of a reservation held for a mapping in progress; un-claims on drop unless disarmed.
struct Claim {
    va: Arc<VaInner>,
    offset: usize,
    armed: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.armed {
            self.va.claims.lock().remove(&self.offset);
        }
    }
}
