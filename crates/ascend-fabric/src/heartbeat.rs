//! The heartbeat thread: every interval, a heartbeat on each channel's keepalive socket; a
//! channel whose heartbeat cannot be sent is lost.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::channel::{self, Channel, ChannelMap};
use crate::control;
use crate::error::LostReason;

/// Stops the heartbeat thread ([`Monitor::stop`]).
#[derive(Default)]
pub(crate) struct Monitor {
    stop: Mutex<bool>,
    cv: Condvar,
}

impl Monitor {
    /// Tells the threads watching it to end (they do within one wake-up).
    pub(crate) fn stop(&self) {
        *self.stop.lock() = true;
        self.cv.notify_all();
    }

    /// Waits `d` (or until stopped): whether to go on.
    pub(crate) fn wait(&self, d: Duration) -> bool {
        let mut stop = self.stop.lock();
        if !*stop {
            self.cv.wait_for(&mut stop, d);
        }
        !*stop
    }
}

/// Starts the heartbeat thread over the channels of `channels`, until `monitor` is stopped or
/// the map is gone.
pub(crate) fn spawn_heartbeats(
    channels: Weak<ChannelMap>,
    monitor: Arc<Monitor>,
    every: Duration,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("fabric-heartbeat".into())
        .spawn(move || loop {
            if !monitor.wait(every) {
                return;
            }
            let Some(map) = channels.upgrade() else {
                return;
            };
            let chans: Vec<Arc<Channel>> = map.read().values().cloned().collect();
            for ch in chans {
                let r = control::send_heartbeat(&mut ch.keepalive.lock());
                if let Err(e) = r {
                    tracing::warn!(peer = %ch.peer, error = %e, "heartbeat failed");
                    channel::lose(&map, &ch, loss_reason(&e));
                }
            }
        })
}

/// Why a failed heartbeat loses its channel: a send that could not finish within its timeout
/// (`WouldBlock`: the peer stopped reading) is the heartbeat's own failure; any other error
/// is the loss the keepalive reader reports for the same event
/// ([`channel::socket_loss`]), whichever of the two threads notices first.
fn loss_reason(e: &std::io::Error) -> LostReason {
    use std::io::ErrorKind::*;
    match e.kind() {
        WouldBlock | WriteZero => LostReason::HeartbeatFailed,
        _ => channel::socket_loss(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_closed_socket_is_the_keepalive_closing_and_a_stalled_one_a_failed_heartbeat() {
        for k in [ErrorKind::BrokenPipe, ErrorKind::ConnectionReset] {
            assert_eq!(loss_reason(&Error::from(k)), LostReason::KeepaliveClosed);
        }
        // TCP gave up on unacknowledged bytes (`TCP_USER_TIMEOUT`): the host is gone.
        let unacked = Error::from_raw_os_error(libc::ETIMEDOUT);
        assert_eq!(loss_reason(&unacked), LostReason::PeerUnresponsive);
        // A send that ran out its `SO_SNDTIMEO` fails with EAGAIN.
        let stalled = Error::from_raw_os_error(libc::EAGAIN);
        assert_eq!(loss_reason(&stalled), LostReason::HeartbeatFailed);
    }
}
