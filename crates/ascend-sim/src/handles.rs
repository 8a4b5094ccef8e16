//! Opaque handles: tagged ids, never pointers. A handle value is
//! `TAG << 56 | kind << 48 | seq`; lookups check the tag and kind before touching a registry,
//! so a wrong, stale or foreign value gets an error code instead of being dereferenced.

use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::rt::{err, AclErr};

const TAG: u64 = 0xA5;

/// The kinds of handle the emulator hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Phys = 1,
    Stream = 2,
    Event = 3,
    Context = 4,
    Comm = 5,
    Window = 6,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Phys => "physical memory handle",
            Kind::Stream => "stream",
            Kind::Event => "event",
            Kind::Context => "context",
            Kind::Comm => "HCCL communicator",
            Kind::Window => "symmetric window",
        }
    }

    fn from_bits(b: u64) -> Option<Kind> {
        Some(match b {
            1 => Kind::Phys,
            2 => Kind::Stream,
            3 => Kind::Event,
            4 => Kind::Context,
            5 => Kind::Comm,
            6 => Kind::Window,
            _ => return None,
        })
    }
}

static SEQ: AtomicU64 = AtomicU64::new(1);

/// A fresh id of `kind`.
pub(crate) fn new_id(kind: Kind) -> u64 {
    let seq = SEQ.fetch_add(1, Relaxed) & 0xFFFF_FFFF_FFFF;
    (TAG << 56) | ((kind as u64) << 48) | seq
}

/// The handle value for an id.
pub(crate) fn to_ptr(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

/// Decodes a handle of `kind`; `what` names the argument for the message.
pub(crate) fn decode(p: *mut c_void, kind: Kind, what: &str) -> Result<u64, AclErr> {
    let v = p as usize as u64;
    if v >> 56 != TAG {
        return Err(err(
            acl_sys::ACL_ERROR_RT_INVALID_HANDLE,
            format!("{what} {p:p} is not a {} of this runtime", kind.name()),
        ));
    }
    let k = (v >> 48) & 0xFF;
    if k != kind as u64 {
        let actual = Kind::from_bits(k).map_or("unknown object", Kind::name);
        return Err(err(
            acl_sys::ACL_ERROR_RT_INVALID_HANDLE,
            format!("{what} {p:p} is a {actual}, not a {}", kind.name()),
        ));
    }
    Ok(v)
}

/// The error for a well-formed handle that is no longer registered.
pub(crate) fn stale(p: *mut c_void, kind: Kind, what: &str) -> AclErr {
    err(
        acl_sys::ACL_ERROR_RT_INVALID_HANDLE,
        format!(
            "{what} {p:p} is not a live {} (already destroyed or freed?)",
            kind.name()
        ),
    )
}

/// A registry keyed by handle id: looked up on every call that names a handle (each
/// stream-ordered copy), in constant time whatever the number of live objects.
pub(crate) type IdMap<T> = HashMap<u64, T, BuildHasherDefault<IdHasher>>;

/// Hashes an id with one multiplication: ids are unique and never come from a caller's
/// choice (a lookup of a forged value only costs a miss), so no keyed hash is needed.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

/// An odd constant close to 2^64 / phi: the product spreads sequential ids over the high
/// bits as well as keeping the low ones distinct.
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(MIX);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(MIX);
    }
}
