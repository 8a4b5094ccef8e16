//! The periodic transfer summary (`EngineOptions::summary_interval`, whose docs give the
//! events and their fields), the log line HIXL's engine writes every 30 minutes, for
//! operators who read logs rather than scrape metrics: the thread that logs each channel's
//! figures since the last summary (kept by the channel: `stats::Window`).

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::channel::{Channel, ChannelMap};
use crate::heartbeat::Monitor;

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
    fn bandwidth_reads_as_gigabytes_per_second_to_two_decimals() {
        assert_eq!(gbps(2.345e9), 2.35);
        assert_eq!(gbps(0.0), 0.0);
    }
}
