//! Pinned host words: an `aclrtMallocHost` block of 64-bit words that streams write
//! (`aclrtValueWrite`) and the host reads and writes directly, with atomics.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::ffi;

/// An owned `aclrtMallocHost` block of `len` words, freed on drop (on its device).
pub(crate) struct OwnedPinned {
    words: NonNull<AtomicU64>,
    len: usize,
    pub(crate) dev: Device,
}

// SAFETY: the block is owned by this value alone and is only ever accessed through
// `AtomicU64` (by the host) or by queued device writes, which are atomic on the runtime's
// side; the pointer is not tied to the thread that allocated it (`aclrtFreeHost` binds the
// device first, as every call of this crate does).
unsafe impl Send for OwnedPinned {}
// SAFETY: as above; shared access is only atomic loads and stores.
unsafe impl Sync for OwnedPinned {}

impl OwnedPinned {
    /// `aclrtMallocHost` of `len` words on `dev`, each set to 0.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 words or more than the address space holds, or when
    /// the runtime returns a block that is not 8-byte aligned; an `aclrtMallocHost` failure.
    pub(crate) fn new(dev: &Device, len: usize) -> Result<OwnedPinned> {
        let bad = |what, value| Error::InvalidArgument {
            api: "aclrtMallocHost",
            what,
            value,
        };
        let bytes = len
            .checked_mul(8)
            .filter(|&b| b > 0 && b <= isize::MAX as usize)
            .ok_or(bad("words", len as i128))?;
        dev.enter()?;
        let p = ffi::host::malloc(dev.lib(), bytes)?;
        let Some(words) = NonNull::new(p.cast::<AtomicU64>()).filter(|p| p.is_aligned()) else {
            // SAFETY: a block the call just returned, used by nothing.
            let _ = unsafe { ffi::host::free(dev.lib(), p) };
            return Err(bad("returned address", p as usize as i128));
        };
        let me = OwnedPinned {
            words,
            len,
            dev: dev.clone(),
        };
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
        // SAFETY: `i` is inside the live, aligned block this value owns, which outlives the
        // borrow; every access to it is atomic.
        unsafe { self.words.add(i).as_ref() }
    }

    /// The address of word `i`, for the runtime.
    pub(crate) fn addr(&self, i: usize) -> *mut c_void {
        self.word(i).as_ptr().cast()
    }
}

impl Drop for OwnedPinned {
    fn drop(&mut self) {
        let r = self.dev.enter().and_then(|()| {
            // SAFETY: the block this value owns; the streams that wrote it keep this value
            // (through an `Arc`) until they are synchronized past the writes, so nothing
            // queued uses it any more, and no borrow of a word outlives `self`.
            unsafe { ffi::host::free(self.dev.lib(), self.words.as_ptr().cast()) }
        });
        if let Err(e) = r {
            tracing::error!(error = %e, "aclrtFreeHost failed");
            self.dev.record_sticky(e);
        }
    }
}
