//! Streams, events and the test hold.
//!
//! A stream is a FIFO of tasks. In `threaded` mode one worker thread per stream runs them (it
//! spins briefly when idle, then parks on a condition variable); in `deterministic` mode the
//! queue runs on the caller's thread at synchronize, query and wait points. Blocking tasks (an
//! event wait, a test hold, a value wait) poll the stream's abort epoch so `aclrtStreamAbort` can
//! cancel them.

pub(crate) mod batch;
pub(crate) mod exports;
pub(crate) mod hold;
pub(crate) mod queue;
pub(crate) mod value;

pub use batch::{aclrtMemcpyBatchAsync, aclrtMemcpyBatchAsyncV2};
pub use exports::*;
pub use value::{aclrtValueWait, aclrtValueWrite};
