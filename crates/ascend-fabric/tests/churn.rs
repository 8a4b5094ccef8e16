//! Resource churn: 20,000 registrations made and undone, 2,000 connects and disconnects to
//! one peer, 500 engines created and dropped, all in one process. After each phase the
//! emulator's live-object counters, the process's open descriptors and threads, and the VA
//! pool are back where they started; during the connect phase their growth is bounded.
//!
//! One test function, so that nothing else runs in this process while threads and descriptors
//! are counted (libtest runs each test on a thread of its own).

#[allow(dead_code)]
#[path = "engine/util.rs"]
mod util;

use std::time::Duration;

use ascend_fabric::{Engine, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_testkit::process;
use util::*;

const T: Duration = Duration::from_secs(20);

/// Open descriptors and live threads (not exiting) of this process.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Usage {
    fds: usize,
    threads: usize,
}

fn usage() -> Usage {
    Usage {
        fds: process::open_fds(),
        threads: process::live_thread_count(),
    }
}

fn assert_back(phase: &str, before: Usage) {
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "{phase}: emulator objects left: {c}");
    assert_eq!(
        usage(),
        before,
        "{phase}: descriptors and threads {:?}",
        process::live_threads()
    );
}

fn registrations(dev: &ascend_mem::Device) {
    let engine = Engine::new(dev, "127.0.0.1", options(1, 4)).unwrap();
    let bufs: Vec<_> = (0..4)
        .map(|_| engine.alloc_device(4 << 20).unwrap())
        .collect();
    for i in 0..20_000usize {
        let b = &bufs[i % bufs.len()];
        // Ranges of different lengths and offsets, so the range map really changes.
        let off = (i % 7) << 12;
        let len = ((i % 5) + 1) << 16;
        let reg = engine
            .register_slice(&b.as_slice().slice(off..off + len).unwrap())
            .unwrap();
        assert_eq!(engine.registrations(), 1);
        if i % 2 == 0 {
            engine.deregister(reg).unwrap();
        } else {
            drop(reg);
        }
        assert_eq!(engine.registrations(), 0);
    }
    assert_eq!(engine.pool_usage().0, 0);
}

fn connects(dev: &ascend_mem::Device) {
    let addr = listen_addr();
    let peer = Engine::new(dev, &addr, options(1, 4)).unwrap();
    let remote = peer.alloc_device(2 << 20).unwrap();
    let _remote_reg = peer.register(&remote).unwrap();
    let client = Engine::new(dev, "127.0.0.1", options(1, 4)).unwrap();
    let local = client.alloc_device(2 << 20).unwrap();
    let _reg = client.register(&local).unwrap();
    let mut first = None;
    for i in 0..2_000usize {
        client.connect(&addr, T).unwrap();
        assert_eq!(client.pool_usage().0, 1);
        if i % 100 == 0 {
            let d = TransferDesc::raw(local.addr(), remote.addr() + i, 4096);
            client
                .transfer_sync(&addr, TransferOp::Write, &[d], T)
                .unwrap();
        }
        client.disconnect(&addr, T).unwrap();
        assert_eq!(client.pool_usage().0, 0);
        assert_eq!(ascend_sim::counters().imports, 0);
        let base = *first.get_or_insert_with(usage);
        // The server may still be closing the last cycle's sockets (its loop runs on its own
        // thread, later under load): a little slack, reached in the background, and no growth
        // with the number of cycles.
        let settled = || {
            let now = usage();
            now.threads == base.threads && now.fds <= base.fds + 2
        };
        if !settled() {
            let what = format!("cycle {i}: descriptors and threads back near {base:?}");
            ascend_testkit::wait_until(&what, T, settled);
        }
    }
}

fn engines(dev: &ascend_mem::Device) {
    for i in 0..500 {
        let addr = if i % 5 == 0 {
            listen_addr()
        } else {
            "127.0.0.1".to_owned()
        };
        let e = Engine::new(dev, &addr, options(1, 4)).unwrap();
        assert_eq!(e.pool_usage().0, 0);
        drop(e);
    }
}

#[test]
fn registrations_connects_and_engines_churn_without_leaks() {
    let env = setup();
    let dev = env.dev.clone();
    // Warm up what lives for the process: the emulator's device state and its descriptor
    // broker (a thread and a socket, started by the first export).
    {
        let e = Engine::new(&dev, "127.0.0.1", options(1, 4)).unwrap();
        let b = e.alloc_device(2 << 20).unwrap();
        drop(e.register(&b).unwrap());
    }
    let before = usage();
    registrations(&dev);
    assert_back("20,000 registrations", before);
    connects(&dev);
    assert_back("2,000 connects", before);
    engines(&dev);
    assert_back("500 engines", before);
}
