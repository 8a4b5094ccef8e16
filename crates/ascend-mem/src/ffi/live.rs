//! C handles as values: [`RawHandle`], the one place a handle is declared safe to move and
//! share between threads, and the owned and borrowed live handles this layer's safe functions
//! take ([`OwnedStream`]/[`StreamRef`], [`OwnedEvent`]/[`EventRef`]).
//!
//! ACL and HCCL hand out opaque pointers (`aclrtStream`, `aclrtDrvMemHandle`, `HcclComm`, a
//! reserved or mapped device address, ...); Rust sees raw pointers as neither `Send` nor
//! `Sync`, so every struct holding one would need its own `unsafe impl`. Instead each holds a
//! `RawHandle` (or an owned handle built on it: these here, and the VMM and HCCL handles of the
//! crate's `handle` module), which carries the one justified impl below. The other one is the
//! crate's pinned host block (`handle/pinned.rs`): its pointer is host memory the host
//! dereferences, so it justifies its own.
//!
//! A stream or event is owned in the manner of `OwnedFd`/`BorrowedFd`: [`super::stream::create`]
//! and [`super::event::create`] make the owned value, only the matching `destroy`, which
//! consumes it, ends it, and a borrow proves it live for the borrow's lifetime. So the calls
//! that take them are safe.

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
