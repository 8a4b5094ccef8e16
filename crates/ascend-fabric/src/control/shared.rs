//! What the control server's handle and its event loop share: the state behind both, the
//! commands the handle queues for the loop, and the progress of a revocation.

use super::{ControlHandler, ServerConfig};
use crate::metrics::ServerMetrics;
use crate::wire::NotifyMsg;
use parking_lot::{Condvar, Mutex};
use polling::Poller;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::thread::ThreadId;
use std::time::Instant;

/// Key of the listener in the poller; connections use keys from 1.
pub(super) const LISTENER_KEY: usize = 0;

/// A live session as the server's callers see it.
pub(super) struct SessionEntry {
    /// The connection's key in the event loop.
    pub(super) key: usize,
    pub(super) last_heartbeat: Instant,
}

/// Totals and current values behind [`ServerStats`](super::ServerStats).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) open_connections: AtomicU64,
    pub(super) sessions: AtomicU64,
    pub(super) refused_over_cap: AtomicU64,
    pub(super) refused_not_allowed: AtomicU64,
    pub(super) closed_at_deadline: AtomicU64,
    pub(super) reaped: AtomicU64,
    pub(super) auth_failures: AtomicU64,
    pub(super) malformed: AtomicU64,
}

/// Progress of one [`ControlServer::revoke`](super::ControlServer::revoke) call, shared between the caller and the loop.
#[derive(Default)]
pub(super) struct RevokeWait {
    state: Mutex<RevokeState>,
    cv: Condvar,
}

#[derive(Default)]
struct RevokeState {
    /// The loop has handled the command (or has stopped).
    started: bool,
    /// Sessions the command revoked.
    revoked: usize,
    /// Of those, how many are still open.
    open: usize,
}

impl RevokeWait {
    /// The loop revoked `n` sessions, each holding a clone of this wait until it closes.
    pub(super) fn started(&self, n: usize) {
        let mut st = self.state.lock();
        st.started = true;
        st.revoked += n;
        st.open += n;
        drop(st);
        self.cv.notify_all();
    }

    /// One revoked session is gone.
    pub(super) fn closed(&self) {
        let mut st = self.state.lock();
        st.open = st.open.saturating_sub(1);
        drop(st);
        self.cv.notify_all();
    }

    /// Waits until the loop has taken the command and every session it revoked has closed, or
    /// until `deadline`; returns how many sessions the command revoked.
    pub(super) fn wait(&self, deadline: Instant) -> usize {
        let mut st = self.state.lock();
        // The loop answers every command it takes, and on exit abandons the rest; both waits
        // are bounded by `wait` all the same.
        while !st.started {
            if self.cv.wait_until(&mut st, deadline).timed_out() {
                tracing::warn!("revoke: the control loop did not take the command in time");
                return 0;
            }
        }
        while st.open > 0 {
            if self.cv.wait_until(&mut st, deadline).timed_out() {
                tracing::warn!(
                    revoked = st.revoked,
                    still_open = st.open,
                    "revoke: not every client closed its session in time"
                );
                break;
            }
        }
        st.revoked
    }
}

/// Work for the event loop from other threads.
pub(super) enum Command {
    Revoke {
        va_addrs: Vec<u64>,
        wait: Arc<RevokeWait>,
    },
}

/// State shared by the server handle and its event loop.
pub(super) struct Shared {
    pub(super) handler: Arc<dyn ControlHandler>,
    pub(super) config: ServerConfig,
    pub(super) poller: Arc<Poller>,
    pub(super) stop: AtomicBool,
    pub(super) commands: Mutex<Vec<Command>>,
    pub(super) sessions: Mutex<HashMap<String, SessionEntry>>,
    pub(super) notifies: Mutex<VecDeque<NotifyMsg>>,
    pub(super) counters: Counters,
    /// The same figures for the installed metrics recorder.
    pub(super) metrics: ServerMetrics,
    pub(super) loop_thread: OnceLock<ThreadId>,
}

impl Shared {
    /// Marks every queued command done; the loop calls it as it exits, so no caller waits on
    /// a loop that is gone.
    pub(super) fn abandon_commands(&self) {
        for c in self.commands.lock().drain(..) {
            match c {
                Command::Revoke { wait, .. } => wait.started(0),
            }
        }
    }
}
