//! The periodic transfer summary (`EngineOptions::summary_interval`, whose docs give the
//! events and their fields), the log line HIXL's engine writes every 30 minutes, for
//! operators who read logs rather than scrape metrics: each channel's figures since the last
//! summary, and the thread that logs them.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use crate::channel::{Channel, ChannelMap};
use crate::heartbeat::Monitor;

/// One direction's figures since the last summary.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct DirWindow {
    pub(crate) transfers: u64,
    pub(crate) bytes: u64,
    pub(crate) busy: Duration,
    /// Bytes per second of the slowest and fastest single transfer.
    pub(crate) min_rate: f64,
    pub(crate) max_rate: f64,
    pub(crate) longest: Duration,
}

impl DirWindow {
    fn add(&mut self, bytes: u64, took: Duration) {
        let rate = bytes as f64 / took.as_secs_f64().max(1e-9);
        if self.transfers == 0 {
            (self.min_rate, self.max_rate) = (rate, rate);
        } else {
            self.min_rate = self.min_rate.min(rate);
            self.max_rate = self.max_rate.max(rate);
        }
        self.transfers += 1;
        self.bytes += bytes;
        self.busy += took;
        self.longest = self.longest.max(took);
    }

    /// The bytes over the time spent, in bytes per second.
    pub(crate) fn avg_rate(&self) -> f64 {
        self.bytes as f64 / self.busy.as_secs_f64().max(1e-9)
    }
}

/// A channel's figures since the last summary (write, read); recorded only when the engine
/// logs summaries.
pub(crate) struct Window {
    on: bool,
    dirs: Mutex<[DirWindow; 2]>,
}

impl Window {
    pub(crate) fn new(on: bool) -> Window {
        Window {
            on,
            dirs: Mutex::default(),
        }
    }

    /// A transfer completed: its direction, bytes and time since submission.
    pub(crate) fn completed(&self, write: bool, bytes: u64, took: Duration) {
        if self.on {
            self.dirs.lock()[usize::from(!write)].add(bytes, took);
        }
    }

    /// The figures since the last call, and a fresh start.
    pub(crate) fn take(&self) -> [DirWindow; 2] {
        std::mem::take(&mut *self.dirs.lock())
    }
}

/// Logs the summary of every channel of `channels` each `every`, until `monitor` is stopped
/// or the map is gone.
pub(crate) fn spawn(
    engine: String,
    channels: Weak<ChannelMap>,
    monitor: Arc<Monitor>,
    every: Duration,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("fabric-summary".into())
        .spawn(move || {
            while monitor.wait(every) {
                let Some(map) = channels.upgrade() else {
                    return;
                };
                let chans: Vec<Arc<Channel>> = map.read().values().cloned().collect();
                drop(map);
                log(&engine, &chans);
            }
        })
}

/// One summary of `chans`: an event per peer and direction with transfers, then the slowest.
fn log(engine: &str, chans: &[Arc<Channel>]) {
    let mut slowest: Option<(&str, &str, f64)> = None;
    for ch in chans {
        for (w, op) in ch.book.summary.take().iter().zip(["write", "read"]) {
            if w.transfers == 0 {
                continue;
            }
            let avg = w.avg_rate();
            tracing::info!(
                engine,
                peer = %ch.peer,
                op,
                transfers = w.transfers,
                avg_size = w.bytes / w.transfers,
                avg_gbps = gbps(avg),
                min_gbps = gbps(w.min_rate),
                max_gbps = gbps(w.max_rate),
                max_ms = w.longest.as_secs_f64() * 1e3,
                "transfer summary"
            );
            if slowest.map_or(true, |(_, _, s)| avg < s) {
                slowest = Some((&ch.peer, op, avg));
            }
        }
    }
    if let Some((peer, op, avg)) = slowest {
        tracing::info!(engine, peer, op, avg_gbps = gbps(avg), "slowest link");
    }
}

/// Bytes per second as GB/s, to two decimals.
fn gbps(rate: f64) -> f64 {
    (rate / 1e7).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_keeps_the_range_the_average_and_the_longest_then_starts_afresh() {
        let w = Window::new(true);
        w.completed(true, 1000, Duration::from_micros(1));
        w.completed(true, 3000, Duration::from_micros(1));
        w.completed(false, 500, Duration::from_millis(2));
        let [wr, rd] = w.take();
        assert_eq!((wr.transfers, wr.bytes), (2, 4000));
        assert_eq!(wr.busy, Duration::from_micros(2));
        assert!((wr.min_rate - 1e9).abs() < 1.0 && (wr.max_rate - 3e9).abs() < 1.0);
        assert!((wr.avg_rate() - 2e9).abs() < 1.0);
        assert_eq!((rd.transfers, rd.longest), (1, Duration::from_millis(2)));
        assert_eq!(w.take(), [DirWindow::default(); 2]);
        assert_eq!(gbps(2.345e9), 2.35);
    }

    #[test]
    fn a_window_that_is_off_records_nothing() {
        let w = Window::new(false);
        w.completed(true, 1000, Duration::from_micros(1));
        assert_eq!(w.take(), [DirWindow::default(); 2]);
    }
}
