//! The emulator's HCCL at the C level: communicators, collectives on both paths, statistics.
//! Ranks are threads of this process (device = rank).

#[macro_use]
mod common;
#[macro_use]
mod hccl_common;

use std::ffi::c_void;
use std::ptr::null_mut;

use common::*;
use half::{bf16, f16};
use hccl_common::*;

// ---------------------------------------------------------------------------------------------
// Element types in the test: generation and a reference reduction.

#[derive(Debug, Clone, Copy)]
struct Ty {
    raw: u32,
    size: usize,
    name: &'static str,
}

const TYPES: [Ty; 13] = [
    Ty {
        raw: HCCL_DATA_TYPE_INT8,
        size: 1,
        name: "int8",
    },
    Ty {
        raw: HCCL_DATA_TYPE_INT16,
        size: 2,
        name: "int16",
    },
    Ty {
        raw: HCCL_DATA_TYPE_INT32,
        size: 4,
        name: "int32",
    },
    Ty {
        raw: HCCL_DATA_TYPE_INT64,
        size: 8,
        name: "int64",
    },
    Ty {
        raw: HCCL_DATA_TYPE_UINT8,
        size: 1,
        name: "uint8",
    },
    Ty {
        raw: HCCL_DATA_TYPE_UINT16,
        size: 2,
        name: "uint16",
    },
    Ty {
        raw: HCCL_DATA_TYPE_UINT32,
        size: 4,
        name: "uint32",
    },
    Ty {
        raw: HCCL_DATA_TYPE_UINT64,
        size: 8,
        name: "uint64",
    },
    Ty {
        raw: HCCL_DATA_TYPE_FP16,
        size: 2,
        name: "fp16",
    },
    Ty {
        raw: HCCL_DATA_TYPE_BFP16,
        size: 2,
        name: "bf16",
    },
    Ty {
        raw: HCCL_DATA_TYPE_FP32,
        size: 4,
        name: "fp32",
    },
    Ty {
        raw: HCCL_DATA_TYPE_FP64,
        size: 8,
        name: "fp64",
    },
    Ty {
        raw: HCCL_DATA_TYPE_INT128,
        size: 16,
        name: "int128",
    },
];

const OPS: [(u32, &str); 4] = [
    (HCCL_REDUCE_SUM, "sum"),
    (HCCL_REDUCE_PROD, "prod"),
    (HCCL_REDUCE_MAX, "max"),
    (HCCL_REDUCE_MIN, "min"),
];

/// Element `i` of rank `r`'s input as bytes (small values; negatives for signed types).
fn gen(t: Ty, r: usize, i: usize) -> Vec<u8> {
    let v = ((r * 7 + i * 3 + 1) % 11) as i64 - 5;
    let u = ((r * 5 + i * 3 + 2) % 13) as u64;
    match t.raw {
        HCCL_DATA_TYPE_INT8 => (v as i8).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_INT16 => (v as i16 * 300).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_INT32 => (v as i32 * 100_000).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_INT64 => (v * 10_000_000_000).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_UINT8 => (u as u8 * 20).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_UINT16 => (u as u16 * 5000).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_UINT32 => (u as u32).wrapping_mul(400_000_000).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_UINT64 => u
            .wrapping_mul(2_000_000_000_000_000_000)
            .to_le_bytes()
            .to_vec(),
        HCCL_DATA_TYPE_FP16 => f16::from_f32(v as f32 * 0.75).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_BFP16 => bf16::from_f32(v as f32 * 1.25).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_FP32 => (v as f32 * 0.1).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_FP64 => (v as f64 * 0.3).to_le_bytes().to_vec(),
        HCCL_DATA_TYPE_INT128 => (i128::from(v) << 80 | i128::from(u)).to_le_bytes().to_vec(),
        _ => unreachable!(),
    }
}

fn input(t: Ty, r: usize, off: usize, count: usize) -> Vec<u8> {
    (off..off + count).flat_map(|i| gen(t, r, i)).collect()
}

macro_rules! red_int {
    ($t:ty, $a:expr, $b:expr, $op:expr) => {{
        let x = <$t>::from_le_bytes($a.try_into().unwrap());
        let y = <$t>::from_le_bytes($b.try_into().unwrap());
        let z = match $op {
            HCCL_REDUCE_SUM => x.wrapping_add(y),
            HCCL_REDUCE_PROD => x.wrapping_mul(y),
            HCCL_REDUCE_MAX => x.max(y),
            _ => x.min(y),
        };
        z.to_le_bytes().to_vec()
    }};
}

macro_rules! red_float {
    ($t:ty, $a:expr, $b:expr, $op:expr) => {{
        let x = <$t>::from_le_bytes($a.try_into().unwrap());
        let y = <$t>::from_le_bytes($b.try_into().unwrap());
        let z = match $op {
            HCCL_REDUCE_SUM => x + y,
            HCCL_REDUCE_PROD => x * y,
            HCCL_REDUCE_MAX => x.max(y),
            _ => x.min(y),
        };
        z.to_le_bytes().to_vec()
    }};
}

fn red16(a: &[u8], b: &[u8], op: u32, bf: bool) -> Vec<u8> {
    let (x, y) = if bf {
        (
            bf16::from_le_bytes([a[0], a[1]]).to_f32(),
            bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        )
    } else {
        (
            f16::from_le_bytes([a[0], a[1]]).to_f32(),
            f16::from_le_bytes([b[0], b[1]]).to_f32(),
        )
    };
    let z = match op {
        HCCL_REDUCE_SUM => x + y,
        HCCL_REDUCE_PROD => x * y,
        HCCL_REDUCE_MAX => x.max(y),
        _ => x.min(y),
    };
    if bf {
        bf16::from_f32(z).to_le_bytes().to_vec()
    } else {
        f16::from_f32(z).to_le_bytes().to_vec()
    }
}

/// Reference: op over ranks 0..n in order, element by element.
fn reference(t: Ty, op: u32, n: usize, off: usize, count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * t.size);
    for i in off..off + count {
        let mut acc = gen(t, 0, i);
        for r in 1..n {
            let b = gen(t, r, i);
            acc = match t.raw {
                HCCL_DATA_TYPE_INT8 => red_int!(i8, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_INT16 => red_int!(i16, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_INT32 => red_int!(i32, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_INT64 => red_int!(i64, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_UINT8 => red_int!(u8, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_UINT16 => red_int!(u16, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_UINT32 => red_int!(u32, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_UINT64 => red_int!(u64, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_INT128 => red_int!(i128, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_FP32 => red_float!(f32, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_FP64 => red_float!(f64, &acc[..], &b[..], op),
                HCCL_DATA_TYPE_FP16 => red16(&acc, &b, op, false),
                HCCL_DATA_TYPE_BFP16 => red16(&acc, &b, op, true),
                _ => unreachable!(),
            };
        }
        out.extend(acc);
    }
    out
}

// ---------------------------------------------------------------------------------------------

/// Send and receive buffers of one rank: in one registered window (symmetric) or aclrtMalloc
/// blocks (staged).
struct Bufs {
    send: *mut c_void,
    recv: *mut c_void,
    _vmm: Option<VmmBuf>,
    _dev: Vec<DevBuf>,
    win: HcclCommSymWindow,
}

const HALF: usize = 1 << 20;

impl Bufs {
    fn new(r: &Rank, sym: bool) -> Bufs {
        if sym {
            let v = VmmBuf::new(r.rank, 2 * HALF);
            let win = register(r, v.ptr, v.len as u64);
            Bufs {
                send: v.ptr,
                recv: v.at(HALF),
                _vmm: Some(v),
                _dev: Vec::new(),
                win,
            }
        } else {
            let a = DevBuf::new(HALF);
            let b = DevBuf::new(HALF);
            Bufs {
                send: a.ptr,
                recv: b.ptr,
                _vmm: None,
                _dev: vec![a, b],
                win: null_mut(),
            }
        }
    }

    fn close(self) {
        if !self.win.is_null() {
            hok!(HcclCommSymWinDeregister(self.win));
        }
    }
}

/// Runs the 2-rank matrix of every collective x type (x op) on one path.
fn matrix(sym: bool) {
    let _g = LOCK.lock();
    ascend_sim::reset_hccl_stats();
    let n = 2usize;
    let count = 37usize;
    ranks(n as u32, None, |r| {
        let b = Bufs::new(r, sym);
        let me = r.rank as usize;
        for t in TYPES {
            // AllGather.
            write_bytes(b.send, &input(t, me, 0, count));
            hok!(HcclAllGather(
                b.send,
                b.recv,
                count as u64,
                t.raw,
                r.comm,
                r.stream
            ));
            assert_eq!(r.sync(), 0, "{}", last_msg());
            let want: Vec<u8> = (0..n).flat_map(|p| input(t, p, 0, count)).collect();
            assert_eq!(read_bytes(b.recv, want.len()), want, "AllGather {}", t.name);
            // Broadcast from rank 1.
            let buf = b.recv;
            write_bytes(buf, &input(t, me, 0, count));
            hok!(HcclBroadcast(buf, count as u64, t.raw, 1, r.comm, r.stream));
            assert_eq!(r.sync(), 0, "{}", last_msg());
            assert_eq!(
                read_bytes(buf, count * t.size),
                input(t, 1, 0, count),
                "Broadcast {}",
                t.name
            );
            for (op, on) in OPS {
                // AllReduce.
                write_bytes(b.send, &input(t, me, 0, count));
                hok!(HcclAllReduce(
                    b.send,
                    b.recv,
                    count as u64,
                    t.raw,
                    op,
                    r.comm,
                    r.stream
                ));
                assert_eq!(r.sync(), 0, "{}", last_msg());
                assert_eq!(
                    read_bytes(b.recv, count * t.size),
                    reference(t, op, n, 0, count),
                    "AllReduce {} {on}",
                    t.name
                );
                // ReduceScatter: rank p gets elements [p*count, (p+1)*count).
                write_bytes(b.send, &input(t, me, 0, n * count));
                hok!(HcclReduceScatter(
                    b.send,
                    b.recv,
                    count as u64,
                    t.raw,
                    op,
                    r.comm,
                    r.stream
                ));
                assert_eq!(r.sync(), 0, "{}", last_msg());
                assert_eq!(
                    read_bytes(b.recv, count * t.size),
                    reference(t, op, n, me * count, count),
                    "ReduceScatter {} {on}",
                    t.name
                );
            }
        }
        hok!(HcclBarrier(r.comm, r.stream));
        assert_eq!(r.sync(), 0);
        b.close();
    });
    let s = ascend_sim::hccl_stats();
    // 13 types x (AllGather + Broadcast + 4 x 2 reductions), on both ranks.
    let ops = 2 * 13 * 10;
    if sym {
        assert_eq!((s.symmetric_ops, s.staged_ops), (ops, 0), "{s:?}");
    } else {
        assert_eq!((s.symmetric_ops, s.staged_ops), (0, ops), "{s:?}");
    }
    assert_clean();
}

#[test]
fn matrix_staged_2_ranks() {
    matrix(false);
}

#[test]
fn matrix_symmetric_2_ranks() {
    matrix(true);
}

/// In-place AllReduce, ReduceScatter and AllGather on both paths, 3 ranks.
#[test]
fn in_place_forms() {
    let _g = LOCK.lock();
    let t = TYPES[10]; // fp32
    let n = 3usize;
    let count = 1000usize;
    for sym in [false, true] {
        ranks(n as u32, None, |r| {
            let me = r.rank as usize;
            let b = Bufs::new(r, sym);
            let buf = b.send;
            write_bytes(buf, &input(t, me, 0, count));
            hok!(HcclAllReduce(
                buf,
                buf,
                count as u64,
                t.raw,
                HCCL_REDUCE_SUM,
                r.comm,
                r.stream
            ));
            assert_eq!(r.sync(), 0, "{}", last_msg());
            assert_eq!(
                read_bytes(buf, count * 4),
                reference(t, HCCL_REDUCE_SUM, n, 0, count)
            );
            // ReduceScatter in place: recv = send + rank * count.
            write_bytes(buf, &input(t, me, 0, n * count));
            // SAFETY: inside the buffer.
            let rv = unsafe { buf.cast::<u8>().add(me * count * 4) }.cast::<c_void>();
            hok!(HcclReduceScatter(
                buf,
                rv,
                count as u64,
                t.raw,
                HCCL_REDUCE_MAX,
                r.comm,
                r.stream
            ));
            assert_eq!(r.sync(), 0, "{}", last_msg());
            assert_eq!(
                read_bytes(rv, count * 4),
                reference(t, HCCL_REDUCE_MAX, n, me * count, count)
            );
            // AllGather in place: send = recv + rank * count.
            write_bytes(rv, &input(t, me, 0, count));
            hok!(HcclAllGather(
                rv,
                buf,
                count as u64,
                t.raw,
                r.comm,
                r.stream
            ));
            assert_eq!(r.sync(), 0, "{}", last_msg());
            let want: Vec<u8> = (0..n).flat_map(|p| input(t, p, 0, count)).collect();
            assert_eq!(read_bytes(buf, want.len()), want);
            b.close();
        });
    }
    assert_clean();
}

/// A 1 MB HCCL buffer forces the staged path to chunk.
#[test]
fn staged_chunks_through_a_small_buffer() {
    let _g = LOCK.lock();
    let t = TYPES[2]; // int32
    let n = 2usize;
    let count = 300_000usize; // 1.2 MB per rank
    let cfg = config(|c| c.hcclBufferSize = 1);
    ranks(n as u32, Some(cfg), |r| {
        let me = r.rank as usize;
        let s = DevBuf::new(n * count * 4);
        let d = DevBuf::new(n * count * 4);
        write_bytes(s.ptr, &input(t, me, 0, count));
        hok!(HcclAllGather(
            s.ptr,
            d.ptr,
            count as u64,
            t.raw,
            r.comm,
            r.stream
        ));
        assert_eq!(r.sync(), 0, "{}", last_msg());
        let want: Vec<u8> = (0..n).flat_map(|p| input(t, p, 0, count)).collect();
        assert_eq!(read_bytes(d.ptr, want.len()), want);
        write_bytes(s.ptr, &input(t, me, 0, n * count));
        hok!(HcclReduceScatter(
            s.ptr,
            d.ptr,
            count as u64,
            t.raw,
            HCCL_REDUCE_SUM,
            r.comm,
            r.stream
        ));
        assert_eq!(r.sync(), 0, "{}", last_msg());
        assert_eq!(
            read_bytes(d.ptr, count * 4),
            reference(t, HCCL_REDUCE_SUM, n, me * count, count)
        );
        write_bytes(s.ptr, &input(t, me, 0, count));
        hok!(HcclAllReduce(
            s.ptr,
            d.ptr,
            count as u64,
            t.raw,
            HCCL_REDUCE_MIN,
            r.comm,
            r.stream
        ));
        assert_eq!(r.sync(), 0, "{}", last_msg());
        assert_eq!(
            read_bytes(d.ptr, count * 4),
            reference(t, HCCL_REDUCE_MIN, n, 0, count)
        );
        write_bytes(d.ptr, &input(t, me, 0, count));
        hok!(HcclBroadcast(
            d.ptr,
            count as u64,
            t.raw,
            0,
            r.comm,
            r.stream
        ));
        assert_eq!(r.sync(), 0, "{}", last_msg());
        assert_eq!(read_bytes(d.ptr, count * 4), input(t, 0, 0, count));
    });
    assert_clean();
}

/// The symmetric path copies fewer bytes: AllGather of b bytes on n ranks costs (2n+1)·b per
/// rank staged and n·b symmetric.
#[test]
fn symmetric_copies_fewer_bytes() {
    let _g = LOCK.lock();
    let n = 4usize;
    let b = 256 << 10;
    let mut per_path = Vec::new();
    for sym in [false, true] {
        ascend_sim::reset_hccl_stats();
        ranks(n as u32, None, |r| {
            let v = VmmBuf::new(r.rank, (n + 1) * b);
            let w = if sym {
                register(r, v.ptr, v.len as u64)
            } else {
                null_mut()
            };
            hok!(HcclAllGather(
                v.ptr,
                v.at(b),
                (b / 4) as u64,
                HCCL_DATA_TYPE_FP32,
                r.comm,
                r.stream
            ));
            assert_eq!(r.sync(), 0, "{}", last_msg());
            if sym {
                hok!(HcclCommSymWinDeregister(w));
            }
        });
        per_path.push(ascend_sim::hccl_stats());
    }
    let (st, sy) = (per_path[0], per_path[1]);
    assert_eq!((st.staged_ops, st.symmetric_ops), (n as u64, 0));
    assert_eq!((sy.staged_ops, sy.symmetric_ops), (0, n as u64));
    assert_eq!(st.staged_bytes_copied, (n * (2 * n + 1) * b) as u64);
    assert_eq!(sy.symmetric_bytes_copied, (n * n * b) as u64);
    assert_clean();
}

/// Only one buffer in a window: the staged path.
#[test]
fn one_buffer_outside_windows_takes_the_staged_path() {
    let _g = LOCK.lock();
    ascend_sim::reset_hccl_stats();
    ranks(2, None, |r| {
        let v = VmmBuf::new(r.rank, HALF);
        let w = register(r, v.ptr, v.len as u64);
        let d = DevBuf::new(8 * 4);
        write_bytes(v.ptr, &[r.rank as u8; 16]);
        hok!(HcclAllGather(
            v.ptr,
            d.ptr,
            4,
            HCCL_DATA_TYPE_FP32,
            r.comm,
            r.stream
        ));
        assert_eq!(r.sync(), 0);
        let want: Vec<u8> = [0u8; 16].into_iter().chain([1u8; 16]).collect();
        assert_eq!(read_bytes(d.ptr, 32), want);
        hok!(HcclCommSymWinDeregister(w));
    });
    let s = ascend_sim::hccl_stats();
    assert_eq!((s.staged_ops, s.symmetric_ops), (2, 0));
    assert_clean();
}

/// A rank whose buffers are in windows while the other's are not: both take the staged path.
#[test]
fn paths_are_agreed_across_ranks() {
    let _g = LOCK.lock();
    ascend_sim::reset_hccl_stats();
    ranks(2, None, |r| {
        let v = VmmBuf::new(r.rank, HALF);
        let w = register(r, v.ptr, v.len as u64);
        let d = DevBuf::new(HALF);
        let (s, dst) = if r.rank == 0 {
            (v.ptr, v.at(4096))
        } else {
            (d.ptr, v.ptr)
        };
        write_bytes(s, &[r.rank as u8 + 1; 8]);
        hok!(HcclAllGather(
            s,
            dst,
            2,
            HCCL_DATA_TYPE_INT32,
            r.comm,
            r.stream
        ));
        assert_eq!(r.sync(), 0);
        assert_eq!(read_bytes(dst, 16), [[1u8; 8], [2u8; 8]].concat());
        hok!(HcclCommSymWinDeregister(w));
    });
    let s = ascend_sim::hccl_stats();
    assert_eq!((s.staged_ops, s.symmetric_ops), (2, 0));
    assert_clean();
}

#[test]
fn single_rank_communicator() {
    let _g = LOCK.lock();
    ranks(1, None, |r| {
        let v = VmmBuf::new(0, HALF);
        let w = register(r, v.ptr, 4096);
        write_bytes(v.ptr, &7u32.to_le_bytes());
        hok!(HcclAllReduce(
            v.ptr,
            v.at(64),
            1,
            HCCL_DATA_TYPE_UINT32,
            HCCL_REDUCE_SUM,
            r.comm,
            r.stream
        ));
        assert_eq!(r.sync(), 0);
        assert_eq!(read_bytes(v.at(64), 4), 7u32.to_le_bytes());
        let mut size = 0;
        let mut id = 9;
        hok!(HcclGetRankSize(r.comm, &mut size));
        hok!(HcclGetRankId(r.comm, &mut id));
        assert_eq!((size, id), (1, 0));
        hok!(HcclCommSymWinDeregister(w));
    });
    assert_clean();
}
