//! Sharing physical memory with other processes: [`FabricHandle`] (the exporter's side) and
//! [`SharedHandle`] (plain bytes another process imports).

use std::fmt;

use crate::device::{granularity, Device};
use crate::error::{Error, ErrorKind, Result};
use crate::ffi;
use crate::handle::OwnedPhys;
use crate::vmm::{Origin, PhysicalMem};

/// The kind of share handle (`aclrtMemSharedHandleType`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShareKind {
    /// `ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT`: a 64-bit handle, within one server.
    Default,
    /// `ACL_MEM_SHARE_HANDLE_TYPE_FABRIC`: a 128-byte handle, across an A3 super-node.
    Fabric,
}

impl ShareKind {
    /// The C value.
    pub fn raw(self) -> acl::aclrtMemSharedHandleType {
        match self {
            ShareKind::Default => acl::ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT,
            ShareKind::Fabric => acl::ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        }
    }

    fn from_raw(v: u8) -> Option<ShareKind> {
        match u32::from(v) {
            acl::ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT => Some(ShareKind::Default),
            acl::ACL_MEM_SHARE_HANDLE_TYPE_FABRIC => Some(ShareKind::Fabric),
            _ => None,
        }
    }
}

bitflags::bitflags! {
    /// Export flags (`ACL_RT_VMM_EXPORT_FLAG_*`).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub struct ExportFlags: u64 {
        /// `ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION`: any process may import (no
        /// allow-list needed).
        const DISABLE_PID_VALIDATION = acl::ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION as u64;
    }
}

const MAGIC: [u8; 4] = *b"ASCM";
const VERSION: u8 = 1;
/// Length of [`SharedHandle::to_bytes`].
pub const SHARED_HANDLE_BYTES: usize = 16 + 128;

/// A share handle as plain data: what crosses to another process, and what it imports.
///
/// Wire format of [`to_bytes`](SharedHandle::to_bytes) (ours, little-endian, 144 bytes):
/// `"ASCM"`, version 1, share kind (1 DEFAULT, 2 FABRIC), 2 reserved bytes, the allocation
/// size as `u64`, then the 128-byte handle (`uint64_t` in the first 8 bytes for DEFAULT).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SharedHandle {
    kind: ShareKind,
    len: u64,
    data: acl::aclrtMemFabricHandle,
}

impl fmt::Debug for SharedHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedHandle")
            .field("kind", &self.kind)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl SharedHandle {
    /// The share kind.
    pub fn kind(&self) -> ShareKind {
        self.kind
    }

    /// The size of the shared allocation in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw handle bytes as ACL returned them.
    pub fn raw_data(&self) -> &[u8; 128] {
        &self.data.data
    }

    /// The bytes to send to another process.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(SHARED_HANDLE_BYTES);
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.push(self.kind.raw() as u8);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&self.len.to_le_bytes());
        v.extend_from_slice(&self.data.data);
        v
    }

    /// Parses bytes made by [`to_bytes`](SharedHandle::to_bytes). Only the framing is checked
    /// here; whether the handle is real is for the runtime to say at import.
    ///
    /// # Errors
    /// [`Error::BadHandleBytes`]: wrong length, magic, version or kind, or a zero size.
    pub fn from_bytes(bytes: &[u8]) -> Result<SharedHandle> {
        let bad = |reason| Error::BadHandleBytes {
            reason,
            len: bytes.len(),
        };
        if bytes.len() != SHARED_HANDLE_BYTES {
            return Err(bad("expected 144 bytes"));
        }
        if bytes[..4] != MAGIC {
            return Err(bad("bad magic (not an ascend-mem share handle)"));
        }
        if bytes[4] != VERSION {
            return Err(bad("unsupported version"));
        }
        let kind = ShareKind::from_raw(bytes[5]).ok_or_else(|| bad("unknown share kind"))?;
        let mut len = [0u8; 8];
        len.copy_from_slice(&bytes[8..16]);
        let len = u64::from_le_bytes(len);
        if len == 0 || usize::try_from(len).is_err() {
            return Err(bad("bad allocation size"));
        }
        let mut data = acl::aclrtMemFabricHandle::default();
        data.data.copy_from_slice(&bytes[16..]);
        Ok(SharedHandle { kind, len, data })
    }

    /// Builds a handle from its parts (for handles obtained outside this crate).
    pub fn from_parts(kind: ShareKind, len: usize, data: [u8; 128]) -> SharedHandle {
        SharedHandle {
            kind,
            len: len as u64,
            data: acl::aclrtMemFabricHandle { data },
        }
    }

    /// Imports the shared memory onto `dev`. The V2 import lands on the calling thread's
    /// current device (rule R17), so `dev` is made current first, checked with
    /// `aclrtGetDevice` (see [`Device::bind`]). Map the result like any [`PhysicalMem`].
    ///
    /// The size in these bytes comes from the sender and is not trusted: after the import,
    /// the allocation's properties are read back from the new handle
    /// (`aclrtMemGetAllocationPropertiesFromHandle`) and the claimed size must be a whole
    /// number of that kind's granules; [`ReservedVa::map`](crate::ReservedVa::map) then maps
    /// exactly the claimed size, which the runtime checks against the real allocation. Either
    /// way a forged or corrupted size is an [`Error::ImportSizeMismatch`], never a mapping of
    /// the wrong size.
    ///
    /// # Errors
    /// * `aclrtMemImportFromShareableHandleV2` failures: the exporter is gone or freed the
    ///   memory (rule R18: `ACL_ERROR_RT_INVALID_HANDLE` 107017), this pid is not on the
    ///   allow-list ([`PermissionDenied`](crate::ErrorKind::PermissionDenied), 207006),
    ///   garbage bytes;
    /// * [`Error::ImportSizeMismatch`] when the claimed size is not a multiple of the
    ///   allocation's granule (the imported handle is freed again);
    /// * `aclrtMemGetAllocationPropertiesFromHandle` or `aclrtMemGetAllocationGranularity`
    ///   failures (a runtime that lacks the first, or reports it unsupported, skips the check).
    #[doc(alias = "aclrtMemImportFromShareableHandleV2")]
    pub fn import(&self, dev: &Device) -> Result<PhysicalMem> {
        let _span = tracing::debug_span!("import", dev = dev.id(), kind = ?self.kind).entered();
        dev.enter()?;
        let lib = dev.lib();
        // The handle is owned by the PhysicalMem built right below (freed on drop, also on the
        // error paths).
        let h = OwnedPhys::import(lib, &self.data, self.kind.raw())?;
        let mem = PhysicalMem::from_handle(dev, h, self.len(), 0, Origin::Imported);
        // On any error below, `mem` drops and frees the imported handle.
        let (granule, host) = self.real_props(dev, &mem.inner.mem)?;
        if granule != 0 && self.len() % granule != 0 {
            return Err(Error::ImportSizeMismatch {
                claimed: self.len(),
                granule,
                reason: "that is not a whole number of the allocation's granules",
                source: None,
            });
        }
        Ok(mem.with_import_props(granule, host))
    }

    /// The MINIMUM granularity of the imported allocation's kind, read back from its handle,
    /// and whether it is host DRAM; (0, false) when the runtime cannot say (no such call, or
    /// reported unsupported).
    fn real_props(&self, dev: &Device, h: &OwnedPhys) -> Result<(usize, bool)> {
        let lib = dev.lib();
        let mut prop = match h.properties(lib) {
            Ok(p) => p,
            Err(e) if e.kind() == ErrorKind::NotSupported => {
                tracing::debug!(error = %e, "cannot read imported properties; size unchecked");
                return Ok((0, false));
            }
            Err(e) => return Err(e),
        };
        let host = prop.location.type_ != acl::ACL_MEM_LOCATION_TYPE_DEVICE;
        // The properties name the exporter's device, which need not exist here: ask about the
        // same kind of memory on the importing device.
        if prop.location.type_ == acl::ACL_MEM_LOCATION_TYPE_DEVICE {
            prop.location.id = dev.id() as u32;
        }
        Ok((
            granularity(lib, &prop, acl::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM)?,
            host,
        ))
    }
}

/// An exported allocation: holds the [`PhysicalMem`] it exported (the memory outlives the
/// handle on this side) and the [`SharedHandle`] to send.
///
/// Cheap to clone. One allocation is exported at most once per process (rule R15): keep and
/// clone this value rather than exporting again.
#[derive(Clone)]
#[must_use = "dropping a FabricHandle lets the exported memory go"]
pub struct FabricHandle {
    mem: PhysicalMem,
    shared: SharedHandle,
    flags: ExportFlags,
}

impl fmt::Debug for FabricHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FabricHandle")
            .field("mem", &self.mem)
            .field("kind", &self.shared.kind)
            .field("flags", &self.flags)
            .finish()
    }
}

impl PhysicalMem {
    /// Exports this allocation for other processes.
    ///
    /// With default flags only allow-listed pids may import
    /// ([`FabricHandle::allow_pids`]); [`ExportFlags::DISABLE_PID_VALIDATION`] lets anyone.
    ///
    /// # Errors
    /// [`Error::AlreadyExported`] on a second export (R15); [`Error::InvalidArgument`] for
    /// imported memory; `aclrtMemExportToShareableHandleV2` failures (FABRIC where the product
    /// lacks it: [`NotSupported`](crate::ErrorKind::NotSupported) or a driver code).
    #[doc(alias = "aclrtMemExportToShareableHandleV2")]
    pub fn export(&self, kind: ShareKind, flags: ExportFlags) -> Result<FabricHandle> {
        let inner = &self.inner;
        if inner.origin == Origin::Imported {
            return Err(Error::InvalidArgument {
                api: "aclrtMemExportToShareableHandleV2",
                what: "memory origin (imported memory cannot be re-exported) =",
                value: 0,
            });
        }
        let mut exported = inner.exported.lock();
        if *exported {
            return Err(Error::AlreadyExported);
        }
        let _span = tracing::debug_span!("export", kind = ?kind).entered();
        inner.dev.enter()?;
        let data = inner
            .mem
            .export(inner.dev.lib(), flags.bits(), kind.raw())?;
        *exported = true;
        Ok(FabricHandle {
            mem: self.clone(),
            shared: SharedHandle {
                kind,
                len: self.len() as u64,
                data,
            },
            flags,
        })
    }
}

impl FabricHandle {
    /// The exported memory.
    pub fn memory(&self) -> &PhysicalMem {
        &self.mem
    }

    /// The share kind.
    pub fn kind(&self) -> ShareKind {
        self.shared.kind
    }

    /// The export flags.
    pub fn flags(&self) -> ExportFlags {
        self.flags
    }

    /// The data to send.
    pub fn shared(&self) -> &SharedHandle {
        &self.shared
    }

    /// [`SharedHandle::to_bytes`] of this export.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.shared.to_bytes()
    }

    /// Parses received bytes (same as [`SharedHandle::from_bytes`]).
    ///
    /// # Errors
    /// [`Error::BadHandleBytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<SharedHandle> {
        SharedHandle::from_bytes(bytes)
    }

    /// Adds `pids` to the allow-list of processes that may import this handle.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list; `aclrtMemSetPidToShareableHandleV2`
    /// failures.
    #[doc(alias = "aclrtMemSetPidToShareableHandleV2")]
    #[allow(unsafe_code)]
    pub fn allow_pids(&self, pids: &[i32]) -> Result<()> {
        if pids.is_empty() {
            return Err(Error::InvalidArgument {
                api: "aclrtMemSetPidToShareableHandleV2",
                what: "pidNum",
                value: 0,
            });
        }
        let dev = self.mem.device();
        dev.enter()?;
        let (data, kind) = (&self.shared.data, self.shared.kind.raw());
        // SAFETY: plain data, only read; the runtime validates the handle bytes and the list.
        unsafe { ffi::share::set_pids_v2(dev.lib(), data, kind, pids) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_framing_errors() {
        let mut data = [0u8; 128];
        data[..8].copy_from_slice(&0x1234_5678_9abc_def0u64.to_le_bytes());
        let h = SharedHandle::from_parts(ShareKind::Default, 4 << 20, data);
        let b = h.to_bytes();
        assert_eq!(b.len(), SHARED_HANDLE_BYTES);
        assert_eq!(SharedHandle::from_bytes(&b).unwrap(), h);
        let bad = |mut b: Vec<u8>, f: fn(&mut Vec<u8>)| {
            f(&mut b);
            SharedHandle::from_bytes(&b).unwrap_err()
        };
        assert!(matches!(
            bad(b.clone(), |b| b.truncate(10)),
            Error::BadHandleBytes { len: 10, .. }
        ));
        assert!(matches!(
            bad(b.clone(), |b| b[0] = b'X'),
            Error::BadHandleBytes { .. }
        ));
        assert!(matches!(
            bad(b.clone(), |b| b[4] = 9),
            Error::BadHandleBytes { .. }
        ));
        assert!(matches!(
            bad(b.clone(), |b| b[5] = 3),
            Error::BadHandleBytes { .. }
        ));
        assert!(matches!(
            bad(b, |b| b[8..16].fill(0)),
            Error::BadHandleBytes { .. }
        ));
    }
}
