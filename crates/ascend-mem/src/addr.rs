//! [`Addr`]: an address in the runtime's address space, the one address type of every crate.

use std::ffi::c_void;
use std::fmt;
use std::ops::{Add, Sub};

/// An address the runtime understands: device virtual address space (HBM, or host DRAM mapped
/// there through the VMM calls), or host memory the runtime accepts (`aclrtMallocHost`).
///
/// It is a number, never dereferenced by the safe API: holding an `Addr` keeps nothing alive
/// and proves nothing about what is there. Every call that takes one checks it against what
/// it knows (registrations, a peer's segments, the runtime's own pointer queries) before the
/// runtime sees it. The safe types hand theirs out with `addr()`
/// ([`MemView::addr`](crate::MemView::addr) on mappings, views and buffers, a typed view's, a
/// window's); a foreign address (a framework tensor's data pointer) comes in
/// through [`Addr::new`] or [`Addr::from_ptr`].
///
/// The layout is a `u64` (`#[repr(transparent)]`), as CANN's and HIXL's C structures carry
/// addresses. Arithmetic takes byte counts as `usize`, the one length type of the crates.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Addr(u64);

impl Addr {
    /// The null address (what the runtime reports for "none").
    pub const NULL: Addr = Addr(0);

    /// An address from its numeric value (as HIXL's descriptors and C callers carry it).
    pub const fn new(raw: u64) -> Addr {
        Addr(raw)
    }

    /// The address of a pointer (a framework tensor's data pointer, a C caller's buffer).
    pub fn from_ptr<T>(ptr: *const T) -> Addr {
        Addr(ptr as usize as u64)
    }

    /// The numeric value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The address as the C calls take it.
    pub fn as_ptr(self) -> *mut c_void {
        self.0 as usize as *mut c_void
    }

    /// Whether this is the null address.
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }

    /// `self + bytes`, or `None` past the end of the address space.
    #[must_use]
    pub const fn checked_add(self, bytes: usize) -> Option<Addr> {
        match self.0.checked_add(bytes as u64) {
            Some(a) => Some(Addr(a)),
            None => None,
        }
    }

    /// How many bytes `self` is past `base`, or `None` when it is before it.
    #[must_use]
    pub const fn offset_from(self, base: Addr) -> Option<usize> {
        match self.0.checked_sub(base.0) {
            Some(d) if d <= usize::MAX as u64 => Some(d as usize),
            _ => None,
        }
    }
}

/// `addr + bytes`.
///
/// # Panics
/// When the sum passes the end of the address space (no address a runtime hands out is
/// there; use [`Addr::checked_add`] for numbers that come from outside).
impl Add<usize> for Addr {
    type Output = Addr;

    fn add(self, bytes: usize) -> Addr {
        match self.checked_add(bytes) {
            Some(a) => a,
            None => panic!("address overflow: {self} + {bytes}"),
        }
    }
}

/// `addr - bytes`.
///
/// # Panics
/// When `bytes` is more than the address (use [`Addr::offset_from`] or `get` for numbers
/// that come from outside).
impl Sub<usize> for Addr {
    type Output = Addr;

    fn sub(self, bytes: usize) -> Addr {
        match self.0.checked_sub(bytes as u64) {
            Some(a) => Addr(a),
            None => panic!("address underflow: {self} - {bytes}"),
        }
    }
}

impl From<Addr> for u64 {
    fn from(a: Addr) -> u64 {
        a.0
    }
}

impl fmt::Debug for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::LowerHex for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::UpperHex for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::UpperHex::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_checked_and_formats_as_hex() {
        let a = Addr::new(0x1000);
        assert_eq!((a + 0x10).get(), 0x1010);
        assert_eq!((a + 0x10 - 0x8).get(), 0x1008);
        assert_eq!(a.checked_add(usize::MAX), None);
        assert_eq!((a + 8).offset_from(a), Some(8));
        assert_eq!(a.offset_from(a + 8), None);
        assert_eq!(format!("{a}"), "0x1000");
        assert_eq!(format!("{a:?}"), "0x1000");
        assert_eq!(format!("{a:x}"), "1000");
        assert!(Addr::NULL.is_null() && !a.is_null());
        let x = 7u32;
        let p: *const u32 = &x;
        assert_eq!(Addr::from_ptr(p).as_ptr() as *const u32, p);
    }

    #[test]
    #[should_panic(expected = "address overflow")]
    fn adding_past_the_end_panics_with_the_operands() {
        let _ = Addr::new(u64::MAX) + 1;
    }
}
