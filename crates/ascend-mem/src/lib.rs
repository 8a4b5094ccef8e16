//! Safe Rust over the Huawei Ascend CANN memory stack: reserve device VA, allocate HBM or host
//! DRAM, map it, share it with other processes through fabric handles, and move bytes with
//! streams and copies.
//!
//! # Ownership
//!
//! ```text
//! DeviceCtx <── VaInner   <──┐
//! DeviceCtx <── PhysInner <──┴── Mapping <── DeviceBuffer / HostBuffer, Stream (pending copies)
//!               PhysInner <───── FabricHandle          (arrow: holds an Arc)
//! DeviceCtx <── CommInner <───── hccl::SymWindow (which also holds its Mapping),
//!                                Stream (pending collectives, with their Mappings and windows)
//! ```
//!
//! [`ReservedVa`] and [`PhysicalMem`] are thin handles over `Arc`s; a [`Mapping`] holds a clone
//! of each and unmaps in its own `Drop`, which runs before those `Arc`s go. So users drop the
//! three in any order and ACL still sees unmap, free, release. A [`FabricHandle`] holds the
//! memory it exported; a [`Stream`] holds every mapping (or [`MappingTable`]) it has pending
//! async work on until it is synchronized. Short views ([`MappingSlice`]) borrow; nothing hands out `&[u8]` or
//! `&mut [u8]` over memory a device or peer can write.
//!
//! # ACL calls and the types that make them
//!
//! | ACL call | here |
//! |---|---|
//! | `aclInit` | [`Runtime::load`], `Runtime::emulated` (feature `emulator`), [`Runtime::from_env`], [`Runtime::from_library_path`] |
//! | `aclrtSetDevice`, `aclrtGetDevice`, `aclrtGetDeviceCount` | [`Runtime::device`], [`Device::bind`], [`Runtime::device_count`] |
//! | `aclrtMemGetAllocationGranularity` | [`Device::granularity`], [`Device::granular`], [`Device::round_up`] → [`Granular`] |
//! | `aclrtReserveMemAddress` / `aclrtReleaseMemAddress` | [`ReservedVa::new`] / its drop, [`ReservedVa::close`] |
//! | `aclrtMallocPhysical` / `aclrtFreePhysical` | [`PhysicalMem::alloc`], [`PhysicalMem::hbm`], [`PhysicalMem::host`] / drop, [`PhysicalMem::close`] |
//! | `aclrtMapMem` / `aclrtUnmapMem` | [`ReservedVa::map`] / [`Mapping`]'s drop, [`Mapping::unmap`] |
//! | `aclrtReserveMemAddressNoUCMemory` | [`ffi::va::reserve_no_uc`] (A3 only) |
//! | `aclrtMemGetAllocationPropertiesFromHandle` | [`SharedHandle::import`] (checks the claimed size) |
//! | `aclrtMemExportToShareableHandleV2` | [`PhysicalMem::export`] → [`FabricHandle`] |
//! | `aclrtMemSetPidToShareableHandleV2` | [`FabricHandle::allow_pids`] |
//! | `aclrtMemImportFromShareableHandleV2` | [`SharedHandle::import`] |
//! | `aclrtMemSetAccess` | [`Mapping::set_device_access`] (done by [`HostBuffer::new`]) |
//! | `aclrtMemcpy`, `aclrtMemset` | [`MemView`], on every mapping, view and buffer: [`MemView::read_into`], [`MemView::write_from`], [`MemView::fill`], [`MemView::to_vec`], [`MemView::copy_from`] |
//! | `aclrtMemcpy` by element type | [`MemView::write_slice`], [`MemView::read_into_slice`], [`MemView::read_to_vec`]; [`TypedSlice`] (from [`MemView::typed`]): [`TypedSlice::write_slice`], [`TypedSlice::read_into_slice`], [`TypedSlice::read_to_vec`] |
//! | `aclrtMemcpyAsync`, `aclrtMemsetAsync` | [`Stream::copy_async`], [`Stream::fill_async`] (any [`MemView`]), [`Stream::copy_typed_async`] (typed views of one element type); batches over many mappings: [`Stream::copy_table_async`] with [`MappingTable`] |
//! | `aclrtMemcpyBatchAsync` (falls back to `aclrtMemcpyAsync` per copy on a runtime without it) | [`Stream::copy_batch_async`] with [`BatchCopy`]s (host to device or device to host) |
//! | `aclrtValueWrite`, `aclrtValueWait` | [`Stream::value_write`], [`Stream::value_wait`] on a [`ValueWord`] with a [`WaitCmp`]; [`Stream::value_write_pinned`] into [`PinnedWords`] |
//! | `aclrtMallocHost` / `aclrtFreeHost` | [`PinnedWords::new`] / its drop |
//! | `aclrtCreateStreamWithConfig`, `…SynchronizeStream…`, `aclrtStreamQuery`, `aclrtStreamAbort`, `aclrtSetStreamFailureMode`, `aclrtDestroyStream` | [`Stream`] (drop or [`Stream::close`]), [`StreamPool`] |
//! | `aclrtCreateEvent…`, `aclrtRecordEvent`, `aclrtStreamWaitEvent`, `aclrtQueryEventStatus`, `aclrtSynchronizeEvent…`, `aclrtEventElapsedTime`, `aclrtDestroyEvent` | [`Event`] (drop or [`Event::close`]), [`Stream::wait_event`] |
//! | `HcclGetRootInfo`, `HcclCommInitRootInfoConfig`, `HcclCommDestroy`, `HcclAllGather`, `HcclReduceScatter`, `HcclAllReduce`, `HcclBroadcast`, `HcclBarrier`, `HcclCommSymWin{Register,Deregister,Get}`, … | the [`hccl`] module: [`hccl::RootInfo`], [`hccl::CommConfig`], [`hccl::Comm`] (collectives), [`hccl::SymWindow`]; its own table there |
//! | `aclrtGetSocName`, `aclsysGetVersionStr`, and a probe of each optional feature | [`Runtime::capabilities`], [`Runtime::capabilities_on`] → [`Capabilities`] |
//! | anything else | [`Runtime::acl`] and the [`ffi`] layer; [`Runtime::hccl`] for HCCL |
//!
//! # What the runtime can do
//!
//! [`Runtime::capabilities`] says what this runtime and device offer before a program relies
//! on it: the runtime's version, each optional group of calls ([`SymbolGroup`]: VMM, NoUC,
//! retained allocations, V2 share handles, batched copies, stream values, HCCL, symmetric
//! windows, host-side peer pointers) with the symbols missing, the device count, the SoC and
//! its family, and what small probes on the device found (a FABRIC export, what an
//! imported host mapping reports, the directions batched copies accept, values written into
//! pinned host memory). Each [`Answer`] says how it was found ([`How`]). The answers are
//! found once per runtime and device and kept. [`Capabilities::check`] turns them into `Ok`
//! or a [`Missing`] with the reason and the fix, for a [`Feature`]:
//!
//! ```no_run
//! # fn main() -> ascend_mem::Result<()> {
//! let rt = ascend_mem::Runtime::from_env()?;
//! if let Err(missing) = rt.capabilities().check(ascend_mem::Feature::Fabric) {
//!     eprintln!("no cross-host sharing here: {missing}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # One set of copy verbs
//!
//! Every byte view of mapped memory is a [`MemView`]: [`Mapping`], [`MappingSlice`],
//! [`DeviceBuffer`], [`HostBuffer`] and [`MappingRef`] lend their bytes as a [`MappingSlice`],
//! and the synchronous verbs (`read_into`, `write_from`, `fill`, `to_vec`, `copy_from`, the
//! typed copies, `typed`, `slice`, `len`, `addr`) are the trait's, the same on each. The
//! stream's verbs take any of them ([`Stream::copy_async`], [`Stream::fill_async`], the
//! `unsafe` raw-host forms), so `stream.copy_async(&dst_buf, &src_buf.slice(..4096)?)` needs
//! no conversion. The trait is in the [`prelude`]: `use ascend_mem::prelude::*;`.
//!
//! # Typed views
//!
//! A [`TypedSlice<T>`](TypedSlice) views device-visible memory as elements of a
//! [`bytemuck::Pod`] type `T`: made by `typed::<T>()`, which checks that the start address is
//! aligned for `T` and the length a whole number of `T`; lengths, offsets and ranges are then
//! in elements. Copies still go through ACL (no `&[T]` over the memory), typed errors name the
//! call and carry the numbers ([`Error::NotWholeElements`], [`Error::MisalignedElements`],
//! [`Error::OutOfBounds`]), and the HCCL collectives take typed views of their element type.
//!
//! ```
//! # #[cfg(not(feature = "emulator"))] fn main() {}
//! # #[cfg(feature = "emulator")]
//! # fn main() -> ascend_mem::Result<()> {
//! use ascend_mem::prelude::*;
//! use ascend_mem::{DeviceBuffer, Error, HostBuffer, Runtime, Stream};
//!
//! #[derive(Copy, Clone, Debug, PartialEq)]
//! #[repr(C)]
//! struct Pair { key: u32, value: f32 }
//! // SAFETY: `repr(C)`, two 4-byte fields: no padding, and every bit pattern is valid.
//! unsafe impl ascend_mem::bytemuck::Zeroable for Pair {}
//! // SAFETY: as above; `Pair` is `Copy` and `'static`.
//! unsafe impl ascend_mem::bytemuck::Pod for Pair {}
//!
//! let rt = Runtime::emulated()?; // or Runtime::from_env()? on an NPU host
//! let dev = rt.device(0)?;
//! let host = HostBuffer::new(&dev, 4096)?;
//! let dev_buf = DeviceBuffer::new(&dev, 4096)?;
//! let pairs = [Pair { key: 1, value: 0.5 }, Pair { key: 2, value: 1.5 }];
//! host.write_slice(&pairs, 0)?;
//! let (src, dst) = (host.typed::<Pair>()?.slice(..2)?, dev_buf.typed::<Pair>()?.slice(10..12)?);
//! let mut s = Stream::new(&dev)?;
//! s.copy_typed_async(&dst, &src)?;
//! s.synchronize()?;
//! assert_eq!(dst.read_to_vec()?, pairs);
//! // 6 bytes are not a whole number of `Pair`s:
//! let e = dev_buf.slice(..6)?.read_to_vec::<Pair>().unwrap_err();
//! assert!(matches!(e, Error::NotWholeElements { len: 6, elem_size: 8, .. }));
//! # Ok(())
//! # }
//! ```
//!
//! # The VMM rules, by label
//!
//! Docs and tests name the runtime's argument and ordering rules for the VMM calls by a short
//! label. What each label means (the CANN ACL API reference for these calls, and where it is
//! silent, what the runtime layers do; the emulator `ascend-sim` enforces the same rules with
//! the same codes):
//!
//! | label | rule |
//! |---|---|
//! | R1 | `aclrtReserveMemAddress`: `size` non-zero, `flags` 0 or 1 (else `ACL_ERROR_INVALID_PARAM` 100000) |
//! | R2 | its `alignment` is reserved and must be 0 |
//! | R3 | its `expectPtr` is NULL, or (experimental) a fixed address inside the product's window, aligned |
//! | R4 | `aclrtReserveMemAddressNoUCMemory`: A3 only (else `ACL_ERROR_RT_FEATURE_NOT_SUPPORT` 207000); a NULL `expectPtr` is not supported (207000, the header's words: HIXL falls back to `aclrtReserveMemAddress` on it); `expectPtr` 1 GiB aligned; `size` a non-zero multiple of 1 GiB |
//! | R5 | `aclrtMallocPhysical`: `flags` 0, `handleType` NONE, `allocationType` PINNED, `size` non-zero (else 100000) |
//! | R6 | DDR page attributes only on host locations; UNREGISTERED and MANAGED locations refused (100000) |
//! | R7 | `memAttr` is one of the attributes `aclrtMallocPhysical` accepts (100000) |
//! | R8 | the physical size is a whole number of the kind's allocation granules |
//! | R9 | `aclrtMapMem`: `flags` 0 (100000) |
//! | R10 | `aclrtMapMem`: map size equal to the physical size and a multiple of the minimum granularity, `offset` 0, address aligned, inside one reservation, not overlapping a mapping |
//! | R11 | one device per reservation (checked on the host by [`ReservedVa::map`]) |
//! | R12 | export of a NULL handle is refused (100000) |
//! | R13 | export `flags` ≤ 1 and a V2 share type of DEFAULT or FABRIC (`ACL_ERROR_RT_PARAM_INVALID` 107000) |
//! | R14 | the export out-buffer is a `uint64_t` for DEFAULT, 128 bytes for FABRIC; a FABRIC export needs a current context (`ACL_ERROR_RT_CONTEXT_NULL` 107002) and an A3 product (207000) |
//! | R15 | one export per allocation per process; imported memory is not re-exported |
//! | R16 | `aclrtMemImportFromShareableHandleV2`: `flags` 0, non-NULL pointers (100000) |
//! | R17 | a V2 import lands on the calling thread's current device |
//! | R18 | an import needs the exporter alive and its memory not freed (`ACL_ERROR_RT_INVALID_HANDLE` 107017) |
//! | R19 | mapped host memory needs `aclrtMemSetAccess` before a device reaches it |
//! | R20 | teardown order: unmap before the memory is freed; a reservation is released only with no mapping in it |
//!
//! # Does
//!
//! * pick the backend at run time: real CANN (opened with `dlopen`, never linked), the
//!   in-tree emulator in process, or the emulator's shared library through the same loader;
//! * check what the host can know before calling C (granularity, bounds, overlap, device,
//!   sizes), with typed errors carrying the numbers, and still surface the runtime's own code
//!   (with its `aclGetRecentErrMsg` text) when it rejects something;
//! * run HCCL collectives typed by element type on this crate's memory, and register VMM
//!   mappings as symmetric windows ([`hccl`]), with the stream keeping everything a queued
//!   collective uses alive;
//! * tear down in the order the runtime needs, from `Drop` (which never panics and records a
//!   failure as a sticky error on the device) or from explicit `close`/`unmap` calls that
//!   hand the value back on failure.
//!
//! # Does not
//!
//! * finalize ACL (`aclFinalize` is process-wide; the library stays loaded);
//! * give host references into device-visible memory, or async copies into borrowed host
//!   slices (those are `unsafe`, see [`Stream::write_async_unchecked`] and, typed,
//!   [`Stream::write_slice_async_unchecked`]);
//! * wrap kernels, contexts, the deprecated V1 share calls (use [`ffi`]/[`Runtime::acl`]), or
//!   HCCL beyond communicators, the five collectives (all-gather, reduce-scatter, all-reduce,
//!   all-to-all, broadcast), barriers and symmetric windows (use
//!   [`Runtime::hccl`] with [`hccl::Comm::as_raw`]);
//! * load libhccl in a process that never makes an HCCL communicator.
//!
//! # Example
//!
//! ```no_run
//! # fn main() -> ascend_mem::Result<()> {
//! use ascend_mem::prelude::*;
//! use ascend_mem::{Runtime, PhysicalMem, ReservedVa};
//! let rt = Runtime::from_env()?;
//! let dev = rt.device(0)?;
//! let size = dev.round_up(3 << 20)?;       // whole granules
//! let va = ReservedVa::new(&dev, size)?;
//! let mem = PhysicalMem::hbm(&dev, size)?;
//! let map = va.map(&mem, size.zero())?;
//! map.write_from(b"hello", 0)?;
//! let mut back = [0u8; 5];
//! map.read_into(&mut back, 0)?;
//! assert_eq!(&back, b"hello");
//! drop(va); drop(mem); drop(map);          // any order: unmap, free, release
//! # Ok(()) }
//! ```
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "ascend-mem supports 64-bit targets only: CANN's addresses and sizes are 64-bit, and an \
     `Addr` converts to a pointer, and a u64 length to a usize, without loss only there"
);

#[allow(unsafe_code)]
pub mod ffi;

mod addr;
mod buffer;
mod caps;
mod device;
mod error;
mod foreign;
#[allow(unsafe_code)]
mod handle;
pub mod hccl;
mod pinned;
mod runtime;
mod share;
pub mod sibling;
mod spec;
mod stream;
mod table;
mod typed;
mod view;
mod vmm;

/// The traits whose methods users call: `use ascend_mem::prelude::*;`.
///
/// [`MemView`] holds the synchronous copy verbs (`read_into`, `write_from`, `fill`, `to_vec`,
/// `copy_from`, the typed copies, `slice`, `len`, `addr`, …) of every byte view of mapped
/// memory: a method call such as `buf.write_from(..)` needs it in scope.
pub mod prelude {
    pub use crate::view::MemView;
}

pub use acl;
pub use addr::Addr;
pub use buffer::{DeviceBuffer, HostBuffer};
pub use bytemuck;
pub use caps::{
    Answer, BatchDirections, CapRow, Capabilities, Feature, GroupAnswer, How, Missing, Soc,
    SocFamily, SymbolGroup,
};
pub use device::{Device, Granular};
pub use error::{AclCode, CloseError, CopySide, Error, ErrorKind, Result};
pub use foreign::{MappingRef, PointerInfo};
pub use pinned::PinnedWords;
pub use runtime::{Backend, BackendChoice, Runtime};
pub use share::{ExportFlags, FabricHandle, ShareKind, SharedHandle, SHARED_HANDLE_BYTES};
pub use spec::{Location, MemAttr, MemKind, MemSpec};
pub use stream::{
    BatchCopy, Event, EventFlags, FailureMode, Stream, StreamFlags, StreamLease, StreamPool,
    StreamWaiter, ValueWord, WaitCmp,
};
pub use table::{MappingTable, TableCopy};
pub use typed::TypedSlice;
pub use view::MemView;
pub use vmm::{Access, Mapping, MappingSlice, Origin, PhysicalMem, ReservedVa};

/// Compile-time checks that every public handle keeps its thread-safety promises: a new raw
/// pointer field cannot remove them silently.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn send<T: Send>() {}
    send_sync::<Runtime>();
    send_sync::<Device>();
    send_sync::<Granular>();
    send_sync::<ReservedVa>();
    send_sync::<PhysicalMem>();
    send_sync::<Mapping>();
    send_sync::<MappingSlice<'static>>();
    send_sync::<TypedSlice<'static, f32>>();
    send_sync::<FabricHandle>();
    send_sync::<SharedHandle>();
    send_sync::<DeviceBuffer>();
    send_sync::<HostBuffer>();
    send_sync::<StreamPool>();
    send_sync::<Error>();
    send::<Stream>();
    send::<Event>();
    send::<StreamLease>();
};
