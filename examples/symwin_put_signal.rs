//! One-sided puts and signals on a symmetric window across N ranks: a token goes around a
//! ring (each rank waits for its signal, adds its rank to the token and puts it, with a signal,
//! into the next rank's window), then every rank sends a block to every rank by one-sided puts
//! (one signal per peer) and checks what arrived against `Comm::all_to_all` of the same data.
//!
//! ```sh
//! cargo run --example symwin_put_signal                 # 4 ranks
//! cargo run --example symwin_put_signal -- --ranks 8    # up to 16
//! ```
//!
//! Without `RANK`/`WORLD_SIZE` in the environment it is the launcher: it starts N rank
//! processes of itself through `ascend_launch::Launcher`, and exits 0 only when every rank
//! verified. With them set (by the launcher, `ascend-run`, torchrun or a scheduler) it is one
//! rank, on device `LOCAL_RANK`. Rank 0 prints each step.
//!
//! Every wait on a peer's signal goes through `Comm::synchronize_watched`: a rank that dies
//! while the others wait for it ends their wait with an error instead of a hang.

mod common;
#[path = "common/ranks.rs"]
mod ranks;

use std::process::ExitCode;
use std::time::Duration;

use ascend_launch::{RankEnv, Rendezvous};
use ascend_mem::hccl::{Comm, CommConfig, RootInfo, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, Runtime, Stream, WaitCmp};

/// Elements of each all-to-all block.
const K: usize = 1024;
const MAX_RANKS: u32 = 16;
/// How long a rank waits for a peer's signal at most.
const WAIT: Duration = Duration::from_secs(60);
/// The signal slot of the ring; the all-to-all uses slot `1 + sender`.
const RING_SLOT: usize = 0;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Element `i` of the block rank `from` sends to rank `to`.
fn value(from: u32, to: u32, i: usize) -> u32 {
    (from << 24) | (to << 16) | i as u32
}

/// The token passes every rank once: rank 0 starts it at 1, each other rank adds its rank.
fn ring(
    comm: &Comm,
    win: &SymWindow,
    stream: &mut Stream,
    dev_buf: &DeviceBuffer,
) -> AnyResult<u64> {
    let (rank, n) = (comm.rank(), comm.size());
    let next = win.peer::<u64>((rank + 1) % n)?;
    let map = win.mapping();
    let mine = map.typed::<u64>()?.slice(..1)?;
    let token = dev_buf.slice(..8)?.typed::<u64>()?;
    if rank != 0 || n == 1 {
        // Wait for the previous rank's put of the token.
        stream.wait_signal(win, RING_SLOT, WaitCmp::Geq, 1)?;
        comm.synchronize_watched(stream, WAIT)?;
    }
    let start = if rank == 0 && n > 1 {
        1
    } else {
        mine.read_to_vec()?[0]
    };
    let t = if rank == 0 {
        start
    } else {
        start + u64::from(rank)
    };
    if n == 1 {
        return Ok(t);
    }
    token.write_slice(&[t], 0)?;
    stream.put_signal(&next, &token, 0, RING_SLOT, 1)?;
    stream.synchronize()?;
    if rank != 0 {
        return Ok(t);
    }
    // Back at rank 0: the token went around.
    stream.wait_signal(win, RING_SLOT, WaitCmp::Geq, 1)?;
    comm.synchronize_watched(stream, WAIT)?;
    Ok(mine.read_to_vec()?[0])
}

/// One-sided all-to-all into the window at element `base` (block of sender `s` at
/// `base + s * K`), checked against `Comm::all_to_all`. Returns whether they agree.
fn all_to_all(
    comm: &Comm,
    win: &SymWindow,
    stream: &mut Stream,
    send_buf: &DeviceBuffer,
    recv_buf: &DeviceBuffer,
    base: usize,
) -> AnyResult<bool> {
    let (rank, n) = (comm.rank(), comm.size() as usize);
    let send = send_buf.slice(..n * K * 4)?.typed::<u32>()?;
    let recv = recv_buf.slice(..n * K * 4)?.typed::<u32>()?;
    for to in 0..n {
        let block: Vec<u32> = (0..K).map(|i| value(rank, to as u32, i)).collect();
        send.write_slice(&block, to * K)?;
    }
    for to in 0..n as u32 {
        let peer = win.peer::<u32>(to)?;
        let part = send.slice(to as usize * K..(to as usize + 1) * K)?;
        stream.put_signal(&peer, &part, base + rank as usize * K, 1 + rank as usize, 1)?;
    }
    for from in 0..n {
        stream.wait_signal(win, 1 + from, WaitCmp::Geq, 1)?;
    }
    comm.synchronize_watched(stream, WAIT)?;
    let got = win
        .mapping()
        .typed::<u32>()?
        .slice(base..base + n * K)?
        .read_to_vec()?;
    comm.all_to_all(&send, &recv, stream)?;
    stream.synchronize()?;
    Ok(got == recv.read_to_vec()?)
}

fn rank_main() -> AnyResult<bool> {
    let env = RankEnv::from_env()?;
    let (rank, n) = (env.rank, env.world_size);
    let say = |s: String| {
        if rank == 0 {
            println!("{s}");
        }
    };
    let mut rdv = Rendezvous::join(&env, Duration::from_secs(60))?;
    let rt = Runtime::from_env_or_emulator()?;
    let dev = rt.device(env.local_rank as i32)?;
    say(format!("backend: {} ({n} ranks)", rt.backend()));

    let cfg = CommConfig::new()
        .name("symwin_put_signal")
        .sym_window_max_per_rank_gb(1)
        .exec_timeout(Duration::from_secs(60));
    let mine = if rank == 0 {
        RootInfo::generate(&dev)?.to_bytes().to_vec()
    } else {
        Vec::new()
    };
    let root = RootInfo::from_bytes(&rdv.broadcast(&mine)?)?;
    let comm = Comm::init(&dev, &root, rank, n, &cfg)?;
    let mut stream = Stream::new(&dev)?;
    say(format!(
        "1. communicator: rank {} of {}",
        comm.rank(),
        comm.size()
    ));

    // The window: one granule of HBM per rank; its tail holds the signal words.
    let win_buf = DeviceBuffer::new(&dev, (n as usize + 1) * K * 4)?;
    let win = SymWindow::register_mapping(&comm, win_buf.mapping())?;
    say(format!(
        "2. window of {:#x} bytes per rank: {:#x} bytes of data, then the signal words",
        win.len(),
        win.data_len()
    ));
    let send_buf = DeviceBuffer::new(&dev, n as usize * K * 4)?;
    let recv_buf = DeviceBuffer::new(&dev, n as usize * K * 4)?;

    let token = ring(&comm, &win, &mut stream, &send_buf)?;
    let want = 1 + u64::from(n) * u64::from(n - 1) / 2;
    let ring_ok = rank != 0 || token == want;
    say(format!(
        "3. ring: the token came back to rank 0 as {token} (expected {want})"
    ));
    // The all-to-all writes past the token (element 2 on, as u32) so the ring's data stays.
    rdv.barrier()?;
    let a2a_ok = all_to_all(&comm, &win, &mut stream, &send_buf, &recv_buf, 2)?;
    let all = rdv.all_gather(&[u8::from(ring_ok && a2a_ok)])?;
    let verified = all.iter().filter(|v| v.first() == Some(&1)).count();
    say(format!(
        "4. one-sided all-to-all of {K} u32 per pair: {verified} of {n} ranks match Comm::all_to_all"
    ));

    rdv.barrier()?;
    win.close()?;
    drop(stream);
    comm.close()?;
    drop((win_buf, send_buf, recv_buf));
    dev.check_sticky()?;
    say("5. torn down".into());
    rdv.barrier()?;
    Ok(ring_ok && a2a_ok && verified == n as usize)
}

fn main() -> ExitCode {
    common::init_logging("warn");
    let (who, r) = if RankEnv::is_set() {
        let rank = std::env::var("RANK").unwrap_or_default();
        (format!("rank {rank}"), rank_main())
    } else {
        ("launcher".to_string(), ranks::launch(4, MAX_RANKS))
    };
    match r {
        Ok(true) => {
            if who == "launcher" {
                println!("every rank verified");
            }
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!("symwin_put_signal ({who}): verification failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("symwin_put_signal ({who}): {e}");
            ExitCode::FAILURE
        }
    }
}
