//! `AutoConnect`: a transfer to a peer the engine is not connected to connects first, a
//! transfer whose copies fail disconnects the peer (the next one connects again), and an
//! engine without the option does neither.

mod common;
mod fabric_util;

use std::time::{Duration, Instant};

use acl_sys as acl;
use ascend_fabric::{Engine, EngineOptions, Error, TransferDesc, TransferOp};
use fabric_util::*;

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
    let env = common::setup();
    let a_addr = format!("127.0.0.1:{}", free_port());
    {
        let b = Engine::new(&env.dev, "127.0.0.1", auto_options()).unwrap();
        let plain = Engine::new(&env.dev, "127.0.0.1", test_options(2)).unwrap();
        let src = b.alloc_device(MIB2).unwrap();
        let _src_reg = b.register(&src).unwrap();
        let psrc = plain.alloc_device(MIB2).unwrap();
        let _psrc_reg = plain.register(&psrc).unwrap();
        let l = src.as_raw() as u64;

        // Nobody listens yet: the on-demand connect fails with the connect's error.
        let e = b
            .transfer_sync(
                &a_addr,
                TransferOp::Write,
                &[TransferDesc::new(l, 1 << 40, 64)],
                T,
            )
            .unwrap_err();
        assert!(matches!(e, Error::Control(_)), "{e:?}");
        assert!(!b.is_connected(&a_addr));

        for (round, seed) in [(0, 7u8), (1, 9)] {
            let a = Engine::new(&env.dev, &a_addr, test_options(2)).unwrap();
            let dst = a.alloc_device(MIB2).unwrap();
            let _dst_reg = a.register(&dst).unwrap();
            let r = dst.as_raw() as u64;
            src.write_from(&pattern(seed, N), 0).unwrap();
            assert!(!b.is_connected(&a_addr), "round {round}");
            let req = b
                .transfer_async(
                    &a_addr,
                    TransferOp::Write,
                    &[TransferDesc::new(l, r, N as u64)],
                )
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
                    &[TransferDesc::new(psrc.as_raw() as u64, r, 64)],
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
    let env = common::setup();
    let a_addr = format!("127.0.0.1:{}", free_port());
    {
        let a = Engine::new(&env.dev, &a_addr, test_options(2)).unwrap();
        let dst = a.alloc_device(MIB2).unwrap();
        let _dst_reg = a.register(&dst).unwrap();
        let r = dst.as_raw() as u64;
        for auto in [true, false] {
            let opts = if auto {
                auto_options()
            } else {
                test_options(2)
            };
            let b = Engine::new(&env.dev, "127.0.0.1", opts).unwrap();
            let src = b.alloc_device(MIB2).unwrap();
            let _src_reg = b.register(&src).unwrap();
            let d = [TransferDesc::new(src.as_raw() as u64, r, N as u64)];
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
                assert!(matches!(e, Error::Mem(_)), "{symbol}: {e:?}");
                assert_eq!(b.is_connected(&a_addr), !auto, "{symbol}, auto {auto}");
                // Either way the next transfer works: reconnected on demand, or still there.
                b.transfer_sync(&a_addr, TransferOp::Write, &d, T).unwrap();
                assert!(b.is_connected(&a_addr));
            }
            // Argument errors leave the channel alone, with the option too.
            let e = b
                .transfer_sync(&a_addr, TransferOp::Write, &[TransferDesc::new(1, r, 8)], T)
                .unwrap_err();
            assert!(matches!(e, Error::NotRegistered { .. }), "{e:?}");
            assert!(b.is_connected(&a_addr));
        }
    }
    env.finish();
}
