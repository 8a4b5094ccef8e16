//! Python against Rust: the same WRITE of one descriptor of 4 KiB or 1 MiB from a registered
//! host buffer of a client engine into a registered device buffer of a listening engine (both
//! in one process, loopback), made from Rust in this process and from Python in a child
//! process, each waited for synchronously (`transfer_sync`) and as a future (the Rust future
//! polled by a minimal parking executor here, the Python one awaited on `asyncio`).
//!
//! ```text
//! cargo run --release -p ascend-bench -- python [--quick] [--python PATH]
//! ```
//!
//! The child is the interpreter of `--python`, else `$PYTHON`, else `python3`, running the
//! embedded script `py/transfer_bench.py`, which imports `ascend_fabric` (the wheel built from
//! `crates/ascend-py`), builds its own pair of engines and answers one pass per request on its
//! stdin with one JSON line on its stdout. Passes of Rust and Python alternate, the one going
//! first alternating too, so a change in the machine's load falls on both; for each size and
//! wait the ratio `python_vs_rust_<wait>_<size>` is the median over rounds of Python's time per
//! transfer over Rust's (above 1: Python costs more). The child's backend is this process's
//! (`ASCEND_MEM_BACKEND` set for it to `sim` or `cann` to match).

use std::fmt::Write as _;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write as _};
use std::path::PathBuf;
use std::pin::pin;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use ascend_fabric::{Engine, EngineOptions, Registration, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{Device, DeviceBuffer, HostBuffer};

use crate::util::{fmt_opt, free_port, median, median_ratio, size_name};
use crate::Res;

/// The Python half, run with `-c`.
const SCRIPT: &str = include_str!("../py/transfer_bench.py");
const T: Duration = Duration::from_secs(30);
/// Copy streams of every engine, on both sides.
const STREAMS: u32 = 4;
/// VA pool of every engine, on both sides.
const POOL: usize = 4 << 30;
/// The sizes measured; the buffers are the largest.
pub(crate) const SIZES: [usize; 2] = [4 << 10, 1 << 20];
/// The interpreter when neither `--python` nor `$PYTHON` names one.
const DEFAULT_PYTHON: &str = "python3";

/// How a transfer is waited for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// `transfer_sync`.
    Sync,
    /// The `transfer` future, awaited.
    Async,
}

impl Wait {
    const ALL: [Wait; 2] = [Wait::Sync, Wait::Async];

    /// The script's name for it, and the RESULT keys'.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Wait::Sync => "sync",
            Wait::Async => "async",
        }
    }
}

/// The subcommand's options.
#[derive(Debug, Clone, Default)]
pub(crate) struct PyArgs {
    /// Fewer rounds and transfers (a smoke test).
    pub(crate) quick: bool,
    /// The interpreter (`--python`); else `$PYTHON`, else `python3`.
    pub(crate) python: Option<PathBuf>,
}

/// One size and wait: the median time per transfer from Rust and from Python, and the median
/// over rounds of Python's over Rust's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) size: usize,
    pub(crate) wait: Wait,
    pub(crate) rust: Duration,
    pub(crate) python: Duration,
    pub(crate) ratio: f64,
}

impl Row {
    /// `python_vs_rust_<wait>_<size>`, e.g. `python_vs_rust_sync_4KiB`.
    pub(crate) fn key(&self) -> String {
        format!(
            "python_vs_rust_{}_{}",
            self.wait.name(),
            size_name(self.size).replace(' ', "")
        )
    }
}

/// Wakes the thread that polls, which parks between polls.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` on this thread until it is ready, parked while it is pending (a wake-up that
/// comes first makes the next park return at once; a spurious one costs a poll).
fn block_on<F: Future>(fut: F, waker: &Waker) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

fn options() -> Res<EngineOptions> {
    Ok(EngineOptions::builder()
        .task_stream_num(STREAMS)
        .pool_capacity(POOL)
        .build()?)
}

/// The Rust side: both engines, the client connected, both buffers registered. Fields drop
/// in order: the registrations before their buffers, the engines last.
struct Pair {
    addr: String,
    _regs: [Registration; 2],
    src: HostBuffer,
    dst: DeviceBuffer,
    client: Engine,
    _server: Engine,
}

impl Pair {
    fn new(dev: &Device) -> Res<Pair> {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let server = Engine::new(dev, &addr, options()?)?;
        let client = Engine::new(dev, "127.0.0.1", options()?)?;
        let src = client.alloc_host(SIZES[1])?;
        let dst = server.alloc_device(SIZES[1])?;
        let regs = [client.register(&src)?, server.register(&dst)?];
        client.connect(&addr, T)?;
        Ok(Pair {
            addr,
            _regs: regs,
            src,
            dst,
            client,
            _server: server,
        })
    }

    /// The time per transfer of `n` WRITEs of `size` bytes, one after the other.
    fn pass(&self, wait: Wait, size: usize, n: usize) -> Res<Duration> {
        let d = [TransferDesc::raw(self.src.addr(), self.dst.addr(), size)];
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let t = Instant::now();
        for _ in 0..n {
            match wait {
                Wait::Sync => self
                    .client
                    .transfer_sync(&self.addr, TransferOp::Write, &d, T)?,
                Wait::Async => block_on(
                    self.client.transfer(&self.addr, TransferOp::Write, &d),
                    &waker,
                )?,
            }
        }
        Ok(t.elapsed() / n as u32)
    }
}

/// The token after `"key": ` in one of the script's flat JSON objects, unquoted (its values
/// are numbers and strings without commas or quotes).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let rest = line[line.find(&pat)? + pat.len()..].trim_start();
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim().trim_matches('"'))
}

/// What the script said about itself.
#[derive(Debug, Clone)]
struct Ready {
    python: String,
    package: String,
    emulator: bool,
}

/// The Python side: the child, its pipes, and the thread collecting its stderr.
struct PyChild {
    interp: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Option<JoinHandle<String>>,
}

impl PyChild {
    /// Starts the script on `interp` with its engines on `device` and its server at `port`.
    fn spawn(interp: &str, device: i32, port: u16, emulator: bool) -> Res<PyChild> {
        let mut child = Command::new(interp)
            .arg("-c")
            .arg(SCRIPT)
            .args([
                port.to_string(),
                device.to_string(),
                STREAMS.to_string(),
                POOL.to_string(),
                SIZES[1].to_string(),
            ])
            .env("ASCEND_MEM_BACKEND", if emulator { "sim" } else { "cann" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!("cannot run the Python interpreter {interp:?}: {e}; name one with --python PATH or PYTHON")
            })?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the Python child's pipes were not set up".into());
        };
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Ok(PyChild {
            interp: interp.to_owned(),
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            stderr: Some(stderr),
        })
    }

    /// Waits for the child to end and returns how it ended and the end of its stderr.
    fn ended(&mut self) -> (String, String) {
        self.stdin = None;
        let status = match self.child.wait() {
            Ok(s) => s.to_string(),
            Err(e) => format!("not known ({e})"),
        };
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let err = err.trim();
        let tail = &err[err.char_indices().rev().nth(1999).map_or(0, |(i, _)| i)..];
        (status, tail.to_owned())
    }

    /// [`PyChild::ended`] as one message: `<interp> (<status>): <stderr's end>`.
    fn ended_msg(&mut self) -> String {
        let (status, tail) = self.ended();
        format!("{} ({status}): {tail}", self.interp)
    }

    /// The child's next stdout line; its end is an error saying how the child ended.
    fn line(&mut self) -> Res<String> {
        let mut s = String::new();
        match self.stdout.read_line(&mut s) {
            Ok(0) => Err(format!("the Python child ended: {}", self.ended_msg()).into()),
            Ok(_) => Ok(s),
            Err(e) => Err(format!("reading the Python child's output: {e}").into()),
        }
    }

    /// The first line: ready, or the package missing (an error saying how to build it).
    fn ready(&mut self) -> Res<Ready> {
        let l = self.line()?;
        if field(&l, "import_error").is_some() {
            let (_, why) = self.ended();
            return Err(format!(
                "{} cannot import ascend_fabric ({why}): build the wheel with `maturin build --release \
                 -m crates/ascend-py/Cargo.toml`, then `pip install target/wheels/ascend_fabric-*.whl` \
                 into that interpreter's environment (or name another with --python PATH or PYTHON)",
                self.interp
            )
            .into());
        }
        let (Some(python), Some(package), Some(emulator)) = (
            field(&l, "python"),
            field(&l, "ascend_fabric"),
            field(&l, "emulator"),
        ) else {
            return Err(
                format!("the Python child's first line is not its ready line: {l:?}").into(),
            );
        };
        Ok(Ready {
            python: python.to_owned(),
            package: package.to_owned(),
            emulator: emulator == "1",
        })
    }

    /// Asks for one pass and returns its time per transfer.
    fn pass(&mut self, wait: Wait, size: usize, n: usize) -> Res<Duration> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or("the Python child's stdin is closed")?;
        writeln!(stdin, "{} {size} {n}", wait.name())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("asking the Python child for a pass: {e}"))?;
        let l = self.line()?;
        let s = field(&l, "per_transfer_s")
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("the Python child's answer has no time: {l:?}"))?;
        Duration::try_from_secs_f64(s)
            .map_err(|e| format!("the Python child's time {s}: {e}").into())
    }

    /// Closes its stdin and checks it exited cleanly.
    fn finish(mut self) -> Res<()> {
        self.stdin = None;
        match self.child.wait() {
            Ok(s) if s.success() => Ok(()),
            _ => Err(format!("the Python child failed at the end: {}", self.ended_msg()).into()),
        }
    }
}

impl Drop for PyChild {
    fn drop(&mut self) {
        // Only after an error: the child is stopped rather than left waiting for a pass.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Rounds per size and wait.
fn rounds(quick: bool) -> usize {
    if quick {
        5
    } else {
        21
    }
}

/// Transfers per pass for `size`.
fn count(size: usize, quick: bool) -> usize {
    (if size <= 4 << 10 { 5000 } else { 500 }) / if quick { 50 } else { 1 }
}

/// Alternated rounds of every size and wait, both sides warmed first.
fn measure(args: &PyArgs, pair: &Pair, py: &mut PyChild) -> Res<Vec<Row>> {
    let rounds = rounds(args.quick);
    let mut rows = Vec::new();
    for size in SIZES {
        let n = count(size, args.quick);
        for wait in Wait::ALL {
            pair.pass(wait, size, n)?;
            py.pass(wait, size, n)?;
            let (mut rs, mut ps, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for r in 0..rounds {
                let (a, b) = if r % 2 == 0 {
                    let a = pair.pass(wait, size, n)?;
                    (a, py.pass(wait, size, n)?)
                } else {
                    let b = py.pass(wait, size, n)?;
                    (pair.pass(wait, size, n)?, b)
                };
                ratios.push(b.as_secs_f64() / a.as_secs_f64());
                rs.push(a);
                ps.push(b);
            }
            rows.push(Row {
                size,
                wait,
                rust: median(rs),
                python: median(ps),
                ratio: median_ratio(ratios),
            });
        }
    }
    Ok(rows)
}

/// The interpreter: `--python`, else `$PYTHON` (when not empty), else `python3`.
fn interpreter(args: &PyArgs) -> String {
    match &args.python {
        Some(p) => p.display().to_string(),
        None => std::env::var("PYTHON")
            .ok()
            .filter(|p| !p.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_PYTHON.to_owned()),
    }
}

/// The table, then the RESULT line.
fn print(rows: &[Row], rounds: usize) {
    println!(
        "python: one WRITE of one descriptor, host to device, per transfer (medians of {rounds} alternated rounds)"
    );
    println!(" size  wait    Rust us  Python us  python/rust");
    for r in rows {
        println!(
            "{:>5}  {:<5} {:>9.2} {:>10.2} {:>12}",
            size_name(r.size),
            r.wait.name(),
            r.rust.as_secs_f64() * 1e6,
            r.python.as_secs_f64() * 1e6,
            fmt_opt(Some(r.ratio), 3)
        );
    }
    let mut line = String::from("RESULT");
    for r in rows {
        let _ = write!(line, " {}={}", r.key(), fmt_opt(Some(r.ratio), 3));
    }
    println!("{line}");
}

/// The subcommand: the backend line, the Python child's versions, the table, the RESULT line.
pub(crate) fn run(args: &PyArgs) -> Res<()> {
    let rt = crate::util::runtime()?;
    let meta = crate::util::Meta::of(&rt)?;
    crate::util::announce(&meta);
    let dev = crate::util::device(&rt, crate::util::Side::Bench)?;
    let interp = interpreter(args);
    let mut py = PyChild::spawn(&interp, meta.device, free_port()?, meta.emulator)?;
    let ready = py.ready()?;
    if ready.emulator != meta.emulator {
        let child = if ready.emulator {
            "the emulator"
        } else {
            "CANN"
        };
        return Err(format!(
            "the Python child measures {child}, this process {}: both must measure one backend",
            meta.backend
        )
        .into());
    }
    println!(
        "python: {interp} (Python {}), ascend_fabric {}",
        ready.python, ready.package
    );
    let pair = Pair::new(&dev)?;
    let rows = measure(args, &pair, &mut py)?;
    py.finish()?;
    print(&rows, rounds(args.quick));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_scripts_fields() {
        let l = r#"{"mode": "sync", "len": 4096, "n": 10, "per_transfer_s": 1.25e-05}"#;
        assert_eq!(field(l, "per_transfer_s"), Some("1.25e-05"));
        assert_eq!(field(l, "mode"), Some("sync"));
        assert_eq!(field(l, "len"), Some("4096"));
        assert_eq!(field(l, "missing"), None);
        assert_eq!(field(r#"{"import_error": 1}"#, "import_error"), Some("1"));
    }

    #[test]
    fn names_the_keys() {
        let r = Row {
            size: 1 << 20,
            wait: Wait::Async,
            rust: Duration::ZERO,
            python: Duration::ZERO,
            ratio: 1.0,
        };
        assert_eq!(r.key(), "python_vs_rust_async_1MiB");
        assert!(median_ratio(Vec::new()).is_nan());
        assert_eq!(median_ratio(vec![3.0, 1.0, 2.0]), 2.0);
    }
}
