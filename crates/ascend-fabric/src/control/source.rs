//! A socket registered with the event loop's poller, deleted from it before it closes.
//!
//! `Poller::add` is `unsafe` because the poller must not outlive its knowledge of an fd that
//! gets closed (the fd number could be reused by an unrelated file while still registered).
//! [`Registered`] owns the socket and deletes it in its `Drop`, which runs before the socket
//! field is dropped, so the contract holds on every path. This is the one place in the crate
//! that needs `unsafe`.
#![allow(unsafe_code)]

use polling::{Event, PollMode, Poller};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::io::AsRawFd;
use std::sync::Arc;

/// A source registered (level-triggered) with `poller` under one key until dropped.
pub(super) struct Registered<S: AsFd + AsRawFd> {
    poller: Arc<Poller>,
    source: S,
    key: usize,
}

impl<S: AsFd + AsRawFd> Registered<S> {
    /// Registers `source` with interest in reading.
    pub(super) fn new(poller: &Arc<Poller>, source: S, key: usize) -> io::Result<Self> {
        // SAFETY: `source` moves into the returned guard, which owns it for as long as it is
        // registered; the guard's Drop deletes it from this poller before the field, and so the
        // fd, is dropped. If `add` fails nothing was registered and `source` is simply dropped.
        unsafe { poller.add_with_mode(&source, Event::readable(key), PollMode::Level)? };
        Ok(Registered {
            poller: poller.clone(),
            source,
            key,
        })
    }

    /// Changes the interest.
    pub(super) fn set_interest(&self, readable: bool, writable: bool) -> io::Result<()> {
        self.poller.modify_with_mode(
            &self.source,
            Event::new(self.key, readable, writable),
            PollMode::Level,
        )
    }

    /// The source.
    pub(super) fn get(&self) -> &S {
        &self.source
    }
}

impl<S: AsFd + AsRawFd> Drop for Registered<S> {
    fn drop(&mut self) {
        if let Err(e) = self.poller.delete(&self.source) {
            tracing::warn!(error = %e, "removing a socket from the control poller failed");
        }
    }
}
