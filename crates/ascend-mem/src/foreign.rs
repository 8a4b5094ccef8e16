//! Memory this crate did not allocate, and extra handles on memory it did: what a transfer
//! engine needs to register user memory.
//!
//! * [`Mapping::hold`] → [`MappingRef`]: a second owner of a mapping, so the memory stays
//!   mapped while an engine copies into it, even if the user drops the buffer first;
//! * [`PhysicalMem::export_cached`]: export an allocation once per process (rule R15) and hand
//!   out the same share-handle bytes on every later call (the memory itself is kept alive by
//!   whoever holds it, e.g. a [`MappingRef`]);
//! * [`Device::address_range`] (`aclrtMemGetAddressRange`), [`Device::pointer_info`]
//!   (`aclrtPointerGetAttributes`) and [`PhysicalMem::retain`]
//!   (`aclrtMemRetainAllocationHandle`): find and hold the allocation behind an address that
//!   some other code mapped.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::addr::Addr;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ffi;
use crate::handle::OwnedPhys;
use crate::share::{ExportFlags, ShareKind, SharedHandle};
use crate::spec::{Location, MemAttr, MemSpec};
use crate::view::MemView;
use crate::vmm::{Mapping, MappingSlice, Origin, PhysInner, PhysicalMem};

// ---------------------------------------------------------------------------------------------
// MappingRef

/// Another owner of a [`Mapping`]: the range stays mapped (and the memory allocated) until the
/// mapping, every `MappingRef` of it and every stream copy pending on it are gone.
///
/// While a `MappingRef` exists, [`Mapping::unmap`] returns [`Error::Busy`]; dropping the
/// original mapping only drops its handle. Cheap to clone.
#[derive(Clone)]
#[must_use = "dropping a MappingRef lets the mapping go"]
pub struct MappingRef {
    map: Arc<Mapping>,
}

impl fmt::Debug for MappingRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MappingRef").field(&*self.map).finish()
    }
}

impl Mapping {
    /// A second owner of this mapping (see [`MappingRef`]).
    pub fn hold(&self) -> MappingRef {
        MappingRef {
            map: Arc::new(Mapping {
                inner: self.inner.clone(),
            }),
        }
    }
}

impl MappingRef {
    /// The mapping, for slicing and copies.
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }
}

impl std::ops::Deref for MappingRef {
    type Target = Mapping;
    fn deref(&self) -> &Mapping {
        &self.map
    }
}

/// The held mapping, whole: a `MappingRef` copies and slices as the mapping does, and the
/// stream's async verbs take it directly.
impl MemView for MappingRef {
    fn as_slice(&self) -> MappingSlice<'_> {
        self.map.as_slice()
    }
}

// ---------------------------------------------------------------------------------------------
// Export cache

struct CacheEntry {
    mem: Weak<PhysInner>,
    shared: SharedHandle,
    flags: ExportFlags,
}

/// Exports made through [`PhysicalMem::export_cached`], keyed by the allocation's address.
#[derive(Default)]
struct Cache {
    entries: HashMap<usize, CacheEntry>,
    /// Dead entries are dropped when `entries` reaches this size (then twice the live count):
    /// amortized constant time per export, not a scan of the whole cache each time.
    prune_at: usize,
}

fn cache() -> &'static Mutex<Cache> {
    static C: OnceLock<Mutex<Cache>> = OnceLock::new();
    C.get_or_init(Default::default)
}

impl PhysicalMem {
    /// Exports this allocation the first time it is called for it, and returns the same
    /// share-handle bytes on every later call while the memory lives (one export per
    /// allocation per process, rule R15). The cache is process-wide and never keeps the
    /// memory alive.
    ///
    /// # Errors
    /// As [`PhysicalMem::export`]: [`Error::AlreadyExported`] when the memory was exported
    /// through [`PhysicalMem::export`] rather than this call; [`Error::InvalidArgument`] when a
    /// cached export exists with another kind or other flags.
    #[doc(alias = "aclrtMemExportToShareableHandleV2")]
    pub fn export_cached(&self, kind: ShareKind, flags: ExportFlags) -> Result<SharedHandle> {
        let key = Arc::as_ptr(&self.inner) as usize;
        let mut c = cache().lock();
        if let Some(e) = c.entries.get(&key) {
            if e.mem
                .upgrade()
                .is_some_and(|m| Arc::ptr_eq(&m, &self.inner))
            {
                if e.shared.kind() != kind || e.flags != flags {
                    return Err(Error::InvalidArgument {
                        api: "PhysicalMem::export_cached",
                        what: "kind/flags differing from the cached export; flags =",
                        value: flags.bits().into(),
                    });
                }
                return Ok(e.shared);
            }
        }
        let h = self.export(kind, flags)?;
        if c.entries.len() >= c.prune_at {
            c.entries.retain(|_, e| e.mem.strong_count() > 0);
            c.prune_at = (2 * c.entries.len()).max(64);
        }
        c.entries.insert(
            key,
            CacheEntry {
                mem: Arc::downgrade(&self.inner),
                shared: *h.shared(),
                flags,
            },
        );
        Ok(*h.shared())
    }
}

// ---------------------------------------------------------------------------------------------
// Foreign addresses

/// What `aclrtPointerGetAttributes` says about an address.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PointerInfo {
    /// Whether the address is device memory (`ACL_MEM_LOCATION_TYPE_DEVICE`) rather than
    /// host memory (device-reachable or plain).
    pub device: Option<u32>,
    /// The page size of the backing memory.
    pub page_size: u32,
}

impl Device {
    /// The mapped block (or `aclrtMalloc` block) containing `addr`: `(base, size)`.
    ///
    /// # Errors
    /// `aclrtMemGetAddressRange` failures: an address that is not memory of this runtime
    /// (plain host memory), or reserved but unmapped VA; [`Error::MissingSymbol`] on runtimes
    /// without the call.
    #[doc(alias = "aclrtMemGetAddressRange")]
    pub fn address_range(&self, addr: Addr) -> Result<(Addr, usize)> {
        self.enter()?;
        let (base, size) = ffi::ptr::address_range(self.lib(), addr.get() as usize)?;
        Ok((Addr::new(base as u64), size))
    }

    /// Where `addr` lives (`aclrtPointerGetAttributes`).
    ///
    /// # Errors
    /// `aclrtPointerGetAttributes` failures (a NULL address); [`Error::MissingSymbol`].
    #[doc(alias = "aclrtPointerGetAttributes")]
    pub fn pointer_info(&self, addr: Addr) -> Result<PointerInfo> {
        self.enter()?;
        let a = ffi::ptr::attributes(self.lib(), addr.get() as usize)?;
        Ok(PointerInfo {
            device: (a.location.type_ == acl::ACL_MEM_LOCATION_TYPE_DEVICE)
                .then_some(a.location.id),
            page_size: a.pageSize,
        })
    }
}

fn attr_from_raw(raw: acl::aclrtMemAttr, host: bool) -> MemAttr {
    const ATTRS: [MemAttr; 13] = [
        MemAttr::HbmHuge,
        MemAttr::HbmNormal,
        MemAttr::HbmHuge1G,
        MemAttr::DdrHuge,
        MemAttr::DdrNormal,
        MemAttr::DdrP2pHuge,
        MemAttr::DdrP2pNormal,
        MemAttr::Normal,
        MemAttr::Huge,
        MemAttr::Huge1G,
        MemAttr::P2pNormal,
        MemAttr::P2pHuge,
        MemAttr::P2pHuge1G,
    ];
    ATTRS
        .into_iter()
        .find(|a| a.raw() == raw)
        .unwrap_or(if host {
            MemAttr::P2pHuge
        } else {
            MemAttr::HbmHuge
        })
}

impl PhysicalMem {
    /// A new handle on the allocation mapped at `block_base` by someone else
    /// (`aclrtMemRetainAllocationHandle`), with its size and kind read back
    /// (`aclrtMemGetAddressRange`, `aclrtMemGetAllocationPropertiesFromHandle`). The handle is
    /// freed on drop; the allocation lives until every handle and mapping of it is gone, so it
    /// can be mapped again (an alias) and exported even after its owner unmaps it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `block_base` is not the start of a block (use
    /// [`Device::address_range`] first); the ACL failures of the three calls (an address that
    /// is not a VMM mapping, e.g. `aclrtMalloc` memory or plain host memory);
    /// [`Error::MissingSymbol`].
    #[doc(alias = "aclrtMemRetainAllocationHandle")]
    pub fn retain(dev: &Device, block_base: Addr) -> Result<PhysicalMem> {
        let (base, size) = dev.address_range(block_base)?;
        if base != block_base {
            return Err(Error::InvalidArgument {
                api: "aclrtMemRetainAllocationHandle",
                what: "address (not the start of its block) =",
                value: i128::from(block_base.get()),
            });
        }
        let lib = dev.lib();
        // The new handle is owned by the PhysicalMem built below (freed once, on its drop): a
        // failure below frees it through the drop.
        let h = OwnedPhys::retain(lib, base.get() as usize)?;
        let mem = PhysicalMem::from_handle(dev, h, size, 0, Origin::Allocated(MemSpec::DEVICE_HBM));
        let prop = mem.inner.mem.properties(lib)?;
        let location = match prop.location.type_ {
            acl::ACL_MEM_LOCATION_TYPE_DEVICE => Location::Device,
            acl::ACL_MEM_LOCATION_TYPE_HOST_NUMA => Location::HostNuma(prop.location.id),
            _ => Location::Host,
        };
        let spec = MemSpec {
            location,
            attr: attr_from_raw(prop.memAttr, location != Location::Device),
        };
        let granule = dev.granularity(spec).unwrap_or(0);
        // Rebuild with the kind known (the fresh value has no other owner).
        let PhysicalMem { inner } = mem;
        match Arc::try_unwrap(inner) {
            Ok(mut inner) => {
                inner.origin = Origin::Allocated(spec);
                if location == Location::Device {
                    inner.home = prop.location.id;
                }
                let mem = PhysicalMem {
                    inner: Arc::new(inner),
                };
                Ok(mem.with_import_props(granule, spec.is_host()))
            }
            Err(inner) => Ok(PhysicalMem { inner }),
        }
    }
}
