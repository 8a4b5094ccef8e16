//! Memory HIXL can register: the [`CommMemory`] contract, the memory kinds as the C API
//! writes them (`CommMemType`), and the memory a registration or batch keeps alive.

use std::any::Any;
use std::sync::Arc;

use ascend_mem::prelude::*;
use ascend_mem::{Addr, DeviceBuffer, HostBuffer, Mapping};
use hixl_sys as hixl;

/// Where registered memory lives (`CommMemType`: `Device` is `COMM_MEM_TYPE_DEVICE`, `Host`
/// `COMM_MEM_TYPE_HOST`): ascend-mem's one host-or-device type.
pub use ascend_mem::MemKind;

/// `kind` as a `CommMemType`.
pub(crate) fn raw_kind(kind: MemKind) -> hixl::CommMemType {
    match kind {
        MemKind::Device => hixl::COMM_MEM_TYPE_DEVICE,
        MemKind::Host => hixl::COMM_MEM_TYPE_HOST,
    }
}

/// A `CommMemType` as a kind (anything but HOST is device memory).
pub(crate) fn kind_of_raw(t: hixl::CommMemType) -> MemKind {
    if t == hixl::COMM_MEM_TYPE_HOST {
        MemKind::Host
    } else {
        MemKind::Device
    }
}

/// Memory that can be registered with HIXL.
///
/// # Safety
/// [`CommMemory::range`] returns memory of that kind, made through the same runtime, valid for
/// as long as the value lives and the same every time it is called.
#[allow(unsafe_code)]
pub unsafe trait CommMemory: Send + Sync + 'static {
    /// Kind, first address and length in bytes.
    fn range(&self) -> (MemKind, Addr, usize);
}

#[allow(unsafe_code)]
// SAFETY: the buffer's mapping is device memory, unmapped only when the buffer drops.
unsafe impl CommMemory for DeviceBuffer {
    fn range(&self) -> (MemKind, Addr, usize) {
        (MemKind::Device, self.addr(), self.len())
    }
}

#[allow(unsafe_code)]
// SAFETY: device-accessible host memory, unmapped only when the buffer drops.
unsafe impl CommMemory for HostBuffer {
    fn range(&self) -> (MemKind, Addr, usize) {
        (MemKind::Host, self.addr(), self.len())
    }
}

#[allow(unsafe_code)]
// SAFETY: the mapping stays mapped while the value lives; its kind follows the memory.
unsafe impl CommMemory for Mapping {
    fn range(&self) -> (MemKind, Addr, usize) {
        let kind = MemKind::host_if(self.is_host());
        (kind, self.addr(), self.len())
    }
}

/// Memory kept alive by a registration or an in-flight batch.
pub(crate) type Keep = Arc<dyn Any + Send + Sync>;

/// The C descriptor of `m`, with its kind.
pub(crate) fn comm_mem<M: CommMemory>(m: &M) -> (MemKind, hixl::CommMem) {
    let (kind, addr, size) = m.range();
    (
        kind,
        hixl::CommMem {
            type_: raw_kind(kind),
            addr: addr.as_ptr(),
            size: size as u64,
        },
    )
}
