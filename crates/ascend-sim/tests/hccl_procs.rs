//! HCCL ranks as processes: a test re-executes the test binary as its own rank processes (a
//! role of `ascend_testkit::role`, root info in `ASCEND_SIM_HCCL_ROOT` as hex). Collectives on both
//! paths across processes; a rank that dies mid-collective leaves the others with an error
//! within the exec timeout; A2 has no symmetric windows.

#[macro_use]
mod common;
#[macro_use]
mod hccl_common;

use std::process::Stdio;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use ascend_testkit::{
    from_hex, result_numbers, role, test_name, to_hex, wait_success, watchdog, Spawn,
};
use common::*;
use hccl_common::*;

const ROOT: &str = "ASCEND_SIM_HCCL_ROOT";
const RANKS: u32 = 3;
/// Bounds the rendezvous too (every rank process must exec and reach init within it): far
/// above what that takes on a loaded machine. A death is noticed long before it.
const EXEC_TIMEOUT_S: i32 = 20;
const COUNT: usize = 1000;

/// Starts `test` again as the rank process `role` of the communicator `root`.
fn spawn(test: &str, role: &str, root: &HcclRootInfo) -> std::process::Child {
    let bytes: Vec<u8> = root.internal.iter().map(|c| *c as u8).collect();
    let mut s = Spawn::new(test, role).env(ROOT, to_hex(&bytes));
    s.command().stdout(Stdio::piped()).stderr(Stdio::piped());
    s.command().spawn().expect("spawn a rank process")
}

fn root_from_env() -> HcclRootInfo {
    let b = from_hex(&std::env::var(ROOT).unwrap());
    let mut r = HcclRootInfo::default();
    for (d, s) in r.internal.iter_mut().zip(b) {
        *d = s as _;
    }
    r
}

/// One rank's life: two good AllGathers (symmetric, staged), then the third one, which the
/// `die` rank abandons by exiting. Returns (sync code, async error, elapsed) of the third.
fn rank_body(rank: u32, root: &HcclRootInfo, die: bool) -> Option<(i32, u32, Duration)> {
    set_device(rank as i32);
    let mut stream = null_mut();
    ok!(aclrtCreateStream(&mut stream));
    let cfg = config(|c| c.hcclExecTimeOut = EXEC_TIMEOUT_S);
    let mut comm = null_mut();
    hok!(HcclCommInitRootInfoConfig(
        RANKS, root, rank, &cfg, &mut comm
    ));
    let n = RANKS as usize;
    let b = COUNT * 4;
    let v = VmmBuf::new(rank, (n + 1) * b);
    let mut w = null_mut();
    hok!(HcclCommSymWinRegister(comm, v.ptr, v.len as u64, &mut w, 1));
    let mine: Vec<u8> = (0..b)
        .map(|i| (i as u8).wrapping_mul(rank as u8 + 3))
        .collect();
    let want: Vec<u8> = (0..n)
        .flat_map(|p| (0..b).map(move |i| (i as u8).wrapping_mul(p as u8 + 3)))
        .collect();
    write_bytes(v.ptr, &mine);
    ascend_sim::reset_hccl_stats();
    hok!(HcclAllGather(
        v.ptr,
        v.at(b),
        COUNT as u64,
        HCCL_DATA_TYPE_FP32,
        comm,
        stream
    ));
    assert_eq!(acl!(aclrtSynchronizeStream(stream)), 0, "{}", last_msg());
    assert_eq!(read_bytes(v.at(b), n * b), want);
    assert_eq!(ascend_sim::hccl_stats().symmetric_ops, 1);
    let s = DevBuf::new(b);
    let d = DevBuf::new(n * b);
    write_bytes(s.ptr, &mine);
    hok!(HcclAllGather(
        s.ptr,
        d.ptr,
        COUNT as u64,
        HCCL_DATA_TYPE_FP32,
        comm,
        stream
    ));
    assert_eq!(acl!(aclrtSynchronizeStream(stream)), 0, "{}", last_msg());
    assert_eq!(read_bytes(d.ptr, n * b), want);
    assert_eq!(ascend_sim::hccl_stats().staged_ops, 1);
    if die {
        // Enqueue on a held stream, so the collective is in flight, and die.
        let _hold = ascend_sim::testing::hold_stream(stream);
        hok!(HcclAllGather(
            v.ptr,
            v.at(b),
            COUNT as u64,
            HCCL_DATA_TYPE_FP32,
            comm,
            stream
        ));
        // SAFETY: ends the process at once, as a crash would.
        unsafe { libc::_exit(0) };
    }
    let t0 = Instant::now();
    hok!(HcclAllGather(
        v.ptr,
        v.at(b),
        COUNT as u64,
        HCCL_DATA_TYPE_FP32,
        comm,
        stream
    ));
    let code = acl!(aclrtSynchronizeStream(stream));
    let dt = t0.elapsed();
    let mut asy = 0;
    hok!(HcclGetCommAsyncError(comm, &mut asy));
    // The broken communicator refuses further work, and still tears down.
    hcode!(
        asy,
        HcclAllGather(
            v.ptr,
            v.at(b),
            COUNT as u64,
            HCCL_DATA_TYPE_FP32,
            comm,
            stream
        )
    );
    let dr = hc!(HcclCommSymWinDeregister(w));
    assert_ne!(dr, 0);
    hok!(HcclCommDestroy(comm));
    drop((s, d, v));
    ok!(aclrtDestroyStream(stream));
    reset_device(rank as i32);
    assert_clean();
    Some((code, asy, dt))
}

#[test]
fn processes_collective_then_a_rank_dies() {
    let name = test_name!(processes_collective_then_a_rank_dies);
    if let Some(role) = role() {
        watchdog(Duration::from_secs(30));
        let root = root_from_env();
        let (rank, die) = match role.as_str() {
            "survivor" => (1, false),
            "die" => (2, true),
            other => panic!("unknown role {other}"),
        };
        if let Some((code, asy, dt)) = rank_body(rank, &root, die) {
            println!("RESULT {code} {asy} {}", dt.as_millis());
        }
        return;
    }
    let _g = LOCK.lock();
    let root = root_info();
    let survivor = spawn(name, "survivor", &root);
    let dier = spawn(name, "die", &root);
    let (code, asy, dt) = rank_body(0, &root, false).unwrap();
    wait_success(dier, "the dying rank (before it died)");
    let v = result_numbers(&wait_success(survivor, "the surviving rank"));
    let limit = Duration::from_secs(EXEC_TIMEOUT_S as u64) + Duration::from_millis(500);
    for (who, code, asy, dt) in [
        ("rank 0", code as u64, asy as u64, dt),
        ("rank 1", v[0], v[1], Duration::from_millis(v[2])),
    ] {
        assert_ne!(code, 0, "{who}");
        assert!(
            asy == u64::from(HCCL_E_REMOTE) || asy == u64::from(HCCL_E_TIMEOUT),
            "{who}: async error {asy}"
        );
        assert!(dt < limit, "{who} took {dt:?}");
    }
    eprintln!("rank 0: code {code} async {asy} after {dt:?}; rank 1: {v:?}");
    // The dead process is noticed through its pidfd, long before the timeout.
    assert_eq!(
        asy,
        HCCL_E_REMOTE,
        "{:?}",
        ascend_sim::hccl_recent_error_message()
    );
    assert_clean();
}

#[test]
fn a2_has_no_symmetric_windows() {
    if let Some(role) = role() {
        assert_eq!(role, "a2");
        assert_eq!(std::env::var("ASCEND_SIM_SOC").as_deref(), Ok("A2"));
        set_device(0);
        let root = root_info();
        let mut comm = null_mut();
        hok!(HcclCommInitRootInfo(1, &root, 0, &mut comm));
        let v = VmmBuf::new(0, 1 << 20);
        let mut w = null_mut();
        hcode!(
            HCCL_E_NOT_SUPPORT,
            HcclCommSymWinRegister(comm, v.ptr, 4096, &mut w, 1)
        );
        drop(v);
        hok!(HcclCommDestroy(comm));
        reset_device(0);
        assert_clean();
        println!("RESULT ok");
        return;
    }
    let out = Spawn::new(test_name!(a2_has_no_symmetric_windows), "a2")
        .env("ASCEND_SIM_SOC", "A2")
        .output();
    ascend_testkit::assert_ok(&out);
}
