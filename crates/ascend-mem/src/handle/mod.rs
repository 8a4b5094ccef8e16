//! Where the crate's C handles are owned, and (with `ffi`) the only module that allows
//! `unsafe`.
//!
//! * Owned live handles, in the manner of `OwnedFd`: an owned value proves its C object live
//!   until the call that ends it, so the calls that take it are safe: the VMM handles in
//!   `vmm.rs`, the HCCL handles in `hccl.rs` (with the lookup of a peer's part of a window).
//!   They hold `ffi`'s `RawHandle` (the one `Send`/`Sync` impl for handles), as `ffi`'s own
//!   live stream and event handles do.
//! * The HCCL work a stream's queue (`stream/enqueue.rs`) takes: collectives
//!   (`collective.rs`; it also keeps the communicator) and one-sided copies and signals
//!   through a peer's part of a window (`onesided.rs`; it also keeps the window).
//! * The pinned host block (`pinned.rs`): an `aclrtMallocHost` block the host reads with
//!   atomics while streams write it; a queue that writes a word keeps the block.

mod collective;
mod hccl;
mod onesided;
mod pinned;
mod vmm;

pub(crate) use collective::Collective;
pub(crate) use hccl::{CommOwner, OwnedComm, OwnedWindow, PeerPart, WindowOwner};
pub(crate) use onesided::PeerDir;
pub(crate) use pinned::OwnedPinned;
pub(crate) use vmm::{MappedRef, OwnedMap, OwnedPhys, OwnedVa};
