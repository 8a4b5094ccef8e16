//! `ascend-run`: start N ranks of a program on this host with torchrun's variables.
//!
//! ```text
//! ascend-run --nproc 4 [--master-addr 127.0.0.1] [--master-port 29500] [--timeout-secs 600] -- PROGRAM [ARGS...]
//! ```
//! Exits 0 when every rank exits 0; otherwise stops the remaining ranks and exits 1.

use std::process::{Command, ExitCode};
use std::time::Duration;

fn usage() -> ExitCode {
    eprintln!(
        "usage: ascend-run --nproc N [--master-addr ADDR] [--master-port PORT] [--timeout-secs S] -- PROGRAM [ARGS...]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(split) = args.iter().position(|a| a == "--") else {
        return usage();
    };
    let (opts, prog) = (&args[..split], &args[split + 1..]);
    if prog.is_empty() {
        return usage();
    }
    let mut launcher = None;
    let (mut addr, mut port, mut timeout) = (None, None, None);
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        let Some(v) = it.next() else { return usage() };
        match o.as_str() {
            "--nproc" => match v.parse::<u32>() {
                Ok(n) if n > 0 => launcher = Some(ascend_launch::Launcher::new(n)),
                _ => return usage(),
            },
            "--master-addr" => addr = Some(v.clone()),
            "--master-port" => match v.parse::<u16>() {
                Ok(p) => port = Some(p),
                Err(_) => return usage(),
            },
            "--timeout-secs" => match v.parse::<u64>() {
                Ok(s) => timeout = Some(Duration::from_secs(s)),
                Err(_) => return usage(),
            },
            _ => return usage(),
        }
    }
    let Some(mut launcher) = launcher else {
        return usage();
    };
    if let Some(a) = addr {
        launcher = launcher.master_addr(a);
    }
    if let Some(p) = port {
        launcher = launcher.master_port(p);
    }
    if let Some(t) = timeout {
        launcher = launcher.timeout(t);
    }
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
