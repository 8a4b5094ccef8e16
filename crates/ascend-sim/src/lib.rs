//! `ascend-sim`: an emulator of the Ascend CANN ACL runtime on host memory.
//!
//! It exports every C symbol of [`acl_sys::SYMBOLS`] with the exact signature of
//! [`acl_sys::fn_types`], so the same loader tables work against it in-process ([`acl_table`],
//! [`lookup`]) or as a shared library (`libascend_sim.so`, e.g. `ASCEND_ACL_LIB=…/libascend_sim.so`),
//! which also lets C programs run on it. There is no NPU: "device memory" is host memory, but the
//! emulator enforces the real argument rules (`cann-abi.md` §2.7) and returns the real codes, so
//! it is a test bed rather than an "accept anything" stub.
//!
//! # Model
//! * **Handles** (physical memory, streams, events, contexts) are tagged ids looked up in
//!   registries, never dereferenced: a wrong-kind, stale or foreign handle gets
//!   `ACL_ERROR_RT_INVALID_HANDLE` (107017).
//! * **Reservation** = one `mmap(PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE)` aligned to
//!   2 MiB. **Physical memory** = one sealed memfd per allocation (data from offset 4096, a
//!   metadata page first), charged against the device's HBM or the host cap. **Map** =
//!   `mmap(MAP_SHARED|MAP_FIXED)` of the memfd; **unmap** overlays `PROT_NONE` again, so a use
//!   after unmap faults as on a device. A mapping keeps its memory alive: `aclrtFreePhysical` of a
//!   mapped handle succeeds and the memory lives until the last mapping goes.
//! * **Copies** (`aclrtMemcpy*`, `aclrtMemset*`) check `count <= destMax`, that each range lies
//!   entirely in known memory with the needed access, and the kind against what the pointers are:
//!   device memory (a mapping of DEVICE memory, `aclrtMalloc`), device-accessible host memory
//!   (a mapping of HOST/HOST_NUMA memory, `aclrtMallocHost`; valid on both sides of
//!   DEVICE_TO_DEVICE, as HIXL uses it, and as the host side of H2D/D2H), or plain host memory
//!   (unknown addresses; host side only). Async copies are checked at submission and again at
//!   execution under the read lock of the address table, so a racing unmap cannot fault.
//! * **Sharing**: all processes on the host form one emulated supernode. DEFAULT (`u64`) and
//!   FABRIC (128-byte) handles encode the exporter's pid, fd and inode; import uses
//!   `pidfd_open` + `pidfd_getfd` (or `dup` in-process), checks the inode and the header magic,
//!   and honours the pid allow-list kept in the memfd's header page. The first export calls
//!   `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)` so same-user importers may take the descriptor
//!   under Yama `ptrace_scope` 1; where `pidfd_getfd` is still refused (another user, scope 2)
//!   the import fails with `ACL_ERROR_RT_NO_PERMISSION` 207006 (no SCM_RIGHTS broker yet).
//! * **Streams**: `threaded` mode runs one worker thread per stream (spins 50 µs, then parks);
//!   `deterministic` mode runs queued work on the caller's thread at synchronize, query and wait
//!   points. A NULL stream is the current context's default stream.
//! * Every export catches panics (507000 with a message), counts calls, can be failed or hidden
//!   ([`fault`]) and logged ([`call_log`]). Every failing call sets a thread-local message naming
//!   the call, the argument and its value (`aclGetRecentErrMsg`, which returns and clears it, or
//!   NULL when there is none; the pointer stays valid until the next `aclGetRecentErrMsg` on the
//!   thread) and the last-error code (`aclrtGetLastError` clears it, `aclrtPeekAtLastError` not).
//!
//! # Environment (read once, at the first call)
//! | variable | meaning | default |
//! |---|---|---|
//! | `ASCEND_SIM_DEVICES` | number of devices (1..=64) | 16 |
//! | `ASCEND_SIM_SOC` | product: `A3`, `A2`, `950` (FABRIC handles and `aclrtReserveMemAddressNoUCMemory` only on A3; `expectPtr` NULL-only on 950) | `A3` |
//! | `ASCEND_SIM_HBM_BYTES` | HBM capacity per device, charged by `aclrtMallocPhysical` (DEVICE) and `aclrtMalloc` | 1 GiB |
//! | `ASCEND_SIM_HOST_BYTES` | cap for HOST/HOST_NUMA physical memory | 4 GiB |
//! | `ASCEND_SIM_STREAM_MODE` | `threaded` or `deterministic` | `threaded` |
//! | `ASCEND_SIM_FAIL` | `sym:n[:code][,sym:n[:code]]`: the n-th call of `sym` fails with `code` | code 507899 |
//! | `ASCEND_SIM_CALL_LOG` | `1` turns the call log on | off |
//!
//! Capacities are accounted per process; the kernel never decides (memfd pages are only
//! allocated on touch, and the caps bound what can be touched).
//!
//! # Codes
//! Rules with a code confirmed in the open ACL/runtime layers (`cann-abi.md` §2.7):
//! R1, R5, R6, R7, R9, R12, R16 and null out-pointers → `ACL_ERROR_INVALID_PARAM` 100000;
//! R13 (export flags > 1, V2 share type ∉ {1, 2}) → `ACL_ERROR_RT_PARAM_INVALID` 107000 (V1
//! `handleType` ≠ NONE → 100000); R14 FABRIC export without a current context →
//! `ACL_ERROR_RT_CONTEXT_NULL` 107002; FABRIC on a non-A3 product and R4 on a non-A3 product →
//! `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` 207000; calls that need a current context → 107002;
//! bad device ids → `ACL_ERROR_RT_INVALID_DEVICEID` 107001; peer-access `flags` ≠ 0 → 200006;
//! stream/event timeouts → 507046 / 507047; aborted stream → 107023 once; aclInit twice → 100002;
//! finalize without init → 100037.
//!
//! **Our choices where the real code is unconfirmed** (driver-level "doc" rules):
//! * `ACL_ERROR_RT_PARAM_INVALID` 107000 for every violated doc rule: R2 (`alignment` ≠ 0),
//!   reservation size not a 2 MiB multiple, R3 (`expectPtr` outside [16 TiB, 24 TiB), unaligned,
//!   or non-NULL on 950), R4 argument errors, R8 (physical size not a multiple of the
//!   granularity), R10 (map size ≠ physical size, offset ≠ 0, address unaligned, outside one
//!   reservation, overlapping a mapping), R15 (second export of the same allocation in a process,
//!   or re-export of imported memory), release of a reservation with live mappings, unmap or
//!   retain of an address that is not a mapping start, a copy kind that does not match the
//!   pointers, frees of addresses that are not block starts.
//! * Out of memory (HBM or host cap) → `ACL_ERROR_RT_MEMORY_ALLOCATION` 207001; a busy
//!   `expectPtr` → 207001 too.
//! * Import when the exporter is gone, freed its memory, or the handle is stale (R18) →
//!   `ACL_ERROR_RT_INVALID_HANDLE` 107017; garbage FABRIC bytes → 107000; importer not in the
//!   allow-list → `ACL_ERROR_RT_NO_PERMISSION` 207006.
//! * A copy touching unmapped VA inside a reservation, running past a block, or into memory
//!   without access → `ACL_ERROR_RT_DEVICE_MEM_ERROR` 507053 (at execution for async copies:
//!   reported by the next synchronize of the stream).
//! * R11 (mixing devices or local/imported handles in one reservation) is **not** enforced: HIXL
//!   does it and whether the driver checks it is unconfirmed.
//! * `aclrtFreePhysical` of a mapped handle succeeds (the mapping keeps the memory alive).
//! * `aclrtDestroyStream` runs the queued work first (a [`testing::hold_stream`] makes it wait);
//!   aborted or discarded event records complete their event so no waiter hangs.
//! * An event that was never recorded is COMPLETE for both query calls.
//! * Counters count explicit contexts only (`aclrtCreateContext`), not the per-device default
//!   contexts of `aclrtSetDevice`; aclInit is not required before other calls.
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::sync::OnceLock;

#[macro_use]
mod rt;
mod device;
mod handles;
mod share;
mod stream;
mod vmm;

pub use device::*;
pub use share::*;
pub use stream::*;
pub use vmm::*;

/// Live-object counters (see [`counters`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Live reservations.
    pub reservations: u64,
    /// Live handles from `aclrtMallocPhysical` and `aclrtMemRetainAllocationHandle`.
    pub physical: u64,
    /// Live handles from imports.
    pub imports: u64,
    /// Live mappings.
    pub mappings: u64,
    /// Live exported allocations.
    pub exports: u64,
    /// Live user streams.
    pub streams: u64,
    /// Live events.
    pub events: u64,
    /// Live explicit contexts.
    pub contexts: u64,
    /// Live `aclrtMalloc` blocks.
    pub device_mallocs: u64,
    /// Live `aclrtMallocHost` blocks.
    pub host_mallocs: u64,
    /// Live HCCL communicators (not emulated yet: 0).
    pub comms: u64,
    /// Live symmetric windows (not emulated yet: 0).
    pub windows: u64,
}

impl Counters {
    /// Whether every counter is zero (nothing leaked).
    pub fn is_zero(&self) -> bool {
        *self == Counters::default()
    }

    fn from_array(a: [u64; rt::NCTR]) -> Self {
        Counters {
            reservations: a[0],
            physical: a[1],
            imports: a[2],
            mappings: a[3],
            exports: a[4],
            streams: a[5],
            events: a[6],
            contexts: a[7],
            device_mallocs: a[8],
            host_mallocs: a[9],
            comms: a[10],
            windows: a[11],
        }
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reservations {}, physical {}, imports {}, mappings {}, exports {}, streams {}, \
             events {}, contexts {}, device_mallocs {}, host_mallocs {}, comms {}, windows {}",
            self.reservations,
            self.physical,
            self.imports,
            self.mappings,
            self.exports,
            self.streams,
            self.events,
            self.contexts,
            self.device_mallocs,
            self.host_mallocs,
            self.comms,
            self.windows
        )
    }
}

/// The live-object counters of this process.
pub fn counters() -> Counters {
    Counters::from_array(rt::counter_values())
}

/// Bytes of `device`'s HBM currently charged (physical DEVICE allocations and `aclrtMalloc`).
pub fn hbm_in_use(device: u32) -> u64 {
    rt::hbm_in_use(device)
}

/// The calls logged since the log was turned on (`ASCEND_SIM_CALL_LOG=1` or [`set_call_log`]),
/// in order, for the whole process.
pub fn call_log() -> Vec<String> {
    rt::call_log()
}

/// Turns the call log on or off (off also clears it).
pub fn set_call_log(on: bool) {
    rt::set_call_log(on)
}

/// Fault injection and symbol hiding (process-global).
pub mod fault {
    /// Makes the `n`-th call (1-based, counted from now) of `symbol` return `code` without doing
    /// anything; its error message is "`symbol`: injected failure (ASCEND_SIM_FAIL)".
    /// Unknown symbols are ignored. `code` [`PANIC`] makes the call panic inside its wrapper
    /// instead (it then returns `ACL_ERROR_RT_INTERNAL_ERROR` 507000).
    pub fn fail_nth(symbol: &str, n: u64, code: i32) {
        crate::rt::fail_nth(symbol, n, code);
    }

    /// The fault code that injects a panic (see [`fail_nth`]).
    pub const PANIC: i32 = i32::MIN;

    /// Disarms every fault and unhides every symbol.
    pub fn clear() {
        crate::rt::clear_faults()
    }

    /// Makes [`crate::lookup`] return null for `symbol` (until [`clear`]).
    pub fn hide_symbol(symbol: &str) {
        crate::rt::hide(symbol)
    }

    /// How many times `symbol` has been called in this process.
    pub fn calls(symbol: &str) -> u64 {
        crate::rt::calls(symbol)
    }
}

/// Test hooks.
pub mod testing {
    use std::sync::Arc;

    /// Blocks a stream until released or dropped (see [`hold_stream`]).
    #[derive(Debug)]
    #[must_use = "dropping the Hold releases the stream at once"]
    pub struct Hold {
        inner: Arc<crate::stream::HoldInner>,
    }

    impl Hold {
        /// Releases the stream.
        pub fn release(self) {}
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            self.inner.release();
        }
    }

    /// Enqueues a task that blocks `stream` (NULL: the current context's default stream) until
    /// the returned [`Hold`] is released or dropped. `aclrtStreamAbort` cancels it.
    ///
    /// # Panics
    /// If `stream` is not a live stream.
    pub fn hold_stream(stream: acl_sys::aclrtStream) -> Hold {
        match crate::stream::hold(stream) {
            Ok(inner) => Hold { inner },
            Err(e) => panic!("hold_stream: {}", e.msg),
        }
    }
}

macro_rules! symbol_table {
    ($($name:ident),* $(,)?) => {
        fn raw_lookup(name: &str) -> *const c_void {
            match name {
                $(stringify!($name) => {
                    let f: acl_sys::fn_types::$name = $name;
                    f as *const c_void
                })*
                _ => std::ptr::null(),
            }
        }
        #[cfg(test)]
        const TABLE_LEN: usize = [$(stringify!($name)),*].len();
    };
}

symbol_table!(
    aclInit,
    aclFinalize,
    aclFinalizeReference,
    aclrtSetDevice,
    aclrtResetDevice,
    aclrtGetDevice,
    aclrtGetDeviceCount,
    aclrtCreateContext,
    aclrtDestroyContext,
    aclrtSetCurrentContext,
    aclrtGetCurrentContext,
    aclrtGetPhyDevIdByLogicDevId,
    aclrtGetLogicDevIdByUserDevId,
    aclrtDeviceGetBareTgid,
    aclrtDeviceCanAccessPeer,
    aclrtDeviceEnablePeerAccess,
    aclrtDeviceDisablePeerAccess,
    aclGetRecentErrMsg,
    aclrtPeekAtLastError,
    aclrtGetLastError,
    aclrtCreateStream,
    aclrtCreateStreamWithConfig,
    aclrtDestroyStream,
    aclrtSynchronizeStream,
    aclrtSynchronizeStreamWithTimeout,
    aclrtStreamQuery,
    aclrtStreamAbort,
    aclrtSetStreamFailureMode,
    aclrtCreateEvent,
    aclrtCreateEventWithFlag,
    aclrtCreateEventExWithFlag,
    aclrtRecordEvent,
    aclrtStreamWaitEvent,
    aclrtQueryEventStatus,
    aclrtQueryEvent,
    aclrtSynchronizeEvent,
    aclrtSynchronizeEventWithTimeout,
    aclrtResetEvent,
    aclrtEventElapsedTime,
    aclrtDestroyEvent,
    aclrtMemcpy,
    aclrtMemcpyAsync,
    aclrtMemset,
    aclrtMemsetAsync,
    aclrtMalloc,
    aclrtFree,
    aclrtMallocHost,
    aclrtFreeHost,
    aclrtGetMemInfo,
    aclrtPointerGetAttributes,
    aclrtMemGetAddressRange,
    aclrtReserveMemAddress,
    aclrtReserveMemAddressNoUCMemory,
    aclrtReleaseMemAddress,
    aclrtMallocPhysical,
    aclrtFreePhysical,
    aclrtMapMem,
    aclrtMemMapNoAccess,
    aclrtUnmapMem,
    aclrtMemGetAllocationGranularity,
    aclrtMemRetainAllocationHandle,
    aclrtMemGetAllocationPropertiesFromHandle,
    aclrtMemExportToShareableHandle,
    aclrtMemExportToShareableHandleV2,
    aclrtMemImportFromShareableHandle,
    aclrtMemImportFromShareableHandleV2,
    aclrtMemSetPidToShareableHandle,
    aclrtMemSetPidToShareableHandleV2,
    aclrtMemSetAccess,
    aclrtMemGetAccess,
);

/// The emulator's export for `name` (any name of [`acl_sys::SYMBOLS`]); null for other names and
/// for symbols hidden with [`fault::hide_symbol`].
pub fn lookup(name: &str) -> *const c_void {
    rt::init();
    match rt::sym_index_rt(name) {
        Some(i) if !rt::is_hidden(i) => raw_lookup(name),
        _ => std::ptr::null(),
    }
}

/// The process-wide ACL loader table served by this emulator in-process.
pub fn acl_table() -> &'static acl_sys::AclLib {
    static T: OnceLock<acl_sys::AclLib> = OnceLock::new();
    T.get_or_init(|| {
        // SAFETY: `lookup` returns this crate's exports, each checked at compile time against
        // `acl_sys::fn_types`, and they live as long as the process.
        unsafe {
            acl_sys::AclLib::from_source(acl_sys::Source::InProcess {
                name: "ascend-sim",
                lookup,
            })
        }
    })
}

/// The counters as a C struct (fields in the order of [`Counters`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AscendSimCounters {
    /// See [`Counters::reservations`].
    pub reservations: u64,
    /// See [`Counters::physical`].
    pub physical: u64,
    /// See [`Counters::imports`].
    pub imports: u64,
    /// See [`Counters::mappings`].
    pub mappings: u64,
    /// See [`Counters::exports`].
    pub exports: u64,
    /// See [`Counters::streams`].
    pub streams: u64,
    /// See [`Counters::events`].
    pub events: u64,
    /// See [`Counters::contexts`].
    pub contexts: u64,
    /// See [`Counters::device_mallocs`].
    pub device_mallocs: u64,
    /// See [`Counters::host_mallocs`].
    pub host_mallocs: u64,
    /// See [`Counters::comms`].
    pub comms: u64,
    /// See [`Counters::windows`].
    pub windows: u64,
}

/// C: copies the live-object counters into `*out`. Returns 0, or 100000 when `out` is NULL.
///
/// # Safety
/// `out` is null or writable for one `AscendSimCounters`.
#[no_mangle]
pub unsafe extern "C" fn ascendSimGetCounters(out: *mut AscendSimCounters) -> i32 {
    if out.is_null() {
        return acl_sys::ACL_ERROR_INVALID_PARAM;
    }
    let Ok(c) = std::panic::catch_unwind(counters) else {
        return acl_sys::ACL_ERROR_RT_INTERNAL_ERROR;
    };
    let v = AscendSimCounters {
        reservations: c.reservations,
        physical: c.physical,
        imports: c.imports,
        mappings: c.mappings,
        exports: c.exports,
        streams: c.streams,
        events: c.events,
        contexts: c.contexts,
        device_mallocs: c.device_mallocs,
        host_mallocs: c.host_mallocs,
        comms: c.comms,
        windows: c.windows,
    };
    // SAFETY: non-null and writable per the contract.
    unsafe { out.write_unaligned(v) };
    0
}

/// C: arms a fault like [`fault::fail_nth`]. Returns 0, or 100000 for a NULL or unknown symbol.
///
/// # Safety
/// `symbol` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ascendSimFailNth(symbol: *const c_char, n: u64, code: i32) -> i32 {
    if symbol.is_null() {
        return acl_sys::ACL_ERROR_INVALID_PARAM;
    }
    // SAFETY: NUL-terminated per the contract.
    let s = unsafe { CStr::from_ptr(symbol) };
    let armed = std::panic::catch_unwind(|| s.to_str().is_ok_and(|s| rt::fail_nth(s, n, code)));
    match armed {
        Ok(true) => 0,
        Ok(false) => acl_sys::ACL_ERROR_INVALID_PARAM,
        Err(_) => acl_sys::ACL_ERROR_RT_INTERNAL_ERROR,
    }
}

/// C: disarms every fault (and unhides symbols). Returns 0.
#[no_mangle]
pub extern "C" fn ascendSimClearFaults() -> i32 {
    match std::panic::catch_unwind(rt::clear_faults) {
        Ok(()) => 0,
        Err(_) => acl_sys::ACL_ERROR_RT_INTERNAL_ERROR,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_symbol_is_exported() {
        assert_eq!(super::TABLE_LEN, acl_sys::SYMBOLS.len());
        for s in acl_sys::SYMBOLS {
            assert!(!super::lookup(s).is_null(), "{s} missing");
        }
        assert!(super::lookup("aclrtNoSuchThing").is_null());
    }
}
