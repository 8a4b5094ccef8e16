//! Stream-ordered values: a [`ValueWord`] (an aligned 64-bit word of a mapping),
//! [`Stream::value_write`] and [`Stream::value_wait`] with a [`WaitCmp`], and
//! [`Stream::value_write_pinned`] into [`PinnedWords`] the host reads directly.
//!
//! The queued write or wait touches the word after the call returns; the stream's queue
//! (`enqueue.rs`) keeps the word's mapping alive until a synchronize proves the work
//! done.

use std::fmt;

use super::enqueue::check_word;
use super::queue::Stream;
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::pinned::PinnedWords;
use crate::view::MemView;
use crate::vmm::{Mapping, MappingSlice};

/// How [`Stream::value_wait`] compares the word with its value (`ACL_STREAM_WAIT_VALUE_*`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WaitCmp {
    /// `(word - value) as i64 >= 0`: the word is at or past `value`, counting with wrap-around
    /// (a sequence number that passes `u64::MAX` still counts as later).
    Geq,
    /// `word == value`.
    Eq,
    /// `word & value != 0`: any of the bits of `value` is set.
    And,
    /// `!(word | value) != 0`: some bit is clear in both.
    Nor,
}

impl WaitCmp {
    /// The `ACL_STREAM_WAIT_VALUE_*` flag.
    pub fn raw(self) -> u32 {
        match self {
            WaitCmp::Geq => acl::ACL_STREAM_WAIT_VALUE_GEQ,
            WaitCmp::Eq => acl::ACL_STREAM_WAIT_VALUE_EQ,
            WaitCmp::And => acl::ACL_STREAM_WAIT_VALUE_AND,
            WaitCmp::Nor => acl::ACL_STREAM_WAIT_VALUE_NOR,
        }
    }

    /// Whether `word` satisfies the comparison with `value` (what the stream checks).
    pub fn holds(self, word: u64, value: u64) -> bool {
        match self {
            WaitCmp::Geq => word.wrapping_sub(value) as i64 >= 0,
            WaitCmp::Eq => word == value,
            WaitCmp::And => word & value != 0,
            WaitCmp::Nor => !(word | value) != 0,
        }
    }
}

/// An 8-byte, 8-byte aligned word of a mapping (device HBM or mapped host memory, e.g. a
/// [`HostBuffer`](crate::HostBuffer) the host polls), for [`Stream::value_write`] and
/// [`Stream::value_wait`]. It borrows the mapping like a [`MappingSlice`].
///
/// Lifetime rule, as for async copies: the queued write or wait uses the word after the call
/// returns, so the stream keeps the word's mapping alive (mapped) until it is synchronized past
/// the work or destroyed; dropping the word, or the buffer it came from, meanwhile is fine.
#[derive(Clone, Copy)]
pub struct ValueWord<'a> {
    slice: MappingSlice<'a>,
}

impl fmt::Debug for ValueWord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueWord")
            .field("addr", &self.slice.as_raw())
            .finish()
    }
}

impl<'a> ValueWord<'a> {
    /// The word `slice` covers.
    ///
    /// # Errors
    /// [`Error::BadValueWord`] when `slice` is not 8 bytes or its address not 8-byte aligned.
    pub fn new(slice: MappingSlice<'a>) -> Result<ValueWord<'a>> {
        check_word(&slice, "ValueWord::new")?;
        Ok(ValueWord { slice })
    }

    /// The word at byte `offset` of `map`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the 8 bytes do not fit; [`Error::BadValueWord`] when the
    /// address is not 8-byte aligned.
    pub fn at(map: &'a Mapping, offset: usize) -> Result<ValueWord<'a>> {
        let end = offset.checked_add(8).ok_or(Error::OutOfBounds {
            what: "ValueWord::at",
            offset,
            len: 8,
            size: map.len(),
        })?;
        ValueWord::new(map.slice(offset..end)?)
    }

    /// The word's bytes as a view.
    pub fn as_slice(&self) -> &MappingSlice<'a> {
        &self.slice
    }

    /// The word's address.
    pub fn addr(&self) -> Addr {
        self.slice.addr()
    }

    /// The word's address as the C calls take it (prefer [`ValueWord::addr`]).
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.slice.as_raw()
    }

    /// Reads the word now (`aclrtMemcpy`, synchronous; not ordered with any stream).
    ///
    /// # Errors
    /// An `aclrtMemcpy` failure.
    #[doc(alias = "aclrtMemcpy")]
    pub fn load(&self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.slice.read_into(&mut b, 0)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Writes the word now (`aclrtMemcpy`, synchronous; a parked [`Stream::value_wait`] sees
    /// it too).
    ///
    /// # Errors
    /// An `aclrtMemcpy` failure.
    #[doc(alias = "aclrtMemcpy")]
    pub fn store(&self, value: u64) -> Result<()> {
        self.slice.write_from(&value.to_ne_bytes(), 0)
    }
}

impl Stream {
    /// Queues a store of `value` into `word` (`aclrtValueWrite`): it lands after the work
    /// queued before it. The stream keeps the word's mapping alive until it is synchronized.
    ///
    /// # Errors
    /// [`Error::WrongDevice`] across runtimes; an `aclrtValueWrite` failure (naming the
    /// runtime's code, e.g. 107008 for an unaligned address); [`Error::MissingSymbol`] on a
    /// runtime without it.
    #[doc(alias = "aclrtValueWrite")]
    pub fn value_write(&mut self, word: &ValueWord<'_>, value: u64) -> Result<()> {
        self.same_runtime(word.slice.mapping().device(), "aclrtValueWrite")?;
        self.dev.enter()?;
        self.queue
            .enqueue_value_write(self.dev.lib(), &word.slice, value)
    }

    /// Queues a store of `value` into word `i` of `words` (`aclrtValueWrite` into pinned host
    /// memory): it lands after the work queued before it, and the host sees it with
    /// [`PinnedWords::load`], no runtime call. The stream keeps the block allocated until it
    /// is synchronized past the write or destroyed.
    ///
    /// A stream that stops on a failed task ([`FailureMode::Stop`](crate::FailureMode::Stop))
    /// never makes the writes behind it: a word still short of its value tells the host to ask
    /// the stream ([`Stream::is_complete`], [`Stream::synchronize`]).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `i` is not a word of `words`; [`Error::WrongDevice`]
    /// across runtimes; an `aclrtValueWrite` failure; [`Error::MissingSymbol`] on a runtime
    /// without it.
    #[doc(alias = "aclrtValueWrite")]
    pub fn value_write_pinned(&mut self, words: &PinnedWords, i: usize, value: u64) -> Result<()> {
        words.check(i, "aclrtValueWrite")?;
        self.same_runtime(words.device(), "aclrtValueWrite")?;
        self.dev.enter()?;
        self.queue
            .enqueue_pinned_write(self.dev.lib(), &words.inner, i, value)
    }

    /// Makes the stream wait until `word` satisfies `cmp` against `value`
    /// (`aclrtValueWait`): work queued after it runs only then. Another stream's
    /// [`Stream::value_write`] or a host [`ValueWord::store`] releases it; aborting or
    /// destroying the stream ends it. The stream keeps the word's mapping alive until it is
    /// synchronized.
    ///
    /// # Errors
    /// [`Error::WrongDevice`] across runtimes; an `aclrtValueWait` failure;
    /// [`Error::MissingSymbol`] on a runtime without it.
    #[doc(alias = "aclrtValueWait")]
    pub fn value_wait(&mut self, word: &ValueWord<'_>, cmp: WaitCmp, value: u64) -> Result<()> {
        self.same_runtime(word.slice.mapping().device(), "aclrtValueWait")?;
        self.dev.enter()?;
        self.queue
            .enqueue_value_wait(self.dev.lib(), &word.slice, value, cmp.raw())
    }
}

#[cfg(test)]
mod tests {
    use super::WaitCmp;

    #[test]
    fn comparisons() {
        assert!(WaitCmp::Geq.holds(1, u64::MAX - 1));
        assert!(!WaitCmp::Geq.holds(4, 5));
        assert!(WaitCmp::Eq.holds(3, 3) && !WaitCmp::Eq.holds(3, 4));
        assert!(WaitCmp::And.holds(0b110, 0b010) && !WaitCmp::And.holds(0b100, 0b011));
        assert!(WaitCmp::Nor.holds(0b01, 0b10) && !WaitCmp::Nor.holds(!0b01, 0b01));
        assert_eq!(WaitCmp::Nor.raw(), 3);
    }
}
