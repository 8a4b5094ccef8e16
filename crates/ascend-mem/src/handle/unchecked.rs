//! The crate's public `unsafe` entry points, where the caller's promise stands in for a check
//! or an ownership proof: opening a runtime library by path or from a foreign table, adopting
//! a raw physical handle, mapping without the host-side claim, and async copies to or from
//! raw host memory (`Stream::*_async_unchecked`, with the other stream copies' checks). Each
//! lists its contract under `# Safety`.

use std::path::Path;

use acl::AclLib;

use super::OwnedPhys;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::runtime::{by_path, Runtime};
use crate::stream::{elems_to_bytes, fits, Stream};
use crate::typed::TypedSlice;
use crate::vmm::{Mapping, MappingSlice, Origin, PhysicalMem, ReservedVa};

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

impl Stream {
    /// Queues a copy of `len` host bytes at `src` into the start of `dst`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpyAsync` failure.
    ///
    /// # Safety
    /// `src..src+len` stays readable and unchanged until this stream is synchronized past
    /// the copy (a `&[u8]` borrow does not guarantee that: it can end first).
    #[doc(alias = "aclrtMemcpyAsync")]
    pub unsafe fn write_async_unchecked(
        &mut self,
        dst: &MappingSlice<'_>,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        fits(len, dst.len(), "aclrtMemcpyAsync: destination")?;
        self.dev.enter()?;
        // SAFETY: forwarded to the caller (`src..src+len` readable and unchanged until the
        // stream is synchronized past the copy); the queue keeps `dst`'s mapping.
        unsafe { self.queue.enqueue_host_write(self.dev.lib(), dst, src, len) }
    }

    /// Queues a copy of the start of `src` into `len` host bytes at `dst`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; an `aclrtMemcpyAsync` failure.
    ///
    /// # Safety
    /// `dst..dst+len` stays writable, and is neither read nor written by anyone else, until
    /// this stream is synchronized past the copy.
    #[doc(alias = "aclrtMemcpyAsync")]
    pub unsafe fn read_async_unchecked(
        &mut self,
        dst: *mut u8,
        len: usize,
        src: &MappingSlice<'_>,
    ) -> Result<()> {
        fits(len, src.len(), "aclrtMemcpyAsync: source")?;
        self.dev.enter()?;
        // SAFETY: forwarded to the caller (`dst..dst+len` writable and untouched by anyone
        // else until the stream is synchronized past the copy); the queue keeps `src`'s
        // mapping.
        unsafe { self.queue.enqueue_host_read(self.dev.lib(), dst, len, src) }
    }

    /// Queues a copy of `len` host elements at `src` into the start of `dst`: element-typed
    /// [`Stream::write_async_unchecked`], which it calls with the byte length.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `len` elements do not fit in `dst` (`what` =
    /// `"Stream::write_slice_async_unchecked: destination"`, lengths in bytes); otherwise as
    /// [`Stream::write_async_unchecked`].
    ///
    /// # Safety
    /// `src..src+len` (elements) stays readable and unchanged until this stream is
    /// synchronized past the copy, as for [`Stream::write_async_unchecked`].
    #[doc(alias = "aclrtMemcpyAsync")]
    pub unsafe fn write_slice_async_unchecked<T: bytemuck::Pod>(
        &mut self,
        dst: &TypedSlice<'_, T>,
        src: *const T,
        len: usize,
    ) -> Result<()> {
        let what = "Stream::write_slice_async_unchecked: destination";
        let bytes = elems_to_bytes::<T>(len, dst.as_bytes().len(), what)?;
        fits(bytes, dst.as_bytes().len(), what)?;
        // SAFETY: forwarded to the caller (`bytes` is exactly `len` elements of `T`).
        unsafe { self.write_async_unchecked(&dst.as_bytes(), src.cast(), bytes) }
    }

    /// Queues a copy of the first `len` elements of `src` into host elements at `dst`:
    /// element-typed [`Stream::read_async_unchecked`], which it calls with the byte length.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `src` has fewer than `len` elements (`what` =
    /// `"Stream::read_slice_async_unchecked: source"`, lengths in bytes); otherwise as
    /// [`Stream::read_async_unchecked`].
    ///
    /// # Safety
    /// `dst..dst+len` (elements) stays writable, and is neither read nor written by anyone
    /// else, until this stream is synchronized past the copy, as for
    /// [`Stream::read_async_unchecked`].
    #[doc(alias = "aclrtMemcpyAsync")]
    pub unsafe fn read_slice_async_unchecked<T: bytemuck::Pod>(
        &mut self,
        dst: *mut T,
        len: usize,
        src: &TypedSlice<'_, T>,
    ) -> Result<()> {
        let what = "Stream::read_slice_async_unchecked: source";
        let bytes = elems_to_bytes::<T>(len, src.as_bytes().len(), what)?;
        fits(bytes, src.as_bytes().len(), what)?;
        // SAFETY: forwarded to the caller (`bytes` is exactly `len` elements of `T`).
        unsafe { self.read_async_unchecked(dst.cast(), bytes, &src.as_bytes()) }
    }
}
