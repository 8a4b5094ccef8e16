//! [`DeviceBuffer`] and [`HostBuffer`]: reserve + allocate + map in one value.

use std::fmt;

use crate::device::Device;
use crate::error::Result;
use crate::share::{ExportFlags, FabricHandle, ShareKind};
use crate::spec::MemSpec;
use crate::view::MemView;
use crate::vmm::{Access, Mapping, MappingSlice, PhysicalMem, ReservedVa};

fn make(dev: &Device, min_bytes: usize, spec: MemSpec) -> Result<Mapping> {
    let len = dev.round_up_for(spec, min_bytes.max(1))?;
    let va = ReservedVa::new(dev, len)?;
    let mem = PhysicalMem::alloc(dev, len, spec)?;
    // The mapping holds both; dropping `va` and `mem` here only drops our extra handles.
    va.map(&mem, len.zero())
}

macro_rules! buffer_common {
    ($t:ident) => {
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("device", &self.map.device().id())
                    .field("addr", &self.map.as_raw())
                    .field("len", &self.map.len())
                    .finish()
            }
        }

        /// The buffer's whole mapping (the length: the requested size rounded up to whole
        /// granules).
        impl MemView for $t {
            fn as_slice(&self) -> MappingSlice<'_> {
                self.map.as_slice()
            }
        }

        impl $t {
            /// The first address as the C calls take it (prefer
            /// [`MemView::addr`](crate::MemView::addr)).
            pub fn as_raw(&self) -> *mut std::ffi::c_void {
                self.map.as_raw()
            }

            /// The device it was made through.
            pub fn device(&self) -> &Device {
                self.map.device()
            }

            /// The underlying mapping.
            pub fn mapping(&self) -> &Mapping {
                &self.map
            }

            /// Consumes the buffer, returning its mapping (which owns the VA and the memory).
            pub fn into_mapping(self) -> Mapping {
                self.map
            }

            /// Exports the buffer's memory (see [`PhysicalMem::export`]).
            ///
            /// # Errors
            /// As [`PhysicalMem::export`].
            #[doc(alias = "aclrtMemExportToShareableHandleV2")]
            pub fn export(&self, kind: ShareKind, flags: ExportFlags) -> Result<FabricHandle> {
                self.map.memory().export(kind, flags)
            }
        }
    };
}

/// Device HBM reserved, allocated and mapped in one value; all three are undone on drop.
///
/// Byte access is [`MemView`]'s (`use ascend_mem::prelude::*`), copying through
/// `aclrtMemcpy`/`aclrtMemset`: device memory may be written by the device or a peer at any
/// time, so no `&[u8]` over it is ever handed out.
///
/// A view ([`MappingSlice`], from [`slice`](MemView::slice) or
/// [`as_slice`](MemView::as_slice)) borrows the buffer and cannot outlive it:
///
/// ```compile_fail,E0505
/// # use ascend_mem::prelude::*;
/// # fn f(buf: ascend_mem::DeviceBuffer) {
/// let view = buf.as_slice();
/// drop(buf); // error[E0505]: cannot move out of `buf` because it is borrowed
/// view.len();
/// # }
/// ```
#[must_use = "dropping a DeviceBuffer unmaps and frees it"]
pub struct DeviceBuffer {
    map: Mapping,
}

impl DeviceBuffer {
    /// At least `min_bytes` of HBM on `dev`, rounded up to whole granules.
    ///
    /// # Errors
    /// As [`ReservedVa::new`], [`PhysicalMem::alloc`] (kind
    /// [`OutOfMemory`](crate::ErrorKind::OutOfMemory) over capacity)
    /// and [`ReservedVa::map`]; whatever was made before the failure is undone.
    pub fn new(dev: &Device, min_bytes: usize) -> Result<DeviceBuffer> {
        Ok(DeviceBuffer {
            map: make(dev, min_bytes, MemSpec::DEVICE_HBM)?,
        })
    }

    /// At least `min_bytes` of memory of kind `spec` (device or host).
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`].
    pub fn with_spec(dev: &Device, min_bytes: usize, spec: MemSpec) -> Result<DeviceBuffer> {
        Ok(DeviceBuffer {
            map: make(dev, min_bytes, spec)?,
        })
    }
}

buffer_common!(DeviceBuffer);

/// Host DRAM (reachable by the device) reserved, allocated and mapped in one value.
///
/// Byte access copies through ACL as for [`DeviceBuffer`]: the device or a peer may write it.
/// Its views borrow it in the same way:
///
/// ```compile_fail,E0505
/// # use ascend_mem::prelude::*;
/// # fn f(buf: ascend_mem::HostBuffer) {
/// let view = buf.slice(..4096).unwrap();
/// drop(buf); // error[E0505]: cannot move out of `buf` because it is borrowed
/// view.len();
/// # }
/// ```
#[must_use = "dropping a HostBuffer unmaps and frees it"]
pub struct HostBuffer {
    map: Mapping,
}

impl HostBuffer {
    /// At least `min_bytes` of host DRAM ([`MemSpec::HOST`]), rounded up to whole granules,
    /// with read-write access granted to `dev` (R19).
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`] and [`Mapping::set_device_access`].
    pub fn new(dev: &Device, min_bytes: usize) -> Result<HostBuffer> {
        Self::with_spec(dev, min_bytes, MemSpec::HOST)
    }

    /// At least `min_bytes` of host DRAM on NUMA node `node`.
    ///
    /// # Errors
    /// As [`HostBuffer::new`].
    pub fn on_numa(dev: &Device, min_bytes: usize, node: u32) -> Result<HostBuffer> {
        Self::with_spec(dev, min_bytes, MemSpec::host_numa(node))
    }

    fn with_spec(dev: &Device, min_bytes: usize, spec: MemSpec) -> Result<HostBuffer> {
        let map = make(dev, min_bytes, spec)?;
        map.set_device_access(dev, Access::ReadWrite)?;
        Ok(HostBuffer { map })
    }
}

buffer_common!(HostBuffer);
