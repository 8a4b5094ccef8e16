//! [`Stream`], [`Event`], [`StreamPool`], and stream-ordered (async) copies.
//!
//! Async copies only run between memory this crate owns (any [`MemView`](crate::MemView):
//! mappings, buffers, [`MappingSlice`]s of them): the stream keeps an `Arc` of every mapping
//! it has pending work on until a synchronize (or query) proves the work done, or the stream
//! is destroyed. Dropping a buffer while a copy into it is queued is therefore fine: the unmap
//! waits for the stream.
//! Copies to or from host slices (`&[u8]`, `&mut [u8]`) are synchronous, or `unsafe`: a guard
//! that synchronizes on drop could be leaked with `mem::forget`, ending the borrow while the
//! copy still runs.
//!
//! One file per concept: [`queue`] (the stream, its flags and teardown), [`enqueue`] (the
//! stream's queue of device work: the live stream, what its work keeps alive, and the calls
//! that queue it), [`event`] (events and
//! waiting on them), [`copy`] (async copies and fills), [`pool`] (leased streams), [`value`]
//! (stream-ordered value writes and waits), [`batch`] (batched async copies), [`waiter`] (waiting on
//! a stream from a thread that does not own it).

mod batch;
mod copy;
mod enqueue;
mod event;
mod pool;
mod queue;
mod value;
mod waiter;

pub use batch::BatchCopy;
pub(crate) use enqueue::{BatchFailure, StreamQueue, BATCH_API, EACH_API};
pub use event::{Event, EventFlags};
pub use pool::{StreamLease, StreamPool};
pub use queue::{FailureMode, Stream, StreamFlags};
pub use value::{ValueWord, WaitCmp};
pub use waiter::StreamWaiter;
