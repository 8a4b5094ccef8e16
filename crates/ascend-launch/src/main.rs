//! `ascend-run`: start N ranks of a program on this host with torchrun's variables.
//!
//! ```text
//! ascend-run --nproc 4 [--master-addr 127.0.0.1] [--master-port 29500] [--timeout-secs 600] -- PROGRAM [ARGS...]
//! ```
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
    /// Number of ranks to start (at least 1).
    #[arg(long, value_name = "N")]
    nproc: NonZeroU32,
    /// Address rank 0 listens on for the rendezvous.
    #[arg(long, value_name = "ADDR")]
    master_addr: Option<String>,
    /// Port rank 0 listens on for the rendezvous.
    #[arg(long, value_name = "PORT")]
    master_port: Option<u16>,
    /// Stop every rank after this many seconds.
    #[arg(long, value_name = "S")]
    timeout_secs: Option<u64>,
    /// The program to run and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]")]
    program: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut launcher = ascend_launch::Launcher::new(args.nproc.get());
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
                    eprintln!("ascend-run: rank {i} ended with {s}");
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
