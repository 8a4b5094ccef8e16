//! `AutoConnect`: a transfer to a peer the engine is not connected to connects first, a
//! transfer whose copies fail disconnects the peer (the next one connects again), and an
//! engine without the option does neither.

use ascend_fabric::Addr;
use std::time::{Duration, Instant};

use crate::peer::*;
use crate::util::*;
use acl_sys as acl;
use ascend_fabric::{Engine, EngineOptions, Error, TransferDesc, TransferOp};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(5);
const N: usize = 64 << 10;

fn auto_options() -> EngineOptions {
    EngineOptions::builder()
        .task_stream_num(2)
        .heartbeat_interval(Duration::from_millis(100))
        .pool_capacity(64 << 30)
        .auto_connect(true)
        .build()
        .unwrap()
}

/// Waits until `cond` holds (the keepalive reader notices a peer's exit on its own thread).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + T;
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn transfers_connect_on_demand_and_again_after_the_peer_restarts() {
    let env = setup();
    let a_addr = format!("127.0.0.1:{}", free_port());
    {
        let b = Engine::new(&env.dev, "127.0.0.1", auto_options()).unwrap();
        let plain = Engine::new(&env.dev, "127.0.0.1", test_options(2)).unwrap();
        let src = b.alloc_device(MIB2).unwrap();
        let _src_reg = b.register(&src).unwrap();
        let psrc = plain.alloc_device(MIB2).unwrap();
        let _psrc_reg = plain.register(&psrc).unwrap();
        let l = src.addr();

        // Nobody listens yet: the on-demand connect fails with the connect's error.
        let e = b
            .transfer_sync(
                &a_addr,
                TransferOp::Write,
                &[TransferDesc::raw(l, Addr::new(1 << 40), 64)],
                T,
            )
            .unwrap_err();
        assert!(matches!(e, Error::Control(_)), "{e:?}");
        assert!(!b.is_connected(&a_addr));

        for (round, seed) in [(0, 7u8), (1, 9)] {
            let a = Engine::new(&env.dev, &a_addr, test_options(2)).unwrap();
            let dst = a.alloc_device(MIB2).unwrap();
            let _dst_reg = a.register(&dst).unwrap();
            let r = dst.addr();
            src.write_from(&pattern(seed, N), 0).unwrap();
            assert!(!b.is_connected(&a_addr), "round {round}");
            let req = b
                .transfer_async(&a_addr, TransferOp::Write, &[TransferDesc::raw(l, r, N)])
                .unwrap();
            req.wait(T).unwrap();
            assert!(b.is_connected(&a_addr), "round {round}");
            let mut got = vec![0u8; N];
            dst.read_into(&mut got, 0).unwrap();
            assert!(got == pattern(seed, N), "round {round}: data");

            // Without the option the same transfer needs a connect first.
            let e = plain
                .transfer_sync(
                    &a_addr,
                    TransferOp::Write,
                    &[TransferDesc::raw(psrc.addr(), r, 64)],
                    T,
                )
                .unwrap_err();
            assert!(matches!(e, Error::NotConnected { .. }), "{e:?}");

            // The peer goes away: `b` notices, and the next round connects anew.
            drop((_dst_reg, dst, a));
            eventually("the channel to close", || !b.is_connected(&a_addr));
        }
    }
    env.finish();
}

#[test]
fn a_failed_copy_disconnects_only_with_auto_connect() {
    let env = setup();
    let a_addr = format!("127.0.0.1:{}", free_port());
    {
        let a = Engine::new(&env.dev, &a_addr, test_options(2)).unwrap();
        let dst = a.alloc_device(MIB2).unwrap();
        let _dst_reg = a.register(&dst).unwrap();
        let r = dst.addr();
        for auto in [true, false] {
            let opts = if auto {
                auto_options()
            } else {
                test_options(2)
            };
            let b = Engine::new(&env.dev, "127.0.0.1", opts).unwrap();
            let src = b.alloc_device(MIB2).unwrap();
            let _src_reg = b.register(&src).unwrap();
            let d = [TransferDesc::raw(src.addr(), r, N)];
            b.connect(&a_addr, T).unwrap();
            // (symbol that fails once, how the failure surfaces)
            for (symbol, at_submit) in [
                ("aclrtMemcpyAsync", true),
                ("aclrtSynchronizeStream", false),
            ] {
                ascend_sim::fault::fail_nth(symbol, 1, acl::ACL_ERROR_RT_INTERNAL_ERROR);
                let e = if at_submit {
                    b.transfer_sync(&a_addr, TransferOp::Write, &d, T)
                        .unwrap_err()
                } else {
                    let req = b.transfer_async(&a_addr, TransferOp::Write, &d).unwrap();
                    req.wait(T).unwrap_err()
                };
                ascend_sim::fault::clear();
                if at_submit {
                    // Refused as it was queued: named by its descriptor.
                    assert!(
                        matches!(e, Error::CopyRefused { index: 0, .. }),
                        "{symbol}: {e:?}"
                    );
                } else {
                    assert!(matches!(e, Error::Mem(_)), "{symbol}: {e:?}");
                }
                assert_eq!(b.is_connected(&a_addr), !auto, "{symbol}, auto {auto}");
                // Either way the next transfer works: reconnected on demand, or still there.
                b.transfer_sync(&a_addr, TransferOp::Write, &d, T).unwrap();
                assert!(b.is_connected(&a_addr));
            }
            // Argument errors leave the channel alone, with the option too.
            let e = b
                .transfer_sync(
                    &a_addr,
                    TransferOp::Write,
                    &[TransferDesc::raw(Addr::new(1), r, 8)],
                    T,
                )
                .unwrap_err();
            assert!(matches!(e, Error::NotRegistered { .. }), "{e:?}");
            assert!(b.is_connected(&a_addr));
        }
    }
    env.finish();
}

/// Two threads transfer while copies fail now and then: each failure disconnects, the other
/// thread's next transfer reconnects, and a late disconnect never closes the session of the
/// connect that replaced it (the peer would then look dead: `KeepaliveClosed`).
#[test]
fn failures_and_reconnects_from_two_threads_do_not_close_new_sessions() {
    let env = setup();
    let a_addr = format!("127.0.0.1:{}", free_port());
    {
        let a = Engine::new(&env.dev, &a_addr, test_options(2)).unwrap();
        let dst = a.alloc_device(2 * MIB2).unwrap();
        let _dst_reg = a.register(&dst).unwrap();
        let r = dst.addr();
        let b = Engine::new(&env.dev, "127.0.0.1", auto_options()).unwrap();
        let src = b.alloc_device(MIB2).unwrap();
        let _src_reg = b.register(&src).unwrap();
        let l = src.addr();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (mut injected, mut failed, mut ok) = (0, 0, 0);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..2usize)
                .map(|t| {
                    let (b, a_addr, stop) = (&b, &a_addr, &stop);
                    s.spawn(move || {
                        let d = [TransferDesc::raw(l, r + t * MIB2, N)];
                        let (mut ok, mut failed) = (0u32, 0u32);
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            match b.transfer_sync(a_addr, TransferOp::Write, &d, T) {
                                Ok(()) => ok += 1,
                                Err(Error::Mem(_))
                                | Err(Error::PeerLost {
                                    reason: ascend_fabric::LostReason::Disconnected,
                                    ..
                                }) => failed += 1,
                                Err(e) => panic!("thread {t}: {e:?}"),
                            }
                        }
                        (ok, failed)
                    })
                })
                .collect();
            for _ in 0..30 {
                std::thread::sleep(Duration::from_millis(10));
                ascend_sim::fault::fail_nth(
                    "aclrtSynchronizeStream",
                    1,
                    acl::ACL_ERROR_RT_INTERNAL_ERROR,
                );
                injected += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            for w in workers {
                let (o, f) = w.join().unwrap();
                ok += o;
                failed += f;
            }
        });
        ascend_sim::fault::clear();
        assert!(
            ok > 0 && failed > 0,
            "ok {ok}, failed {failed}, injected {injected}"
        );
        // Every disconnect the workers made has been answered, and the server ends a
        // session before it answers: so if b holds a channel now, a must hold its session
        // (a stale disconnect closing the new session would show here), and a transfer
        // goes over that same channel without reconnecting.
        let before = b.peer_stats(&a_addr);
        if before.is_some() {
            assert_eq!(a.sessions().len(), 1, "{:?}", a.sessions());
        }
        let d = [TransferDesc::raw(l, r, N)];
        b.transfer_sync(&a_addr, TransferOp::Write, &d, T).unwrap();
        let after = b.peer_stats(&a_addr).expect("connected");
        if let Some(before) = before {
            assert_eq!(after.writes, before.writes + 1, "the same channel");
        }
        assert_eq!(a.sessions().len(), 1, "{:?}", a.sessions());
    }
    env.finish();
}

/// A synchronous transfer that runs out of time is aborted and, with the option, disconnects
/// its peer; the next transfer connects again.
#[test]
fn a_timed_out_transfer_disconnects_with_auto_connect() {
    let env = setup();
    let a_addr = format!("127.0.0.1:{}", free_port());
    {
        let a = Engine::new(&env.dev, &a_addr, test_options(2)).unwrap();
        let dst = a.alloc_device(2 * MIB2).unwrap();
        let _dst_reg = a.register(&dst).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", auto_options()).unwrap();
        let src = b.alloc_device(2 * MIB2).unwrap();
        let _src_reg = b.register(&src).unwrap();
        let d = [TransferDesc::raw(src.addr(), dst.addr(), 2 * MIB2)];
        b.connect(&a_addr, T).unwrap();
        // Every stream is held, so the copies cannot finish before the deadline whatever the
        // machine's speed; the timeout aborts them (an aborted stream stops waiting).
        let hold = ascend_sim::testing::hold_all_streams();
        let e = b
            .transfer_sync(&a_addr, TransferOp::Write, &d, Duration::from_millis(20))
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
        assert!(!b.is_connected(&a_addr));
        drop(hold);
        b.transfer_sync(&a_addr, TransferOp::Write, &d, T).unwrap();
        assert!(b.is_connected(&a_addr));
    }
    env.finish();
}
