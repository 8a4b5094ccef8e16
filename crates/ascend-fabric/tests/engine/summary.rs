//! The periodic summary (`EngineOptions::summary_interval`): a client with a 50 ms interval
//! writes and reads a peer's memory; its log (captured in a child process, whose global
//! subscriber sees the summary thread) carries `transfer summary` events whose counts and
//! sizes add up to exactly the transfers made, per direction, and a `slowest link` event.
//! An engine without the option has no summary thread.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use ascend_fabric::{Engine, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_testkit::{assert_ok, role, test_name, Spawn};
use parking_lot::Mutex;

use crate::util::*;

const T: Duration = Duration::from_secs(20);
const LEN: usize = 64 << 10;

/// Everything logged, as text.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

/// The value of `key=` in a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..].split(' ').next()
}

/// The summary's totals for `op`: (transfers, bytes) over every `transfer summary` event.
fn totals(log: &str, op: &str) -> (u64, u64) {
    log.lines()
        .filter(|l| l.contains("transfer summary") && field(l, "op") == Some(op))
        .fold((0, 0), |(n, b), l| {
            let t: u64 = field(l, "transfers").unwrap().parse().unwrap();
            let size: u64 = field(l, "avg_size").unwrap().parse().unwrap();
            (n + t, b + t * size)
        })
}

fn run(summary: bool) -> String {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .init();
    let env = setup();
    let (server, addr) = listening(&env.dev, options(2, 4));
    let remote = server.alloc_device(LEN).unwrap();
    let _rreg = server.register(&remote).unwrap();
    let mut opts = options(2, 4);
    if summary {
        opts.summary_interval = Some(Duration::from_millis(50));
    }
    let client = Engine::new(&env.dev, "127.0.0.1", opts).unwrap();
    let local = client.alloc_device(LEN).unwrap();
    let _lreg = client.register(&local).unwrap();
    client.connect(&addr, T).unwrap();
    let d = [TransferDesc::raw(local.addr(), remote.addr(), LEN)];
    for _ in 0..5 {
        client
            .transfer_sync(&addr, TransferOp::Write, &d, T)
            .unwrap();
    }
    for _ in 0..3 {
        client
            .transfer_sync(&addr, TransferOp::Read, &d, T)
            .unwrap();
    }
    // Only an engine with the option has a summary thread (the server has none). A new
    // thread names itself once it runs: the one expected is waited for.
    let threads = || ascend_testkit::process::live_threads_named("fabric-summary").len();
    if summary {
        ascend_testkit::wait_until("the summary thread", T, || threads() == 1);
    } else {
        assert_eq!(threads(), 0);
    }
    if summary {
        ascend_testkit::wait_until("every transfer summarised", T, || {
            totals(&log.text(), "\"read\"").0 >= 3 && totals(&log.text(), "\"write\"").0 >= 5
        });
    }
    drop((_lreg, local, client));
    drop((_rreg, remote, server));
    env.finish();
    log.text()
}

#[test]
fn the_summary_adds_up_to_the_transfers_made() {
    let name = test_name!(the_summary_adds_up_to_the_transfers_made);
    match role().as_deref() {
        Some("on") => {
            let log = run(true);
            assert_eq!(totals(&log, "\"write\""), (5, 5 * LEN as u64), "{log}");
            assert_eq!(totals(&log, "\"read\""), (3, 3 * LEN as u64), "{log}");
            assert!(log.contains("slowest link"), "{log}");
            let line = log
                .lines()
                .find(|l| l.contains("transfer summary"))
                .unwrap();
            for key in [
                "engine", "peer", "avg_gbps", "min_gbps", "max_gbps", "max_ms",
            ] {
                assert!(field(line, key).is_some(), "no {key} in {line}");
            }
            println!("RESULT ok");
        }
        Some("off") => {
            let log = run(false);
            assert!(!log.contains("transfer summary"), "{log}");
            println!("RESULT ok");
        }
        _ => {
            for r in ["on", "off"] {
                assert_ok(&Spawn::new(name, r).output());
            }
        }
    }
}
