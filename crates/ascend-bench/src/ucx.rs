//! UCX's one-sided put bandwidth over shared memory, as `ucx_perftest` measures it: a server
//! `ucx_perftest -p PORT`, then `ucx_perftest 127.0.0.1 -p PORT -t ucp_put_bw -s SIZE -n ITERS`
//! with `UCX_TLS=posix,cma,self`; the figure is the average of column 6 of the `Final:` line.
//! Latency the same way with `-t ucp_put_lat`: the typical latency, column 3.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Res;

const TLS: &str = "posix,cma,self";

/// The `ucx_perftest` executable on `PATH`, or why there is none.
pub(crate) fn find() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").ok_or("PATH is not set")?;
    for dir in std::env::split_paths(&path) {
        let p = dir.join("ucx_perftest");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err("ucx_perftest is not on PATH (Debian/Ubuntu package ucx-utils)".into())
}

/// Iterations `ucx_perftest` runs for a message size (divided by 8 with `--quick`).
pub(crate) fn iterations(size: usize, quick: bool) -> u64 {
    let n = if size >= 16 << 20 {
        64
    } else if size >= 1 << 20 {
        1000
    } else {
        20000
    };
    if quick {
        n / 8
    } else {
        n
    }
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // The server exits after its one test; stop it if it did not.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Column `col` (0-based after the label) of the `Final:` line: 1 is the typical latency in
/// µs, 4 the average bandwidth in MB/s (UCX's MB = 2^20 bytes).
fn parse_final(out: &str, col: usize) -> Option<f64> {
    out.lines()
        .find(|l| l.trim_start().starts_with("Final:"))
        .and_then(|l| l.split_whitespace().nth(col + 1))
        .and_then(|v| v.parse().ok())
}

/// Runs `ucx_perftest -t test -s size -n iters` against a server of its own (three tries)
/// and returns column `col` of its `Final:` line.
fn perftest(exe: &PathBuf, test: &str, size: usize, iters: u64, col: usize) -> Res<f64> {
    let mut last = String::new();
    for _attempt in 0..3 {
        let port = crate::util::free_port()?;
        let server = Server(
            Command::new(exe)
                .args(["-p", &port.to_string()])
                .env("UCX_TLS", TLS)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        std::thread::sleep(Duration::from_millis(300));
        let out = Command::new(exe)
            .args([
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-t",
                test,
                "-s",
                &size.to_string(),
                "-n",
                &iters.to_string(),
            ])
            .env("UCX_TLS", TLS)
            .stdin(Stdio::null())
            .output()?;
        drop(server);
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(v) = parse_final(&text, col) {
            return Ok(v);
        }
        last = format!(
            "{}; {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("no output")
        );
    }
    Err(format!("no Final: line from ucx_perftest -t {test} ({last})").into())
}

/// Put bandwidth in GB/s (10^9 bytes/s) for `size`-byte messages.
pub(crate) fn put_bw(exe: &PathBuf, size: usize, quick: bool) -> Res<f64> {
    let mbs = perftest(exe, "ucp_put_bw", size, iterations(size, quick), 4)?;
    Ok(mbs * f64::from(1 << 20) / 1e9)
}

/// Typical put latency in µs for `size`-byte messages (`ucp_put_lat`: one put, then the
/// peer's reply, again and again; UCX reports half the round trip).
pub(crate) fn put_lat(exe: &PathBuf, size: usize, quick: bool) -> Res<f64> {
    perftest(exe, "ucp_put_lat", size, iterations(size, quick), 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_line() {
        let s = "[thread 0]  361  0.039  2764.959  2764.959  361.67  361.67  362  362\n\
                 Final:  1000  0.033  1887.189  2204.064  529.89  453.71  530  454\n";
        assert_eq!(parse_final(s, 4), Some(529.89));
        assert_eq!(parse_final(s, 1), Some(0.033));
        assert_eq!(parse_final("nothing", 4), None);
        assert_eq!(iterations(64 << 20, false), 64);
        assert_eq!(iterations(1 << 20, false), 1000);
        assert_eq!(iterations(4096, false), 20000);
    }
}
