//! The peer engine process (this binary re-executed) and the child-process plumbing.
//!
//! The peer starts an engine listening on `127.0.0.1:$BENCH_PORT`, allocates `$BENCH_SEGS`
//! device buffers of `$BENCH_SEG_BYTES` (each its own allocation, so each is one offered
//! segment), fills them when `$BENCH_TOUCH` is 1, registers them, prints `READY`, then answers
//! lines on stdin: `rss` → `RSS <VmHWM bytes> <registered bytes touched>`, `peek <offset>` →
//! `PEEK <byte at offset of the first buffer>`. It exits at EOF. It opens the runtime as the
//! process that started it does ([`crate::util::runtime`], from the inherited environment),
//! on `ASCEND_BENCH_PEER_DEVICE` (default: `ASCEND_BENCH_DEVICE`, default 0).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use ascend_fabric::{Engine, EngineOptions};
use ascend_mem::prelude::*;

use crate::util::proc_status_bytes;
use crate::Res;

/// Env var naming the role of a child process.
pub(crate) const ROLE_VAR: &str = "ASCEND_BENCH_ROLE";

/// Copy streams per transfer: HIXL's host-mode default `task_stream_num` (4), or
/// `ASCEND_BENCH_STREAMS` (1..=8). The transfer ceiling uses as many threads (or, on CANN,
/// streams).
pub(crate) fn streams() -> u32 {
    std::env::var("ASCEND_BENCH_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| (1..=8).contains(n))
        .unwrap_or(4)
}

/// Engine options of every bench engine.
pub(crate) fn engine_options() -> Res<EngineOptions> {
    let mut b = EngineOptions::builder()
        .task_stream_num(streams())
        .heartbeat_interval(Duration::from_secs(1));
    // Profiling aid: valgrind cannot reserve the default 32 TB VA pool.
    if let Some(g) = std::env::var("ASCEND_BENCH_POOL_GIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        b = b.pool_capacity(g << 30);
    }
    Ok(b.build()?)
}

fn env_num(k: &str) -> Res<u64> {
    let v = std::env::var(k).map_err(|_| format!("{k} is not set"))?;
    Ok(v.parse().map_err(|e| format!("{k}={v:?}: {e}"))?)
}

/// The peer role.
pub(crate) fn peer_main() -> Res<()> {
    let port = env_num("BENCH_PORT")?;
    let segs = env_num("BENCH_SEGS")? as usize;
    let seg_bytes = env_num("BENCH_SEG_BYTES")? as usize;
    let touch = env_num("BENCH_TOUCH")? == 1;
    let rt = crate::util::runtime()?;
    let dev = crate::util::device(&rt, crate::util::Side::Peer)?;
    let eng = Engine::new(&dev, &format!("127.0.0.1:{port}"), engine_options()?)?;
    let mut bufs = Vec::with_capacity(segs);
    let mut regs = Vec::with_capacity(segs);
    for _ in 0..segs {
        let b = eng.alloc_device(seg_bytes)?;
        if touch {
            b.fill(0x5a)?;
        }
        regs.push(eng.register(&b)?);
        bufs.push(b);
    }
    // Registered memory in this process's VmHWM: on the emulator every touched buffer (host
    // memory); on CANN none (device memory is not the host's).
    let touched = if touch && rt.backend().is_emulator() {
        bufs.iter().map(|b| b.len() as u64).sum()
    } else {
        0
    };
    // Optionally one host-DRAM segment too (the HIXL-shaped table's remote host memory).
    let host_bytes = std::env::var("BENCH_HOST_BYTES").map_or(Ok(0), |v| v.parse::<usize>())?;
    let host = match host_bytes {
        0 => None,
        n => {
            let h = eng.alloc_host(n)?;
            h.fill(0x3c)?;
            let r = eng.register(&h)?;
            Some((h, r))
        }
    };
    let mut out = std::io::stdout().lock();
    match &host {
        Some((h, _)) => writeln!(out, "READY {} {}", bufs[0].addr(), h.addr())?,
        None => writeln!(out, "READY {}", bufs[0].addr())?,
    }
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let mut w = line.split_whitespace();
        match w.next() {
            Some("rss") => writeln!(out, "RSS {} {touched}", proc_status_bytes("VmHWM")?)?,
            Some("peek") => {
                let off: usize = w.next().ok_or("peek needs an offset")?.parse()?;
                let mut b = [0u8; 1];
                bufs[0].read_into(&mut b, off)?;
                writeln!(out, "PEEK {}", b[0])?;
            }
            _ => writeln!(out, "ERR unknown command {line:?}")?,
        }
        out.flush()?;
    }
    drop(host);
    drop(regs);
    drop(eng);
    Ok(())
}

/// A child process of this binary with line I/O.
pub(crate) struct ChildProc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    what: String,
}

impl ChildProc {
    /// Re-runs this binary as `role` with `envs`.
    ///
    /// Profiling aid: with `ASCEND_BENCH_WRAP_<ROLE>` set (e.g. `ASCEND_BENCH_WRAP_TRANSLATE=
    /// "valgrind --tool=callgrind"`), the child runs under that command line.
    pub(crate) fn spawn(role: &str, envs: &[(&str, String)]) -> Res<ChildProc> {
        let exe = std::env::current_exe()?;
        let wrap = std::env::var(format!("ASCEND_BENCH_WRAP_{}", role.to_uppercase())).ok();
        let mut cmd = match wrap.as_deref().map(str::split_whitespace) {
            Some(mut w) => {
                let mut c = Command::new(w.next().ok_or("empty wrapper")?);
                c.args(w).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        cmd.env(ROLE_VAR, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("child stdout")?);
        Ok(ChildProc {
            child,
            stdin,
            stdout,
            what: role.to_owned(),
        })
    }

    /// The rest of the next line starting with `prefix` (other lines are skipped).
    pub(crate) fn expect(&mut self, prefix: &str) -> Res<String> {
        loop {
            let mut l = String::new();
            if self.stdout.read_line(&mut l)? == 0 {
                let st = self.child.wait()?;
                return Err(format!(
                    "the {} process ended ({st}) before printing {prefix:?}",
                    self.what
                )
                .into());
            }
            if let Some(rest) = l.trim_end().strip_prefix(prefix) {
                return Ok(rest.trim().to_owned());
            }
        }
    }

    /// Sends a line and returns the reply starting with `prefix`.
    pub(crate) fn ask(&mut self, line: &str, prefix: &str) -> Res<String> {
        let s = self.stdin.as_mut().ok_or("child stdin closed")?;
        writeln!(s, "{line}")?;
        s.flush()?;
        self.expect(prefix)
    }

    /// Closes stdin and waits for a successful exit.
    pub(crate) fn finish(mut self) -> Res<()> {
        self.close_stdin();
        self.wait_success()
    }

    /// Closes the child's stdin (it sees EOF).
    pub(crate) fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits for the child to exit and requires success.
    pub(crate) fn wait_success(&mut self) -> Res<()> {
        let st = self.child.wait()?;
        if !st.success() {
            return Err(format!("the {} process failed: {st}", self.what).into());
        }
        Ok(())
    }

    /// Kills the child (SIGKILL) and reaps it.
    pub(crate) fn kill(&mut self) -> Res<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Ok(None) = self.child.try_wait() {
            // Give it a moment to exit on EOF, then stop it.
            for _ in 0..50 {
                std::thread::sleep(Duration::from_millis(20));
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts a peer offering `segs` buffers of `seg_bytes`, and waits until it is ready.
/// Returns the process and the engine address to connect to.
pub(crate) fn start_peer(segs: usize, seg_bytes: usize, touch: bool) -> Res<(ChildProc, String)> {
    let (p, addr, _) = start_peer_with_host(segs, seg_bytes, touch, 0)?;
    Ok((p, addr))
}

/// [`start_peer`] offering one host-DRAM segment of `host_bytes` too (none for 0); also
/// returns the peer's addresses of its first device buffer and of the host segment, as the
/// peer printed them (`READY <device> [<host>]`).
pub(crate) fn start_peer_with_host(
    segs: usize,
    seg_bytes: usize,
    touch: bool,
    host_bytes: usize,
) -> Res<(ChildProc, String, Vec<u64>)> {
    let port = crate::util::free_port()?;
    let mut p = ChildProc::spawn(
        "peer",
        &[
            ("BENCH_PORT", port.to_string()),
            ("BENCH_SEGS", segs.to_string()),
            ("BENCH_SEG_BYTES", seg_bytes.to_string()),
            ("BENCH_TOUCH", u8::from(touch).to_string()),
            ("BENCH_HOST_BYTES", host_bytes.to_string()),
        ],
    )?;
    let ready = p.expect("READY")?;
    let addrs = ready
        .split_whitespace()
        .map(|a| {
            let hex = a.trim_start_matches("0x");
            u64::from_str_radix(hex, 16).map_err(|e| format!("READY {ready:?}: {e}"))
        })
        .collect::<Result<Vec<u64>, _>>()?;
    Ok((p, format!("127.0.0.1:{port}"), addrs))
}
