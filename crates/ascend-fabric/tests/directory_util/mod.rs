//! Helpers of the directory tests: a throwaway etcd, engines published in it, and waiting for
//! directory events.
#![allow(dead_code)]

pub mod etcd_server;

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use ascend_fabric::directory::DirectoryEvent;

pub use etcd_server::LocalEtcd;

/// Starts etcd on free loopback ports.
pub fn etcd() -> LocalEtcd {
    LocalEtcd::start(|| ascend_launch::free_port().expect("a free loopback port"))
}

/// Waits up to `within` for `name` to leave, skipping other events; the time it took.
pub fn wait_left(rx: &Receiver<DirectoryEvent>, name: &str, within: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    loop {
        let left = within.checked_sub(t0.elapsed())?;
        match rx.recv_timeout(left).ok()? {
            DirectoryEvent::Left { name: n } if n == name => return Some(t0.elapsed()),
            _ => {}
        }
    }
}
