//! `ascend-bench`: how close the Fabric Mem engine gets to `memcpy` between the same buffers,
//! how it compares with UCX's one-sided put over shared memory, what a descriptor costs on the
//! host, and what symmetric windows save HCCL collectives.
//!
//! The backend is `ASCEND_MEM_BACKEND`'s (`cann`: CANN or its load error; `sim`: the in-tree
//! emulator; unset: CANN if found, else the emulator, with a WARN line), for this process and
//! every child process it starts (they inherit the environment); the first line of stdout
//! names it and the devices. `ASCEND_BENCH_DEVICE` (default 0) is the measuring process's
//! device, `ASCEND_BENCH_PEER_DEVICE` (default: the same) the peers'. On CANN, `transfer`,
//! `translate` and `hixl` measure the NPU, against the runtime's own copies where the emulator
//! has `memcpy` (the host cannot address device memory); `collectives`, the soak and
//! `--call-ns` measure the emulator itself and need `ASCEND_MEM_BACKEND=sim` (`all` skips
//! `collectives` with a line saying why; by name they are an error).
//!
//! ```text
//! cargo run --release -p ascend-bench -- <transfer|translate|hixl|collectives|all> [--quick] [--out DIR]
//!     [--call-ns NS] [--submit-threads N]
//! cargo run --release -p ascend-bench -- soak [--seconds N] [--seed S] [--peers P] [--strict]
//! cargo run --release -p ascend-bench -- python [--quick] [--python PATH]
//! ```
//!
//! * **transfer**: two engines in two processes (this binary re-executed as the peer), WRITE
//!   and READ of device memory (HBM) to device memory, block sizes 4 KiB, 64 KiB, 1 MiB and
//!   64 MiB. *walk*: a region of 1 GiB (256 MiB with `--quick`) moved block by block, the
//!   remote blocks in a scattered order so that no two descriptors coalesce; 4 KiB and 64 KiB
//!   blocks go in batches of 1,024 descriptors (`TransferAsync`, 4 batches in flight), 1 MiB
//!   and 64 MiB blocks one per transfer (2 per copy stream in flight).
//!   *repeat*: one buffer of the block size moved again and again (the pattern of
//!   `ucx_perftest`), up to 1,024 descriptors and 64 MiB per transfer (1 MiB: 64 per
//!   transfer; 64 MiB: one), as `ucx_perftest` keeps puts outstanding. Both buffers are touched
//!   before timing. The ceiling is `memcpy` between the same mapped buffers (this process's
//!   local buffer and its mapping of the peer's buffer), the same blocks, on as many threads as
//!   the engine has copy streams; on CANN, whose device memory the host cannot address, the
//!   runtime's own copies (`aclrtMemcpyAsync`, device to device, as the engine queues them)
//!   on as many streams.
//!   *latency*: 10,000 synchronous 4 KiB WRITEs (2,000 with `--quick`) one after the other,
//!   p50 and p99. One more row, `repeat/host`: repeated 4 KiB
//!   WRITEs from a host-DRAM local buffer, whose copies the engine batches (one
//!   `aclrtMemcpyBatchAsync` per stream per transfer; the runtime batches host-device copies
//!   only, so the HBM rows are one `aclrtMemcpyAsync` per copy). UCX: `ucx_perftest -t ucp_put_bw` with
//!   `UCX_TLS=posix,cma,self` at the same sizes, and `-t ucp_put_lat` at 4 KiB, when
//!   `ucx_perftest` is installed.
//!   Last, *cancel*: what dropping 1,000 transfer futures in flight costs the dropping thread
//!   (every slot holding a 32 MiB WRITE whose copies run), against `cancel()` on each of as many
//!   requests, which waits for the aborted streams (see the `cancel` module).
//! * **translate**: host-side cost of a descriptor (checks, translation, `aclrtMemcpyAsync`
//!   submission) with 1 and with 10,000 segments offered by the peer (each its own 2 MiB
//!   allocation), measured in a child process whose emulator runs streams in `deterministic`
//!   mode, so no copy runs while descriptors are submitted (on CANN the device runs them);
//!   and the same copies posted as (local block, remote block) pairs of prepared lists. With 1
//!   segment it is measured again from a host-DRAM local registration, whose copies go as one
//!   batch call per stream. Next to each, the runtime floor: the same copies straight through
//!   ascend-mem's table calls.
//! * **hixl**: HIXL's benchmark shape (16 KiB-2 MiB, D2rD/D2rH/rH2D, contig and scatter, one
//!   synchronous transfer of 128 MiB per step) with `--call-ns` and `--submit-threads`, and the
//!   caller CPU of a synchronous 1 MiB wait against its floor (see the `hixl` module).
//! * **collectives**: AllGather and AllReduce (sum), 4 ranks as threads of this process (one
//!   emulated device each), 8 MiB per rank, fp32, with symmetric windows and staged.
//! * **soak**: a randomized run against peer processes that are killed and restarted, with
//!   ACL faults injected and every byte checked against a model; it has its own `RESULT`
//!   line (see the `soak` module).
//! * **python**: a 4 KiB and a 1 MiB WRITE from Python (`ascend_fabric`, in a child process)
//!   against the same from Rust, sync and awaited, as ratios; its own table and `RESULT` line
//!   (see the `python` module).
//!
//! RESULT keys: `write_64MiB_vs_memcpy`, `read_64MiB_vs_memcpy` (walk, engine GB/s over
//! memcpy GB/s), `write_4KiB_ops_vs_memcpy` (walk, descriptors/s over memcpy's),
//! `write_1MiB_vs_ucx`, `write_64MiB_vs_ucx` (repeat, engine over UCX put), `translate_10k_vs_1`
//! (submission cost per descriptor with 10,000 segments over with 1: a cost ratio),
//! `translate_prepared_10k_vs_1` (the same for prepared lists), `prepared_vs_raw_submit`
//! (prepared over raw submission cost per descriptor, 1 segment), `host_batched_vs_raw_submit`
//! (raw submission from host DRAM, batched, over raw submission from HBM, one call per copy),
//! `host_prepared_vs_raw_submit` (prepared over raw, both from host DRAM),
//! `walk_1MiB_vs_memcpy`, `repeat_4KiB_vs_ucx` (WRITE), `repeat_4KiB_host_vs_ucx` (the same
//! from host DRAM, batched), `lat_4KiB_p50_vs_ucx` (p50 of a synchronous 4 KiB WRITE over
//! UCX's typical put latency: a time ratio), `lat_4KiB_p50_us`, `lat_4KiB_p99_us`,
//! `allgather_sym_vs_staged` (staged time over symmetric), `alltoall_onesided_vs_staged`
//! (staged all-to-all time over one-sided puts), `peak_rss_over_registered_MiB`
//! (sum over the two transfer processes of VmHWM minus the registered memory each touches: the
//! initiator its buffer and its mapping of the peer's, the peer its buffer). `nan` when a part
//! `drop_1000_futures_ms` (the drop of 1,000 futures in flight on one thread),
//! `drop_vs_cancel` (that drop's time over the waiting cancels'),
//! `submit_vs_runtime_floor`, `submit_prepared_vs_runtime_floor` and their `_10k_` forms
//! (submission cost per descriptor over the runtime floor's), `wait_cpu_vs_floor`,
//! `hixl_16K_D2rD_scatter_threads_vs_1` (1 submitting thread's step time over N's),
//! `hixl_min_vs_memcpy`, `hixl_call_ns`. `nan` when a part did not run or UCX is missing.
//!
//! Profiling aids (environment): `ASCEND_BENCH_FILTER` (run only matching transfer rows, e.g.
//! `"walk Write 4 KiB"`), `ASCEND_BENCH_CEILING=runtime` (the runtime's copies as the ceiling
//! on the emulator too), `ASCEND_BENCH_REPS`, `ASCEND_BENCH_STREAMS`,
//! `ASCEND_BENCH_WINDOW_1`, `ASCEND_BENCH_TRANSLATE_BATCHES`, `ASCEND_BENCH_POOL_GIB`, `ASCEND_BENCH_WRAP_<ROLE>` (run a
//! child role under e.g. `perf record`), and the `inproc` role for valgrind.
//!
//! Output: the backend line, a table on stdout, `transfer.csv`, `translate.csv`,
//! `collectives.csv`, `results.csv` (the backend, the devices and the ceiling first, then the
//! RESULT figures) and `bandwidth.svg` in `--out` (default `target/bench` under the current
//! directory), a progress bar on stderr when it is a terminal, and as the last line of stdout
//! the `RESULT` line.

mod cancel;
mod ceiling;
mod collectives;
mod hixl;
mod peer;
mod progress;
mod python;
mod report;
mod soak;
mod telemetry;
mod transfer;
mod translate;
mod ucx;
mod util;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type Res<T> = Result<T, BoxError>;

/// Which parts to run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Mode {
    Transfer,
    Translate,
    Hixl,
    Collectives,
    Metrics,
    All,
    Soak,
    Python,
}

/// Parsed command line.
#[derive(Debug)]
pub(crate) struct Args {
    mode: Mode,
    pub(crate) quick: bool,
    /// The HIXL-shaped table's emulated host cost per runtime copy call, ns.
    pub(crate) call_ns: u64,
    /// The HIXL-shaped table's submitter count besides 1.
    pub(crate) submit_threads: u32,
    pub(crate) out: PathBuf,
    soak: soak::SoakArgs,
    python: python::PyArgs,
}

/// Benchmarks of the Fabric Mem engine (ratios measured in one run against memcpy between
/// the same buffers, and UCX when installed) and of HCCL on the emulator, and the soak.
#[derive(Debug, Parser)]
#[command(name = "ascend-bench", version, after_help = ENV_HELP)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The environment that picks the backend and devices (the `--help` epilogue).
const ENV_HELP: &str = "\
Environment:
  ASCEND_MEM_BACKEND        cann: CANN (or its load error); sim: the emulator;
                            unset: CANN if found, else the emulator (with a WARN line).
                            Child processes inherit it: every process measures the same backend.
  ASCEND_BENCH_DEVICE       device of the measuring process of transfer, translate and hixl
                            (default 0)
  ASCEND_BENCH_PEER_DEVICE  device of their peer processes (default: ASCEND_BENCH_DEVICE)
collectives, soak and --call-ns measure the emulator itself: they need the emulator
(ASCEND_MEM_BACKEND=sim, or unset with no CANN found); on CANN `all` skips collectives with a
line saying so.";

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Engine WRITE/READ between two processes against memcpy (on CANN the runtime's own
    /// copies) and UCX.
    #[command(after_help = ENV_HELP)]
    Transfer(RunOpts),
    /// Host-side cost of a descriptor with 1 and 10,000 remote segments, against the runtime
    /// floor.
    #[command(after_help = ENV_HELP)]
    Translate(RunOpts),
    /// HIXL's benchmark shape (16 KiB-2 MiB, D2rD/D2rH/rH2D, contig and scatter) and the
    /// caller CPU of a synchronous wait against one blocking synchronize per stream.
    #[command(after_help = ENV_HELP)]
    Hixl(RunOpts),
    /// AllGather and AllReduce with symmetric windows against staged (the emulator only).
    #[command(after_help = ENV_HELP)]
    Collectives(RunOpts),
    /// The cost of metrics: synchronous 4 KiB and 1 MiB WRITEs by engines made with a
    /// recorder installed (Prometheus') against engines made without one.
    #[command(after_help = ENV_HELP)]
    Metrics(RunOpts),
    /// Everything above (collectives on the emulator only), then the RESULT line.
    #[command(after_help = ENV_HELP)]
    All(RunOpts),
    /// Random verified transfers with peer kills and injected faults (the emulator only);
    /// exits non-zero on anything unexpected or leaked.
    #[command(after_help = ENV_HELP)]
    Soak(SoakOpts),
    /// A 4 KiB and a 1 MiB WRITE from Python (the ascend_fabric package, in a child process),
    /// sync and awaited on asyncio, against the same from Rust: Python's time over Rust's.
    #[command(after_help = ENV_HELP)]
    Python(PythonOpts),
}

#[derive(Debug, clap::Args)]
struct RunOpts {
    /// Smaller sizes and fewer repetitions (a smoke test).
    #[arg(long)]
    quick: bool,
    /// Where the CSV files and the plot go.
    #[arg(long, value_name = "DIR", default_value = "target/bench")]
    out: PathBuf,
    /// HIXL-shaped table: host time the client's emulator charges per runtime copy call
    /// (`ASCEND_SIM_CALL_NS`; HIXL's published A3 host path is about 5,700 ns per copy). The
    /// emulator only: an error on CANN.
    #[arg(long, value_name = "NS", default_value_t = 0)]
    call_ns: u64,
    /// HIXL-shaped table: also measure with this many submitting threads (1..=streams).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    submit_threads: u32,
}

#[derive(Debug, clap::Args)]
struct SoakOpts {
    /// How long to run.
    #[arg(long, value_name = "N", default_value_t = 60)]
    seconds: u64,
    /// Seed of every random choice.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Peer processes (at least 1).
    #[arg(long, value_name = "P", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    peers: u16,
    /// Count late releases (the engine's ordering guarantees not met) as unexpected.
    #[arg(long)]
    strict: bool,
}

#[derive(Debug, clap::Args)]
struct PythonOpts {
    /// Fewer rounds and transfers (a smoke test).
    #[arg(long)]
    quick: bool,
    /// The interpreter with ascend_fabric installed (default: $PYTHON, else python3).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
}

impl From<Cli> for Args {
    fn from(cli: Cli) -> Args {
        let run = |mode, o: RunOpts| Args {
            mode,
            quick: o.quick,
            call_ns: o.call_ns,
            submit_threads: o.submit_threads,
            out: o.out,
            soak: soak::SoakArgs::default(),
            python: python::PyArgs::default(),
        };
        match cli.cmd {
            Cmd::Transfer(o) => run(Mode::Transfer, o),
            Cmd::Translate(o) => run(Mode::Translate, o),
            Cmd::Hixl(o) => run(Mode::Hixl, o),
            Cmd::Collectives(o) => run(Mode::Collectives, o),
            Cmd::Metrics(o) => run(Mode::Metrics, o),
            Cmd::All(o) => run(Mode::All, o),
            Cmd::Soak(o) => Args {
                mode: Mode::Soak,
                quick: false,
                call_ns: 0,
                submit_threads: 1,
                out: PathBuf::from("target/bench"),
                soak: soak::SoakArgs {
                    seconds: o.seconds,
                    seed: o.seed,
                    peers: o.peers.into(),
                    strict: o.strict,
                },
                python: python::PyArgs::default(),
            },
            Cmd::Python(o) => Args {
                mode: Mode::Python,
                quick: o.quick,
                call_ns: 0,
                submit_threads: 1,
                out: PathBuf::from("target/bench"),
                soak: soak::SoakArgs::default(),
                python: python::PyArgs {
                    quick: o.quick,
                    python: o.python,
                },
            },
        }
    }
}

/// Every figure of one run; `None` prints as `nan`.
#[derive(Debug, Default)]
pub(crate) struct Results {
    /// The backend and devices measured.
    pub(crate) meta: Option<util::Meta>,
    pub(crate) transfer: Vec<transfer::Row>,
    pub(crate) translate: Vec<translate::Row>,
    pub(crate) hixl: Option<hixl::Report>,
    pub(crate) collectives: Vec<collectives::Row>,
    pub(crate) ucx_note: Option<String>,
    pub(crate) rss: Option<transfer::RssReport>,
    /// The transfer part's ceiling.
    pub(crate) ceiling: Option<ceiling::CeilingName>,
    pub(crate) latency: Option<transfer::Latency>,
    pub(crate) cancel: Option<cancel::Cancel>,
    pub(crate) telemetry: Option<telemetry::Telemetry>,
}

fn main() -> ExitCode {
    util::raise_nofile();
    util::default_sim_env();
    match std::env::var(peer::ROLE_VAR).as_deref() {
        Ok("peer") => return exit(peer::peer_main()),
        Ok("translate") => return exit(translate::client_main()),
        Ok("hixl") => return exit(hixl::client_main()),
        Ok("inproc") => return exit(translate::inproc_main()),
        Ok("soak-peer") => return exit(soak::peer_main()),
        _ => {}
    }
    let args = Args::from(Cli::parse());
    exit(run(&args))
}

fn exit(r: Res<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ascend-bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Res<()> {
    if args.mode == Mode::Soak {
        return soak::run(&args.soak);
    }
    if args.mode == Mode::Python {
        return python::run(&args.python);
    }
    let t0 = std::time::Instant::now();
    // What needs the emulator is refused before any runtime is opened when
    // ASCEND_MEM_BACKEND=cann names CANN (no CANN needed to say so), and again once the
    // runtime is open (unset: CANN when found).
    let sim_only = |rt: Option<&ascend_mem::Runtime>| -> Res<()> {
        if args.mode == Mode::Collectives {
            util::need_emulator(util::SimOnly::Collectives, rt)?;
        }
        if args.call_ns != 0 {
            util::need_emulator(util::SimOnly::CallNs, rt)?;
        }
        Ok(())
    };
    sim_only(None)?;
    let rt = util::runtime()?;
    let meta = util::Meta::of(&rt)?;
    util::announce(&meta);
    sim_only(Some(&rt))?;
    let do_t = matches!(args.mode, Mode::Transfer | Mode::All);
    let do_x = matches!(args.mode, Mode::Translate | Mode::All);
    let do_c = matches!(args.mode, Mode::Collectives | Mode::All) && meta.emulator;
    if args.mode == Mode::All && !meta.emulator {
        println!("{}", util::SimOnly::Collectives.skipped(&meta.backend));
    }
    let do_h = matches!(args.mode, Mode::Hixl | Mode::All);
    let steps = if do_t { transfer::steps(args) } else { 0 }
        + if do_x { translate::STEPS } else { 0 }
        + if do_h { hixl::STEPS } else { 0 }
        + if do_c { collectives::STEPS } else { 0 };
    let pb = progress::bar(steps, "{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")?;
    let mut res = Results {
        meta: Some(meta),
        ..Results::default()
    };
    // Transfer first: the engine process's peak RSS is read right after it.
    if do_t {
        transfer::run(args, &pb, &mut res)?;
    }
    if do_x {
        res.translate = translate::run(args, &pb)?;
    }
    if do_h {
        res.hixl = Some(hixl::run(args, &pb)?);
    }
    if do_c {
        res.collectives = collectives::run(args, &pb)?;
    }
    if matches!(args.mode, Mode::Metrics | Mode::All) {
        pb.set_message("metrics on vs off");
        let dev = util::device(&rt, util::Side::Bench)?;
        res.telemetry = Some(telemetry::run(args, &dev)?);
    }
    pb.finish_and_clear();
    std::fs::create_dir_all(&args.out)?;
    report::print_tables(&res);
    let files = report::write_files(&res, &args.out)?;
    println!();
    println!(
        "files: {} (total {:.1} s{})",
        files.join(", "),
        t0.elapsed().as_secs_f64(),
        if args.quick { ", --quick" } else { "" }
    );
    println!("{}", report::result_line(&res));
    Ok(())
}
