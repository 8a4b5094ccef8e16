//! The heartbeat thread: every interval, a heartbeat on each channel's keepalive socket; a
//! channel whose heartbeat cannot be sent is lost (by this thread when the peer stopped
//! reading, by the socket's reader when the socket is dead).

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
                let mut keepalive = ch.keepalive.lock();
                let Err(e) = control::send_heartbeat(&mut keepalive) else {
                    continue;
                };
                tracing::warn!(peer = %ch.peer, error = %e, "heartbeat failed");
                match loss_reason(&e) {
                    // The socket is dead: its reader wakes and loses the channel, with
                    // what this heartbeat found if it took the socket's error.
                    None => ch.heartbeat_failed(&mut keepalive, &e),
                    Some(reason) => {
                        drop(keepalive);
                        channel::lose(&map, &ch, reason);
                    }
                }
            }
        })
}

/// Whether a failed heartbeat loses its channel itself: a send that could not finish within
/// its timeout (`WouldBlock`: the peer stopped reading, the socket is open) is the
/// heartbeat's own failure, which nothing else would notice. Any other error means the socket
/// is dead, which its keepalive reader sees too: `None`, the reader loses the channel (with
/// the reason of [`channel::socket_loss`], whichever of the two took the socket's error), so
/// one thread decides the reason.
fn loss_reason(e: &std::io::Error) -> Option<LostReason> {
    use std::io::ErrorKind::*;
    match e.kind() {
        WouldBlock | WriteZero => Some(LostReason::HeartbeatFailed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_stalled_socket_is_a_failed_heartbeat_and_a_dead_one_left_to_its_reader() {
        for k in [
            ErrorKind::BrokenPipe,
            ErrorKind::ConnectionReset,
            ErrorKind::TimedOut,
        ] {
            assert_eq!(loss_reason(&Error::from(k)), None, "{k:?}");
        }
        // A send that ran out its `SO_SNDTIMEO` fails with EAGAIN.
        let stalled = Error::from_raw_os_error(libc::EAGAIN);
        assert_eq!(loss_reason(&stalled), Some(LostReason::HeartbeatFailed));
    }
}
