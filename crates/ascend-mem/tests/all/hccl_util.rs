//! Helpers of the `hccl_*` integration tests: ranks as threads of this process (each with its
//! own device, stream and communicator, all through the safe API), element types with a
//! reference reduction, and byte conversions.
#![allow(dead_code)]

use std::sync::Barrier;
use std::time::Duration;

use ascend_mem::hccl::{half, Comm, CommConfig, HcclType, ReduceOp, RootInfo};
use ascend_mem::{Device, Runtime, Stream};

/// One rank's context, handed to the rank body.
pub struct Rank<'a> {
    pub rank: u32,
    pub n: u32,
    pub dev: Device,
    pub comm: Comm,
    pub stream: Stream,
    /// A barrier of all ranks of the run (host-side, for phases and statistics).
    pub barrier: &'a Barrier,
}

/// A config for tests: 1 MB HCCL buffers (so big collectives stage in chunks), 1 GB symmetric
/// maximum per rank, a 10 s exec timeout.
pub fn test_config() -> CommConfig {
    CommConfig::new()
        .buffer_size_mb(1)
        .sym_window_max_per_rank_gb(1)
        .exec_timeout(Duration::from_secs(10))
}

/// Runs `body` on `n` threads as the ranks of one communicator (rank r on device r), then
/// destroys each rank's stream and communicator (`close`, which must succeed: the body drops
/// its windows) and checks no sticky error is left. Returns the results in rank order.
pub fn ranks<R: Send>(
    rt: &Runtime,
    n: u32,
    cfg: &CommConfig,
    body: impl Fn(&mut Rank<'_>) -> R + Sync,
) -> Vec<R> {
    let root = RootInfo::generate(&rt.device(0).unwrap()).expect("HcclGetRootInfo");
    let barrier = Barrier::new(n as usize);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                let (body, root, barrier) = (&body, &root, &barrier);
                s.spawn(move || {
                    let dev = rt.device(rank as i32).unwrap();
                    let comm = Comm::init(&dev, root, rank, n, cfg)
                        .unwrap_or_else(|e| panic!("rank {rank}: Comm::init: {e}"));
                    let stream = Stream::new(&dev).unwrap();
                    let mut ctx = Rank {
                        rank,
                        n,
                        dev,
                        comm,
                        stream,
                        barrier,
                    };
                    let out = body(&mut ctx);
                    let Rank {
                        dev, comm, stream, ..
                    } = ctx;
                    drop(stream);
                    if let Err(e) = comm.close() {
                        panic!("rank {rank}: Comm::close: {e}");
                    }
                    dev.check_sticky()
                        .unwrap_or_else(|e| panic!("rank {rank}: sticky error left: {e}"));
                    out
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// An element type with a test pattern and a reference reduction that mirrors the
/// library's: in rank order, fp16/bf16 widened to f32 and rounded back after every step,
/// integers wrapping.
pub trait Elem: HcclType + PartialEq + std::fmt::Debug {
    const NAME: &'static str;
    fn gen(rank: u32, i: usize) -> Self;
    fn red(op: ReduceOp, a: Self, b: Self) -> Self;
}

/// A small value in -5..=13 (exact in every type).
fn small(rank: u32, i: usize) -> i64 {
    ((rank as i64) * 37 + (i as i64) * 11) % 19 - 5
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const NAME: &'static str = stringify!($t);
            fn gen(rank: u32, i: usize) -> Self {
                small(rank, i) as $t
            }
            fn red(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
        }
    )*};
}
int_elem!(i8, i16, i32, i64, i128, u8, u16, u32, u64);

fn fred(op: ReduceOp, a: f64, b: f64) -> f64 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

fn fsmall(rank: u32, i: usize) -> f32 {
    (small(rank, i) % 7) as f32 * 0.5 - 0.75
}

impl Elem for f32 {
    const NAME: &'static str = "f32";
    fn gen(rank: u32, i: usize) -> Self {
        fsmall(rank, i)
    }
    fn red(op: ReduceOp, a: Self, b: Self) -> Self {
        match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Prod => a * b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
}

impl Elem for f64 {
    const NAME: &'static str = "f64";
    fn gen(rank: u32, i: usize) -> Self {
        f64::from(fsmall(rank, i)) + 1e-9
    }
    fn red(op: ReduceOp, a: Self, b: Self) -> Self {
        fred(op, a, b)
    }
}

impl Elem for half::f16 {
    const NAME: &'static str = "f16";
    fn gen(rank: u32, i: usize) -> Self {
        half::f16::from_f32(fsmall(rank, i) * 1.1)
    }
    fn red(op: ReduceOp, a: Self, b: Self) -> Self {
        half::f16::from_f32(fred(op, a.to_f64(), b.to_f64()) as f32)
    }
}

impl Elem for half::bf16 {
    const NAME: &'static str = "bf16";
    fn gen(rank: u32, i: usize) -> Self {
        half::bf16::from_f32(fsmall(rank, i) * 1.1)
    }
    fn red(op: ReduceOp, a: Self, b: Self) -> Self {
        half::bf16::from_f32(fred(op, a.to_f64(), b.to_f64()) as f32)
    }
}

/// The reference reduction of element `idx` over ranks `0..n` (each contributing `gen(q, idx)`).
pub fn reduced<T: Elem>(op: ReduceOp, n: u32, idx: usize) -> T {
    let mut acc = T::gen(0, idx);
    for q in 1..n {
        acc = T::red(op, acc, T::gen(q, idx));
    }
    acc
}
