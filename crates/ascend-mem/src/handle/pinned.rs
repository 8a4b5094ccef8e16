//! The owned pinned host block: an `aclrtMallocHost` block of 64-bit words that streams write
//! (`aclrtValueWrite`) and the host reads and writes directly, with atomics.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use acl::AclLib;

use crate::error::{Error, Result};
use crate::ffi;

/// An owned `aclrtMallocHost` block of `len` words.
///
/// Dropping it leaks the block: its owner frees it with [`OwnedPinned::free`], with the
/// block's device bound.
pub(crate) struct OwnedPinned {
    words: NonNull<AtomicU64>,
    /// Words in the block; 0 once freed (so no word is reachable then).
    len: usize,
}

// SAFETY: the block is owned by this value alone and is only ever accessed through
// `AtomicU64` (by the host) or by queued device writes, which are atomic on the runtime's
// side; the pointer is not tied to the thread that allocated it (its owner binds the device
// before `aclrtFreeHost`, as every call of this crate does).
unsafe impl Send for OwnedPinned {}
// SAFETY: as above; shared access is only atomic loads and stores.
unsafe impl Sync for OwnedPinned {}

fn bad(what: &'static str, value: i128) -> Error {
    Error::InvalidArgument {
        api: "aclrtMallocHost",
        what,
        value,
    }
}

impl OwnedPinned {
    /// The size in bytes of `len` words, checked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 words or more than the address space holds.
    pub(crate) fn byte_len(len: usize) -> Result<usize> {
        len.checked_mul(8)
            .filter(|&b| b > 0 && b <= isize::MAX as usize)
            .ok_or(bad("words", len as i128))
    }

    /// `aclrtMallocHost` of `len` words on the device bound to the calling thread, each set
    /// to 0.
    ///
    /// # Errors
    /// As [`OwnedPinned::byte_len`]; [`Error::InvalidArgument`] when the runtime returns a
    /// block that is not 8-byte aligned; an `aclrtMallocHost` failure.
    pub(crate) fn alloc(lib: &AclLib, len: usize) -> Result<OwnedPinned> {
        let p = ffi::host::malloc(lib, Self::byte_len(len)?)?;
        let Some(words) = NonNull::new(p.cast::<AtomicU64>()).filter(|p| p.is_aligned()) else {
            // SAFETY: a block the call just returned, used by nothing.
            let _ = unsafe { ffi::host::free(lib, p) };
            return Err(bad("returned address", p as usize as i128));
        };
        let me = OwnedPinned { words, len };
        for i in 0..len {
            me.word(i).store(0, Ordering::Relaxed);
        }
        Ok(me)
    }

    /// Words in the block.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Word `i` (`i < len`, checked by the callers; panics otherwise).
    pub(crate) fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len, "pinned word {i} of {}", self.len);
        // SAFETY: `i` is inside the live, aligned block this value owns (a freed block has no
        // words), which outlives the borrow; every access to it is atomic.
        unsafe { self.words.add(i).as_ref() }
    }

    /// The address of word `i`, for the runtime.
    pub(crate) fn addr(&self, i: usize) -> *mut c_void {
        self.word(i).as_ptr().cast()
    }

    /// `aclrtFreeHost`, with the block's device bound; nothing once freed. The block has no
    /// words afterwards.
    ///
    /// # Errors
    /// An `aclrtFreeHost` failure (the block stays).
    pub(crate) fn free(&mut self, lib: &AclLib) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the block this value owns, freed once (it has no words afterwards). No
        // borrow of a word outlives `&mut self`; queued writes are the business of whoever
        // queued them (`ffi::value::write`'s contract), and the crate's streams keep the
        // block's owner, through an `Arc`, until they are synchronized past the writes.
        unsafe { ffi::host::free(lib, self.words.as_ptr().cast()) }?;
        self.len = 0;
        Ok(())
    }
}
