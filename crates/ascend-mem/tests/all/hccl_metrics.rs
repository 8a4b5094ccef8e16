//! The HCCL layer's metrics: two ranks (threads of a child process that installed a
//! debugging recorder as the global one) queue known collectives and one-sided operations,
//! and each rank's counters, bytes and window gauge come out exact.

use std::time::Duration;

use ascend_mem::hccl::metrics::*;
use ascend_mem::hccl::{ReduceOp, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::DeviceBuffer;
use ascend_testkit::metrics::{DebuggingRecorder, Recorded};
use ascend_testkit::{assert_ok, role, test_name};

use crate::common::{run_child, setup};
use crate::hccl_util::*;

const MIB: usize = 1 << 20;

/// Per rank: a window registered; an AllGather of 4 KiB; two AllReduces of 8 KiB; two
/// barriers; a put of 16 KiB and a signal to the next rank; a get of 4 KiB from it.
fn workload(r: &mut Rank<'_>) {
    let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
    let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
    r.comm.barrier(&mut r.stream).unwrap();
    let send = DeviceBuffer::new(&r.dev, 4096).unwrap();
    let gathered = DeviceBuffer::new(&r.dev, r.n as usize * 4096).unwrap();
    let (s, g) = (send.slice(..4096).unwrap(), gathered.slice(..).unwrap());
    r.comm
        .all_gather::<u32>(&s, &g.slice(..r.n as usize * 4096).unwrap(), &mut r.stream)
        .unwrap();
    let red = DeviceBuffer::new(&r.dev, 8192).unwrap();
    let red = red.slice(..8192).unwrap();
    for _ in 0..2 {
        r.comm
            .all_reduce::<f32>(&red, &red, ReduceOp::Sum, &mut r.stream)
            .unwrap();
    }
    let next = (r.rank + 1) % r.n;
    let peer = win.peer::<u32>(next).unwrap();
    let src = DeviceBuffer::new(&r.dev, 16384).unwrap();
    let src = src.slice(..16384).unwrap().typed::<u32>().unwrap();
    r.stream.put_signal(&peer, &src, 0, 0, 1).unwrap();
    let back = DeviceBuffer::new(&r.dev, 4096).unwrap();
    let back = back.slice(..4096).unwrap().typed::<u32>().unwrap();
    r.stream.get(&peer, 0, &back).unwrap();
    r.comm.barrier(&mut r.stream).unwrap();
    r.comm
        .synchronize_watched(&mut r.stream, Duration::from_secs(10))
        .unwrap();
    drop(peer);
    r.barrier.wait();
    win.close().unwrap();
}

#[test]
fn collectives_and_onesided_operations_are_counted_per_rank() {
    let name = test_name!(collectives_and_onesided_operations_are_counted_per_rank);
    if role().as_deref() != Some("recorded") {
        assert_ok(&run_child(name, "recorded", &[]));
        return;
    }
    let rec = DebuggingRecorder::new();
    let snap = rec.snapshotter();
    rec.install().expect("the child's global recorder");
    describe();
    let env = setup();
    ranks(&env.rt, 2, &test_config(), workload);
    let got = Recorded::take(&snap);
    for rank in ["0", "1"] {
        let c = |name, op| got.counter(name, &[("rank", rank), ("op", op)]);
        assert_eq!(c(COLLECTIVES, "all_gather"), 1);
        assert_eq!(c(COLLECTIVE_BYTES, "all_gather"), 4096);
        assert_eq!(c(COLLECTIVES, "all_reduce"), 2);
        assert_eq!(c(COLLECTIVE_BYTES, "all_reduce"), 2 * 8192);
        assert_eq!(c(COLLECTIVES, "barrier"), 2);
        assert_eq!(c(COLLECTIVES, "reduce_scatter"), 0);
        assert_eq!(c(ONESIDED, "put"), 1);
        assert_eq!(c(ONESIDED_BYTES, "put"), 16384);
        assert_eq!(c(ONESIDED, "signal"), 1);
        assert_eq!(c(ONESIDED, "get"), 1);
        assert_eq!(c(ONESIDED_BYTES, "get"), 4096);
        // Registered, then closed.
        assert_eq!(got.gauge(WINDOWS, &[("rank", rank)]), 0.0);
    }
    env.finish();
    println!("RESULT ok");
}
