//! `ascend-cluster`: runs one shell command per emulated host of a throwaway supernode
//! (`ascend_testkit::cluster`), prints each host's output line by line prefixed with its
//! host, and removes the hosts when every command has ended (killed, it leaves them to the
//! next cluster made on the machine, which removes them).
//!
//! ```text
//! ascend-cluster [--supernodes 0,0,1] [--etcd] --run 'CMD ON HOST 0' --run 'CMD ON HOST 1' ...
//! ```
//! Host `i` runs the `i`-th `--run` with `sh -c`, at address `198.18.0.<i+1>`, with
//! `ASCEND_SIM_HOST=i`, its `ASCEND_SIM_SUPERNODE` (`--supernodes`, default all 0) and
//! `HCCL_IF_IP`; `$HOST_ADDR_<j>` in every command's environment is host `j`'s address.
//! With `--etcd`, one more host (after the others, in supernode 0) runs etcd on its own
//! address, and `$ETCD_URL` in every command's environment is its client URL.
//! Exits 0 when every command exits 0, 1 when one fails, 2 for a bad command line, a
//! cluster that cannot be made (it needs root) or `--etcd` without etcd installed; an etcd
//! that does not become healthy ends the run with a panic that holds its log.

use std::io::{BufRead, BufReader};
use std::process::{ExitCode, Stdio};

use ascend_testkit::cluster::Cluster;

fn usage(msg: &str) -> ExitCode {
    eprintln!("ascend-cluster: {msg}");
    eprintln!("usage: ascend-cluster [--supernodes 0,0,1] [--etcd] --run CMD [--run CMD ...]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut runs = Vec::new();
    let mut supernodes: Option<Vec<u32>> = None;
    let mut with_etcd = false;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--etcd" {
            with_etcd = true;
            continue;
        }
        match (k.as_str(), it.next()) {
            ("--run", Some(v)) => runs.push(v),
            ("--supernodes", Some(v)) => match v.split(',').map(|x| x.trim().parse()).collect() {
                Ok(s) => supernodes = Some(s),
                Err(_) => return usage(&format!("--supernodes {v:?}: not a list of numbers")),
            },
            (flag, None) if flag == "--run" || flag == "--supernodes" => {
                return usage(&format!("{flag} needs a value"))
            }
            (other, _) => return usage(&format!("unknown argument {other:?}")),
        }
    }
    if runs.is_empty() {
        return usage("no --run: nothing to run");
    }
    let supernodes = supernodes.unwrap_or_else(|| vec![0; runs.len()]);
    if supernodes.len() != runs.len() {
        return usage(&format!(
            "{} --run for {} --supernodes entries (one each)",
            runs.len(),
            supernodes.len()
        ));
    }
    if with_etcd {
        if let Err(e) = ascend_testkit::etcd::installed() {
            return usage(&e);
        }
    }
    let all: Vec<u32> = supernodes
        .iter()
        .copied()
        .chain(with_etcd.then_some(0))
        .collect();
    let cluster = match Cluster::new(&all) {
        Ok(c) => c,
        Err(e) => return usage(&e.to_string()),
    };
    let etcd = with_etcd.then(|| cluster.etcd(runs.len()));
    if let Some(e) = &etcd {
        eprintln!("ascend-cluster: etcd on host {} at {}", runs.len(), e.url());
    }
    let mut threads = Vec::new();
    for (i, cmd) in runs.iter().enumerate() {
        let mut c = cluster.command(i, "sh");
        c.args(["-c", cmd])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        for j in 0..cluster.len() {
            c.env(format!("HOST_ADDR_{j}"), Cluster::addr(j).to_string());
        }
        if let Some(e) = &etcd {
            c.env("ETCD_URL", e.url());
        }
        let mut child = match c.spawn() {
            Ok(ch) => ch,
            Err(e) => return usage(&format!("cannot start host {i}'s command: {e}")),
        };
        let out = child.stdout.take().expect("piped stdout");
        threads.push(std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                println!("[host {i}] {line}");
            }
            child.wait().map(|s| s.success()).unwrap_or(false)
        }));
    }
    let mut ok = true;
    for (i, t) in threads.into_iter().enumerate() {
        if !t.join().unwrap_or(false) {
            eprintln!("ascend-cluster: host {i}'s command failed");
            ok = false;
        }
    }
    drop(etcd);
    let left = cluster.close();
    if !left.is_empty() {
        eprintln!("ascend-cluster: could not remove {left:?}");
        return ExitCode::from(1);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
