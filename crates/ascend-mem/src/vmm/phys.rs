//! [`PhysicalMem`]: device HBM or host DRAM, allocated or imported.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::device::{Device, Granular};
use crate::error::{close_last, CloseError, Error, Result};
use crate::handle::OwnedPhys;
use crate::spec::{Location, MemSpec};

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
    /// The allocation (freed by `close` or Drop).
    pub(crate) mem: OwnedPhys,
    pub(crate) len: usize,
    /// The granule mapping offsets must respect (the kind's granularity; 0 = unknown).
    pub(super) granule: usize,
    pub(crate) origin: Origin,
    /// Host DRAM: allocated as host memory, or imported from it (its properties say so).
    pub(crate) host: bool,
    /// The device whose memory it is, as the runtime sees it: `dev` unless the allocation was
    /// retained from another device's mapping (its properties name that device).
    pub(crate) home: u32,
    /// Set once exported (rule R15: one export per handle per process).
    pub(crate) exported: Mutex<bool>,
}

impl PhysInner {
    fn free_now(&mut self) -> Result<()> {
        self.dev.bind()?;
        // Every Mapping holding this Arc has already unmapped (a Mapping holds an Arc to us,
        // so none is left when we are dropped or closed).
        self.mem.free(self.dev.lib())
    }
}

impl Drop for PhysInner {
    fn drop(&mut self) {
        if !self.mem.is_live() {
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
/// Cheap to clone (an `Arc`); freed when the last clone, [`Mapping`](crate::Mapping) and
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
        let handle = OwnedPhys::malloc(dev.lib(), len.get(), &prop)?;
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
        mem: OwnedPhys,
        len: usize,
        granule: usize,
        origin: Origin,
    ) -> PhysicalMem {
        PhysicalMem {
            inner: Arc::new(PhysInner {
                dev: dev.clone(),
                mem,
                len,
                granule,
                host: matches!(origin, Origin::Allocated(s) if s.is_host()),
                home: u32::try_from(dev.id()).unwrap_or(u32::MAX),
                origin,
                exported: Mutex::new(false),
            }),
        }
    }

    /// The same memory with the mapping-offset granule and whether it is host DRAM now known
    /// (imports learn them after the handle exists). Only called on a fresh, unshared value.
    pub(crate) fn with_import_props(mut self, granule: usize, host: bool) -> PhysicalMem {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.granule = granule;
            inner.host = host;
        }
        self
    }

    /// The raw handle (borrowed: do not free it).
    pub fn as_raw(&self) -> acl::aclrtDrvMemHandle {
        self.inner.mem.as_raw()
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

    /// The device whose memory this is as the runtime sees it (what a batch copy's DEVICE
    /// location names): [`PhysicalMem::device`], unless it was retained from a mapping of
    /// another device's memory.
    pub(crate) fn home_device(&self) -> u32 {
        self.inner.home
    }

    /// Whether the memory is host DRAM: allocated as host memory, or imported (or retained)
    /// from an allocation whose properties say host (false when the runtime cannot say).
    pub fn is_host(&self) -> bool {
        self.inner.host
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

impl PhysicalMem {
    /// Takes ownership of a raw handle (freed on drop).
    ///
    /// # Safety
    /// `handle` is a live physical handle of `dev`'s runtime, of exactly `len` bytes, owned
    /// by nobody else (it will be passed to `aclrtFreePhysical` once).
    #[allow(unsafe_code)]
    pub unsafe fn from_raw(
        dev: &Device,
        handle: acl::aclrtDrvMemHandle,
        len: usize,
        origin: Origin,
    ) -> PhysicalMem {
        // SAFETY: forwarded to the caller (live, owned by nobody else).
        let mem = unsafe { OwnedPhys::from_raw(handle) };
        Self::from_handle(dev, mem, len, 0, origin)
    }
}
