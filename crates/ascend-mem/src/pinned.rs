//! [`PinnedWords`]: 64-bit words of pinned host memory that streams write and the host reads
//! without a runtime call.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::handle::OwnedPinned;

/// 64-bit words of pinned host memory (`aclrtMallocHost`), all 0 when made: a stream stores
/// into one with [`Stream::value_write_pinned`](crate::Stream::value_write_pinned) when it
/// reaches that point of its work, and the host reads it with [`PinnedWords::load`], an
/// atomic load with no runtime call. Polling such a word is how a host learns cheaply that a
/// stream got past its work (HIXL's completion flags), where polling an event costs a call
/// each time.
///
/// Cheap to clone (an `Arc`); the block is freed (`aclrtFreeHost`) when the last clone is
/// dropped and no stream that was given a write into it still has that write pending: the
/// stream keeps the block until it is synchronized past the write or destroyed.
#[derive(Clone)]
#[must_use = "dropping the last handle frees the pinned memory (once no stream's write into it is pending)"]
pub struct PinnedWords {
    pub(crate) inner: Arc<PinnedInner>,
}

/// The block and the device it was allocated through; freed, on that device, when the last
/// owner (a [`PinnedWords`] or a stream with a write into it pending) drops it.
pub(crate) struct PinnedInner {
    pub(crate) words: OwnedPinned,
    dev: Device,
}

impl Drop for PinnedInner {
    fn drop(&mut self) {
        let r = self
            .dev
            .enter()
            .and_then(|()| self.words.free(self.dev.lib()));
        if let Err(e) = r {
            tracing::error!(error = %e, "aclrtFreeHost failed");
            self.dev.record_sticky(e);
        }
    }
}

impl fmt::Debug for PinnedWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedWords")
            .field("device", &self.inner.dev.id())
            .field("len", &self.inner.words.len())
            .finish()
    }
}

impl PinnedWords {
    /// `len` words of pinned host memory, each 0, on `dev`'s runtime.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 words (or more than the address space holds); an
    /// `aclrtMallocHost` failure; [`Error::MissingSymbol`] on a runtime without it.
    #[doc(alias = "aclrtMallocHost")]
    pub fn new(dev: &Device, len: usize) -> Result<PinnedWords> {
        OwnedPinned::byte_len(len)?;
        dev.enter()?;
        let words = OwnedPinned::alloc(dev.lib(), len)?;
        Ok(PinnedWords {
            inner: Arc::new(PinnedInner {
                words,
                dev: dev.clone(),
            }),
        })
    }

    /// Words in the block.
    pub fn len(&self) -> usize {
        self.inner.words.len()
    }

    /// Never: a block holds at least one word.
    pub fn is_empty(&self) -> bool {
        self.inner.words.len() == 0
    }

    /// The device whose runtime allocated the block.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Word `i` now (an acquire load: what the stream did before writing it is visible).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `i` is not a word of the block.
    pub fn load(&self, i: usize) -> Result<u64> {
        self.check(i, "PinnedWords::load")?;
        Ok(self.inner.words.word(i).load(Ordering::Acquire))
    }

    /// Sets word `i` now (a release store).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when `i` is not a word of the block.
    pub fn store(&self, i: usize, value: u64) -> Result<()> {
        self.check(i, "PinnedWords::store")?;
        self.inner.words.word(i).store(value, Ordering::Release);
        Ok(())
    }

    /// Whether word `i` is a word of the block.
    pub(crate) fn check(&self, i: usize, what: &'static str) -> Result<()> {
        if i < self.inner.words.len() {
            return Ok(());
        }
        Err(Error::OutOfBounds {
            what,
            offset: i.saturating_mul(8),
            len: 8,
            size: self.inner.words.len() * 8,
        })
    }
}
