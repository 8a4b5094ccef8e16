//! HCCL: communicators, stream-ordered collectives and symmetric windows over VMM memory.
//!
//! ```text
//! DeviceCtx <── CommInner <──┬── SymWindow ──> MapInner (the registered Mapping)
//!                            └── Stream (unsynchronized collectives; also their buffers'
//!                                        MapInners and the SymWindows holding them)
//! ```
//!
//! | HCCL call | here |
//! |---|---|
//! | `HcclGetRootInfo` | [`RootInfo::generate`]; bytes out and in: [`RootInfo::to_bytes`], [`RootInfo::from_bytes`] |
//! | `HcclCommConfigInit` (inline in C) | [`CommConfig::to_raw`] (via [`hccl_sys::comm_config_init`]) |
//! | `HcclCommInitRootInfoConfig` | [`Comm::init`] |
//! | `HcclCommDestroy` | [`Comm`]'s drop (after its windows and pending collectives), [`Comm::close`] |
//! | `HcclGetRankSize`, `HcclGetRankId`, `HcclGetCommName` | [`Comm::size`]/[`Comm::query_size`], [`Comm::rank`]/[`Comm::query_rank`], [`Comm::name`] |
//! | `HcclGetCommAsyncError` | [`Comm::async_error`] |
//! | `HcclBarrier` | [`Comm::barrier`] |
//! | `HcclAllGather`, `HcclReduceScatter`, `HcclAllReduce`, `HcclAlltoAll`, `HcclBroadcast` | [`Comm::all_gather`], [`Comm::reduce_scatter`], [`Comm::all_reduce`], [`Comm::all_to_all`], [`Comm::broadcast`] |
//! | `HcclCommSymWinRegister` | [`SymWindow::register`], [`SymWindow::register_mapping`] |
//! | `HcclCommSymWinDeregister` | [`SymWindow`]'s drop, [`SymWindow::close`] |
//! | `HcclCommSymWinGet` | [`Comm::window_of`], [`Comm::window_of_raw`], [`SymWindow::is_registered`] |
//! | `HcclSymWinGetPeerPointer` | [`SymWindow::peer`] (a [`PeerView`]), used by [`Stream::put`](crate::Stream::put), [`Stream::get`](crate::Stream::get), [`Stream::signal`](crate::Stream::signal), [`Stream::put_signal`](crate::Stream::put_signal) |
//! | anything else | [`Runtime::hccl`](crate::Runtime::hccl) (the raw table) with [`Comm::as_raw`] |
//!
//! # One-sided puts and signals
//! On an A3 every rank reaches every peer's part of a window directly: [`SymWindow::peer`]
//! gives a typed [`PeerView`] of a peer's part, and a [`Stream`](crate::Stream) queues
//! one-sided copies into and out of it ([`put`](crate::Stream::put),
//! [`get`](crate::Stream::get)). The last [`SIGNAL_AREA_BYTES`] of every rank's part (rounded
//! to a 64-bit word) hold [`SIGNAL_SLOTS`] signal words, so the data area
//! ([`SymWindow::data_len`]) is that much smaller than the window; collectives may still use
//! the whole window, but must not overwrite signals in flight.
//! [`signal`](crate::Stream::signal) stores a value into a peer's word after the work before
//! it on the stream (`aclrtValueWrite`), [`put_signal`](crate::Stream::put_signal) is a put
//! and its signal, and [`wait_signal`](crate::Stream::wait_signal) makes the stream wait for
//! one of our words (`aclrtValueWait`). The host waits for such a stream with
//! [`Comm::synchronize_watched`], bounded by a deadline and by the communicator's failure
//! detection (a dead peer ends the wait with `E_REMOTE` instead of a hang). As with
//! collectives, the stream keeps the window (registered and mapped) and the local buffers
//! until synchronized, and [`SymWindow::close`] refuses ([`Busy`](crate::Error::Busy)) while
//! a view or queued work holds the window. Note: CANN documents `HcclSymWinGetPeerPointer`
//! for device-side kernels; a host library exporting it is what this API needs.
//!
//! # Which library
//! Chosen per [`Runtime`](crate::Runtime) on first use and cached, so a process that never
//! makes a communicator never loads libhccl: the in-process emulator
//! (`Runtime::emulated`) serves HCCL in process too (`ascend_sim::hccl_table`); the emulator's
//! shared library opened as the ACL runtime (`ASCEND_ACL_LIB=…/libascend_sim.so`) is opened
//! again as the HCCL library (it exports the `Hccl*` symbols), unless `ASCEND_HCCL_LIB` names
//! another file; real CANN uses [`hccl_sys::hccl`] (`ASCEND_HCCL_LIB`, then `libhccl.so` and
//! `libhcomm.so` from `$ASCEND_HOME_PATH/lib64`, …).
//!
//! # Typed collectives
//! Buffers are typed views ([`TypedSlice<T>`](crate::TypedSlice), from `typed::<T>()` on a
//! [`MappingSlice`](crate::MappingSlice), a [`Mapping`](crate::Mapping) or a
//! [`DeviceBuffer`](crate::DeviceBuffer)); the element type ([`HcclType`]: the integers up to
//! 128 bits, `f32`, `f64`, [`half::f16`], [`half::bf16`], all [`bytemuck::Pod`]) fixes the
//! HCCL data type, and counts are element lengths, checked (`size ×` relations, same device)
//! before any C call. Byte-level `MappingSlice`s are still accepted ([`CollectiveBuffer`]),
//! with the element type named by a turbofish and their lengths checked to be whole
//! elements. Every collective is queued on a [`Stream`](crate::Stream),
//! which keeps the buffers' mappings, the windows holding them and the communicator alive
//! until it is synchronized: dropping any of them early is safe.
//!
//! ```no_run
//! # fn main() -> ascend_mem::Result<()> {
//! use ascend_mem::hccl::{Comm, CommConfig, RootInfo, SymWindow};
//! use ascend_mem::prelude::*;
//! use ascend_mem::{DeviceBuffer, Runtime, Stream};
//! # let (rank, size) = (0u32, 1u32);
//! # fn from_rank0(b: &[u8]) -> Vec<u8> { b.to_vec() }
//! let rt = Runtime::from_env()?;
//! let dev = rt.device(rank as i32)?;
//! // Rank 0 makes the root info; every rank gets its bytes out of band.
//! let root = if rank == 0 { Some(RootInfo::generate(&dev)?) } else { None };
//! let bytes = from_rank0(root.as_ref().map(|r| &r.to_bytes()[..]).unwrap_or(&[]));
//! let root = RootInfo::from_bytes(&bytes)?;
//! let comm = Comm::init(&dev, &root, rank, size, &CommConfig::new().sym_window_max_per_rank_gb(1))?;
//! let buf = DeviceBuffer::new(&dev, (size as usize + 1) * 4096)?;
//! let win = SymWindow::register_mapping(&comm, buf.mapping())?; // every rank, same size
//! let all = buf.typed::<f32>()?;                  // 1024 f32 per rank, then `size` × 1024
//! let (send, recv) = (all.slice(..1024)?, all.slice(1024..(size as usize + 1) * 1024)?);
//! send.write_slice(&[rank as f32; 1024], 0)?;
//! let mut stream = Stream::new(&dev)?;
//! comm.all_gather(&send, &recv, &mut stream)?;      // symmetric: both in windows
//! stream.synchronize()?;
//! assert_eq!(recv.read_to_vec()?[1024 * size as usize - 1], (size - 1) as f32);
//! win.close()?; // every rank
//! # Ok(()) }
//! ```

mod collective;
mod comm;
mod config;
pub mod metrics;
mod onesided;
mod peer;
mod state;
mod table;
mod types;
mod window;

pub use crate::error::HcclCode;
pub use comm::Comm;
pub use config::{CommConfig, Deterministic, OpExpansion, RootInfo, DEFAULT_SYM_WINDOW_MAX_GB};
pub use half;
pub use hccl_sys;
pub use peer::{PeerView, SIGNAL_AREA_BYTES, SIGNAL_SLOTS};
pub use types::{CollectiveBuffer, DataType, HcclType, ReduceOp};
pub use window::SymWindow;

/// Compile-time checks of the handles' thread-safety promises (see each type's docs: `Comm`
/// and `SymWindow` are `Send + Sync` because every call through them holds the
/// communicator's lock and binds the device first).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Comm>();
    send_sync::<SymWindow>();
    send_sync::<RootInfo>();
    send_sync::<CommConfig>();
    send_sync::<HcclCode>();
};
