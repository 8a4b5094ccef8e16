//! Owning handles of the VMM family: [`ReservedVa`], [`PhysicalMem`], [`Mapping`], and the
//! short view [`MappingSlice`].
//!
//! Ownership (arrow: holds an `Arc`):
//!
//! ```text
//! DeviceCtx <── VaInner   <──┐
//! DeviceCtx <── PhysInner <──┴── MapInner <── Mapping, Stream (pending async copies)
//!               PhysInner <───── FabricHandle
//! ```
//!
//! A Drop body runs before the fields drop, so `MapInner` unmaps before its `Arc`s to the VA
//! and the memory go: whatever order users drop things in, ACL sees unmap, then free, then
//! release (rule R20).
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::device::{Device, Granular};
use crate::error::{close_last, AclCode, CloseError, Error, Result};
use crate::ffi;
use crate::spec::{Location, MemSpec};

// ---------------------------------------------------------------------------------------------
// Reserved VA

pub(crate) struct VaInner {
    pub(crate) dev: Device,
    base: *mut c_void,
    len: usize,
    /// Ranges mapped (or being mapped) in this reservation: offset -> length.
    claims: Mutex<BTreeMap<usize, usize>>,
    /// False once released by `close`.
    live: bool,
}

// SAFETY: `base` is an address in the device VA space, an id rather than memory this struct
// dereferences; every method and Drop binds `dev` on the calling thread before calling ACL.
unsafe impl Send for VaInner {}
// SAFETY: the only mutable state (`claims`) is behind a parking_lot lock; ACL's VMM calls may
// be made from any thread once the device is bound.
unsafe impl Sync for VaInner {}

impl VaInner {
    fn release_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: we own the reservation, and nothing is mapped in it: every Mapping holds an
        // Arc to this struct, so none exists when it is being dropped or closed.
        unsafe { ffi::va::release(self.dev.lib(), self.base) }?;
        self.live = false;
        Ok(())
    }
}

impl Drop for VaInner {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        let _span = tracing::debug_span!("release_va", base = ?self.base, len = self.len).entered();
        if let Err(e) = self.release_now() {
            tracing::error!(error = %e, "releasing reserved VA failed");
            self.dev.record_sticky(e);
        }
    }
}

/// A range of device virtual addresses (`aclrtReserveMemAddress`), released on drop.
///
/// Map [`PhysicalMem`] into it with [`ReservedVa::map`]. Cheap to clone (an `Arc`); the
/// reservation is released when the last clone and the last [`Mapping`] in it are gone.
#[derive(Clone)]
#[must_use = "dropping the last ReservedVa handle releases the address range (once nothing is mapped in it)"]
pub struct ReservedVa {
    pub(crate) inner: Arc<VaInner>,
}

impl fmt::Debug for ReservedVa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReservedVa")
            .field("device", &self.inner.dev.id())
            .field("base", &self.inner.base)
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
        // SAFETY: plain values; the result is owned by the VaInner built below.
        let base = unsafe { ffi::va::reserve(dev.lib(), len.get(), 0) }?;
        Ok(Self::owning(dev, base, len.get()))
    }

    /// Reserves `len` bytes at the fixed address `at` for memory used without the
    /// unified-cache path (`aclrtReserveMemAddressNoUCMemory`, rule R4): what HIXL's Fabric
    /// Mem VA pool reserves on an A3. Only A3 products have it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero `at` or size; [`Error::Misaligned`] when `at` or
    /// `len` is not a multiple of 1 GiB; `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` (kind
    /// [`NotSupported`](crate::ErrorKind::NotSupported)) on other products; other
    /// `aclrtReserveMemAddressNoUCMemory` failures (the range is in use, ...).
    #[doc(alias = "aclrtReserveMemAddressNoUCMemory")]
    pub fn new_no_uc(dev: &Device, len: Granular, at: usize) -> Result<ReservedVa> {
        const GIB: usize = 1 << 30;
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
        // SAFETY: plain values and a fixed address the runtime checks is free; the result is
        // owned by the VaInner built below.
        let base = unsafe { ffi::va::reserve_no_uc(dev.lib(), len.get(), at as *mut c_void, 0) }?;
        Ok(Self::owning(dev, base, len.get()))
    }

    fn owning(dev: &Device, base: *mut c_void, len: usize) -> ReservedVa {
        ReservedVa {
            inner: Arc::new(VaInner {
                dev: dev.clone(),
                base,
                len,
                claims: Mutex::new(BTreeMap::new()),
                live: true,
            }),
        }
    }

    /// The first address.
    pub fn as_raw(&self) -> *mut c_void {
        self.inner.base
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
        // SAFETY: `claim` holds [at, at + phys.len()) of this live reservation exclusively, it
        // lies inside the reservation, and `phys` is alive (we clone its Arc into the mapping).
        let r = unsafe { self.map_claimed(phys, claim) };
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

    /// # Safety
    /// `claim` covers `[claim.offset, + phys.len())` of this reservation.
    unsafe fn map_claimed(&self, phys: &PhysicalMem, mut claim: Claim) -> Result<Mapping> {
        // SAFETY: forwarded to the caller.
        let m = unsafe { self.map_raw(phys, claim.offset, true) }?;
        claim.armed = false; // the mapping owns the claim now
        Ok(m)
    }

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
    pub unsafe fn map_unchecked(&self, phys: &PhysicalMem, offset: usize) -> Result<Mapping> {
        // SAFETY: forwarded to the caller.
        unsafe { self.map_raw(phys, offset, false) }
    }

    /// # Safety
    /// As [`ReservedVa::map_unchecked`]; `claimed` says whether a claim for the range exists.
    unsafe fn map_raw(&self, phys: &PhysicalMem, offset: usize, claimed: bool) -> Result<Mapping> {
        let va = &self.inner;
        let _span =
            tracing::debug_span!("map", dev = va.dev.id(), offset, len = phys.len()).entered();
        va.dev.enter()?;
        let addr = (va.base as usize).wrapping_add(offset) as *mut c_void;
        // SAFETY: forwarded to the caller (range inside the reservation, unclaimed); `phys`
        // is a live handle whose size is passed as the map size (rule R10).
        unsafe { ffi::map::map(va.dev.lib(), addr, phys.len(), phys.inner.handle) }?;
        Ok(Mapping {
            inner: Arc::new(MapInner {
                phys: phys.inner.clone(),
                va: self.inner.clone(),
                addr,
                offset,
                len: phys.len(),
                claimed,
                live: true,
            }),
        })
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

// ---------------------------------------------------------------------------------------------
// Physical memory

/// How a physical allocation came to be.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// `aclrtMallocPhysical` with this kind.
    Allocated(MemSpec),
    /// `aclrtMemImportFromShareableHandleV2` of memory another process exported.
    Imported,
}

pub(crate) struct PhysInner {
    pub(crate) dev: Device,
    pub(crate) handle: acl::aclrtDrvMemHandle,
    pub(crate) len: usize,
    /// The granule mapping offsets must respect (the kind's granularity; 0 = unknown).
    granule: usize,
    pub(crate) origin: Origin,
    /// Set once exported (rule R15: one export per handle per process).
    pub(crate) exported: Mutex<bool>,
    live: bool,
}

// SAFETY: the handle is an id, not tied to the thread that made it; every method and Drop
// makes `dev` current on the calling thread before calling ACL.
unsafe impl Send for PhysInner {}
// SAFETY: the only mutable state (`exported`) is behind a parking_lot lock; the handle itself
// is only passed by value to ACL calls that may be made from any thread.
unsafe impl Sync for PhysInner {}

impl PhysInner {
    fn free_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: we own `handle`, and every Mapping holding this Arc has already unmapped
        // (a Mapping holds an Arc to us, so none is left when we are dropped or closed).
        unsafe { ffi::phys::free(self.dev.lib(), self.handle) }?;
        self.live = false;
        Ok(())
    }
}

impl Drop for PhysInner {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        let _span = tracing::debug_span!("free_physical", len = self.len).entered();
        if let Err(e) = self.free_now() {
            tracing::error!(error = %e, "freeing physical memory failed");
            self.dev.record_sticky(e);
        }
    }
}

/// Physical memory: device HBM or host DRAM (`aclrtMallocPhysical`), or memory imported from
/// another process ([`SharedHandle::import`](crate::SharedHandle::import)). Freed on drop.
///
/// Cheap to clone (an `Arc`); freed when the last clone, [`Mapping`] and
/// [`FabricHandle`](crate::FabricHandle) holding it are gone.
#[derive(Clone)]
#[must_use = "dropping the last PhysicalMem handle frees the memory (once nothing maps it)"]
pub struct PhysicalMem {
    pub(crate) inner: Arc<PhysInner>,
}

impl fmt::Debug for PhysicalMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PhysicalMem")
            .field("device", &self.inner.dev.id())
            .field("len", &self.inner.len)
            .field("origin", &self.inner.origin)
            .finish()
    }
}

impl PhysicalMem {
    /// Allocates `len` bytes of device HBM ([`MemSpec::DEVICE_HBM`]) on `dev`.
    ///
    /// # Errors
    /// As [`PhysicalMem::alloc`].
    pub fn hbm(dev: &Device, len: Granular) -> Result<PhysicalMem> {
        Self::alloc(dev, len, MemSpec::DEVICE_HBM)
    }

    /// Allocates `len` bytes of host DRAM that `dev` can reach ([`MemSpec::HOST`], or
    /// HOST_NUMA on `numa_node`).
    ///
    /// # Errors
    /// As [`PhysicalMem::alloc`].
    pub fn host(dev: &Device, len: Granular, numa_node: Option<u32>) -> Result<PhysicalMem> {
        let spec = match numa_node {
            Some(n) => MemSpec::host_numa(n),
            None => MemSpec::HOST,
        };
        Self::alloc(dev, len, spec)
    }

    /// Allocates `len` bytes of memory of kind `spec` through `dev`.
    ///
    /// # Errors
    /// * [`Error::InvalidArgument`]: zero size, or a DDR attribute on a device location (R6);
    /// * [`Error::Misaligned`]: `len` not a multiple of this kind's granularity (R8);
    /// * `aclrtMallocPhysical` failures. Over capacity the runtime returns an out-of-memory
    ///   code, both of kind [`OutOfMemory`](crate::ErrorKind::OutOfMemory):
    ///   `ACL_ERROR_RT_MEMORY_ALLOCATION` (207001, what the emulator returns) or
    ///   `ACL_ERROR_BAD_ALLOC` (200000); match on [`Error::kind`], not the code. Rejected
    ///   properties give `ACL_ERROR_INVALID_PARAM` (100000).
    #[doc(alias = "aclrtMallocPhysical")]
    pub fn alloc(dev: &Device, len: Granular, spec: MemSpec) -> Result<PhysicalMem> {
        if len.is_zero() {
            return Err(Error::InvalidArgument {
                api: "aclrtMallocPhysical",
                what: "size",
                value: 0,
            });
        }
        if spec.location == Location::Device && spec.attr.is_host_only() {
            return Err(Error::InvalidArgument {
                api: "aclrtMallocPhysical",
                what: "memAttr (DDR kinds are host-only) =",
                value: spec.attr.raw().into(),
            });
        }
        let granule = dev.granularity(spec)?;
        if !len.is_multiple_of(granule) {
            return Err(Error::Misaligned {
                what: "aclrtMallocPhysical size",
                value: len.get(),
                granule,
            });
        }
        let _span =
            tracing::debug_span!("malloc_physical", dev = dev.id(), len = len.get()).entered();
        dev.enter()?;
        let prop = spec.to_prop(dev.id());
        // SAFETY: `prop` is valid; the handle is owned by the PhysInner built below.
        let handle = unsafe { ffi::phys::malloc(dev.lib(), len.get(), &prop) }?;
        Ok(Self::from_handle(
            dev,
            handle,
            len.get(),
            granule,
            Origin::Allocated(spec),
        ))
    }

    pub(crate) fn from_handle(
        dev: &Device,
        handle: acl::aclrtDrvMemHandle,
        len: usize,
        granule: usize,
        origin: Origin,
    ) -> PhysicalMem {
        PhysicalMem {
            inner: Arc::new(PhysInner {
                dev: dev.clone(),
                handle,
                len,
                granule,
                origin,
                exported: Mutex::new(false),
                live: true,
            }),
        }
    }

    /// The same memory with the mapping-offset granule now known (imports learn it after the
    /// handle exists). Only called on a fresh, unshared value.
    pub(crate) fn with_granule(mut self, granule: usize) -> PhysicalMem {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.granule = granule;
        }
        self
    }

    /// Takes ownership of a raw handle (freed on drop).
    ///
    /// # Safety
    /// `handle` is a live physical handle of `dev`'s runtime, of exactly `len` bytes, owned
    /// by nobody else (it will be passed to `aclrtFreePhysical` once).
    pub unsafe fn from_raw(
        dev: &Device,
        handle: acl::aclrtDrvMemHandle,
        len: usize,
        origin: Origin,
    ) -> PhysicalMem {
        Self::from_handle(dev, handle, len, 0, origin)
    }

    /// The raw handle (borrowed: do not free it).
    pub fn as_raw(&self) -> acl::aclrtDrvMemHandle {
        self.inner.handle
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Always false (allocations are never empty).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The device it was allocated or imported through.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// How it was made.
    pub fn origin(&self) -> Origin {
        self.inner.origin
    }

    /// Whether the memory is host DRAM (false for imports: treated as device memory).
    pub fn is_host(&self) -> bool {
        matches!(self.inner.origin, Origin::Allocated(s) if s.is_host())
    }

    /// Frees the memory now, returning the error (and the memory) on failure.
    ///
    /// # Errors
    /// [`Error::Busy`] while a mapping, export or clone holds it; an `aclrtFreePhysical`
    /// failure.
    #[doc(alias = "aclrtFreePhysical")]
    pub fn close(self) -> std::result::Result<(), CloseError<PhysicalMem>> {
        close_last(self.inner, "PhysicalMem", |inner| inner.free_now())
            .map_err(|(e, inner)| CloseError::new(e, PhysicalMem { inner }))
    }
}

// ---------------------------------------------------------------------------------------------
// Mapping

pub(crate) struct MapInner {
    // Field order matters: after Drop unmaps, fields drop in declaration order, so when this
    // mapping holds the last handles the memory is freed before the VA is released (R20).
    phys: Arc<PhysInner>,
    va: Arc<VaInner>,
    addr: *mut c_void,
    offset: usize,
    len: usize,
    /// Whether this mapping owns a claim in `va.claims` (false for unchecked maps).
    claimed: bool,
    live: bool,
}

// SAFETY: `addr` is a device VA this struct never dereferences (host access goes through
// `aclrtMemcpy`); every method and Drop binds the device on the calling thread first.
unsafe impl Send for MapInner {}
// SAFETY: no interior mutability besides what the Arc'd VaInner/PhysInner guard with locks; the
// ACL calls it makes are thread-safe once the device is bound.
unsafe impl Sync for MapInner {}

impl MapInner {
    fn unmap_now(&mut self) -> Result<()> {
        self.va.dev.bind()?;
        // SAFETY: we mapped `addr`; nothing uses it any more: host access borrows the Mapping
        // and streams with pending copies hold an Arc to us, so none is left now.
        unsafe { ffi::map::unmap(self.va.dev.lib(), self.addr) }?;
        self.live = false;
        if self.claimed {
            self.va.claims.lock().remove(&self.offset);
        }
        Ok(())
    }
}

impl Drop for MapInner {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        let _span = tracing::debug_span!("unmap", addr = ?self.addr, len = self.len).entered();
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
/// ([`read_into`](Mapping::read_into), [`write_from`](Mapping::write_from),
/// [`fill`](Mapping::fill)); no `&[u8]` is ever formed over memory a device or peer may write.
#[must_use = "dropping a Mapping unmaps it (once no stream has work on it)"]
pub struct Mapping {
    pub(crate) inner: Arc<MapInner>,
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("device", &self.inner.va.dev.id())
            .field("addr", &self.inner.addr)
            .field("len", &self.inner.len)
            .finish()
    }
}

/// Resolves a range against a length.
fn resolve(
    range: impl RangeBounds<usize>,
    len: usize,
    what: &'static str,
) -> Result<(usize, usize)> {
    resolve_units(range, len, 1, what)
}

/// Resolves a range of units (bytes, or elements of `unit` bytes) against a length of `len`
/// units into `(start, count)`; the error reports the range in bytes.
pub(crate) fn resolve_units(
    range: impl RangeBounds<usize>,
    len: usize,
    unit: usize,
    what: &'static str,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::OutOfBounds {
            what,
            offset: start.saturating_mul(unit),
            len: end.saturating_sub(start).saturating_mul(unit),
            size: len.saturating_mul(unit),
        });
    }
    Ok((start, end - start))
}

impl Mapping {
    /// The first mapped address.
    pub fn as_raw(&self) -> *mut c_void {
        self.inner.addr
    }

    /// The mapped size in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Always false (mappings are never empty).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
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

    /// A view of `range` (bytes) of the mapping, borrowing it:
    ///
    /// ```compile_fail,E0505
    /// # fn f(m: ascend_mem::Mapping) {
    /// let view = m.slice(..).unwrap();
    /// drop(m);
    /// view.len();
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `range` exceeds the mapping.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<MappingSlice<'_>> {
        let (offset, len) = resolve(range, self.len(), "Mapping::slice")?;
        Ok(MappingSlice {
            map: self,
            offset,
            len,
        })
    }

    /// The whole mapping as a view.
    pub fn as_slice(&self) -> MappingSlice<'_> {
        MappingSlice {
            map: self,
            offset: 0,
            len: self.len(),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst` (`aclrtMemcpy`, device to host).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    pub fn read_into(&self, dst: &mut [u8], offset: usize) -> Result<()> {
        self.as_slice().read_into(dst, offset)
    }

    /// Copies `src` to `offset` (`aclrtMemcpy`, host to device).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    pub fn write_from(&self, src: &[u8], offset: usize) -> Result<()> {
        self.as_slice().write_from(src, offset)
    }

    /// Sets every byte to `value` (`aclrtMemset`).
    ///
    /// # Errors
    /// An `aclrtMemset` failure; a sticky error.
    #[doc(alias = "aclrtMemset")]
    pub fn fill(&self, value: u8) -> Result<()> {
        self.as_slice().fill(value)
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
        // SAFETY: out-parameter call on an opened table.
        let logic = unsafe { ffi::device::logic_id(dev.lib(), dev.id()) }?;
        let desc = acl::aclrtMemAccessDesc {
            flags: access.raw(),
            location: acl::aclrtMemLocation {
                id: logic as u32,
                type_: acl::ACL_MEM_LOCATION_TYPE_DEVICE,
            },
            rsv: [0; 12],
        };
        // SAFETY: address and size are exactly those of this live mapping's map call.
        unsafe { ffi::map::set_access(self.device().lib(), self.as_raw(), self.len(), &desc) }
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

/// A borrowed byte range of a [`Mapping`] (or of a buffer): the unit copies work on.
///
/// It cannot outlive the mapping it views (see [`Mapping::slice`]).
#[derive(Clone, Copy)]
pub struct MappingSlice<'a> {
    map: &'a Mapping,
    offset: usize,
    len: usize,
}

impl fmt::Debug for MappingSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappingSlice")
            .field("addr", &self.as_raw())
            .field("len", &self.len)
            .finish()
    }
}

/// The memcpy kind between two sides; `true` = host DRAM, `false` = device memory.
pub(crate) fn memcpy_kind(dst_host_slice: bool, src_host_slice: bool) -> acl::aclrtMemcpyKind {
    // Mapped VMM memory (HBM or host DRAM alike) lives in device VA: copies to and from it
    // are device-side copies, as HIXL issues them.
    match (dst_host_slice, src_host_slice) {
        (false, false) => acl::ACL_MEMCPY_DEVICE_TO_DEVICE,
        (false, true) => acl::ACL_MEMCPY_HOST_TO_DEVICE,
        (true, false) => acl::ACL_MEMCPY_DEVICE_TO_HOST,
        (true, true) => acl::ACL_MEMCPY_HOST_TO_HOST,
    }
}

impl<'a> MappingSlice<'a> {
    /// The first address of the view.
    pub fn as_raw(&self) -> *mut c_void {
        (self.map.inner.addr as usize + self.offset) as *mut c_void
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The offset of the view in its mapping.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The mapping viewed.
    pub fn mapping(&self) -> &'a Mapping {
        self.map
    }

    pub(crate) fn map_inner(&self) -> &Arc<MapInner> {
        &self.map.inner
    }

    /// A narrower view; `range` is relative to this view.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<MappingSlice<'a>> {
        let (o, l) = resolve(range, self.len, "MappingSlice::slice")?;
        Ok(MappingSlice {
            map: self.map,
            offset: self.offset + o,
            len: l,
        })
    }

    fn check(&self, offset: usize, len: usize, what: &'static str) -> Result<()> {
        if offset.checked_add(len).map_or(true, |e| e > self.len) {
            return Err(Error::OutOfBounds {
                what,
                offset,
                len,
                size: self.len,
            });
        }
        Ok(())
    }

    fn dev(&self) -> &Device {
        self.map.device()
    }

    /// Copies `dst.len()` bytes at `offset` of the view into `dst` (`aclrtMemcpy`).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    pub fn read_into(&self, dst: &mut [u8], offset: usize) -> Result<()> {
        self.check(offset, dst.len(), "read_into")?;
        if dst.is_empty() {
            return Ok(());
        }
        self.dev().enter()?;
        let src = (self.as_raw() as usize + offset) as *const c_void;
        // SAFETY: `src..+len` lies inside the live mapping (checked above, and `self` borrows
        // the Mapping); `dst` is an exclusive host buffer of `len` bytes.
        unsafe {
            ffi::copy::memcpy(
                self.dev().lib(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                src,
                dst.len(),
                memcpy_kind(true, false),
            )
        }
    }

    /// Copies `src` to `offset` of the view (`aclrtMemcpy`).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpy` failure; a sticky error.
    #[doc(alias = "aclrtMemcpy")]
    pub fn write_from(&self, src: &[u8], offset: usize) -> Result<()> {
        self.check(offset, src.len(), "write_from")?;
        if src.is_empty() {
            return Ok(());
        }
        self.dev().enter()?;
        let dst = (self.as_raw() as usize + offset) as *mut c_void;
        // SAFETY: `dst..+len` lies inside the live mapping (no Rust reference covers mapped
        // memory); `src` is a readable host buffer of `len` bytes.
        unsafe {
            ffi::copy::memcpy(
                self.dev().lib(),
                dst,
                self.len - offset,
                src.as_ptr().cast(),
                src.len(),
                memcpy_kind(false, true),
            )
        }
    }

    /// Sets every byte of the view to `value` (`aclrtMemset`).
    ///
    /// # Errors
    /// An `aclrtMemset` failure; a sticky error.
    #[doc(alias = "aclrtMemset")]
    pub fn fill(&self, value: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.dev().enter()?;
        // SAFETY: the view lies inside the live mapping.
        unsafe { ffi::copy::memset(self.dev().lib(), self.as_raw(), self.len, value, self.len) }
    }

    /// Copies all of `src` into the start of this view, synchronously (`aclrtMemcpy`,
    /// device to device).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `src` is longer than this view; [`Error::WrongDevice`]
    /// across runtimes; an `aclrtMemcpy` failure.
    #[doc(alias = "aclrtMemcpy")]
    pub fn copy_from(&self, src: &MappingSlice<'_>) -> Result<()> {
        self.check(0, src.len, "copy_from")?;
        if !std::ptr::eq(src.dev().lib(), self.dev().lib()) {
            return Err(Error::WrongDevice {
                what: "aclrtMemcpy across runtimes",
                expected: self.dev().id(),
                found: src.dev().id(),
            });
        }
        if src.len == 0 {
            return Ok(());
        }
        self.dev().enter()?;
        // SAFETY: both ranges lie inside live mappings borrowed for the call.
        unsafe {
            ffi::copy::memcpy(
                self.dev().lib(),
                self.as_raw(),
                self.len,
                src.as_raw(),
                src.len,
                memcpy_kind(false, false),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_with_bounds() {
        assert_eq!(resolve(.., 10, "t").unwrap(), (0, 10));
        assert_eq!(resolve(2..5, 10, "t").unwrap(), (2, 3));
        assert_eq!(resolve(2..=5, 10, "t").unwrap(), (2, 4));
        assert_eq!(resolve(10.., 10, "t").unwrap(), (10, 0));
        assert!(matches!(
            resolve(5..11, 10, "t"),
            Err(Error::OutOfBounds {
                offset: 5,
                len: 6,
                size: 10,
                ..
            })
        ));
        let (start, end) = (6, 5);
        assert!(resolve(start..end, 10, "t").is_err());
        assert!(resolve(..=usize::MAX, 10, "t").is_err());
    }

    #[test]
    fn memcpy_kinds() {
        assert_eq!(memcpy_kind(false, false), acl::ACL_MEMCPY_DEVICE_TO_DEVICE);
        assert_eq!(memcpy_kind(false, true), acl::ACL_MEMCPY_HOST_TO_DEVICE);
        assert_eq!(memcpy_kind(true, false), acl::ACL_MEMCPY_DEVICE_TO_HOST);
    }
}
