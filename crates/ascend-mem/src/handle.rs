//! Raw C handles as plain values: [`RawHandle`], the one place a handle is declared safe to
//! move and share between threads.
//!
//! ACL and HCCL hand out opaque pointers (`aclrtStream`, `aclrtDrvMemHandle`, `HcclComm`, a
//! reserved or mapped device address, ...). Rust sees raw pointers as neither `Send` nor
//! `Sync`, so every struct holding one would need its own `unsafe impl`. Instead each holds a
//! `RawHandle`, which carries the one justified impl below.

use std::ffi::c_void;
use std::fmt;

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
