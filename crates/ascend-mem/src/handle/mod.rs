//! Where the crate's C handles are owned, and (with `ffi`) the only module that allows
//! `unsafe`.
//!
//! * [`RawHandle`]: the one place a handle is declared safe to move and share between
//!   threads. ACL and HCCL hand out opaque pointers (`aclrtStream`, `aclrtDrvMemHandle`,
//!   `HcclComm`, a reserved or mapped device address, ...); Rust sees raw pointers as neither
//!   `Send` nor `Sync`, so every struct holding one would need its own `unsafe impl`. Instead
//!   each holds a `RawHandle` (or an owned handle built on it), which carries the one
//!   justified impl below for handles. The other one is `OwnedPinned` (`pinned.rs`): its
//!   pointer is host memory the host dereferences, so it justifies its own.
//! * Owned and borrowed live handles, in the manner of `OwnedFd`/`BorrowedFd`: an owned value
//!   proves its C object live until the call that ends it; a borrow proves it for the
//!   borrow's lifetime. So the calls that take them are safe: streams and events here (their
//!   `ffi` calls take [`StreamRef`]/[`EventRef`]), the VMM handles in `vmm.rs`, the HCCL
//!   handles in `hccl.rs` (with the lookup of a peer's part of a window).
//! * A stream's queue of device work and what that work uses (`stream.rs`): the async
//!   copies, fills, value writes and waits it queues are safe because it keeps the memory they
//!   touch, and releases it only once the stream is synchronized or destroyed. The HCCL work
//!   it queues the same way: collectives (`collective.rs`; it also keeps the communicator)
//!   and one-sided copies and signals through a peer's part of a window (`onesided.rs`; it
//!   also keeps the window).
//! * Copies between the entries of two mapping tables (`table.rs`): batched where the
//!   runtime batches them, one call per copy elsewhere; the queue keeps the tables.
//! * Pinned host words (`pinned.rs`): an `aclrtMallocHost` block the host reads with
//!   atomics while streams write it; a queue that writes a word keeps the block.
//! * Loading libhccl and reading its error strings (`hccl_lib.rs`).
//! * The crate's public `unsafe` entry points (`unchecked.rs`).

mod collective;
mod hccl;
mod hccl_lib;
mod onesided;
mod pinned;
mod stream;
mod table;
mod unchecked;
mod vmm;

pub(crate) use collective::Collective;
pub(crate) use hccl::{root_info, CommOwner, OwnedComm, OwnedWindow, PeerPart, WindowOwner};
pub(crate) use hccl_lib::hccl_table;
pub(crate) use onesided::PeerDir;
pub(crate) use pinned::OwnedPinned;
pub(crate) use stream::{check_word, BatchPair, StreamQueue, BATCH_API};
pub(crate) use vmm::{granularity, set_pids, MappedRef, OwnedMap, OwnedPhys, OwnedVa};

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;

/// An opaque C handle or device address, treated as an id: never dereferenced by Rust.
///
/// Copying it does not copy what it names; who owns the C object is the holder's business
/// (each owning type documents it and releases it once).
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RawHandle(*mut c_void);

// SAFETY: a `RawHandle` is an id in the runtime's namespace (a handle or a device virtual
// address), never dereferenced on the host, and not tied to the thread that obtained it: ACL
// and HCCL work on the calling thread's current device, and every holder in this crate binds
// its device on the calling thread before passing the handle to C (Drop included). Holders
// whose C object is not documented as usable concurrently (a stream, a communicator) restrict
// sharing themselves (`Stream` is not `Sync`; a communicator's calls hold its lock).
unsafe impl Send for RawHandle {}
// SAFETY: as above; the value is immutable, and sharing `&RawHandle` only lets threads copy
// the id out.
unsafe impl Sync for RawHandle {}

impl RawHandle {
    /// Wraps a raw handle or address.
    pub(crate) fn new(raw: *mut c_void) -> RawHandle {
        RawHandle(raw)
    }

    /// The raw value, for passing to C.
    pub(crate) fn get(self) -> *mut c_void {
        self.0
    }

    /// The value as an address.
    pub(crate) fn addr(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for RawHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// Declares an owned live C handle and its `Copy` borrow, in the manner of `OwnedFd` and
/// `BorrowedFd`: the owned value proves the object is live (an `ffi` create call made it, and
/// only the matching `ffi` destroy call, which consumes it, ends it), and a borrow of it proves
/// that for the borrow's lifetime, so the `ffi` functions that take a borrow are safe.
macro_rules! live_handle {
    ($(#[$odoc:meta])* $owned:ident, $(#[$bdoc:meta])* $borrowed:ident, $raw:ty) => {
        $(#[$odoc])*
        ///
        /// Dropping it leaks the C object: its owner destroys it explicitly (with its device
        /// bound) through `ffi`, which takes it by value.
        #[derive(Debug)]
        pub struct $owned(RawHandle);

        $(#[$bdoc])*
        #[derive(Copy, Clone, Debug)]
        pub struct $borrowed<'a>(RawHandle, PhantomData<&'a $owned>);

        impl $owned {
            /// Takes ownership of a raw handle.
            ///
            /// # Safety
            /// `raw` is live, owned by nobody else, and destroyed only through this value.
            pub(crate) unsafe fn from_raw(raw: $raw) -> $owned {
                $owned(RawHandle::new(raw))
            }

            /// The raw handle (borrowed: do not destroy it).
            pub fn as_raw(&self) -> $raw {
                self.0.get()
            }

            /// A borrow, valid while this value lives.
            pub fn borrow(&self) -> $borrowed<'_> {
                $borrowed(self.0, PhantomData)
            }
        }

        impl $borrowed<'_> {
            /// Borrows a raw handle obtained elsewhere (the raw table, another library).
            ///
            /// # Safety
            /// `raw` is live for the whole lifetime of the returned borrow.
            pub unsafe fn borrow_raw(raw: $raw) -> Self {
                $borrowed(RawHandle::new(raw), PhantomData)
            }

            /// The raw handle.
            pub fn as_raw(self) -> $raw {
                self.0.get()
            }
        }
    };
}

live_handle!(
    /// An ACL stream (`aclrtStream`) this value owns.
    OwnedStream,
    /// A borrowed live ACL stream.
    StreamRef,
    acl::aclrtStream
);

live_handle!(
    /// An ACL event (`aclrtEvent`) this value owns.
    OwnedEvent,
    /// A borrowed live ACL event.
    EventRef,
    acl::aclrtEvent
);
