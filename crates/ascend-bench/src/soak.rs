//! The soak: a long randomized run of the Fabric Mem engine against peer processes that
//! are killed and restarted, with ACL faults injected, every byte checked against a model.
//!
//! ```text
//! cargo run --release -p ascend-bench -- soak --seconds N [--seed S] [--peers P] [--strict]
//! ```
//!
//! This process (the *driver*) runs one engine on the in-process emulator (listening, so
//! its control server's threads are among what must end at the drop) and connects to
//! `P` peers (default 2), each this binary re-executed in the `soak-peer` role with its own
//! engine. The driver registers three local buffers of 8 MiB (two in HBM, one in host DRAM)
//! chunk by chunk (2 MiB registrations, so neighbouring chunks make ranges that span
//! registrations); each peer offers one to three regions, one of them two HBM allocations
//! mapped back to back and registered as one range of two segments. Then, until the time
//! is up, a seeded random source picks one action at a time:
//!
//! * WRITE or READ batches of 1 to 6 descriptors of 1 B to 4 MiB between random registered
//!   ranges, sync, or async with up to 4 in flight (waited for in random order); ranges of
//!   transfers in flight are never reused until they are waited for;
//! * a checksum of a random range asked from a peer and compared with the model;
//! * a local chunk registered or deregistered (refused with `Error::Busy` while a transfer
//!   not yet waited for uses it); a region added to or removed from a peer,
//!   followed by a disconnect and a connect (a removal revokes the region at this engine and
//!   keeps the channel, which is checked; an addition is reached through the reconnect here,
//!   though a refresh would also reach it);
//! * a transfer, a connect or a register with a fault armed (`ascend_sim::fault::fail_nth`)
//!   at a call the operation makes of one ACL symbol of its kind (the symbols and call
//!   numbers are learnt by counting the calls of clean operations with
//!   `ascend_sim::fault::calls`): `aclrtMemcpyAsync`, `aclrtMemcpyBatchAsync` (host-DRAM
//!   chunks' copies are batched), `aclrtValueWrite` (completion flags), `aclrtStreamQuery`,
//!   `aclrtSynchronizeStreamWithTimeout`, `aclrtSynchronizeStream`,
//!   `aclrtCreateStreamWithConfig`, `aclrtMallocHost` (a new slot's flags) (transfers),
//!   `aclrtMemImportFromShareableHandleV2`, `aclrtMapMem`, `aclrtMemSetAccess` (connects),
//!   `aclrtMemExportToShareableHandleV2` (registers: a local buffer is now and then replaced
//!   by a fresh allocation, whose first register exports it); candidates the engine never
//!   calls are listed at the end and never armed;
//! * a peer killed with SIGKILL (transfers may be in flight), probed (a transfer or a connect
//!   right after the kill), its loss awaited, then restarted on the same address with fresh
//!   memory (half the time with connects retried while it starts: refused with
//!   `Error::Control` until one is accepted, which is disconnected again).
//!
//! The model holds every byte of the driver's and the peers' registered memory: a peer's
//! regions start as a pattern seeded per region, WRITE sources are fresh random bytes, READ
//! results are compared with the model, and the bytes a failed transfer would have written
//! are unknown until written again. Every outcome is judged: a clean operation must
//! succeed; one whose fault fired must fail with `Error::Mem` or `Error::CopyRefused` naming
//! the faulted call (or succeed with correct data: "absorbed"); operations on a killed peer may succeed, or fail
//! with `Error::PeerLost` or `Error::NotConnected`, and after the loss is noticed a
//! transfer must fail with `NotConnected`; a connect to the dead address fails with
//! `Error::Control`. Anything else is printed as `UNEXPECTED ...` with details.
//!
//! At the end the driver waits for everything, disconnects, ends its peers (each reports
//! its emulator counters), checks the engine's VA pool is empty, drops everything and checks
//! the emulator's counters, its open file descriptors and its threads against the start.
//! Threads or descriptors that outlive the drop but end within 2 s are printed as a
//! `FINDING` (the library ended them asynchronously); those still there after are leaks.
//!
//! The design promises an order: by the time `is_connected` is false or a waiter sees
//! `PeerLost`, the lost channel's imports are unmapped. Where that does not hold (imports
//! back in the VA pool only later), and where threads or descriptors end only after the
//! drop, a `FINDING` line is printed and counted; with `--strict` findings count as
//! unexpected.
//!
//! The last stdout line is
//! `RESULT soak_seconds=.. soak_ops=.. soak_verified_bytes=.. soak_peer_kills=.. soak_faults=..
//! soak_unexpected=.. soak_leaked=..` (ops: transfer batches; faults: injected faults that
//! fired). The exit status is non-zero when `soak_unexpected` or `soak_leaked` is not 0.
//! The choices of a run depend only on `--seed` (timing aside: how many steps fit in the
//! time, and what a killed peer's in-flight transfers saw); a digest of the first 1,000
//! choices is printed to compare runs.

mod actions;
mod batch;
mod driver;
mod faults;
mod leaks;
mod local;
mod model;
mod peer;

use std::time::{Duration, Instant};

use ascend_fabric::Engine;
use ascend_mem::Runtime;
use indicatif::ProgressBar;

use crate::Res;
use driver::{Driver, Stats};

pub(crate) use peer::peer_main;

/// Command-line settings of the soak.
#[derive(Debug, Clone)]
pub(crate) struct SoakArgs {
    pub(crate) seconds: u64,
    pub(crate) seed: u64,
    pub(crate) peers: usize,
    /// Count findings (the design's ordering guarantees not met) as unexpected.
    pub(crate) strict: bool,
}

impl Default for SoakArgs {
    fn default() -> Self {
        SoakArgs {
            seconds: 60,
            seed: 1,
            peers: 2,
            strict: false,
        }
    }
}

fn progress(seconds: u64) -> Res<ProgressBar> {
    crate::progress::bar(seconds, "{elapsed_precise} [{bar:30}] {pos}/{len} s {msg}")
}

/// Runs the soak and prints its report; an error when anything unexpected happened or
/// leaked.
pub(crate) fn run(args: &SoakArgs) -> Res<()> {
    let t0 = Instant::now();
    // The emulator only: refused before any runtime is opened when ASCEND_MEM_BACKEND=cann,
    // and when the backend found (ASCEND_MEM_BACKEND unset) is CANN.
    crate::util::need_emulator(crate::util::SimOnly::Soak, None)?;
    crate::util::need_emulator(crate::util::SimOnly::Soak, Some(&crate::util::runtime()?))?;
    let rt = Runtime::emulated()?;
    let dev = rt.device(0)?;
    let base = leaks::Baseline::now();
    // Listening, so the control server's threads are part of what must end at the drop.
    let port = crate::util::free_port()?;
    let eng = Engine::new(&dev, &format!("127.0.0.1:{port}"), peer::options()?)?;
    let mut stats = match Driver::new(eng, args.seed, args.peers.max(1)) {
        Ok(mut d) => {
            let r = soak_loop(&mut d, args);
            if let Err(e) = r {
                d.unexpected("soak aborted", e.to_string());
            }
            leaks::teardown(d)
        }
        Err(e) => {
            println!("UNEXPECTED setup failed: {e}");
            Stats {
                unexpected: 1,
                ..Stats::default()
            }
        }
    };
    drop(dev);
    drop(rt);
    let (leaked, findings) = leaks::check_process(&base);
    stats.leaked += leaked;
    stats.findings += findings;
    if args.strict && stats.findings != 0 {
        println!(
            "--strict: {} finding(s) count as unexpected",
            stats.findings
        );
        stats.unexpected += stats.findings;
    }
    report(&stats, t0.elapsed());
    if stats.unexpected != 0 || stats.leaked != 0 {
        return Err(format!(
            "soak: {} unexpected outcome(s), {} leak(s)",
            stats.unexpected, stats.leaked
        )
        .into());
    }
    Ok(())
}

fn soak_loop(d: &mut Driver, args: &SoakArgs) -> Res<()> {
    let pb = progress(args.seconds)?;
    let start = Instant::now();
    let end = start + Duration::from_secs(args.seconds);
    while Instant::now() < end {
        d.step()?;
        pb.set_position(start.elapsed().as_secs().min(args.seconds));
        let s = &d.stats;
        pb.set_message(format!(
            "ops {} kills {} faults {} unexpected {}",
            s.ops, s.kills, s.faults, s.unexpected
        ));
    }
    pb.finish_and_clear();
    Ok(())
}

fn report(s: &Stats, took: Duration) {
    println!(
        "soak: {} transfer batches ({:.1} MiB moved), {} checksums, {} local ({} refused as \
         busy, {} done after the engine saw their transfers end) and {} peer registration \
         changes, {} connects, {} failed as expected",
        s.ops,
        s.bytes_moved as f64 / f64::from(1 << 20),
        s.checksums,
        s.local_reg_changes,
        s.busy_refusals,
        s.released_after_completion,
        s.peer_reg_changes,
        s.connects,
        s.failed_as_expected
    );
    println!(
        "descriptors done spanning two local registrations: {}, spanning two remote segments: {}",
        s.spanning[0], s.spanning[1]
    );
    println!(
        "killed peers: {} kill(s) with transfers in flight; transfers to killed peers: {} done, \
         {} PeerLost, {} NotConnected; {} loss(es) whose imports were unmapped after \
         is_connected turned false, {} PeerLost reported before the imports were unmapped \
         ({} of them with no other request to the peer alive); {} finding(s) in all",
        s.kills_in_flight,
        s.dead[0],
        s.dead[1],
        s.dead[2],
        s.late_teardown,
        s.lost_before_unmap,
        s.lost_before_unmap_alone,
        s.findings
    );
    if s.unexplained_losses != 0 {
        println!(
            "{} connection(s) to live peers lost for no reason the soak knows (counted as \
             unexpected; reconnected each time)",
            s.unexplained_losses
        );
    }
    println!(
        "connects retried while a killed peer restarted on its address: {} refused, {} accepted",
        s.restart_connects[0], s.restart_connects[1]
    );
    println!(
        "choices digest {:016x} over the first {} choices",
        s.choices, s.choices_n
    );
    println!(
        "RESULT soak_seconds={:.1} soak_ops={} soak_verified_bytes={} soak_peer_kills={} \
         soak_faults={} soak_unexpected={} soak_leaked={}",
        took.as_secs_f64(),
        s.ops,
        s.verified,
        s.kills,
        s.faults,
        s.unexpected,
        s.leaked
    );
}
