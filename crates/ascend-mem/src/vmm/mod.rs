//! Owning handles of the VMM family: [`ReservedVa`], [`PhysicalMem`], [`Mapping`], and the
//! short view [`MappingSlice`].
//!
//! Ownership (arrow: holds an `Arc`):
//!
//! ```text
//! DeviceCtx <── VaInner   <──┐
//! DeviceCtx <── PhysInner <──┴── MapInner <── Mapping, Stream (pending async copies)
//!               PhysInner <───── FabricHandle
//! ```
//!
//! A Drop body runs before the fields drop, so `MapInner` unmaps before its `Arc`s to the VA
//! and the memory go: whatever order users drop things in, ACL sees unmap, then free, then
//! release (rule R20).
//!
//! One file per handle: [`reserve`] (the VA range and its claims), [`phys`] (physical memory),
//! [`mapping`] (a mapping and its access rights), [`slice`] (borrowed views, and the byte copies
//! behind [`MemView`](crate::MemView)'s verbs).

mod mapping;
mod phys;
mod reserve;
mod slice;

pub(crate) use mapping::MapInner;
pub use mapping::{Access, Mapping};
pub(crate) use phys::PhysInner;
pub use phys::{Origin, PhysicalMem};
pub use reserve::ReservedVa;
pub use slice::MappingSlice;
pub(crate) use slice::{memcpy_kind, resolve_units};
