//! Staged vs symmetric AllGather, 4 ranks (threads) x 8 MiB fp32: bytes copied and time.
//! Ignored by default; run with
//! `cargo test -p ascend-sim --release --test hccl_bench -- --ignored --nocapture`.

#[macro_use]
mod common;
#[macro_use]
mod hccl_common;

use std::ptr::null_mut;
use std::time::{Duration, Instant};

use common::*;
use hccl_common::*;

const RANKS: usize = 4;
const BYTES: usize = 8 << 20;
const ITERS: u32 = 20;

fn run(sym: bool) -> (Duration, ascend_sim::HcclStats) {
    let gate = std::sync::Barrier::new(RANKS);
    let times = ranks(RANKS as u32, None, |r| {
        let v = VmmBuf::new(r.rank, (RANKS + 1) * BYTES);
        let w = if sym {
            register(r, v.ptr, v.len as u64)
        } else {
            null_mut()
        };
        write_bytes(v.ptr, &vec![r.rank as u8; BYTES]);
        let count = (BYTES / 4) as u64;
        let once = || {
            hok!(HcclAllGather(
                v.ptr,
                v.at(BYTES),
                count,
                HCCL_DATA_TYPE_FP32,
                r.comm,
                r.stream
            ));
            assert_eq!(r.sync(), 0, "{}", last_msg());
        };
        once();
        once();
        gate.wait();
        if r.rank == 0 {
            ascend_sim::reset_hccl_stats();
        }
        gate.wait();
        let t0 = Instant::now();
        for _ in 0..ITERS {
            once();
        }
        let dt = t0.elapsed();
        gate.wait();
        let got = read_bytes(v.at(BYTES), RANKS * BYTES);
        for p in 0..RANKS {
            assert!(got[p * BYTES..(p + 1) * BYTES]
                .iter()
                .all(|b| *b == p as u8));
        }
        if sym {
            hok!(HcclCommSymWinDeregister(w));
        }
        dt
    });
    (
        times.into_iter().max().unwrap() / ITERS,
        ascend_sim::hccl_stats(),
    )
}

#[test]
#[ignore]
fn allgather_4x8mib_staged_vs_symmetric() {
    let _g = LOCK.lock();
    let (ts, ss) = run(false);
    let (ty, sy) = run(true);
    let per_op = |b: u64, ops: u64| b / ops.max(1) * RANKS as u64;
    println!(
        "staged:    {:>8.3} ms per AllGather, {} MiB copied per AllGather (all ranks)",
        ts.as_secs_f64() * 1e3,
        per_op(ss.staged_bytes_copied, ss.staged_ops) >> 20
    );
    println!(
        "symmetric: {:>8.3} ms per AllGather, {} MiB copied per AllGather (all ranks)",
        ty.as_secs_f64() * 1e3,
        per_op(sy.symmetric_bytes_copied, sy.symmetric_ops) >> 20
    );
    println!(
        "speed-up {:.2}x, bytes ratio {:.2}x",
        ts.as_secs_f64() / ty.as_secs_f64(),
        ss.staged_bytes_copied as f64 / sy.symmetric_bytes_copied as f64
    );
    assert_clean();
}
