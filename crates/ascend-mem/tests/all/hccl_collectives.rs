//! The collectives through the safe API, against references computed here: every collective
//! (AllGather, AllToAll, Broadcast, ReduceScatter, AllReduce) × every data type with a Rust type × every
//! reduce op × {staged, symmetric} × {1, 2, 4} ranks (ranks as threads). The path is chosen by
//! the memory alone (unregistered buffers stage; buffers in registered windows on every rank go
//! symmetric) and checked with the emulator's statistics. Also: in-place forms, large
//! collectives that stage in chunks, collectives and buffers dropped before the stream
//! synchronizes, and a measurement (ignored) of symmetric vs staged AllGather.

use std::time::{Duration, Instant};

use crate::common::setup;
use crate::hccl_util::*;
use ascend_mem::hccl::{half, CommConfig, ReduceOp, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, MappingSlice};

/// Elements per rank in the matrix (odd: no alignment luck).
const COUNT: usize = 67;

/// Where a rank's collectives read and write: `send` and `recv` each hold at least
/// `n × COUNT` elements of the widest type.
struct Area<'a> {
    send: MappingSlice<'a>,
    recv: MappingSlice<'a>,
}

/// Byte-level helpers, for the collectives below that still pass byte views.
fn write<T: Elem>(s: &MappingSlice<'_>, v: &[T]) {
    s.write_slice(v, 0).unwrap();
}

fn read<T: Elem>(s: &MappingSlice<'_>) -> Vec<T> {
    s.read_to_vec().unwrap()
}

/// Every collective and op for `T` on one rank; returns how many collectives ran.
fn collectives_of<T: Elem>(r: &mut Rank<'_>, a: &Area<'_>) -> u64 {
    let (n, me) = (r.n, r.rank);
    // Typed views of the two areas: lengths and ranges below are in elements of `T`.
    let (sv, rv) = (a.send.typed::<T>().unwrap(), a.recv.typed::<T>().unwrap());
    let ctx = |what: &str| format!("{} {what}, rank {me} of {n}", T::NAME);
    let mut ops = 0;

    // AllGather: every rank's COUNT elements, in rank order.
    let send = sv.slice(..COUNT).unwrap();
    let recv = rv.slice(..n as usize * COUNT).unwrap();
    send.write_slice(&(0..COUNT).map(|i| T::gen(me, i)).collect::<Vec<T>>(), 0)
        .unwrap();
    recv.fill_zero().unwrap();
    r.comm.all_gather(&send, &recv, &mut r.stream).unwrap();
    r.stream.synchronize().unwrap();
    let want: Vec<T> = (0..n)
        .flat_map(|q| (0..COUNT).map(move |i| T::gen(q, i)))
        .collect();
    assert_eq!(recv.read_to_vec().unwrap(), want, "{}", ctx("AllGather"));
    ops += 1;

    // AllToAll: block q of the receive buffer is block `me` of rank q's send buffer.
    let send = sv.slice(..n as usize * COUNT).unwrap();
    let recv = rv.slice(..n as usize * COUNT).unwrap();
    send.write_slice(
        &(0..n as usize * COUNT)
            .map(|j| T::gen(me, j))
            .collect::<Vec<T>>(),
        0,
    )
    .unwrap();
    recv.fill_zero().unwrap();
    r.comm.all_to_all(&send, &recv, &mut r.stream).unwrap();
    r.stream.synchronize().unwrap();
    let want: Vec<T> = (0..n)
        .flat_map(|q| (0..COUNT).map(move |i| T::gen(q, me as usize * COUNT + i)))
        .collect();
    assert_eq!(recv.read_to_vec().unwrap(), want, "{}", ctx("AllToAll"));
    ops += 1;

    // Broadcast from the last rank.
    let root = n - 1;
    let buf = rv.slice(..COUNT).unwrap();
    buf.write_slice(&(0..COUNT).map(|i| T::gen(me, i)).collect::<Vec<T>>(), 0)
        .unwrap();
    r.comm.broadcast(&buf, root, &mut r.stream).unwrap();
    r.stream.synchronize().unwrap();
    let want: Vec<T> = (0..COUNT).map(|i| T::gen(root, i)).collect();
    assert_eq!(buf.read_to_vec().unwrap(), want, "{}", ctx("Broadcast"));
    ops += 1;

    for op in ReduceOp::ALL {
        // ReduceScatter: rank r gets block r of the reduction of every rank's n × COUNT.
        let send = sv.slice(..n as usize * COUNT).unwrap();
        let recv = rv.slice(..COUNT).unwrap();
        send.write_slice(
            &(0..n as usize * COUNT)
                .map(|j| T::gen(me, j))
                .collect::<Vec<T>>(),
            0,
        )
        .unwrap();
        recv.fill_zero().unwrap();
        r.comm
            .reduce_scatter(&send, &recv, op, &mut r.stream)
            .unwrap();
        r.stream.synchronize().unwrap();
        let want: Vec<T> = (0..COUNT)
            .map(|i| reduced::<T>(op, n, me as usize * COUNT + i))
            .collect();
        assert_eq!(
            recv.read_to_vec().unwrap(),
            want,
            "{}",
            ctx(&format!("ReduceScatter {op:?}"))
        );

        // AllReduce.
        let send = sv.slice(..COUNT).unwrap();
        let recv = rv.slice(..COUNT).unwrap();
        send.write_slice(&(0..COUNT).map(|i| T::gen(me, i)).collect::<Vec<T>>(), 0)
            .unwrap();
        recv.fill_zero().unwrap();
        r.comm.all_reduce(&send, &recv, op, &mut r.stream).unwrap();
        r.stream.synchronize().unwrap();
        let want: Vec<T> = (0..COUNT).map(|i| reduced::<T>(op, n, i)).collect();
        assert_eq!(
            recv.read_to_vec().unwrap(),
            want,
            "{}",
            ctx(&format!("AllReduce {op:?}"))
        );
        ops += 2;
    }
    ops
}

/// Every type with a Rust type (fp8/hif8 have none).
fn every_type(r: &mut Rank<'_>, a: &Area<'_>) -> u64 {
    collectives_of::<i8>(r, a)
        + collectives_of::<i16>(r, a)
        + collectives_of::<i32>(r, a)
        + collectives_of::<i64>(r, a)
        + collectives_of::<i128>(r, a)
        + collectives_of::<u8>(r, a)
        + collectives_of::<u16>(r, a)
        + collectives_of::<u32>(r, a)
        + collectives_of::<u64>(r, a)
        + collectives_of::<f32>(r, a)
        + collectives_of::<f64>(r, a)
        + collectives_of::<half::f16>(r, a)
        + collectives_of::<half::bf16>(r, a)
}

/// A large AllReduce and AllToAll (1.2 MB of f32, above the 1 MB HCCL buffer: staged in
/// chunks) and an in-place AllGather, AllReduce and AllToAll. Returns how many collectives
/// ran.
fn large_and_in_place(r: &mut Rank<'_>, a: &Area<'_>) -> u64 {
    let (n, me) = (r.n, r.rank);
    const BIG: usize = 300_000;
    let send = a.send.slice(..BIG * 4).unwrap();
    let recv = a.recv.slice(..BIG * 4).unwrap();
    write(
        &send,
        &(0..BIG).map(|i| f32::gen(me, i)).collect::<Vec<_>>(),
    );
    r.comm
        .all_reduce::<f32>(&send, &recv, ReduceOp::Sum, &mut r.stream)
        .unwrap();
    r.stream.synchronize().unwrap();
    let got = read::<f32>(&recv);
    for i in (0..BIG).step_by(997).chain([BIG - 1]) {
        assert_eq!(
            got[i],
            reduced::<f32>(ReduceOp::Sum, n, i),
            "big AllReduce [{i}]"
        );
    }

    // In place: this rank's block of the receive buffer is the send buffer.
    let recv = a.recv.slice(..n as usize * COUNT * 4).unwrap();
    let mine = recv
        .slice(me as usize * COUNT * 4..(me as usize + 1) * COUNT * 4)
        .unwrap();
    recv.fill(0).unwrap();
    write(
        &mine,
        &(0..COUNT).map(|i| f32::gen(me, i)).collect::<Vec<_>>(),
    );
    r.comm
        .all_gather::<f32>(&mine, &recv, &mut r.stream)
        .unwrap();
    r.stream.synchronize().unwrap();
    let want: Vec<f32> = (0..n)
        .flat_map(|q| (0..COUNT).map(move |i| f32::gen(q, i)))
        .collect();
    assert_eq!(read::<f32>(&recv), want, "in-place AllGather");

    let buf = a.send.slice(..COUNT * 8).unwrap();
    write(
        &buf,
        &(0..COUNT).map(|i| i64::gen(me, i)).collect::<Vec<_>>(),
    );
    r.comm
        .all_reduce::<i64>(&buf, &buf, ReduceOp::Max, &mut r.stream)
        .unwrap();
    r.stream.synchronize().unwrap();
    let want: Vec<i64> = (0..COUNT).map(|i| reduced(ReduceOp::Max, n, i)).collect();
    assert_eq!(read::<i64>(&buf), want, "in-place AllReduce");

    // A large AllToAll (staged in chunks when not symmetric), then one in place.
    let send = a.send.slice(..BIG * 4).unwrap();
    let recv = a.recv.slice(..BIG * 4).unwrap();
    recv.fill(0).unwrap();
    write(
        &send,
        &(0..BIG).map(|i| f32::gen(me, i)).collect::<Vec<_>>(),
    );
    r.comm
        .all_to_all::<f32>(&send, &recv, &mut r.stream)
        .unwrap();
    r.stream.synchronize().unwrap();
    let got = read::<f32>(&recv);
    let blk = BIG / n as usize;
    for i in (0..BIG).step_by(991).chain([BIG - 1]) {
        let (q, k) = (i / blk, i % blk);
        assert_eq!(
            got[i],
            f32::gen(q as u32, me as usize * blk + k),
            "big AllToAll [{i}]"
        );
    }
    let buf = a.send.slice(..n as usize * COUNT * 2).unwrap();
    write(
        &buf,
        &(0..n as usize * COUNT)
            .map(|j| i16::gen(me, j))
            .collect::<Vec<_>>(),
    );
    r.comm.all_to_all::<i16>(&buf, &buf, &mut r.stream).unwrap();
    r.stream.synchronize().unwrap();
    let want: Vec<i16> = (0..n)
        .flat_map(|q| (0..COUNT).map(move |i| i16::gen(q, me as usize * COUNT + i)))
        .collect();
    assert_eq!(read::<i16>(&buf), want, "in-place AllToAll");
    5
}

/// The whole matrix on `n` ranks: first on unregistered buffers (staged), then on buffers in
/// a registered window (symmetric), with the emulator's statistics showing which path ran.
fn matrix(n: u32) {
    let env = setup();
    let cfg = test_config();
    let t0 = Instant::now();
    let per_rank = ranks(&env.rt, n, &cfg, |r| {
        let bytes = (n as usize * COUNT * 16).max(300_000 * 4);
        // Staged: plain device buffers, never registered.
        let send = DeviceBuffer::new(&r.dev, bytes).unwrap();
        let recv = DeviceBuffer::new(&r.dev, bytes).unwrap();
        r.barrier.wait();
        if r.rank == 0 {
            ascend_sim::reset_hccl_stats();
        }
        r.barrier.wait();
        let area = Area {
            send: send.as_slice(),
            recv: recv.as_slice(),
        };
        let staged_ops = every_type(r, &area) + large_and_in_place(r, &area);
        r.barrier.wait();
        let staged = ascend_sim::hccl_stats();
        r.barrier.wait();
        if r.rank == 0 {
            ascend_sim::reset_hccl_stats();
        }
        // Symmetric: one window over one buffer holding both areas (same size on every rank).
        let both = DeviceBuffer::new(&r.dev, 2 * bytes).unwrap();
        let win = SymWindow::register_mapping(&r.comm, both.mapping()).unwrap();
        r.barrier.wait();
        let area = Area {
            send: both.slice(..bytes).unwrap(),
            recv: both.slice(bytes..).unwrap(),
        };
        let sym_ops = every_type(r, &area) + large_and_in_place(r, &area);
        r.barrier.wait();
        let sym = ascend_sim::hccl_stats();
        win.close().unwrap();
        (staged_ops, staged, sym_ops, sym)
    });
    let (ops, staged, sym_ops, sym) = per_rank[0];
    assert_eq!(ops, sym_ops);
    let total = ops * u64::from(n);
    assert_eq!(
        (staged.staged_ops, staged.symmetric_ops),
        (total, 0),
        "{n} ranks, unregistered buffers: every collective staged ({staged:?})"
    );
    assert!(staged.staged_bytes_copied > 0 && staged.symmetric_bytes_copied == 0);
    assert_eq!(
        (sym.symmetric_ops, sym.staged_ops),
        (total, 0),
        "{n} ranks, buffers in windows: every collective symmetric ({sym:?})"
    );
    assert!(sym.symmetric_bytes_copied > 0 && sym.staged_bytes_copied == 0);
    eprintln!(
        "{n} ranks: {total} collectives per path in {:?}; staged {staged:?}; symmetric {sym:?}",
        t0.elapsed()
    );
    env.finish();
}

#[test]
fn matrix_1_rank() {
    matrix(1);
}

#[test]
fn matrix_2_ranks() {
    matrix(2);
}

#[test]
fn matrix_4_ranks() {
    matrix(4);
}

/// Dropping the window, the communicator and the buffers right after queueing collectives is
/// safe: the stream holds them; the deregistration (collective) and the destroy run at the
/// stream's synchronize, on every rank.
#[test]
fn dropping_everything_before_the_stream_synchronizes() {
    let env = setup();
    let n = 2;
    let cfg = test_config();
    let root = ascend_mem::hccl::RootInfo::generate(&env.dev).unwrap();
    std::thread::scope(|s| {
        for rank in 0..n {
            let (rt, root, cfg) = (&env.rt, &root, &cfg);
            s.spawn(move || {
                let dev = rt.device(rank as i32).unwrap();
                let comm = ascend_mem::hccl::Comm::init(&dev, root, rank, n, cfg).unwrap();
                let mut stream = ascend_mem::Stream::new(&dev).unwrap();
                let buf = DeviceBuffer::new(&dev, 2 << 20).unwrap();
                let win = SymWindow::register_mapping(&comm, buf.mapping()).unwrap();
                let out = DeviceBuffer::new(&dev, 2 << 20).unwrap();
                let keep = out.mapping().hold();
                let send = buf.slice(..COUNT * 4).unwrap();
                let recv = buf.slice(4096..4096 + n as usize * COUNT * 4).unwrap();
                write(
                    &send,
                    &(0..COUNT).map(|i| f32::gen(rank, i)).collect::<Vec<_>>(),
                );
                let hold = ascend_sim::testing::hold_stream(stream.as_raw());
                comm.all_gather::<f32>(&send, &recv, &mut stream).unwrap();
                stream
                    .copy_async(&keep.slice(..recv.len()).unwrap(), &recv)
                    .unwrap();
                drop(win);
                drop(comm);
                drop(buf);
                drop(out);
                // Still registered: the stream holds the window until it synchronizes.
                assert!(ascend_sim::counters().windows >= 1);
                drop(hold);
                stream.synchronize().unwrap();
                let got = read::<f32>(&keep.slice(..n as usize * COUNT * 4).unwrap());
                let want: Vec<f32> = (0..n)
                    .flat_map(|q| (0..COUNT).map(move |i| f32::gen(q, i)))
                    .collect();
                assert_eq!(got, want, "rank {rank}");
                drop(keep);
                drop(stream);
                dev.check_sticky().unwrap();
            });
        }
    });
    let c = ascend_sim::counters();
    assert_eq!((c.comms, c.windows), (0, 0), "{c}");
    env.finish();
}

/// Symmetric vs staged AllGather, 4 ranks × 8 MiB per rank of fp32, measured in one run:
/// bytes copied (the emulator's statistics) and time per collective.
///
/// `cargo test --release -p ascend-mem --test all -- --ignored --nocapture hccl_collectives::measure`
#[test]
#[ignore = "measurement: cargo test --release -p ascend-mem --test all -- --ignored --nocapture hccl_collectives::measure"]
fn measure_symmetric_vs_staged_allgather() {
    const N: u32 = 4;
    const PER_RANK: usize = 8 << 20;
    const ITERS: usize = 10;
    let env = setup();
    let cfg = CommConfig::new()
        .sym_window_max_per_rank_gb(1)
        .exec_timeout(Duration::from_secs(60));
    let res = ranks(&env.rt, N, &cfg, |r| {
        let count = PER_RANK / 4;
        let total = PER_RANK * N as usize;
        let data: Vec<f32> = (0..count)
            .map(|i| (r.rank as usize * count + i) as f32)
            .collect();
        let want: Vec<f32> = (0..N as usize * count).map(|i| i as f32).collect();
        let plain_send = DeviceBuffer::new(&r.dev, PER_RANK).unwrap();
        let plain_recv = DeviceBuffer::new(&r.dev, total).unwrap();
        let win_buf = DeviceBuffer::new(&r.dev, PER_RANK + total).unwrap();
        let win = SymWindow::register_mapping(&r.comm, win_buf.mapping()).unwrap();
        let mut out = Vec::new();
        for (name, send, recv) in [
            ("staged", plain_send.as_slice(), plain_recv.as_slice()),
            (
                "symmetric",
                win_buf.slice(..PER_RANK).unwrap(),
                win_buf.slice(PER_RANK..PER_RANK + total).unwrap(),
            ),
        ] {
            write(&send, &data);
            // Warm up (first touch of the pages), then measure.
            r.comm
                .all_gather::<f32>(&send, &recv, &mut r.stream)
                .unwrap();
            r.stream.synchronize().unwrap();
            r.barrier.wait();
            if r.rank == 0 {
                ascend_sim::reset_hccl_stats();
            }
            r.barrier.wait();
            let t0 = Instant::now();
            for _ in 0..ITERS {
                r.comm
                    .all_gather::<f32>(&send, &recv, &mut r.stream)
                    .unwrap();
            }
            r.stream.synchronize().unwrap();
            let dt = t0.elapsed() / ITERS as u32;
            r.barrier.wait();
            let st = ascend_sim::hccl_stats();
            r.barrier.wait();
            assert_eq!(read::<f32>(&recv), want, "{name}");
            out.push((name, dt, st));
        }
        win.close().unwrap();
        out
    });
    println!(
        "AllGather, {N} ranks (threads) x {} MiB per rank of fp32, mean of {ITERS}:",
        PER_RANK >> 20
    );
    for i in 0..2 {
        let (name, _, st) = res[0][i];
        let worst = res.iter().map(|r| r[i].1).max().unwrap();
        let bytes = st.staged_bytes_copied + st.symmetric_bytes_copied;
        let ops = st.staged_ops + st.symmetric_ops;
        println!(
            "  {name:>9}: {:6.1} MiB copied per collective (all ranks), {:7.2} ms per collective (slowest rank); {ops} ops",
            bytes as f64 / ops as f64 * f64::from(N) / (1 << 20) as f64,
            worst.as_secs_f64() * 1e3
        );
    }
    env.finish();
}

/// On the symmetric path, ranks where a collective runs in place (through scratch, one step
/// more) and ranks where it does not stay in step: the collectives after it see fresh data.
#[test]
fn in_place_on_some_ranks_only() {
    let env = setup();
    let cfg = test_config();
    ranks(&env.rt, 2, &cfg, |r| {
        let (n, me) = (r.n as usize, r.rank);
        const C: usize = 64;
        let buf = DeviceBuffer::new(&r.dev, 4 * C * n * 4).unwrap();
        let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
        let whole = buf.slice(..n * C * 4).unwrap();
        let other = buf.slice(n * C * 4..2 * n * C * 4).unwrap();
        // Rank 1 in place, rank 0 from `other` into `whole`.
        let send = if me == 1 { &whole } else { &other };
        for round in 0..3u32 {
            let v = |rank: u32, j: usize| (rank * 1000 + round * 100) as f32 + j as f32;
            // AllToAll.
            write(send, &(0..n * C).map(|j| v(me, j)).collect::<Vec<f32>>());
            if me == 0 {
                whole.fill(0).unwrap();
            }
            r.comm
                .all_to_all::<f32>(send, &whole, &mut r.stream)
                .unwrap();
            r.stream.synchronize().unwrap();
            let want: Vec<f32> = (0..n as u32)
                .flat_map(|q| (0..C).map(move |i| v(q, me as usize * C + i)))
                .collect();
            assert_eq!(read::<f32>(&whole), want, "AllToAll, round {round}");
            // AllReduce, in place on rank 1 only.
            let (s, d) = (send.slice(..C * 4).unwrap(), whole.slice(..C * 4).unwrap());
            write(&s, &(0..C).map(|j| v(me, j)).collect::<Vec<f32>>());
            r.comm
                .all_reduce::<f32>(&s, &d, ReduceOp::Sum, &mut r.stream)
                .unwrap();
            r.stream.synchronize().unwrap();
            let want: Vec<f32> = (0..C).map(|j| v(0, j) + v(1, j)).collect();
            assert_eq!(read::<f32>(&d), want, "AllReduce, round {round}");
            // AllGather (never in scratch) right after.
            let g = other.slice(..C * 4).unwrap();
            let out = buf.slice(2 * n * C * 4..3 * n * C * 4).unwrap();
            write(&g, &(0..C).map(|j| v(me, j)).collect::<Vec<f32>>());
            r.comm.all_gather::<f32>(&g, &out, &mut r.stream).unwrap();
            r.stream.synchronize().unwrap();
            let want: Vec<f32> = (0..n as u32)
                .flat_map(|q| (0..C).map(move |j| v(q, j)))
                .collect();
            assert_eq!(read::<f32>(&out), want, "AllGather, round {round}");
        }
        let st = ascend_sim::hccl_stats();
        assert_eq!(st.staged_ops, 0, "{st:?}");
        win.close().unwrap();
    });
    env.finish();
}
