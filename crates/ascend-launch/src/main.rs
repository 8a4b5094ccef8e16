//! `ascend-run`: start N ranks of a program on this host with torchrun's variables, alone or
//! as one node of a job of several.
//!
//! ```text
//! ascend-run --nproc 4 [--nnodes 2 --node-rank 0] [--master-addr 127.0.0.1] [--master-port 29500] [--timeout-secs 600] -- PROGRAM [ARGS...]
//! ```
//! As torchrun, the node flags and the master's address and port may come from the
//! environment instead (`PET_NNODES`, `PET_NODE_RANK`, `PET_MASTER_ADDR`,
//! `PET_MASTER_PORT`, and for a job of several nodes `MASTER_ADDR` and `MASTER_PORT`); a flag
//! wins over a variable.
//! Exits 0 when every rank exits 0; otherwise stops the remaining ranks and exits 1. A bad
//! command line exits 2 with a message naming the flag and the value.

use std::num::NonZeroU32;
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::Parser;

/// Starts N ranks of a program on this host, each with RANK, LOCAL_RANK, WORLD_SIZE,
/// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (torchrun's conventions). When one rank
/// fails, the others are stopped.
#[derive(Debug, Parser)]
#[command(name = "ascend-run", version)]
struct Args {
    /// Number of ranks to start on this node (at least 1).
    #[arg(long, value_name = "N")]
    nproc: NonZeroU32,
    /// Number of nodes of the job, each running `ascend-run` with the same `--nproc`.
    #[arg(long, value_name = "N", env = "PET_NNODES", default_value = "1")]
    nnodes: NonZeroU32,
    /// This node's rank among them (node 0 runs rank 0, the rendezvous master).
    #[arg(long, value_name = "K", env = "PET_NODE_RANK", default_value = "0")]
    node_rank: u32,
    /// Address rank 0 listens on for the rendezvous (node 0's address with several nodes).
    #[arg(long, value_name = "ADDR", env = "PET_MASTER_ADDR")]
    master_addr: Option<String>,
    /// Port rank 0 listens on for the rendezvous (required with several nodes).
    #[arg(long, value_name = "PORT", env = "PET_MASTER_PORT")]
    master_port: Option<u16>,
    /// Stop every rank after this many seconds.
    #[arg(long, value_name = "S")]
    timeout_secs: Option<u64>,
    /// The program to run and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]")]
    program: Vec<String>,
}

/// The node flags' consistency, as clap reports a bad value (exit 2).
fn check_nodes(a: &mut Args) {
    use clap::CommandFactory;
    let fail = |msg: String| -> ! {
        Args::command()
            .error(clap::error::ErrorKind::ArgumentConflict, msg)
            .exit()
    };
    let n = a.nnodes.get();
    if a.node_rank >= n {
        fail(format!(
            "--node-rank {} is outside a job of --nnodes {n} (0..={})",
            a.node_rank,
            n - 1
        ));
    }
    // torchrun's variables without the PET_ prefix, as a scheduler sets them, for a job of
    // several nodes only: a single-node run inside another job must not take its port.
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if n > 1 && a.master_addr.is_none() {
        a.master_addr = var("MASTER_ADDR");
    }
    if n > 1 && a.master_port.is_none() {
        if let Some(v) = var("MASTER_PORT") {
            match v.parse() {
                Ok(p) => a.master_port = Some(p),
                Err(_) => fail(format!("MASTER_PORT={v:?} is not a port")),
            }
        }
    }
    if n > 1 && (a.master_addr.is_none() || a.master_port.is_none()) {
        fail(format!(
            "a job of --nnodes {n} needs --master-addr and --master-port (node 0's address and \
             a port every node uses)"
        ));
    }
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    check_nodes(&mut args);
    let mut launcher =
        ascend_launch::Launcher::new(args.nproc.get()).nodes(args.nnodes.get(), args.node_rank);
    if let Some(a) = args.master_addr {
        launcher = launcher.master_addr(a);
    }
    if let Some(p) = args.master_port {
        launcher = launcher.master_port(p);
    }
    if let Some(t) = args.timeout_secs {
        launcher = launcher.timeout(Duration::from_secs(t));
    }
    let prog = &args.program;
    match launcher.run(|_| {
        let mut c = Command::new(&prog[0]);
        c.args(&prog[1..]);
        c
    }) {
        Ok(r) if r.success() => ExitCode::SUCCESS,
        Ok(r) => {
            for (i, s) in r.statuses.iter().enumerate() {
                if !s.success() {
                    let rank = args.node_rank * args.nproc.get() + i as u32;
                    eprintln!("ascend-run: rank {rank} (local rank {i}) ended with {s}");
                }
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("ascend-run: {e}");
            ExitCode::from(1)
        }
    }
}
