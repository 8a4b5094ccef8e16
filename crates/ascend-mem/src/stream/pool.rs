//! [`StreamPool`]: streams created up front and leased out, and the [`StreamLease`] guard.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::queue::{Stream, StreamFlags};
use crate::device::Device;
use crate::error::{Error, Result};

struct PoolInner {
    free: Mutex<VecDeque<Stream>>,
    cv: Condvar,
    size: usize,
}

/// A fixed set of streams created up front and leased round-robin; a lease returns its
/// stream on drop. `Send + Sync`: share it between threads by reference or in an `Arc`.
#[derive(Clone)]
#[must_use = "dropping the StreamPool destroys its streams"]
pub struct StreamPool {
    inner: Arc<PoolInner>,
}

impl fmt::Debug for StreamPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPool")
            .field("size", &self.inner.size)
            .field("free", &self.inner.free.lock().len())
            .finish()
    }
}

impl StreamPool {
    /// Creates `n` streams with `flags` on `dev`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `n == 0`; a stream creation failure (streams made so
    /// far are destroyed).
    pub fn new(dev: &Device, n: usize, flags: StreamFlags) -> Result<StreamPool> {
        if n == 0 {
            return Err(Error::InvalidArgument {
                api: "StreamPool::new",
                what: "stream count",
                value: 0,
            });
        }
        let streams = (0..n)
            .map(|_| Stream::with_config(dev, 0, flags))
            .collect::<Result<VecDeque<_>>>()?;
        Ok(StreamPool {
            inner: Arc::new(PoolInner {
                free: Mutex::new(streams),
                cv: Condvar::new(),
                size: n,
            }),
        })
    }

    /// The number of streams.
    pub fn len(&self) -> usize {
        self.inner.size
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.inner.size == 0
    }

    /// Leases the next stream in turn, waiting while all are leased.
    pub fn lease(&self) -> StreamLease {
        let mut free = self.inner.free.lock();
        loop {
            if let Some(s) = free.pop_front() {
                return self.wrap(s);
            }
            self.inner.cv.wait(&mut free);
        }
    }

    /// Leases the next stream if one is free now.
    pub fn try_lease(&self) -> Option<StreamLease> {
        self.inner.free.lock().pop_front().map(|s| self.wrap(s))
    }

    /// Leases the next stream, waiting at most `timeout`.
    pub fn lease_timeout(&self, timeout: Duration) -> Option<StreamLease> {
        let deadline = Instant::now() + timeout;
        let mut free = self.inner.free.lock();
        loop {
            if let Some(s) = free.pop_front() {
                return Some(self.wrap(s));
            }
            if self.inner.cv.wait_until(&mut free, deadline).timed_out() {
                return free.pop_front().map(|s| self.wrap(s));
            }
        }
    }

    fn wrap(&self, s: Stream) -> StreamLease {
        StreamLease {
            stream: Some(s),
            pool: self.inner.clone(),
        }
    }
}

/// A stream leased from a [`StreamPool`]; derefs to [`Stream`] and goes back to the pool
/// (at the end of the rotation) on drop.
#[must_use = "dropping a StreamLease returns the stream to its pool"]
pub struct StreamLease {
    stream: Option<Stream>,
    pool: Arc<PoolInner>,
}

impl fmt::Debug for StreamLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StreamLease").field(&self.stream).finish()
    }
}

impl std::ops::Deref for StreamLease {
    type Target = Stream;
    fn deref(&self) -> &Stream {
        // Invariant: `stream` is Some until drop.
        self.stream
            .as_ref()
            .expect("lease holds its stream until drop")
    }
}

impl std::ops::DerefMut for StreamLease {
    fn deref_mut(&mut self) -> &mut Stream {
        self.stream
            .as_mut()
            .expect("lease holds its stream until drop")
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            self.pool.free.lock().push_back(s);
            self.pool.cv.notify_one();
        }
    }
}
