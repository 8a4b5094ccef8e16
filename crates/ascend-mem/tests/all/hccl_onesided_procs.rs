//! One-sided puts, gets and signals with ranks as processes (the test binary re-executed in a
//! role of `ascend_testkit::role`, the root info hex-encoded in `HCCL_TEST_ROOT`): on 2, 4 and 8
//! ranks every block put with a signal arrives before the signal releases its waiter, and gets
//! read a peer's part; a rank that dies while the others wait on its signal ends their wait
//! with `E_REMOTE` from the communicator's failure detection, well before the deadline.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::setup;
use ascend_mem::hccl::{Comm, CommConfig, HcclCode, RootInfo, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Error, Runtime, Stream, WaitCmp};
use ascend_testkit::{
    from_hex, result_numbers, role, test_name, to_hex, wait_success, watchdog, Spawn,
};

const ROOT_VAR: &str = "HCCL_TEST_ROOT";
const K: usize = 512;
/// Bounds the rendezvous too (every rank process must exec and reach `Comm::init` within it).
const EXEC_TIMEOUT: Duration = Duration::from_secs(20);
/// The signal wait's deadline: far above how long a peer's death takes to notice.
const WAIT: Duration = Duration::from_secs(30);

fn spawn_rank(test: &str, role: &str, root: &RootInfo) -> Child {
    let mut s = Spawn::new(test, role).env(ROOT_VAR, to_hex(root.to_bytes()));
    s.command().stdout(Stdio::piped()).stderr(Stdio::piped());
    s.command().spawn().expect("spawn a rank process")
}

fn root_from_env() -> RootInfo {
    RootInfo::from_bytes(&from_hex(&std::env::var(ROOT_VAR).unwrap())).unwrap()
}

fn config() -> CommConfig {
    CommConfig::new()
        .buffer_size_mb(1)
        .sym_window_max_per_rank_gb(1)
        .exec_timeout(EXEC_TIMEOUT)
}

fn val(from: u32, to: u32, i: usize) -> u32 {
    (from << 24) | (to << 16) | i as u32
}

/// One rank: put a block with a signal into every rank, wait for every sender, check, get the
/// next rank's copy of our block back, check, tear down. Panics on any mismatch.
fn exchange(rank: u32, n: u32, root: &RootInfo) {
    let rt = Runtime::emulated().unwrap();
    let dev = rt.device(rank as i32).unwrap();
    let comm = Comm::init(&dev, root, rank, n, &config()).unwrap();
    let mut stream = Stream::new(&dev).unwrap();
    let buf = DeviceBuffer::new(&dev, n as usize * K * 4).unwrap();
    let win = SymWindow::register_mapping(&comm, buf.mapping()).unwrap();
    let src_buf = DeviceBuffer::new(&dev, n as usize * K * 4).unwrap();
    let src = src_buf
        .slice(..n as usize * K * 4)
        .unwrap()
        .typed::<u32>()
        .unwrap();
    for to in 0..n {
        let block: Vec<u32> = (0..K).map(|i| val(rank, to, i)).collect();
        src.write_slice(&block, to as usize * K).unwrap();
    }
    for to in 0..n {
        let peer = win.peer::<u32>(to).unwrap();
        let part = src.slice(to as usize * K..(to as usize + 1) * K).unwrap();
        stream
            .put_signal(&peer, &part, rank as usize * K, rank as usize, 1)
            .unwrap();
    }
    for from in 0..n as usize {
        stream.wait_signal(&win, from, WaitCmp::Geq, 1).unwrap();
    }
    comm.synchronize_watched(&mut stream, WAIT).unwrap();
    let got = buf.typed::<u32>().unwrap().slice(..n as usize * K).unwrap();
    let got = got.read_to_vec().unwrap();
    for from in 0..n {
        let want: Vec<u32> = (0..K).map(|i| val(from, rank, i)).collect();
        let b = from as usize * K;
        assert_eq!(got[b..b + K], want[..], "rank {rank}: block from {from}");
    }
    let next = win.peer::<u32>((rank + 1) % n).unwrap();
    let back = src.slice(..K).unwrap();
    stream.get(&next, rank as usize * K, &back).unwrap();
    stream.synchronize().unwrap();
    let want: Vec<u32> = (0..K).map(|i| val(rank, (rank + 1) % n, i)).collect();
    assert_eq!(back.read_to_vec().unwrap(), want, "rank {rank}: get");
    drop(next);
    win.close().unwrap();
    drop(stream);
    comm.close().unwrap();
    dev.check_sticky().unwrap();
}

#[test]
fn puts_and_signals_across_processes() {
    let name = test_name!(puts_and_signals_across_processes);
    if let Some(role) = role() {
        watchdog(Duration::from_secs(60));
        let (n, rank) = role.split_once('-').unwrap();
        exchange(rank.parse().unwrap(), n.parse().unwrap(), &root_from_env());
        println!("RESULT 1");
        return;
    }
    let env = setup();
    for n in [2u32, 4, 8] {
        let root = RootInfo::generate(&env.dev).unwrap();
        let kids: Vec<Child> = (1..n)
            .map(|r| spawn_rank(name, &format!("{n}-{r}"), &root))
            .collect();
        exchange(0, n, &root);
        for (r, k) in kids.into_iter().enumerate() {
            let out = wait_success(k, &format!("rank {} of {n}", r + 1));
            assert_eq!(result_numbers(&out), [1]);
        }
    }
    env.finish();
}

/// A survivor's life: wait on the dying rank's signal (slot 2) and report how the wait ended
/// (the HCCL code, how long it took), then tear down as far as a lost peer allows.
fn survive(rank: u32, root: &RootInfo) -> (Error, Duration) {
    let rt = Runtime::emulated().unwrap();
    let dev = rt.device(rank as i32).unwrap();
    let comm = Comm::init(&dev, root, rank, 3, &config()).unwrap();
    let mut stream = Stream::new(&dev).unwrap();
    let buf = DeviceBuffer::new(&dev, 1 << 20).unwrap();
    let win = SymWindow::register_mapping(&comm, buf.mapping()).unwrap();
    stream.wait_signal(&win, 2, WaitCmp::Geq, 1).unwrap();
    let t0 = Instant::now();
    let e = comm.synchronize_watched(&mut stream, WAIT).unwrap_err();
    let dt = t0.elapsed();
    // The stream is empty again; the window can only be removed locally.
    stream.synchronize().unwrap();
    drop(stream);
    if let Err(e) = win.close().map_err(|e| e.into_parts()) {
        assert!(!e.1.is_registered().unwrap(), "{}", e.0);
    }
    comm.close().unwrap();
    drop(buf);
    dev.check_sticky().unwrap();
    (e, dt)
}

#[test]
fn a_rank_that_dies_ends_the_signal_wait() {
    let name = test_name!(a_rank_that_dies_ends_the_signal_wait);
    if let Some(role) = role() {
        watchdog(Duration::from_secs(60));
        let root = root_from_env();
        if role == "die" {
            let rt = Runtime::emulated().unwrap();
            let dev = rt.device(2).unwrap();
            let comm = Comm::init(&dev, &root, 2, 3, &config()).unwrap();
            let buf = DeviceBuffer::new(&dev, 1 << 20).unwrap();
            let _win = SymWindow::register_mapping(&comm, buf.mapping()).unwrap();
            // SAFETY: ends the process at once, as a crash would, without signalling.
            unsafe { libc::_exit(0) };
        }
        let (e, dt) = survive(1, &root);
        println!(
            "RESULT {} {}",
            e.hccl_code().map_or(0, |c| c.0),
            dt.as_millis()
        );
        return;
    }
    let env = setup();
    let root = RootInfo::generate(&env.dev).unwrap();
    let survivor = spawn_rank(name, "survivor", &root);
    let dier = spawn_rank(name, "die", &root);
    let (e, dt) = survive(0, &root);
    wait_success(dier, "the dying rank (before it died)");
    let v = result_numbers(&wait_success(survivor, "the surviving rank"));
    assert!(
        matches!(
            e,
            Error::Hccl {
                api: "HcclGetCommAsyncError",
                code: HcclCode::E_REMOTE,
                ..
            }
        ),
        "rank 0: {e:?}"
    );
    assert_eq!(v[0], u64::from(HcclCode::E_REMOTE.0), "rank 1");
    for (who, t) in [("rank 0", dt), ("rank 1", Duration::from_millis(v[1]))] {
        assert!(t < WAIT / 2, "{who}: the wait took {t:?}");
    }
    eprintln!("rank 0: {e} after {dt:?}; rank 1: {v:?}");
    env.finish();
}
