//! The crate's public `unsafe` entry points, where the caller's promise stands in for a check
//! or an ownership proof: opening a runtime library by path or from a foreign table, adopting
//! a raw physical handle, and mapping without the host-side claim. Each lists its contract
//! under `# Safety`.

use std::path::Path;

use acl::AclLib;

use super::OwnedPhys;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::runtime::{by_path, Runtime};
use crate::vmm::{Mapping, Origin, PhysicalMem, ReservedVa};

impl Runtime {
    /// Opens an ACL runtime library from one explicit file (CANN or the emulator's
    /// `libascend_sim.so`). The library stays loaded for the life of the process; opening the
    /// same path again reuses it.
    ///
    /// # Errors
    /// [`Error::Load`] with the single attempt; an `aclInit` failure.
    ///
    /// # Safety
    /// Opening a shared library runs its initialisers, and its exports are called as the ACL
    /// functions of `acl-sys`: the file must be a trusted ACL runtime (or the emulator).
    pub unsafe fn from_library_path(path: impl AsRef<Path>) -> Result<Runtime> {
        let path = path.as_ref().to_path_buf();
        let lib = {
            let mut m = by_path().lock();
            match m.get(&path) {
                Some(l) => *l,
                None => {
                    // SAFETY: forwarded to the caller: the library is trusted.
                    let lib = unsafe { AclLib::open_path(&path) }
                        .map_err(|e| Error::Load(Box::new(e)))?;
                    // Never unloaded: handles from it may outlive every Runtime.
                    let lib: &'static AclLib = Box::leak(Box::new(lib));
                    m.insert(path, lib);
                    lib
                }
            }
        };
        Self::from_table(lib)
    }

    /// Wraps an ACL table obtained elsewhere (for instance a fresh table over the emulator's
    /// in-process lookup, or one opened with custom search rules).
    ///
    /// # Errors
    /// An `aclInit` failure.
    ///
    /// # Safety
    /// Every symbol `lib` resolves must be the ACL function of that name with the signature
    /// declared in `acl-sys` (the table's methods call through them unchecked).
    pub unsafe fn from_table_unchecked(lib: &'static AclLib) -> Result<Runtime> {
        Self::from_table(lib)
    }
}

impl PhysicalMem {
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
        // SAFETY: forwarded to the caller (live, owned by nobody else).
        let mem = unsafe { OwnedPhys::from_raw(handle) };
        Self::from_handle(dev, mem, len, 0, origin)
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
    pub unsafe fn map_unchecked(&self, phys: &PhysicalMem, offset: usize) -> Result<Mapping> {
        self.map_raw(phys, offset, false)
    }
}
