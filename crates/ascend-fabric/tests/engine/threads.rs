//! Many threads on one engine: 8 threads x 1000 transfers (sync and async, READ and WRITE) on
//! one channel at once, each on its own bytes, all verified; then the emulator's counters are
//! back to zero.

use std::time::{Duration, Instant};

use crate::util::*;
use ascend_fabric::{Engine, TransferDesc, TransferOp};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(20);
const THREADS: usize = 8;
const PER_THREAD: usize = 1000;
const AREA: usize = 64 << 10;

#[test]
fn eight_threads_times_a_thousand_transfers() {
    let env = setup();
    let a_addr = format!("127.0.0.1:{}", free_port());
    let t0 = Instant::now();
    {
        let a = Engine::new(&env.dev, &a_addr, test_options(4)).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(4)).unwrap();
        let remote = a.alloc_device(THREADS * AREA).unwrap();
        let _ra = a.register(&remote).unwrap();
        let local = b.alloc_host(2 * THREADS * AREA).unwrap();
        let _rb = b.register(&local).unwrap();
        b.connect(&a_addr, T).unwrap();
        let (l0, r0) = (local.addr(), remote.addr());
        for t in 0..THREADS {
            local
                .write_from(&pattern(t as u8, AREA), 2 * t * AREA)
                .unwrap();
        }
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let b = &b;
                let a_addr = &a_addr;
                s.spawn(move || {
                    let src = l0 + 2 * t * AREA;
                    let dst_back = src + AREA;
                    let r = r0 + t * AREA;
                    for i in 0..PER_THREAD {
                        // 4 KiB pieces at rotating offsets, plus a whole-area op now and then.
                        let (off, len) = if i % 100 == 99 {
                            (0, AREA)
                        } else {
                            ((i * 4096) % AREA, 4096)
                        };
                        let w = [TransferDesc::raw(src + off, r + off, len)];
                        let rd = [TransferDesc::raw(dst_back + off, r + off, len)];
                        match i % 4 {
                            0 => b.transfer_sync(a_addr, TransferOp::Write, &w, T).unwrap(),
                            1 => b.transfer_sync(a_addr, TransferOp::Read, &rd, T).unwrap(),
                            2 => b
                                .transfer_async(a_addr, TransferOp::Write, &w)
                                .unwrap()
                                .wait(T)
                                .unwrap(),
                            _ => b
                                .transfer_async(a_addr, TransferOp::Read, &rd)
                                .unwrap()
                                .wait(T)
                                .unwrap(),
                        }
                    }
                    // Final round trip of the whole area.
                    let w = [TransferDesc::raw(src, r, AREA)];
                    let rd = [TransferDesc::raw(dst_back, r, AREA)];
                    b.transfer_sync(a_addr, TransferOp::Write, &w, T).unwrap();
                    b.transfer_sync(a_addr, TransferOp::Read, &rd, T).unwrap();
                });
            }
        });
        for t in 0..THREADS {
            let mut got = vec![0u8; AREA];
            remote.read_into(&mut got, t * AREA).unwrap();
            assert!(got == pattern(t as u8, AREA), "remote area of thread {t}");
            local.read_into(&mut got, (2 * t + 1) * AREA).unwrap();
            assert!(
                got == pattern(t as u8, AREA),
                "read-back area of thread {t}"
            );
        }
        let st = b.peer_stats(&a_addr).unwrap();
        assert_eq!(st.errors, 0);
        assert_eq!(st.in_flight, 0);
        assert_eq!(
            st.reads + st.writes,
            (THREADS * (PER_THREAD + 2)) as u64,
            "{st:?}"
        );
        assert!(b.stream_slots() <= THREADS, "slots are reused");
    }
    eprintln!(
        "{} transfers on {THREADS} threads in {:?}",
        THREADS * (PER_THREAD + 2),
        t0.elapsed()
    );
    env.finish();
}

/// The ids of this process's live threads named `name`.
fn threads_named(name: &str) -> std::collections::BTreeSet<u64> {
    ascend_testkit::process::live_threads_named(name)
        .into_iter()
        .map(|t| t.tid)
        .collect()
}

/// Threads named `name` that are not in `before` (threads of earlier tests' engines may
/// still be ending: only new ones count).
fn new_threads(name: &str, before: &std::collections::BTreeSet<u64>) -> usize {
    threads_named(name).difference(before).count()
}

/// A synchronous transfer is observed by its caller alone: the engine's progress thread is
/// started by the first asynchronous one, not before.
#[test]
fn synchronous_transfers_start_no_progress_thread() {
    let env = setup();
    {
        let (a, a_addr) = listening(&env.dev, test_options(2));
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(2)).unwrap();
        let remote = a.alloc_device(AREA).unwrap();
        let local = b.alloc_device(AREA).unwrap();
        let _r = (a.register(&remote).unwrap(), b.register(&local).unwrap());
        b.connect(&a_addr, T).unwrap();
        let d = [TransferDesc::raw(local.addr(), remote.addr(), AREA)];
        let before = threads_named("fabric-progress");
        for op in [TransferOp::Write, TransferOp::Read] {
            for _ in 0..50 {
                b.transfer_sync(&a_addr, op, &d, T).unwrap();
            }
        }
        assert_eq!(new_threads("fabric-progress", &before), 0);
        b.transfer_async(&a_addr, TransferOp::Write, &d)
            .unwrap()
            .wait(T)
            .unwrap();
        // The new thread names itself once it runs: wait for that (bounded).
        let t0 = Instant::now();
        while new_threads("fabric-progress", &before) == 0 && t0.elapsed() < T {
            std::thread::yield_now();
        }
        assert_eq!(new_threads("fabric-progress", &before), 1);
    }
    env.finish();
}
