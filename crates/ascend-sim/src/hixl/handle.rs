//! Handles: tagged ids, never dereferenced. The value is `tag << 40 | id`, with one tag per kind
//! and ids unique in the process, so a wrong-kind, stale or foreign value is detected by lookup.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Server = 0x5A1,
    Client = 0x5A2,
    Mem = 0x5A3,
    Complete = 0x5A4,
}

const ID_BITS: u32 = 40;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A fresh id (unique in the process for every kind).
pub(crate) fn new_id() -> u64 {
    NEXT.fetch_add(1, Relaxed) & ID_MASK
}

pub(crate) fn to_ptr(kind: Kind, id: u64) -> *mut c_void {
    (((kind as u64) << ID_BITS) | id) as usize as *mut c_void
}

/// The id of `p` when it carries `kind`'s tag (`None` for null or another kind).
pub(crate) fn decode(p: *mut c_void, kind: Kind) -> Option<u64> {
    let v = p as usize as u64;
    (v >> ID_BITS == kind as u64 && v & ID_MASK != 0).then_some(v & ID_MASK)
}
