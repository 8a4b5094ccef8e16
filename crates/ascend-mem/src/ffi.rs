//! The thin layer over `acl-sys`: one small function per C call, grouped by area.
//!
//! Out-parameters become return values; a non-zero status becomes [`Error::Acl`] carrying the
//! C name, the [`AclCode`] and the `aclGetRecentErrMsg()` text read right after the failure on
//! the same thread; a symbol the library lacks becomes [`Error::MissingSymbol`]. Every function
//! takes the [`AclLib`] table to call through, so the same code serves real CANN, the
//! in-process emulator and the emulator opened by path.
//!
//! Everything here is `unsafe`: handle and pointer validity is the caller's job. The safe types
//! of this crate are the intended callers; it is public so tests and rare calls can reach the C
//! layer without a wider safe API (see each function's `# Safety`).
//!
//! Arguments CANN documents as reserved or "must be 0" are not parameters here: the function
//! passes the constant and says which rule requires it.

use std::ffi::{c_void, CStr};

use acl::AclLib;

use crate::error::{AclCode, Error, Result};

/// Reads `aclGetRecentErrMsg()` on this thread (empty when the library has none).
pub fn recent_error_message(lib: &AclLib) -> Box<str> {
    // SAFETY: takes no arguments; returns a thread-local string or null.
    let p = match unsafe { lib.aclGetRecentErrMsg() } {
        Ok(p) if !p.is_null() => p,
        _ => return Box::from(""),
    };
    // SAFETY: a non-null result is a NUL-terminated string valid until the next ACL call on this
    // thread; we copy it out at once.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_string_lossy().into_owned().into_boxed_str()
}

/// Turns the result of a table call into our `Result`, reading the error text on failure.
///
/// # Errors
/// [`Error::Acl`] for a non-zero status; [`Error::MissingSymbol`].
pub fn check(
    lib: &AclLib,
    api: &'static str,
    r: std::result::Result<acl::aclError, acl::MissingSymbol>,
) -> Result<()> {
    match r {
        Ok(0) => Ok(()),
        Ok(code) => Err(Error::Acl {
            api,
            code: AclCode(code),
            msg: recent_error_message(lib),
        }),
        Err(m) => Err(m.into()),
    }
}

/// `call!(lib, aclrtFoo(a, b))`: calls through the table and checks the status with the C name.
/// Must be used inside an `unsafe` block (the table methods are `unsafe`).
macro_rules! call {
    ($lib:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib: &::acl::AclLib = $lib;
        $crate::ffi::check(lib, stringify!($f), lib.$f($($arg),*))
    }};
}

/// Process setup.
pub mod init {
    use super::*;

    /// `aclInit(NULL)`. A repeated init (`ACL_ERROR_REPEAT_INITIALIZE`) counts as success.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `lib` must be an ACL runtime table (its initialisers have run when it was opened).
    pub unsafe fn init(lib: &AclLib) -> Result<()> {
        // SAFETY: a NULL config path is documented as allowed.
        match unsafe { call!(lib, aclInit(std::ptr::null())) } {
            Err(Error::Acl { code, .. }) if code == AclCode::REPEAT_INITIALIZE => Ok(()),
            r => r,
        }
    }
}

/// Devices.
pub mod device {
    use super::*;

    /// `aclrtSetDevice`: binds `id` to the calling thread.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table; an unknown id is reported by ACL.
    pub unsafe fn set(lib: &AclLib, id: i32) -> Result<()> {
        // SAFETY: plain integer argument.
        unsafe { call!(lib, aclrtSetDevice(id)) }
    }

    /// `aclrtResetDevice`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// Every resource of this device made on this thread must be gone.
    pub unsafe fn reset(lib: &AclLib, id: i32) -> Result<()> {
        // SAFETY: plain integer argument; resource lifetime forwarded to the caller.
        unsafe { call!(lib, aclrtResetDevice(id)) }
    }

    /// `aclrtGetDeviceCount`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table.
    pub unsafe fn count(lib: &AclLib) -> Result<u32> {
        let mut n = 0u32;
        // SAFETY: `n` is a writable u32.
        unsafe { call!(lib, aclrtGetDeviceCount(&mut n)) }?;
        Ok(n)
    }

    /// `aclrtGetDevice`: the device bound to the calling thread.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table.
    pub unsafe fn current(lib: &AclLib) -> Result<i32> {
        let mut id = -1i32;
        // SAFETY: `id` is a writable i32.
        unsafe { call!(lib, aclrtGetDevice(&mut id)) }?;
        Ok(id)
    }

    /// `aclrtDeviceGetBareTgid`: this process's pid as share allow-lists see it.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table.
    pub unsafe fn bare_tgid(lib: &AclLib) -> Result<i32> {
        let mut pid = 0i32;
        // SAFETY: `pid` is a writable i32.
        unsafe { call!(lib, aclrtDeviceGetBareTgid(&mut pid)) }?;
        Ok(pid)
    }

    /// `aclrtGetLogicDevIdByUserDevId`: the driver-logical id (for access descriptors).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table.
    pub unsafe fn logic_id(lib: &AclLib, user_id: i32) -> Result<i32> {
        let mut id = 0i32;
        // SAFETY: `id` is a writable i32.
        unsafe { call!(lib, aclrtGetLogicDevIdByUserDevId(user_id, &mut id)) }?;
        Ok(id)
    }
}

/// Virtual address reservations.
pub mod va {
    use super::*;

    /// `aclrtReserveMemAddress(&va, size, 0, NULL, flags)`: alignment is reserved (rule R2,
    /// pass 0) and `expectPtr` is NULL (R3: a fixed address is experimental).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table; the returned range must be released with [`release`].
    pub unsafe fn reserve(lib: &AclLib, size: usize, flags: u64) -> Result<*mut c_void> {
        let mut va = std::ptr::null_mut();
        // SAFETY: `va` is a writable pointer slot; the other arguments are plain values.
        unsafe {
            call!(
                lib,
                aclrtReserveMemAddress(&mut va, size, 0, std::ptr::null_mut(), flags)
            )
        }?;
        Ok(va)
    }

    /// `aclrtReserveMemAddress` with every argument explicit (only for tests of rules R2, R3:
    /// `alignment` is reserved and must be 0; a non-NULL `expectPtr` must lie in the
    /// product's fixed-address window and be aligned).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// As [`reserve`]; a fixed `expect` address must not be in use by this process.
    pub unsafe fn reserve_raw(
        lib: &AclLib,
        size: usize,
        alignment: usize,
        expect: *mut c_void,
        flags: u64,
    ) -> Result<*mut c_void> {
        let mut va = std::ptr::null_mut();
        // SAFETY: `va` is a writable pointer slot; the rest is forwarded to the caller.
        unsafe {
            call!(
                lib,
                aclrtReserveMemAddress(&mut va, size, alignment, expect, flags)
            )
        }?;
        Ok(va)
    }

    /// `aclrtReserveMemAddressNoUCMemory(&va, size, 0, expect, flags)`: a reservation at a
    /// fixed address for memory mapped without the unified-cache path (rule R4). Only A3
    /// products have it (others return `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` 207000);
    /// `expectPtr` is required (not NULL) and 1 GiB aligned, and `size` a non-zero multiple
    /// of 1 GiB. `alignment` is reserved and passed as 0. Released with [`release`].
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table and an `expect` range this process does not use; the
    /// returned range must be released with [`release`].
    #[doc(alias = "aclrtReserveMemAddressNoUCMemory")]
    pub unsafe fn reserve_no_uc(
        lib: &AclLib,
        size: usize,
        expect: *mut c_void,
        flags: u64,
    ) -> Result<*mut c_void> {
        let mut va = std::ptr::null_mut();
        // SAFETY: `va` is a writable pointer slot; the rest is forwarded to the caller.
        unsafe {
            call!(
                lib,
                aclrtReserveMemAddressNoUCMemory(&mut va, size, 0, expect, flags)
            )
        }?;
        Ok(va)
    }

    /// `aclrtReleaseMemAddress`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `va` came from [`reserve`], is not released yet, and nothing is mapped in it (R20).
    pub unsafe fn release(lib: &AclLib, va: *mut c_void) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtReleaseMemAddress(va)) }
    }
}

/// Physical allocations.
pub mod phys {
    use super::*;

    /// `aclrtMallocPhysical(&h, size, prop, 0)`: `flags` must be 0 (rule R5).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table; the handle must be freed with [`free`].
    pub unsafe fn malloc(
        lib: &AclLib,
        size: usize,
        prop: &acl::aclrtPhysicalMemProp,
    ) -> Result<acl::aclrtDrvMemHandle> {
        // SAFETY: as `malloc_flags` with flags 0.
        unsafe { malloc_flags(lib, size, prop, 0) }
    }

    /// `aclrtMallocPhysical` with explicit flags (only for tests of rule R5).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// As [`malloc`].
    pub unsafe fn malloc_flags(
        lib: &AclLib,
        size: usize,
        prop: &acl::aclrtPhysicalMemProp,
        flags: u64,
    ) -> Result<acl::aclrtDrvMemHandle> {
        let mut h = std::ptr::null_mut();
        // SAFETY: `h` is a writable slot; `prop` is a valid struct for the call's duration.
        unsafe { call!(lib, aclrtMallocPhysical(&mut h, size, prop, flags)) }?;
        Ok(h)
    }

    /// `aclrtFreePhysical`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `h` is a live handle from [`malloc`] or an import, no longer mapped anywhere, and is
    /// not used again.
    pub unsafe fn free(lib: &AclLib, h: acl::aclrtDrvMemHandle) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtFreePhysical(h)) }
    }

    /// `aclrtMemGetAllocationGranularity`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table.
    pub unsafe fn granularity(
        lib: &AclLib,
        prop: &acl::aclrtPhysicalMemProp,
        option: acl::aclrtMemGranularityOptions,
    ) -> Result<usize> {
        let mut g = 0usize;
        let mut p = *prop;
        // SAFETY: `p` and `g` are valid for the call; the C side only reads `p`.
        unsafe {
            call!(
                lib,
                aclrtMemGetAllocationGranularity(&mut p, option, &mut g)
            )
        }?;
        Ok(g)
    }

    /// `aclrtMemGetAllocationPropertiesFromHandle`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `h` is a live handle.
    pub unsafe fn properties(
        lib: &AclLib,
        h: acl::aclrtDrvMemHandle,
    ) -> Result<acl::aclrtPhysicalMemProp> {
        let mut p = acl::aclrtPhysicalMemProp::default();
        // SAFETY: `p` is writable; handle validity forwarded to the caller.
        unsafe { call!(lib, aclrtMemGetAllocationPropertiesFromHandle(h, &mut p)) }?;
        Ok(p)
    }
}

/// Mapping physical memory into reserved VA.
pub mod map {
    use super::*;

    /// `aclrtMapMem(va, size, 0, h, 0)`: `offset` and `flags` must be 0 (rules R9, R10).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `va..va+size` lies in a live reservation and is not mapped; `h` is live and `size`
    /// equals its size.
    pub unsafe fn map(
        lib: &AclLib,
        va: *mut c_void,
        size: usize,
        h: acl::aclrtDrvMemHandle,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtMapMem(va, size, 0, h, 0)) }
    }

    /// `aclrtMapMem` with explicit offset and flags (only for tests of rules R9, R10).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// As [`map()`].
    pub unsafe fn map_raw(
        lib: &AclLib,
        va: *mut c_void,
        size: usize,
        offset: usize,
        h: acl::aclrtDrvMemHandle,
        flags: u64,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtMapMem(va, size, offset, h, flags)) }
    }

    /// `aclrtUnmapMem`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `va` is the start of a live mapping and nothing (host or stream) uses it any more.
    pub unsafe fn unmap(lib: &AclLib, va: *mut c_void) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtUnmapMem(va)) }
    }

    /// `aclrtMemSetAccess` for one descriptor.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `va`/`size` equal those of a live map call.
    pub unsafe fn set_access(
        lib: &AclLib,
        va: *mut c_void,
        size: usize,
        desc: &acl::aclrtMemAccessDesc,
    ) -> Result<()> {
        let mut d = *desc;
        // SAFETY: `d` is valid for the call; the rest is forwarded to the caller.
        unsafe { call!(lib, aclrtMemSetAccess(va, size, &mut d, 1)) }
    }
}

/// Share handles (V2 calls).
pub mod share {
    use super::*;

    /// The out-buffer of an export: a `uint64_t` for DEFAULT, 128 bytes for FABRIC (rule R14).
    pub type HandleData = acl::aclrtMemFabricHandle;

    /// `aclrtMemExportToShareableHandleV2(h, flags, shareType, &out)`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `h` is a live handle.
    pub unsafe fn export_v2(
        lib: &AclLib,
        h: acl::aclrtDrvMemHandle,
        flags: u64,
        share_type: acl::aclrtMemSharedHandleType,
    ) -> Result<HandleData> {
        // 128 bytes covers both out types (R14), zeroed so a DEFAULT export leaves the tail 0.
        let mut out = HandleData::default();
        // SAFETY: `out` is 128 writable bytes, enough for either share type.
        unsafe {
            call!(
                lib,
                aclrtMemExportToShareableHandleV2(
                    h,
                    flags,
                    share_type,
                    (&mut out as *mut HandleData).cast()
                )
            )
        }?;
        Ok(out)
    }

    /// `aclrtMemImportFromShareableHandleV2(&data, shareType, 0, &h)`: `flags` must be 0 (R16).
    /// Imports onto the device current on the calling thread (R17).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table: the bytes are validated by the runtime. The handle must be
    /// freed with [`phys::free`].
    pub unsafe fn import_v2(
        lib: &AclLib,
        data: &HandleData,
        share_type: acl::aclrtMemSharedHandleType,
    ) -> Result<acl::aclrtDrvMemHandle> {
        let mut d = *data;
        let mut h = std::ptr::null_mut();
        // SAFETY: `d` is 128 readable bytes (the C side only reads it); `h` is writable.
        unsafe {
            call!(
                lib,
                aclrtMemImportFromShareableHandleV2(
                    (&mut d as *mut HandleData).cast(),
                    share_type,
                    0,
                    &mut h
                )
            )
        }?;
        Ok(h)
    }

    /// `aclrtMemImportFromShareableHandleV2` with explicit flags (only for tests of rule R16:
    /// `flags` must be 0).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// As [`import_v2`].
    pub unsafe fn import_v2_flags(
        lib: &AclLib,
        data: &HandleData,
        share_type: acl::aclrtMemSharedHandleType,
        flags: u64,
    ) -> Result<acl::aclrtDrvMemHandle> {
        let mut d = *data;
        let mut h = std::ptr::null_mut();
        // SAFETY: `d` is 128 readable bytes (the C side only reads it); `h` is writable.
        unsafe {
            call!(
                lib,
                aclrtMemImportFromShareableHandleV2(
                    (&mut d as *mut HandleData).cast(),
                    share_type,
                    flags,
                    &mut h
                )
            )
        }?;
        Ok(h)
    }

    /// `aclrtMemSetPidToShareableHandleV2`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table; `pids` must not be empty (checked by the runtime).
    pub unsafe fn set_pids_v2(
        lib: &AclLib,
        data: &HandleData,
        share_type: acl::aclrtMemSharedHandleType,
        pids: &[i32],
    ) -> Result<()> {
        let mut d = *data;
        let mut p = pids.to_vec();
        // SAFETY: `d` and `p` are valid for the call; the C side only reads them.
        unsafe {
            call!(
                lib,
                aclrtMemSetPidToShareableHandleV2(
                    (&mut d as *mut HandleData).cast(),
                    share_type,
                    p.as_mut_ptr(),
                    p.len()
                )
            )
        }
    }
}

/// Streams.
pub mod stream {
    use super::*;

    /// `aclrtCreateStreamWithConfig`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table and a bound device; destroy with [`destroy`].
    pub unsafe fn create(lib: &AclLib, priority: u32, flags: u32) -> Result<acl::aclrtStream> {
        let mut s = std::ptr::null_mut();
        // SAFETY: `s` is a writable slot.
        unsafe { call!(lib, aclrtCreateStreamWithConfig(&mut s, priority, flags)) }?;
        Ok(s)
    }

    /// `aclrtDestroyStream`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `s` is live and not used again.
    pub unsafe fn destroy(lib: &AclLib, s: acl::aclrtStream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtDestroyStream(s)) }
    }

    /// `aclrtSynchronizeStream`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `s` is live.
    pub unsafe fn synchronize(lib: &AclLib, s: acl::aclrtStream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtSynchronizeStream(s)) }
    }

    /// `aclrtSynchronizeStreamWithTimeout` (milliseconds; −1 forever, 0 check once).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `s` is live.
    pub unsafe fn synchronize_timeout(lib: &AclLib, s: acl::aclrtStream, ms: i32) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtSynchronizeStreamWithTimeout(s, ms)) }
    }

    /// `aclrtStreamQuery`: the raw `aclrtStreamStatus`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `s` is live.
    pub unsafe fn query(lib: &AclLib, s: acl::aclrtStream) -> Result<acl::aclrtStreamStatus> {
        let mut st = acl::ACL_STREAM_STATUS_RESERVED;
        // SAFETY: `st` is writable; stream validity forwarded to the caller.
        unsafe { call!(lib, aclrtStreamQuery(s, &mut st)) }?;
        Ok(st)
    }

    /// `aclrtStreamAbort`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `s` is live.
    pub unsafe fn abort(lib: &AclLib, s: acl::aclrtStream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtStreamAbort(s)) }
    }

    /// `aclrtSetStreamFailureMode`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `s` is live.
    pub unsafe fn set_failure_mode(lib: &AclLib, s: acl::aclrtStream, mode: u64) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtSetStreamFailureMode(s, mode)) }
    }

    /// `aclrtStreamWaitEvent(stream, event)`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `s` and `e` are live.
    pub unsafe fn wait_event(lib: &AclLib, s: acl::aclrtStream, e: acl::aclrtEvent) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtStreamWaitEvent(s, e)) }
    }
}

/// Events.
pub mod event {
    use super::*;

    /// `aclrtCreateEvent` (default flags).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table and a bound device; destroy with [`destroy`].
    pub unsafe fn create_default(lib: &AclLib) -> Result<acl::aclrtEvent> {
        let mut e = std::ptr::null_mut();
        // SAFETY: `e` is a writable slot.
        unsafe { call!(lib, aclrtCreateEvent(&mut e)) }?;
        Ok(e)
    }

    /// `aclrtCreateEventWithFlag`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// None beyond a valid table and a bound device; destroy with [`destroy`].
    pub unsafe fn create(lib: &AclLib, flags: u32) -> Result<acl::aclrtEvent> {
        let mut e = std::ptr::null_mut();
        // SAFETY: `e` is a writable slot.
        unsafe { call!(lib, aclrtCreateEventWithFlag(&mut e, flags)) }?;
        Ok(e)
    }

    /// `aclrtDestroyEvent`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `e` is live and not used again.
    pub unsafe fn destroy(lib: &AclLib, e: acl::aclrtEvent) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtDestroyEvent(e)) }
    }

    /// `aclrtRecordEvent(event, stream)`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `e` and `s` are live.
    pub unsafe fn record(lib: &AclLib, e: acl::aclrtEvent, s: acl::aclrtStream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtRecordEvent(e, s)) }
    }

    /// `aclrtQueryEventStatus`: the raw `aclrtEventRecordedStatus` (1 = complete).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `e` is live.
    pub unsafe fn query(lib: &AclLib, e: acl::aclrtEvent) -> Result<acl::aclrtEventRecordedStatus> {
        let mut st = acl::ACL_EVENT_RECORDED_STATUS_NOT_READY;
        // SAFETY: `st` is writable; event validity forwarded to the caller.
        unsafe { call!(lib, aclrtQueryEventStatus(e, &mut st)) }?;
        Ok(st)
    }

    /// `aclrtSynchronizeEvent`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `e` is live.
    pub unsafe fn synchronize(lib: &AclLib, e: acl::aclrtEvent) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtSynchronizeEvent(e)) }
    }

    /// `aclrtSynchronizeEventWithTimeout` (milliseconds).
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `e` is live.
    pub unsafe fn synchronize_timeout(lib: &AclLib, e: acl::aclrtEvent, ms: i32) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtSynchronizeEventWithTimeout(e, ms)) }
    }

    /// `aclrtEventElapsedTime(&ms, start, end)`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// Both events are live.
    pub unsafe fn elapsed(
        lib: &AclLib,
        start: acl::aclrtEvent,
        end: acl::aclrtEvent,
    ) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: `ms` is writable; event validity forwarded to the caller.
        unsafe { call!(lib, aclrtEventElapsedTime(&mut ms, start, end)) }?;
        Ok(ms)
    }
}

/// Copies and fills.
pub mod copy {
    use super::*;

    /// `aclrtMemcpy(dst, dst_max, src, count, kind)`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `dst..dst+dst_max` and `src..src+count` are valid for the given kind, and no Rust
    /// reference covers the destination while the copy runs.
    pub unsafe fn memcpy(
        lib: &AclLib,
        dst: *mut c_void,
        dst_max: usize,
        src: *const c_void,
        count: usize,
        kind: acl::aclrtMemcpyKind,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtMemcpy(dst, dst_max, src, count, kind)) }
    }

    /// `aclrtMemcpyAsync(dst, dst_max, src, count, kind, stream)`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// As [`memcpy`], and both ranges stay valid (and the destination unobserved) until the
    /// stream has been synchronized past this copy.
    pub unsafe fn memcpy_async(
        lib: &AclLib,
        dst: *mut c_void,
        dst_max: usize,
        src: *const c_void,
        count: usize,
        kind: acl::aclrtMemcpyKind,
        stream: acl::aclrtStream,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe {
            call!(
                lib,
                aclrtMemcpyAsync(dst, dst_max, src, count, kind, stream)
            )
        }
    }

    /// `aclrtMemset(dst, max, value, count)`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// `dst..dst+max` is valid device or mapped memory.
    pub unsafe fn memset(
        lib: &AclLib,
        dst: *mut c_void,
        max: usize,
        value: u8,
        count: usize,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { call!(lib, aclrtMemset(dst, max, i32::from(value), count)) }
    }

    /// `aclrtMemsetAsync(dst, max, value, count, stream)`.
    ///
    /// # Errors
    /// [`Error::Acl`] with the returned status; [`Error::MissingSymbol`].
    ///
    /// # Safety
    /// As [`memset`], valid until the stream is synchronized past this operation.
    pub unsafe fn memset_async(
        lib: &AclLib,
        dst: *mut c_void,
        max: usize,
        value: u8,
        count: usize,
        stream: acl::aclrtStream,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe {
            call!(
                lib,
                aclrtMemsetAsync(dst, max, i32::from(value), count, stream)
            )
        }
    }
}
