//! HCCL through the safe API with ranks as processes (a test re-executes the test binary as its
//! own children in a role of `ascend_testkit::role`, the root info hex-encoded in
//! `HCCL_TEST_ROOT`): a rank that dies mid-collective leaves the others with an error within
//! the exec timeout; on A2 a window is `NotSupported`; the emulator's shared library opened as
//! the ACL runtime serves HCCL too, and `ASCEND_HCCL_LIB` is honoured and only read when a
//! communicator is made.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{run_child, setup, sim_library};
use crate::hccl_util::*;
use ascend_mem::hccl::{Comm, HcclCode, RootInfo, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::{Backend, DeviceBuffer, Error, ErrorKind, Runtime, Stream};
use ascend_testkit::{
    assert_ok, from_hex, result_numbers, role, test_name, to_hex, wait_success, watchdog, Spawn,
};

const ROOT_VAR: &str = "HCCL_TEST_ROOT";
const RANKS: u32 = 3;
/// Bounds the rendezvous too: every rank process must exec and reach `Comm::init` within it,
/// so it is far above what that takes on a loaded machine. A death is noticed long before it.
const EXEC_TIMEOUT: Duration = Duration::from_secs(20);
const COUNT: usize = 1000;

/// Starts `test` again as the rank process `role` of the communicator `root`.
fn spawn_rank(test: &str, role: &str, root: &RootInfo) -> Child {
    let mut s = Spawn::new(test, role).env(ROOT_VAR, to_hex(root.to_bytes()));
    s.command().stdout(Stdio::piped()).stderr(Stdio::piped());
    s.command().spawn().expect("spawn a rank process")
}

fn value(rank: u32, i: usize) -> f32 {
    (rank as usize * COUNT + i) as f32
}

/// One rank's life: a good symmetric and a good staged AllGather, then a third one, which the
/// dying rank abandons (queued on a held stream, so it is in flight) by exiting. Returns the
/// third's synchronize error, the async error and how long the synchronize took.
fn rank_life(rank: u32, root: &RootInfo, die: bool) -> (Error, Option<HcclCode>, Duration) {
    let rt = Runtime::emulated().unwrap();
    let dev = rt.device(rank as i32).unwrap();
    let cfg = test_config().exec_timeout(EXEC_TIMEOUT);
    let comm = Comm::init(&dev, root, rank, RANKS, &cfg).unwrap();
    let mut stream = Stream::new(&dev).unwrap();
    let n = RANKS as usize;
    let b = COUNT * 4;
    let win_buf = DeviceBuffer::new(&dev, (n + 1) * b).unwrap();
    let win = SymWindow::register_mapping(&comm, win_buf.mapping()).unwrap();
    let plain_send = DeviceBuffer::new(&dev, b).unwrap();
    let plain_recv = DeviceBuffer::new(&dev, n * b).unwrap();
    let mine: Vec<f32> = (0..COUNT).map(|i| value(rank, i)).collect();
    let want: Vec<f32> = (0..n * COUNT).map(|i| i as f32).collect();
    let (ws, wr) = (
        win_buf.slice(..b).unwrap(),
        win_buf.slice(b..(n + 1) * b).unwrap(),
    );
    for (send, recv) in [
        (ws, wr),
        (
            plain_send.slice(..b).unwrap(),
            plain_recv.slice(..n * b).unwrap(),
        ),
    ] {
        let (send, recv) = (send.typed::<f32>().unwrap(), recv.typed::<f32>().unwrap());
        send.write_slice(&mine, 0).unwrap();
        comm.all_gather(&send, &recv, &mut stream).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(recv.read_to_vec().unwrap(), want, "rank {rank}");
    }
    let st = ascend_sim::hccl_stats();
    assert_eq!(
        (st.symmetric_ops, st.staged_ops),
        (1, 1),
        "rank {rank}: {st:?}"
    );
    if die {
        let _hold = ascend_sim::testing::hold_stream(stream.as_raw());
        comm.all_gather::<f32>(&ws, &wr, &mut stream).unwrap();
        // SAFETY: ends the process at once, as a crash would.
        unsafe { libc::_exit(0) };
    }
    let t0 = Instant::now();
    comm.all_gather::<f32>(&ws, &wr, &mut stream).unwrap();
    let e = stream.synchronize().unwrap_err();
    let dt = t0.elapsed();
    let asy = comm.async_error().unwrap();
    // The broken communicator refuses further work with the recorded error...
    let again = comm.all_gather::<f32>(&ws, &wr, &mut stream).unwrap_err();
    assert_eq!(again.hccl_code(), asy, "{again}");
    // ... and still tears down: the stream (which held the window and the communicator for
    // its failed work), the window, locally (close reports the peer's absence and hands back
    // a window that is no longer registered), then the communicator.
    drop(stream);
    match win.close().map_err(|e| e.into_parts()) {
        Ok(()) => {}
        Err((e, w)) => {
            assert!(!w.is_registered().unwrap(), "{e}");
            drop(w);
        }
    }
    comm.close().unwrap();
    drop((win_buf, plain_send, plain_recv));
    let _ = dev.check_sticky();
    dev.check_sticky().unwrap();
    (e, asy, dt)
}

#[test]
fn a_rank_that_dies_mid_collective_leaves_the_others_an_error() {
    let name = test_name!(a_rank_that_dies_mid_collective_leaves_the_others_an_error);
    if let Some(role) = role() {
        watchdog(Duration::from_secs(30));
        let root = RootInfo::from_bytes(&from_hex(&std::env::var(ROOT_VAR).unwrap())).unwrap();
        let (rank, die) = if role == "survivor" {
            (1, false)
        } else {
            (2, true)
        };
        let (e, asy, dt) = rank_life(rank, &root, die);
        println!(
            "RESULT {} {} {}",
            e.code().map_or(0, |c| c.0),
            asy.map_or(0, |c| c.0),
            dt.as_millis()
        );
        return;
    }
    let env = setup();
    let root = RootInfo::generate(&env.dev).unwrap();
    let survivor = spawn_rank(name, "survivor", &root);
    let dier = spawn_rank(name, "die", &root);
    let (e, asy, dt) = rank_life(0, &root, false);
    wait_success(dier, "the dying rank (before it died)");
    let v = result_numbers(&wait_success(survivor, "the surviving rank"));
    assert!(
        matches!(
            e,
            Error::Acl {
                api: "aclrtSynchronizeStream",
                ..
            }
        ),
        "rank 0: {e:?}"
    );
    let limit = EXEC_TIMEOUT + Duration::from_millis(500);
    let remote_or_timeout = [
        u64::from(HcclCode::E_REMOTE.0),
        u64::from(HcclCode::E_TIMEOUT.0),
    ];
    for (who, code, asy, dt) in [
        (
            "rank 0",
            e.code().map_or(0, |c| c.0 as u64),
            asy.map_or(0, |c| u64::from(c.0)),
            dt,
        ),
        ("rank 1", v[0], v[1], Duration::from_millis(v[2])),
    ] {
        assert_ne!(code, 0, "{who}: the synchronize failed with an ACL code");
        assert!(remote_or_timeout.contains(&asy), "{who}: async error {asy}");
        assert!(dt < limit, "{who} took {dt:?}");
    }
    eprintln!("rank 0: {e} / async {asy:?} after {dt:?}; rank 1: {v:?}");
    env.finish();
}

/// A2 has no symmetric memory: registering is `NotSupported` (HCCL_E_NOT_SUPPORT); the staged
/// path still works. (`ASCEND_SIM_SOC` is read once per process, hence the child.)
#[test]
fn a2_has_no_symmetric_windows() {
    let name = test_name!(a2_has_no_symmetric_windows);
    if role().as_deref() == Some("a2") {
        assert_eq!(std::env::var("ASCEND_SIM_SOC").as_deref(), Ok("A2"));
        let env = setup();
        ranks(&env.rt, 2, &test_config(), |r| {
            let buf = DeviceBuffer::new(&r.dev, 2 << 20).unwrap();
            let e = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotSupported, "{e}");
            assert_eq!(e.hccl_code(), Some(HcclCode::E_NOT_SUPPORT));
            assert_eq!(e.api(), Some("HcclCommSymWinRegister"));
            let send = buf.slice(..64).unwrap();
            let recv = buf.slice(4096..4096 + 128).unwrap();
            send.write_from(&[r.rank as u8; 64], 0).unwrap();
            r.comm
                .all_gather::<u8>(&send, &recv, &mut r.stream)
                .unwrap();
            r.stream.synchronize().unwrap();
            let mut got = [9u8; 128];
            recv.read_into(&mut got, 0).unwrap();
            assert_eq!((got[..64] == [0; 64], got[64..] == [1; 64]), (true, true));
        });
        assert_eq!(ascend_sim::hccl_stats().symmetric_ops, 0);
        env.finish();
        println!("RESULT ok");
        return;
    }
    if let Some(other) = role() {
        panic!("unknown role {other}");
    }
    let out = run_child(name, "a2", &[("ASCEND_SIM_SOC", "A2")]);
    assert_ok(&out);
}

/// `ASCEND_ACL_LIB=…/libascend_sim.so`: the runtime takes the dlopen path and the same file
/// serves HCCL (a symmetric AllGather across two thread ranks). With `ASCEND_HCCL_LIB` naming a
/// missing file, ACL still works (HCCL is only opened for a communicator) and the first HCCL
/// call reports the load error.
#[test]
fn the_emulator_by_dlopen_serves_hccl_too() {
    let name = test_name!(the_emulator_by_dlopen_serves_hccl_too);
    match role().as_deref() {
        Some("dlopen") => {
            let rt = Runtime::from_env().unwrap();
            let lib = std::env::var("ASCEND_ACL_LIB").unwrap();
            assert_eq!(*rt.backend(), Backend::EmulatorDl { path: lib.clone() });
            assert_eq!(rt.hccl().unwrap().source().describe(), lib);
            let res = ranks(&rt, 2, &test_config(), |r| {
                let buf = DeviceBuffer::new(&r.dev, 2 << 20).unwrap();
                let win = SymWindow::register_mapping(&r.comm, buf.mapping()).unwrap();
                let send = buf.slice(..64).unwrap();
                let recv = buf.slice(4096..4096 + 128).unwrap();
                send.write_from(&[r.rank as u8 + 5; 64], 0).unwrap();
                r.comm
                    .all_gather::<u8>(&send, &recv, &mut r.stream)
                    .unwrap();
                r.stream.synchronize().unwrap();
                let mut got = [0u8; 128];
                recv.read_into(&mut got, 0).unwrap();
                win.close().unwrap();
                got[..64] == [5; 64] && got[64..] == [6; 64]
            });
            assert_eq!(res, [true, true]);
            println!("RESULT ok");
        }
        Some("no-hccl") => {
            let rt = Runtime::from_env().unwrap();
            assert!(matches!(rt.backend(), Backend::EmulatorDl { .. }));
            let dev = rt.device(0).unwrap();
            let buf = DeviceBuffer::new(&dev, 2 << 20).unwrap();
            buf.write_from(b"acl works", 0).unwrap();
            let e = RootInfo::generate(&dev).unwrap_err();
            assert!(matches!(e, Error::Load(_)), "{e:?}");
            assert_eq!(e.kind(), ErrorKind::Unavailable);
            assert!(e.to_string().contains("/nonexistent/libhccl.so"), "{e}");
            println!("RESULT ok");
        }
        Some(other) => panic!("unknown role {other}"),
        None => {
            let lib = sim_library().expect(
                "libascend_sim.so not built next to the test binary (cargo build -p ascend-sim)",
            );
            let lib = lib.to_string_lossy().into_owned();
            for (role, extra) in [
                ("dlopen", None),
                (
                    "no-hccl",
                    Some(("ASCEND_HCCL_LIB", "/nonexistent/libhccl.so")),
                ),
            ] {
                let mut envs = vec![
                    ("ASCEND_MEM_BACKEND", "cann"),
                    ("ASCEND_ACL_LIB", lib.as_str()),
                ];
                envs.extend(extra);
                let out = run_child(name, role, &envs);
                assert_ok(&out);
            }
        }
    }
}
