//! The VMM handles: a reservation ([`OwnedVa`]), a physical allocation ([`OwnedPhys`]), a
//! mapping ([`OwnedMap`]) and a borrowed mapped range ([`MappedRef`]), with the safe calls
//! their ownership justifies.
//!
//! `ffi::va`, `ffi::phys`, `ffi::map` and `ffi::copy` keep their raw, `unsafe` signatures
//! (tests and rare callers pass raw handles); these types are the crate's safe way to make
//! those calls. Each owned value is live from its create call until its `release`, `free` or
//! `unmap` succeeds, after which it hands out nothing and further calls on it are refused.

use std::ffi::c_void;
use std::marker::PhantomData;

use acl::AclLib;

use crate::error::{Error, Result};
use crate::ffi;
use crate::ffi::RawHandle;

/// The error for a call on a handle already released, freed or unmapped (the safe types
/// never make one: they drop the handle with its owner).
fn gone(api: &'static str) -> Error {
    Error::InvalidArgument {
        api,
        what: "handle (already released)",
        value: 0,
    }
}

/// A reservation of device VA this value owns.
#[derive(Debug)]
pub(crate) struct OwnedVa {
    base: RawHandle,
    live: bool,
}

impl OwnedVa {
    /// `aclrtReserveMemAddress` of `len` bytes.
    pub(crate) fn reserve(lib: &AclLib, len: usize) -> Result<OwnedVa> {
        // SAFETY: plain values; the new range is owned by the value returned.
        let base = unsafe { ffi::va::reserve(lib, len, 0) }?;
        Ok(OwnedVa {
            base: RawHandle::new(base),
            live: true,
        })
    }

    /// `aclrtReserveMemAddressNoUCMemory` of `len` bytes at `at`.
    pub(crate) fn reserve_no_uc(lib: &AclLib, len: usize, at: usize) -> Result<OwnedVa> {
        // SAFETY: plain values; the runtime checks that the fixed range is free. The new range
        // is owned by the value returned.
        let base = unsafe { ffi::va::reserve_no_uc(lib, len, at as *mut c_void, 0) }?;
        Ok(OwnedVa {
            base: RawHandle::new(base),
            live: true,
        })
    }

    /// The first address.
    pub(crate) fn base(&self) -> *mut c_void {
        self.base.get()
    }

    /// Whether the range is still reserved.
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    /// `aclrtReleaseMemAddress`; nothing once released.
    pub(crate) fn release(&mut self, lib: &AclLib) -> Result<()> {
        if !self.live {
            return Ok(());
        }
        // SAFETY: we own the live reservation and mark it released on success, so it is not
        // released twice. A mapping inside it would make the runtime refuse (rule R20); the
        // crate's mappings hold their reservation's owner, so none is left here.
        unsafe { ffi::va::release(lib, self.base.get()) }?;
        self.live = false;
        Ok(())
    }
}

/// A physical allocation (allocated, imported or retained) this value owns.
#[derive(Debug)]
pub(crate) struct OwnedPhys {
    h: RawHandle,
    live: bool,
}

impl OwnedPhys {
    /// # Safety
    /// `h` is a live handle owned by nobody else.
    pub(crate) unsafe fn from_raw(h: acl::aclrtDrvMemHandle) -> OwnedPhys {
        OwnedPhys {
            h: RawHandle::new(h),
            live: true,
        }
    }

    /// `aclrtMallocPhysical`.
    pub(crate) fn malloc(
        lib: &AclLib,
        len: usize,
        prop: &acl::aclrtPhysicalMemProp,
    ) -> Result<OwnedPhys> {
        // SAFETY: `prop` is a valid struct; the new handle is owned by the value returned.
        let h = unsafe { ffi::phys::malloc(lib, len, prop) }?;
        // SAFETY: fresh from a successful allocation.
        Ok(unsafe { OwnedPhys::from_raw(h) })
    }

    /// `aclrtMemImportFromShareableHandleV2`, onto the calling thread's device.
    pub(crate) fn import(
        lib: &AclLib,
        data: &ffi::share::HandleData,
        share_type: acl::aclrtMemSharedHandleType,
    ) -> Result<OwnedPhys> {
        // SAFETY: `data` is 128 readable bytes, validated by the runtime.
        let h = unsafe { ffi::share::import_v2(lib, data, share_type) }?;
        // SAFETY: fresh from a successful import.
        Ok(unsafe { OwnedPhys::from_raw(h) })
    }

    /// `aclrtMemRetainAllocationHandle`: a new handle on the allocation mapped at `base`.
    pub(crate) fn retain(lib: &AclLib, base: usize) -> Result<OwnedPhys> {
        let mut h: acl::aclrtDrvMemHandle = std::ptr::null_mut();
        // SAFETY: the call only looks the address up; `h` is a writable local.
        unsafe {
            ffi::check(
                lib,
                "aclrtMemRetainAllocationHandle",
                lib.aclrtMemRetainAllocationHandle(base as *mut c_void, &mut h),
            )
        }?;
        // SAFETY: a successful retain hands us a new reference that we release once.
        Ok(unsafe { OwnedPhys::from_raw(h) })
    }

    /// Whether the handle is still held.
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    /// The raw handle (borrowed: do not free it).
    pub(crate) fn as_raw(&self) -> acl::aclrtDrvMemHandle {
        self.h.get()
    }

    fn live(&self, api: &'static str) -> Result<acl::aclrtDrvMemHandle> {
        if self.live {
            Ok(self.h.get())
        } else {
            Err(gone(api))
        }
    }

    /// `aclrtMemGetAllocationPropertiesFromHandle`.
    pub(crate) fn properties(&self, lib: &AclLib) -> Result<acl::aclrtPhysicalMemProp> {
        let h = self.live("aclrtMemGetAllocationPropertiesFromHandle")?;
        // SAFETY: `h` is live (owned by self).
        unsafe { ffi::phys::properties(lib, h) }
    }

    /// `aclrtMemExportToShareableHandleV2`.
    pub(crate) fn export(
        &self,
        lib: &AclLib,
        flags: u64,
        share_type: acl::aclrtMemSharedHandleType,
    ) -> Result<ffi::share::HandleData> {
        let h = self.live("aclrtMemExportToShareableHandleV2")?;
        // SAFETY: `h` is live (owned by self).
        unsafe { ffi::share::export_v2(lib, h, flags, share_type) }
    }

    /// `aclrtFreePhysical`; nothing once freed.
    pub(crate) fn free(&mut self, lib: &AclLib) -> Result<()> {
        if !self.live {
            return Ok(());
        }
        // SAFETY: we own the live handle and mark it freed on success, so it is not freed
        // twice. The crate's mappings hold the allocation's owner, so none maps it now (and
        // the runtime refuses to free mapped memory, rule R20).
        unsafe { ffi::phys::free(lib, self.h.get()) }?;
        self.live = false;
        Ok(())
    }
}

/// What owns an [`OwnedMap`], shared through an `Arc`: what is registered over part of the
/// mapping (a symmetric window) keeps a clone, so the memory stays mapped while it is (the
/// mapping is unmapped only through `&mut`, so never while a clone is held).
pub(crate) trait MapOwner: Send + Sync + 'static {
    /// The mapping.
    fn mapping(&self) -> &OwnedMap;
}

/// Physical memory mapped into a reservation, owned by this value.
#[derive(Debug)]
pub(crate) struct OwnedMap {
    addr: RawHandle,
    len: usize,
    live: bool,
}

impl OwnedMap {
    /// `aclrtMapMem` of all `len` bytes of `phys` at `offset` of `va`.
    ///
    /// # Errors
    /// An error when either handle is gone; an `aclrtMapMem` failure (the runtime refuses a
    /// range outside the reservation, unaligned or overlapping a mapping: rule R10).
    pub(crate) fn map(
        lib: &AclLib,
        va: &OwnedVa,
        offset: usize,
        phys: &OwnedPhys,
        len: usize,
    ) -> Result<OwnedMap> {
        if !va.is_live() {
            return Err(gone("aclrtMapMem"));
        }
        let h = phys.live("aclrtMapMem")?;
        let addr = va.base.addr().wrapping_add(offset) as *mut c_void;
        // SAFETY: `va` and `h` are live. The runtime maps only inside one reservation, at an
        // aligned address, with the size of the allocation, and never over another mapping
        // (rule R10: it refuses anything else, which `ReservedVa::map_unchecked` relies on);
        // the checked path also keeps these on the host. The mapping is owned by the value
        // returned.
        unsafe { ffi::map::map(lib, addr, len, h) }?;
        Ok(OwnedMap {
            addr: RawHandle::new(addr),
            len,
            live: true,
        })
    }

    /// Whether the range is still mapped.
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    /// The first mapped address.
    pub(crate) fn addr(&self) -> *mut c_void {
        self.addr.get()
    }

    /// The mapped length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `len` bytes at `offset`, borrowed; `None` outside the mapping or once unmapped.
    pub(crate) fn range(&self, offset: usize, len: usize) -> Option<MappedRef<'_>> {
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len);
        (self.live && inside).then(|| MappedRef {
            addr: self.addr.addr() + offset,
            len,
            _map: PhantomData,
        })
    }

    /// `aclrtMemSetAccess` over the whole mapping.
    pub(crate) fn set_access(&self, lib: &AclLib, desc: &acl::aclrtMemAccessDesc) -> Result<()> {
        if !self.live {
            return Err(gone("aclrtMemSetAccess"));
        }
        // SAFETY: address and size are exactly those of this live mapping's map call.
        unsafe { ffi::map::set_access(lib, self.addr.get(), self.len, desc) }
    }

    /// `aclrtUnmapMem`; nothing once unmapped.
    pub(crate) fn unmap(&mut self, lib: &AclLib) -> Result<()> {
        if !self.live {
            return Ok(());
        }
        // SAFETY: we own the live mapping and mark it unmapped on success. Host copies borrow
        // it (`MappedRef`), so none runs now (`&mut self`); queued device copies are the
        // business of whoever queued them (`ffi::copy::memcpy_async`'s contract), and the
        // crate's streams hold the mapping's owner until synchronized.
        unsafe { ffi::map::unmap(lib, self.addr.get()) }?;
        self.live = false;
        Ok(())
    }
}

/// A byte range of a live mapping, borrowed from its [`OwnedMap`]: the synchronous copies on
/// it are safe.
#[derive(Copy, Clone, Debug)]
pub(crate) struct MappedRef<'a> {
    addr: usize,
    len: usize,
    _map: PhantomData<&'a OwnedMap>,
}

impl MappedRef<'_> {
    /// The first address.
    pub(crate) fn addr(self) -> *mut c_void {
        self.addr as *mut c_void
    }

    /// The length in bytes.
    pub(crate) fn len(self) -> usize {
        self.len
    }

    /// `aclrtMemcpy` of all of this range into `dst` (device to host); `dst.len()` must equal
    /// the range's length.
    pub(crate) fn read_into(self, lib: &AclLib, dst: &mut [u8]) -> Result<()> {
        let n = dst.len().min(self.len);
        // SAFETY: the source lies inside a live mapping (borrowed); `dst` is an exclusive host
        // buffer of at least `n` bytes.
        unsafe {
            ffi::copy::memcpy(
                lib,
                dst.as_mut_ptr().cast(),
                dst.len(),
                self.addr(),
                n,
                acl::ACL_MEMCPY_DEVICE_TO_HOST,
            )
        }
    }

    /// `aclrtMemcpy` of `src` into the start of this range (host to device).
    pub(crate) fn write_from(self, lib: &AclLib, src: &[u8]) -> Result<()> {
        let n = src.len().min(self.len);
        // SAFETY: the destination lies inside a live mapping (borrowed; no Rust reference
        // covers mapped memory); `src` is a readable host buffer of at least `n` bytes.
        unsafe {
            ffi::copy::memcpy(
                lib,
                self.addr(),
                self.len,
                src.as_ptr().cast(),
                n,
                acl::ACL_MEMCPY_HOST_TO_DEVICE,
            )
        }
    }

    /// `aclrtMemcpy` of all of `src` into the start of this range (device to device).
    pub(crate) fn copy_from(self, lib: &AclLib, src: MappedRef<'_>) -> Result<()> {
        let n = src.len.min(self.len);
        // SAFETY: both ranges lie inside live mappings (borrowed).
        unsafe {
            ffi::copy::memcpy(
                lib,
                self.addr(),
                self.len,
                src.addr(),
                n,
                acl::ACL_MEMCPY_DEVICE_TO_DEVICE,
            )
        }
    }

    /// `aclrtMemset` of the whole range.
    pub(crate) fn fill(self, lib: &AclLib, value: u8) -> Result<()> {
        // SAFETY: the range lies inside a live mapping (borrowed).
        unsafe { ffi::copy::memset(lib, self.addr(), self.len, value, self.len) }
    }
}
