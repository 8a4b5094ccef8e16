//! Quick throughput figures (ignored by default; run in release):
//! `cargo test --release -p ascend-fabric --test engine -- --ignored perf:: --nocapture`.
//! Engine WRITE/READ of 64 MiB blocks and of batched 4 KiB blocks against `memcpy` between
//! buffers of the same sizes on this machine.

use std::time::{Duration, Instant};

use crate::util::*;
use ascend_fabric::{Engine, TransferDesc, TransferOp};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(60);
const BIG: usize = 64 << 20;

fn gbs(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn best_of(n: usize, mut f: impl FnMut()) -> Duration {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

#[test]
#[ignore = "throughput figures: cargo test --release -p ascend-fabric --test engine -- --ignored perf:: --nocapture"]
fn throughput_against_memcpy() {
    let env = setup();
    let addr = format!("127.0.0.1:{}", free_port());
    {
        let a = Engine::new(&env.dev, &addr, test_options(4)).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(4)).unwrap();
        let remote = a.alloc_device(BIG).unwrap();
        let _ra = a.register(&remote).unwrap();
        let local = b.alloc_host(BIG).unwrap();
        let _rb = b.register(&local).unwrap();
        remote.fill(1).unwrap();
        local.fill(2).unwrap();
        b.connect(&addr, T).unwrap();
        let (l, r) = (local.addr(), remote.addr());

        let src = vec![3u8; BIG];
        let mut dst = vec![0u8; BIG];
        let m_big = best_of(10, || {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        });
        let m_4k = best_of(10, || {
            for (i, c) in dst.chunks_exact_mut(4096).enumerate() {
                let j = (i * 7919) % (BIG / 4096);
                c.copy_from_slice(&src[j * 4096..j * 4096 + 4096]);
            }
            std::hint::black_box(&mut dst);
        });

        let big = [TransferDesc::raw(l, r, BIG)];
        let w_big = best_of(10, || {
            b.transfer_sync(&addr, TransferOp::Write, &big, T).unwrap()
        });
        let r_big = best_of(10, || {
            b.transfer_sync(&addr, TransferOp::Read, &big, T).unwrap()
        });
        // 4 KiB blocks scattered on the remote side (no two adjacent: nothing coalesces).
        let n = BIG / 4096;
        let small: Vec<TransferDesc> = (0..n)
            .map(|i| {
                let j = (i * 7919) % n;
                TransferDesc::raw(l + (i * 4096), r + (j * 4096), 4096)
            })
            .collect();
        let w_4k = best_of(5, || {
            b.transfer_sync(&addr, TransferOp::Write, &small, T)
                .unwrap()
        });
        eprintln!("memcpy 64 MiB: {:.2} GB/s", gbs(BIG, m_big));
        eprintln!(
            "engine WRITE 64 MiB: {:.2} GB/s ({:.2} of memcpy); READ {:.2} GB/s ({:.2})",
            gbs(BIG, w_big),
            m_big.as_secs_f64() / w_big.as_secs_f64(),
            gbs(BIG, r_big),
            m_big.as_secs_f64() / r_big.as_secs_f64()
        );
        eprintln!("memcpy 16384 x 4 KiB: {:.2} GB/s", gbs(BIG, m_4k));
        eprintln!(
            "engine WRITE 16384 x 4 KiB in one batch: {:.2} GB/s ({:.2} of memcpy)",
            gbs(BIG, w_4k),
            m_4k.as_secs_f64() / w_4k.as_secs_f64()
        );
    }
    env.finish();
}
