//! The crate's owned C resources: who owns a reservation, a physical allocation, a mapping, a
//! communicator, a registered window or a pinned host block, and the safe calls that ownership
//! justifies. With `ffi`, the one module that allows `unsafe` throughout; elsewhere only the
//! items that need it do, each with its own `#[allow(unsafe_code)]`.
//!
//! It sits on `ffi` (whose calls these make, and whose `RawHandle` they hold: the one
//! `Send`/`Sync` impl for handles) and below everything that owns them.
//!
//! * Owned live handles, in the manner of `OwnedFd`: an owned value proves its C object live
//!   until the call that ends it, and a borrow of a range of a mapping ([`MappedRef`]) proves
//!   it for the borrow's lifetime, so the calls that take them are safe: the VMM handles
//!   (`vmm.rs`: [`OwnedVa`], [`OwnedPhys`], [`OwnedMap`], [`MappedRef`]) and the HCCL handles
//!   (`hccl.rs`: [`OwnedComm`], [`OwnedWindow`], and [`PeerPart`], a peer's part of a window
//!   as its lookup gives it).
//! * The pinned host block (`pinned.rs`: [`OwnedPinned`]): an `aclrtMallocHost` block the
//!   host reads with atomics while streams write it; its owner frees it, and a stream that
//!   writes a word keeps that owner. It justifies its own `Send`/`Sync` (host memory the host
//!   dereferences).
//!
//! The device work queued with these (async copies, table copies, HCCL collectives and
//! one-sided copies) is with the concept that queues it: `stream/enqueue.rs`, `table/copy.rs`,
//! `hccl/`; each `enqueue_*` call derives its addresses from the owner it then keeps.

mod hccl;
mod pinned;
mod vmm;

pub(crate) use hccl::{OwnedComm, OwnedWindow, PeerPart};
pub(crate) use pinned::OwnedPinned;
pub(crate) use vmm::{MapOwner, MappedRef, OwnedMap, OwnedPhys, OwnedVa};
