//! Communicators and symmetric windows through the safe API: every registration rule as a
//! typed error (checked here before any C call where HCCL checks it locally too, otherwise
//! HCCL's error on every rank, never a hang), window lookup and rounding, collective
//! deregistration (mismatch, `close` handing the window back, `Busy`), a failed drop recorded
//! as the device's sticky error, ranks that disagree on a collective, the length and device
//! checks of the collectives, and communicator init errors. Ranks are threads.

use std::time::{Duration, Instant};

use crate::common::setup;
use crate::hccl_util::*;
use ascend_mem::hccl::{Comm, CommConfig, HcclCode, OpExpansion, ReduceOp, RootInfo, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Error, ErrorKind, HostBuffer, Stream};

const MIB: usize = 1 << 20;

/// Asserts an HCCL error from `api` with `code`, and its kind.
#[track_caller]
fn assert_hccl(e: &Error, api: &str, code: HcclCode, kind: ErrorKind) {
    match e {
        Error::Hccl {
            api: a, code: c, ..
        } => {
            assert_eq!((*a, *c), (api, code), "{e}");
        }
        other => panic!("expected {api} failing with {code}, got {other:?}"),
    }
    assert_eq!(e.kind(), kind, "kind of {e}");
    assert_eq!(e.hccl_code(), Some(code));
}

#[track_caller]
fn assert_invalid(e: &Error, api: &str) {
    assert!(
        matches!(e, Error::InvalidArgument { api: a, .. } if *a == api),
        "expected InvalidArgument from {api}, got {e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

/// Rules the safe API checks before calling C (HCCL checks them locally too, so no rank waits
/// for another): empty range, above the per-rank maximum, another device's memory.
#[test]
fn register_rules_checked_before_any_call() {
    let env = setup();
    ranks(&env.rt, 1, &test_config(), |r| {
        let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let e = SymWindow::register(&r.comm, &buf.slice(..0).unwrap()).unwrap_err();
        assert_invalid(&e, "HcclCommSymWinRegister");
        // Above hcclSymWinMaxMemSizePerRank (1 GB here): host memory is enough to make a
        // mapping that long (its pages are never touched).
        let big = HostBuffer::new(&r.dev, (1 << 30) + 2 * MIB).unwrap();
        let e = SymWindow::register(&r.comm, &big.as_slice()).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { value, .. } if value == ((1 << 30) + 2 * MIB) as i128),
            "{e:?}"
        );
        let other = DeviceBuffer::new(&r.dev.runtime().device(9).unwrap(), 2 * MIB).unwrap();
        let e = SymWindow::register(&r.comm, &other.as_slice()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::WrongDevice {
                    expected: 0,
                    found: 9,
                    ..
                }
            ),
            "{e:?}"
        );
        // A MappingSlice cannot run past its mapping, so "size within the mapped memory"
        // holds by construction.
        assert!(buf.slice(..2 * MIB + 1).is_err());
        let e = r.comm.window_of(&buf.slice(..0).unwrap()).unwrap_err();
        assert_invalid(&e, "HcclCommSymWinGet");
        assert_eq!(ascend_sim::counters().windows, 0);
    });
    env.finish();
}

/// Rules HCCL checks collectively: every rank learns every rank's outcome, so a bad rank makes
/// every rank fail at once (well inside the 10 s exec timeout), and nothing is registered.
#[test]
fn register_rules_enforced_by_hccl_on_every_rank() {
    let env = setup();
    ranks(&env.rt, 2, &test_config(), |r| {
        let t0 = Instant::now();
        // Host memory: mapped with the VMM calls, but not device HBM.
        let host = HostBuffer::new(&r.dev, 2 * MIB).unwrap();
        let e = SymWindow::register_mapping(&r.comm, host.mapping()).unwrap_err();
        assert_hccl(
            &e,
            "HcclCommSymWinRegister",
            HcclCode::E_PARA,
            ErrorKind::InvalidArgument,
        );

        // Sizes that differ between ranks (after rounding to the allocation: 2 vs 4 MiB).
        let buf = DeviceBuffer::new(&r.dev, (2 + 2 * r.rank as usize) * MIB).unwrap();
        let e = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap_err();
        assert_hccl(
            &e,
            "HcclCommSymWinRegister",
            HcclCode::E_PARA,
            ErrorKind::InvalidArgument,
        );
        assert!(e.to_string().contains("HcclCommSymWinRegister"), "{e}");

        // Requested sizes that differ although both round to the same 2 MiB allocation.
        let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let len = MIB + r.rank as usize * MIB / 2;
        let e = SymWindow::register(&r.comm, &buf.slice(..len).unwrap()).unwrap_err();
        assert_hccl(
            &e,
            "HcclCommSymWinRegister",
            HcclCode::E_PARA,
            ErrorKind::InvalidArgument,
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(ascend_sim::counters().windows, 0);

        // The same size on every rank works; the window is rounded to the whole allocation.
        let w = SymWindow::register(&r.comm, &buf.slice(..4096).unwrap()).unwrap();
        assert_eq!(w.len(), 4096);
        assert!(w.is_registered().unwrap());
        let (found, off) = r
            .comm
            .window_of(&buf.slice(MIB..MIB + 64).unwrap())
            .unwrap()
            .expect("the rounded window holds the second MiB");
        assert_eq!((found.as_raw(), off), (w.as_raw(), MIB));
        let elsewhere = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        assert!(r.comm.window_of(&elsewhere.as_slice()).unwrap().is_none());

        // Another handle (from the lookup) makes close Busy; the communicator is Busy too
        // while a window (or a stream) holds it, and both hand the value back.
        let w = match w.close().map_err(|e| e.into_parts()) {
            Err((
                Error::Busy {
                    what: "SymWindow",
                    refs: 1,
                },
                w,
            )) => w,
            other => panic!("{other:?}"),
        };
        drop(found);
        match w.comm().close().map_err(|e| e.into_parts()) {
            Err((Error::Busy { what: "Comm", .. }, c)) => drop(c),
            other => panic!("{other:?}"),
        }
        w.close().unwrap();
        assert_eq!(
            r.comm
                .window_of(&buf.slice(..64).unwrap())
                .unwrap()
                .map(|(_, o)| o),
            None
        );
    });
    assert_eq!(ascend_sim::counters().windows, 0);
    env.finish();
}

/// Symmetric memory needs AI CPU op expansion: other modes are refused on every rank.
#[test]
fn op_expansion_other_than_ai_cpu_is_not_supported() {
    let env = setup();
    for (mode, ok) in [
        (OpExpansion::Aiv, false),
        (OpExpansion::Host, false),
        (OpExpansion::AiCpu, true),
    ] {
        let cfg = test_config().op_expansion(mode);
        ranks(&env.rt, 2, &cfg, |r| {
            let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
            match SymWindow::register_mapping(&r.comm, buf.mapping()) {
                Ok(w) if ok => w.close().unwrap(),
                Err(e) if !ok => assert_hccl(
                    &e,
                    "HcclCommSymWinRegister",
                    HcclCode::E_NOT_SUPPORT,
                    ErrorKind::NotSupported,
                ),
                other => panic!("{mode:?}: {other:?}"),
            }
        });
    }
    env.finish();
}

/// Deregistration is collective: ranks naming different windows fail with E_PARA on every
/// rank, `close` hands the window back still registered, and closing the matching windows
/// then works.
#[test]
fn deregistering_different_windows_is_an_error_and_close_hands_them_back() {
    let env = setup();
    ranks(&env.rt, 2, &test_config(), |r| {
        let a_buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let b_buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let a = SymWindow::register_mapping(&r.comm, a_buf.mapping()).unwrap();
        let b = SymWindow::register_mapping(&r.comm, b_buf.mapping()).unwrap();
        // Rank 0 closes a, rank 1 closes b.
        let (a, b) = if r.rank == 0 {
            let (e, a) = a.close().unwrap_err().into_parts();
            assert_hccl(
                &e,
                "HcclCommSymWinDeregister",
                HcclCode::E_PARA,
                ErrorKind::InvalidArgument,
            );
            (a, b)
        } else {
            let (e, b) = b.close().unwrap_err().into_parts();
            assert_hccl(
                &e,
                "HcclCommSymWinDeregister",
                HcclCode::E_PARA,
                ErrorKind::InvalidArgument,
            );
            (a, b)
        };
        assert!(a.is_registered().unwrap() && b.is_registered().unwrap());
        // The lookup still finds the window handed back.
        let (found, off) = r
            .comm
            .window_of(&a_buf.slice(8..16).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!((found.as_raw(), off), (a.as_raw(), 8));
        drop(found);
        a.close().unwrap();
        b.close().unwrap();
    });
    assert_eq!(ascend_sim::counters().windows, 0);
    env.finish();
}

/// A deregistration that fails in Drop never panics: it is logged and recorded as the
/// device's sticky error, which the next fallible call returns. (The communicator's destroy
/// then removes the windows HCCL still holds.)
#[test]
fn a_failed_deregistration_in_drop_becomes_the_sticky_error() {
    let env = setup();
    let cfg = test_config();
    let root = RootInfo::generate(&env.dev).unwrap();
    std::thread::scope(|s| {
        for rank in 0..2u32 {
            let (rt, root, cfg) = (&env.rt, &root, &cfg);
            s.spawn(move || {
                let dev = rt.device(rank as i32).unwrap();
                let comm = Comm::init(&dev, root, rank, 2, cfg).unwrap();
                let a_buf = DeviceBuffer::new(&dev, 2 * MIB).unwrap();
                let b_buf = DeviceBuffer::new(&dev, 2 * MIB).unwrap();
                let a = SymWindow::register_mapping(&comm, a_buf.mapping()).unwrap();
                let b = SymWindow::register_mapping(&comm, b_buf.mapping()).unwrap();
                // Drop different windows first: both deregistrations fail with E_PARA.
                let left = if rank == 0 {
                    drop(a);
                    b
                } else {
                    drop(b);
                    a
                };
                let e = dev.check_sticky().unwrap_err();
                match &e {
                    Error::Sticky { device, source } => {
                        assert_eq!(*device, rank as i32);
                        assert_eq!(source.hccl_code(), Some(HcclCode::E_PARA), "{e}");
                        assert_eq!(source.api(), Some("HcclCommSymWinDeregister"));
                    }
                    other => panic!("{other:?}"),
                }
                assert_eq!(e.hccl_code(), Some(HcclCode::E_PARA));
                dev.check_sticky().unwrap();
                // The ranks now hold different windows, so closing the one left fails too;
                // the communicator's destroy removes whatever HCCL still has registered.
                let (e, left) = left.close().unwrap_err().into_parts();
                assert_eq!(e.hccl_code(), Some(HcclCode::E_PARA));
                assert!(left.is_registered().unwrap());
                drop(left);
                let _ = dev.check_sticky();
                drop(comm);
                dev.check_sticky().unwrap();
            });
        }
    });
    let c = ascend_sim::counters();
    assert_eq!((c.comms, c.windows), (0, 0), "{c}");
    env.finish();
}

/// Ranks that disagree on a collective (count, type or op) fail on every rank at the stream's
/// synchronize, promptly, with the communicator's async error set; the communicator stays
/// usable. On both paths.
#[test]
fn ranks_disagreeing_on_a_collective_fail_on_every_rank() {
    let env = setup();
    ranks(&env.rt, 2, &test_config(), |r| {
        let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let plain = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
        for (path, mem) in [("symmetric", &buf), ("staged", &plain)] {
            // Rank 0 gathers 64 elements per rank, rank 1 32.
            let count = if r.rank == 0 { 64 } else { 32 };
            let send = mem.slice(..count * 4).unwrap();
            let recv = mem.slice(4096..4096 + 2 * count * 4).unwrap();
            let t0 = Instant::now();
            r.comm
                .all_gather::<f32>(&send, &recv, &mut r.stream)
                .unwrap();
            let e = r.stream.synchronize().unwrap_err();
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{path}: {:?}",
                t0.elapsed()
            );
            assert!(
                matches!(
                    e,
                    Error::Acl {
                        api: "aclrtSynchronizeStream",
                        ..
                    }
                ),
                "{path}: {e:?}"
            );
            assert_eq!(
                r.comm.async_error().unwrap(),
                Some(HcclCode::E_PARA),
                "{path}"
            );
            // Same byte count, different op.
            let op = if r.rank == 0 {
                ReduceOp::Sum
            } else {
                ReduceOp::Max
            };
            let s = mem.slice(..256).unwrap();
            r.comm.all_reduce::<i32>(&s, &s, op, &mut r.stream).unwrap();
            assert!(r.stream.synchronize().is_err(), "{path}");
            // AllToAll with different block sizes.
            let n = if r.rank == 0 { 128 } else { 64 };
            let (send, recv) = (mem.slice(..n).unwrap(), mem.slice(4096..4096 + n).unwrap());
            r.comm
                .all_to_all::<u8>(&send, &recv, &mut r.stream)
                .unwrap();
            assert!(r.stream.synchronize().is_err(), "{path}");
            // Still usable: a matching collective works.
            let send = mem.slice(..16).unwrap();
            let recv = mem.slice(4096..4096 + 32).unwrap();
            send.write_from(&[r.rank as u8 + 1; 16], 0).unwrap();
            r.comm
                .all_gather::<u8>(&send, &recv, &mut r.stream)
                .unwrap();
            r.stream.synchronize().unwrap();
            let mut got = [0u8; 32];
            recv.read_into(&mut got, 0).unwrap();
            assert_eq!(got[..16], [1; 16]);
            assert_eq!(got[16..], [2; 16]);
        }
        win.close().unwrap();
    });
    env.finish();
}

/// Lengths, roots and devices are checked before any C call; nothing is queued or kept.
#[test]
fn collectives_check_lengths_and_devices_first() {
    let env = setup();
    ranks(&env.rt, 2, &test_config(), |r| {
        let buf = DeviceBuffer::new(&r.dev, 2 * MIB).unwrap();
        let s = |a: usize, b: usize| buf.slice(a..b).unwrap();
        let st = &mut r.stream;
        let c = &r.comm;
        // AllGather: recv must be size × send; whole elements.
        assert_invalid(
            &c.all_gather::<f32>(&s(0, 64), &s(4096, 4096 + 64), st)
                .unwrap_err(),
            "HcclAllGather",
        );
        assert_invalid(
            &c.all_gather::<f32>(&s(0, 6), &s(4096, 4108), st)
                .unwrap_err(),
            "HcclAllGather",
        );
        // ReduceScatter: send must be size × recv.
        assert_invalid(
            &c.reduce_scatter::<i16>(&s(0, 64), &s(4096, 4096 + 64), ReduceOp::Sum, st)
                .unwrap_err(),
            "HcclReduceScatter",
        );
        // AllReduce: equal lengths.
        assert_invalid(
            &c.all_reduce::<u64>(&s(0, 64), &s(4096, 4096 + 72), ReduceOp::Min, st)
                .unwrap_err(),
            "HcclAllReduce",
        );
        // AllToAll: equal lengths, a multiple of the rank size in elements.
        assert_invalid(
            &c.all_to_all::<i32>(&s(0, 64), &s(4096, 4096 + 72), st)
                .unwrap_err(),
            "HcclAlltoAll",
        );
        assert_invalid(
            &c.all_to_all::<i32>(&s(0, 12), &s(4096, 4108), st)
                .unwrap_err(),
            "HcclAlltoAll",
        );
        // Broadcast: root in range.
        let e = c.broadcast::<i8>(&s(0, 64), 2, st).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    api: "HcclBroadcast",
                    value: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        // Another device's stream or memory.
        let other_dev = r.dev.runtime().device(8 + r.rank as i32).unwrap();
        let mut other_stream = Stream::new(&other_dev).unwrap();
        let e = c
            .all_gather::<u8>(&s(0, 8), &s(64, 80), &mut other_stream)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::WrongDevice {
                    what: "HcclAllGather",
                    ..
                }
            ),
            "{e:?}"
        );
        let other = DeviceBuffer::new(&other_dev, 2 * MIB).unwrap();
        let e = c
            .all_reduce::<u8>(&s(0, 8), &other.slice(..8).unwrap(), ReduceOp::Sum, st)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::WrongDevice {
                    what: "HcclAllReduce",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = c.barrier(&mut other_stream).unwrap_err();
        assert!(
            matches!(
                e,
                Error::WrongDevice {
                    what: "HcclBarrier",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            format!("{st:?}").contains("pending_keepalives: 0"),
            "{st:?}"
        );
        // A count of zero is fine (nothing to do).
        c.all_gather::<f32>(&s(0, 0), &s(0, 0), st).unwrap();
        st.synchronize().unwrap();
    });
    env.finish();
}

/// Init arguments, the config and the root info are checked; queries answer; a rank that
/// never joins makes the others time out (after the exec timeout), never hang.
#[test]
fn comm_init_errors_and_queries() {
    let env = setup();
    let root = RootInfo::generate(&env.dev).unwrap();
    let cfg = CommConfig::new();
    assert_invalid(
        &Comm::init(&env.dev, &root, 2, 2, &cfg).unwrap_err(),
        "HcclCommInitRootInfoConfig",
    );
    assert_invalid(
        &Comm::init(&env.dev, &root, 0, 0, &cfg).unwrap_err(),
        "HcclCommInitRootInfoConfig",
    );
    let long = CommConfig::new().name("n".repeat(200));
    assert_invalid(
        &Comm::init(&env.dev, &root, 0, 1, &long).unwrap_err(),
        "HcclCommConfig",
    );
    // Bytes that are not a root info.
    let garbage = RootInfo::from_bytes(&[0x5a; RootInfo::LEN]).unwrap();
    let e = Comm::init(&env.dev, &garbage, 0, 1, &cfg).unwrap_err();
    assert_hccl(
        &e,
        "HcclCommInitRootInfoConfig",
        HcclCode::E_PARA,
        ErrorKind::InvalidArgument,
    );
    assert!(RootInfo::from_bytes(&root.to_bytes()[..100]).is_err());
    // A rank that never joins: the other times out after the 1 s exec timeout.
    let t0 = Instant::now();
    let short = CommConfig::new().exec_timeout(Duration::from_secs(1));
    let e = Comm::init(&env.dev, &root, 0, 2, &short).unwrap_err();
    assert_hccl(
        &e,
        "HcclCommInitRootInfoConfig",
        HcclCode::E_TIMEOUT,
        ErrorKind::Timeout,
    );
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());

    let cfg = test_config().name("hccl-tests");
    ranks(&env.rt, 2, &cfg, |r| {
        assert_eq!(r.comm.name().unwrap(), "hccl-tests");
        assert_eq!(
            (r.comm.query_rank().unwrap(), r.comm.query_size().unwrap()),
            (r.rank, 2)
        );
        assert_eq!((r.comm.rank(), r.comm.size()), (r.rank, 2));
        assert_eq!(r.comm.sym_window_max_per_rank(), 1 << 30);
        assert_eq!(r.comm.async_error().unwrap(), None);
        // A stream with a queued barrier holds the communicator.
        let hold = ascend_sim::testing::hold_stream(r.stream.as_raw());
        r.comm.barrier(&mut r.stream).unwrap();
        let stand_in = placeholder(r);
        let comm = std::mem::replace(&mut r.comm, stand_in);
        let comm = match comm.close().map_err(|e| e.into_parts()) {
            Err((
                Error::Busy {
                    what: "Comm",
                    refs: 1,
                },
                c,
            )) => c,
            other => panic!("{other:?}"),
        };
        drop(hold);
        r.stream.synchronize().unwrap();
        let spare = std::mem::replace(&mut r.comm, comm);
        spare.close().unwrap();
    });
    env.finish();
}

/// A second, single-rank communicator on the same device, to stand in while the test takes the
/// rank's own out of its context.
fn placeholder(r: &Rank<'_>) -> Comm {
    let root = RootInfo::generate(&r.dev).unwrap();
    Comm::init(&r.dev, &root, 0, 1, &CommConfig::new()).unwrap()
}
