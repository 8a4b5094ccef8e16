//! Symmetric-window AllGather across N ranks: config with the symmetric-window maximum, comm
//! init (rank 0 makes the root info and hands it to the others over a TCP rendezvous), stream,
//! granularity, reserve, allocate HBM (huge pages), map, register one window covering the send
//! and the receive half, AllGather 1024 fp32 from the send half into the receive half,
//! synchronize, verify every rank's contribution, deregister, tear down.
//!
//! ```sh
//! cargo run --example symwin_allgather                 # 2 ranks
//! cargo run --example symwin_allgather -- --ranks 4    # up to 16
//! ```
//!
//! Without `RANK`/`WORLD_SIZE` in the environment it is the launcher: it starts N rank
//! processes of itself through `ascend_launch::Launcher` (torchrun's variables), and exits 0
//! only when every rank verified. With them set (by the launcher, torchrun or a scheduler) it
//! is one rank, on device `LOCAL_RANK`. Rank 0 prints each step; the others stay quiet unless
//! something fails. Runs on whatever `Runtime::from_env_or_emulator()` picks: CANN when installed,
//! otherwise the emulator (`ASCEND_ACL_LIB=…/libascend_sim.so` takes the dlopen path).

mod common;
#[path = "common/ranks.rs"]
mod ranks;

use std::process::ExitCode;
use std::time::Duration;

use ascend_launch::{RankEnv, Rendezvous};
use ascend_mem::hccl::{Comm, CommConfig, RootInfo, SymWindow};
use ascend_mem::prelude::*;
use ascend_mem::{Backend, MemSpec, PhysicalMem, ReservedVa, Runtime, Stream};

/// Elements each rank contributes.
const COUNT: usize = 1024;
const MAX_RANKS: u32 = 16;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// The value rank `r` contributes at index `i` (exact in fp32).
fn value(r: u32, i: usize) -> f32 {
    (r as usize * 100_000 + i) as f32
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

    // 1. Config: the symmetric-window maximum per rank bounds what one rank may register and
    //    sizes the communicator's symmetric heap (ranks × this much VA).
    let cfg = CommConfig::new()
        .name("symwin_allgather")
        .sym_window_max_per_rank_gb(1)
        .buffer_size_mb(8)
        .exec_timeout(Duration::from_secs(60));
    say("1. config: symmetric-window maximum 1 GB per rank, HCCL buffer 8 MB".into());

    // 2. Comm init: rank 0 makes the root info; every rank receives its bytes.
    let mine = if rank == 0 {
        RootInfo::generate(&dev)?.to_bytes().to_vec()
    } else {
        Vec::new()
    };
    let root = RootInfo::from_bytes(&rdv.broadcast(&mine)?)?;
    let comm = Comm::init(&dev, &root, rank, n, &cfg)?;
    say(format!(
        "2. communicator {:?}: rank {} of {}",
        comm.name()?,
        comm.rank(),
        comm.size()
    ));

    // 3. Stream.
    let mut stream = Stream::new(&dev)?;
    say("3. stream created".into());

    // 4-7. Granularity, reserve, allocate HBM (huge pages), map.
    let granule = dev.granularity(MemSpec::DEVICE_HBM)?;
    let send_bytes = COUNT * 4;
    let recv_bytes = send_bytes * n as usize;
    let size = dev.round_up(send_bytes + recv_bytes)?;
    say(format!("4. granularity of device HBM: {granule:#x} bytes"));
    let va = ReservedVa::new(&dev, size)?;
    say(format!(
        "5. reserved {size} bytes of VA at {:p}",
        va.as_raw()
    ));
    let mem = PhysicalMem::alloc(&dev, size, MemSpec::DEVICE_HBM)?;
    say(format!(
        "6. allocated {size} bytes of HBM (ACL_HBM_MEM_HUGE)"
    ));
    let map = va.map(&mem, size.zero())?;
    say(format!("7. mapped at {:p}", map.as_raw()));

    // 8. One window over the send half and the receive half (collective, same size on all).
    // Typed views: the first COUNT fp32 are the send half, the next n × COUNT the receive half.
    let all = map.typed::<f32>()?;
    let send = all.slice(..COUNT)?;
    let recv = all.slice(COUNT..COUNT + n as usize * COUNT)?;
    let win = SymWindow::register(&comm, &map.slice(..send_bytes + recv_bytes)?)?;
    let (_, off) = comm
        .window_of(&recv.as_bytes())?
        .ok_or("the receive half is not in the window")?;
    say(format!(
        "8. registered a symmetric window of {:#x} bytes at {} (send at +0, receive at +{off:#x})",
        win.len(),
        win.addr()
    ));

    // 9. AllGather 1024 fp32 from the send half into the receive half.
    let data: Vec<f32> = (0..COUNT).map(|i| value(rank, i)).collect();
    send.write_slice(&data, 0)?;
    recv.fill_zero()?;
    comm.all_gather(&send, &recv, &mut stream)?;
    stream.synchronize()?;
    say(format!(
        "9. AllGather of {COUNT} fp32 per rank queued and synchronized"
    ));
    if *rt.backend() == Backend::EmulatorInProcess {
        // The emulator counts the bytes each path copied in this process (this rank).
        let st = ascend_sim::hccl_stats();
        say(format!(
            "   path taken: {} symmetric op(s), {} bytes read from windows; {} staged op(s)",
            st.symmetric_ops, st.symmetric_bytes_copied, st.staged_ops
        ));
    }

    // 10. Verify every rank's contribution.
    let got = recv.read_to_vec()?;
    let mut ok = true;
    for r in 0..n {
        let block = &got[r as usize * COUNT..(r as usize + 1) * COUNT];
        if let Some(i) = (0..COUNT).find(|&i| block[i] != value(r, i)) {
            eprintln!(
                "rank {rank}: element {i} from rank {r} is {}, expected {}",
                block[i],
                value(r, i)
            );
            ok = false;
        }
    }
    let all = rdv.all_gather(&[u8::from(ok)])?;
    let verified = all.iter().filter(|v| v.first() == Some(&1)).count();
    say(format!(
        "10. verified: {verified} of {n} ranks saw every rank's {COUNT} values"
    ));

    // 11. Deregister (collective), then tear down.
    win.close()?;
    say("11. window deregistered".into());
    drop(stream);
    comm.close()?;
    drop((map, mem, va));
    dev.check_sticky()?;
    say("12. torn down (stream, communicator, unmap, free, release)".into());
    rdv.barrier()?;
    Ok(ok && verified == n as usize)
}

fn main() -> ExitCode {
    // Logs to stderr (`RUST_LOG`, default `warn`).
    common::init_logging("warn");
    let (who, r) = if RankEnv::is_set() {
        let rank = std::env::var("RANK").unwrap_or_default();
        (format!("rank {rank}"), rank_main())
    } else {
        ("launcher".to_string(), ranks::launch(2, MAX_RANKS))
    };
    match r {
        Ok(true) => {
            if who == "launcher" {
                println!("every rank verified");
            }
            ExitCode::SUCCESS
        }
        Ok(false) => {
            let what = if who == "launcher" {
                "not every rank succeeded"
            } else {
                "verification failed"
            };
            eprintln!("symwin_allgather ({who}): {what}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("symwin_allgather ({who}): {e}");
            ExitCode::FAILURE
        }
    }
}
