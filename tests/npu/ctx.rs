//! What the tests share: the runtime and its capabilities, the devices to use, child
//! processes of this binary in a role (and HCCL ranks made of them), and the child's side of
//! that (its device, its commands, its communicator).
//!
//! A child is this executable started with `ASCEND_NPU_ROLE` naming its role. It talks to
//! its parent in lines: commands on its stdin, answers on its stdout; its stderr is kept for
//! the failure message. It never outlives the parent: a watchdog ends it after
//! [`CHILD_LIMIT`], a command role ends when its stdin closes, and a rank exits at once when
//! it does. Every wait of the parent has a deadline, so a broken runtime is a failure, not
//! a hang.

use std::error::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ascend::fabric::{EngineCapabilities, Need};
use ascend::hccl::{Comm, CommConfig, RootInfo};
use ascend::prelude::*;
use ascend::{Device, MappingSlice, Runtime, Stream};
use ascend_launch::{RankEnv, Rendezvous};

use crate::harness::Outcome;

/// A test's result: its outcome, or why it failed.
pub type Res<T> = Result<T, Box<dyn Error>>;

/// The variable that names a child's role.
pub const ROLE: &str = "ASCEND_NPU_ROLE";
/// The variable that names a child's device.
pub const DEVICE: &str = "ASCEND_NPU_DEVICE";
/// The longest the parent waits for one step of a child (an answer, an exit, a rank job),
/// and a child for its next command.
pub const STEP: Duration = Duration::from_secs(60);
/// Set for a run of the suite that another run started (the self-test's).
pub const NESTED: &str = "ASCEND_NPU_NESTED";
/// A child's watchdog: it exits (status 3) after this long whatever it is doing.
pub const CHILD_LIMIT: Duration = Duration::from_secs(180);

/// Returns the skip from the test when the expression has one.
#[macro_export]
macro_rules! skip_if {
    ($lacking:expr) => {
        if let Some(skip) = $lacking {
            return Ok(skip);
        }
    };
}

/// The suite's view of the machine.
pub struct Ctx {
    pub rt: Runtime,
    /// Probed on the first listed device.
    pub caps: EngineCapabilities,
    /// The devices to use, from `ASCEND_TEST_DEVICES`.
    pub devices: Vec<i32>,
}

impl Ctx {
    /// The runtime `ASCEND_MEM_BACKEND` picks, the listed devices, the capabilities.
    pub fn open() -> Res<Ctx> {
        let rt = Runtime::from_env_or_emulator()?;
        let devices = test_devices(&rt)?;
        let caps = EngineCapabilities::probe_on(&rt, devices[0])?;
        Ok(Ctx { rt, caps, devices })
    }

    pub fn emulated(&self) -> bool {
        self.rt.backend().is_emulator()
    }

    /// The skip for `need` when the runtime lacks it.
    pub fn lacks(&self, need: Need) -> Option<Outcome> {
        self.caps.check(need).err().map(Outcome::from)
    }

    /// The skip when fewer than `n` devices are listed.
    pub fn lacks_devices(&self, n: usize) -> Option<Outcome> {
        (self.devices.len() < n).then(|| {
            let list: Vec<String> = (0..n).map(|d| d.to_string()).collect();
            Outcome::skip(
                "devices",
                format!(
                    "needs {n} devices; set ASCEND_TEST_DEVICES={}",
                    list.join(",")
                ),
            )
        })
    }

    /// The first listed device.
    pub fn device(&self) -> Res<Device> {
        Ok(self.rt.device(self.devices[0])?)
    }

    /// The device for the second process of a two-process test: the second listed one, or
    /// the first when only one is listed.
    pub fn other_device(&self) -> i32 {
        *self.devices.get(1).unwrap_or(&self.devices[0])
    }
}

/// `ASCEND_TEST_DEVICES` (a comma list); without it, the first four devices on the emulator
/// and device 0 on CANN. Every device must exist, none twice.
fn test_devices(rt: &Runtime) -> Res<Vec<i32>> {
    let count = i32::try_from(rt.device_count()?)?;
    let text = std::env::var("ASCEND_TEST_DEVICES").unwrap_or_default();
    let list: Vec<i32> = if text.trim().is_empty() {
        let n = if rt.backend().is_emulator() { 4 } else { 1 };
        (0..n.min(count)).collect()
    } else {
        text.split(',')
            .map(|d| d.trim().parse::<i32>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("ASCEND_TEST_DEVICES={text:?}: {e}"))?
    };
    if list.is_empty() {
        return Err("no device to test (the runtime reports none)".into());
    }
    for (i, d) in list.iter().enumerate() {
        if !(0..count).contains(d) {
            return Err(
                format!("ASCEND_TEST_DEVICES lists device {d}; the runtime has {count}").into(),
            );
        }
        if list[..i].contains(d) {
            return Err(format!("ASCEND_TEST_DEVICES lists device {d} twice").into());
        }
    }
    Ok(list)
}

/// A failure unless `ok`.
pub fn ensure(ok: bool, what: impl Into<String>) -> Res<()> {
    if ok {
        Ok(())
    } else {
        Err(what.into().into())
    }
}

/// A failure naming the first byte where `got` differs from `want`.
pub fn same_bytes(got: &[u8], want: &[u8], what: &str) -> Res<()> {
    if got.len() < want.len() {
        return Err(format!("{what}: {} bytes, expected {}", got.len(), want.len()).into());
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            want.len(),
            got[i],
            want[i]
        )
        .into()),
    }
}

/// A child of this binary in a role.
pub struct Peer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Peer {
    /// Starts `role` with `env` added to this process's environment.
    pub fn start(role: &str, env: &[(&str, String)]) -> Res<Peer> {
        Peer::named(role.to_string(), role, env)
    }

    /// As [`Peer::start`], called `name` in messages.
    pub fn named(name: String, role: &str, env: &[(&str, String)]) -> Res<Peer> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.env(ROLE, role);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Peer::spawn(name, cmd)
    }

    /// Starts `cmd` with its stdin, stdout and stderr piped to us.
    pub fn spawn(name: String, mut cmd: Command) -> Res<Peer> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut err = child.stderr.take().ok_or("no stderr")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        Ok(Peer {
            name,
            stdin: child.stdin.take(),
            child,
            lines,
            stderr: Some(stderr),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The rest of the child's next line that starts with `prefix` (other lines are
    /// skipped), within [`STEP`].
    pub fn expect(&mut self, prefix: &str) -> Res<String> {
        let deadline = Instant::now() + STEP;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.trim().to_string());
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(self.failure(&format!("said no {prefix:?} within {STEP:?}")))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.failure(&format!("ended before saying {prefix:?}")))
                }
            }
        }
    }

    /// Sends a line.
    pub fn send(&mut self, line: &str) -> Res<()> {
        let stdin = self.stdin.as_mut().ok_or("the child's stdin is closed")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    /// Sends a line and returns the answer line that starts with `prefix`.
    pub fn ask(&mut self, line: &str, prefix: &str) -> Res<String> {
        self.send(line)?;
        self.expect(prefix)
    }

    /// Kills the child (SIGKILL) and reaps it.
    pub fn kill(&mut self) -> Res<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Closes its stdin (the end of its commands) and waits up to [`STEP`] for it to exit;
    /// a failure unless it exits with status 0.
    pub fn finish(mut self) -> Res<()> {
        drop(self.stdin.take());
        self.wait()
    }

    /// Waits up to [`STEP`] for it to exit, its stdin left open; a failure unless it exits
    /// with status 0. Its exit shows as the end of its stdout (lines it prints meanwhile
    /// are skipped).
    pub fn wait(mut self) -> Res<()> {
        let deadline = Instant::now() + STEP;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(self.failure(&format!("did not exit within {STEP:?}")))
                }
                Err(RecvTimeoutError::Disconnected) => return self.exited(),
            }
        }
    }

    /// Reaps the child after its stdout ended; a failure unless it exited with status 0.
    /// Only its exit ends its stdout (no child of the suite closes it earlier, and none
    /// passes it on to a process of its own), so the child is exiting and this wait is
    /// short; one that closed its stdout and hung would be ended by its watchdog
    /// ([`CHILD_LIMIT`]).
    fn exited(&mut self) -> Res<()> {
        let status = self.child.wait()?;
        if status.success() {
            Ok(())
        } else {
            Err(self.failure("failed"))
        }
    }

    /// Sends `i` on `ends` when the child's stdout ends (when it exits, see
    /// [`Peer::exited`]): for a parent that waits for several children at once. The
    /// child's lines are skipped from then on ([`Peer::expect`] sees none).
    fn tell_end(&mut self, i: usize, ends: Sender<usize>) {
        let (_, none) = channel();
        let lines = std::mem::replace(&mut self.lines, none);
        std::thread::spawn(move || {
            while lines.recv().is_ok() {}
            let _ = ends.send(i);
        });
    }

    /// A failure saying what went wrong with the child, with how it ended and its stderr
    /// (it is killed first if still running, so its stderr is complete).
    pub fn failure(&mut self, what: &str) -> Box<dyn Error> {
        let _ = self.child.kill();
        let status = self
            .child
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        let err = self
            .stderr
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let mut from = err.len().saturating_sub(2000);
        while !err.is_char_boundary(from) {
            from += 1;
        }
        let tail: Vec<&str> = err[from..]
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        format!(
            "{} {what} ({status}); its stderr: {}",
            self.name,
            tail.join(" | ")
        )
        .into()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `role` as an HCCL job: one rank process per device of `devices`, with torchrun's
/// variables; each rank checks its own results and exits 0 when they hold. The first rank
/// that fails fails the job (the others are killed), as does one still running after
/// [`STEP`].
pub fn run_ranks(role: &str, devices: &[i32]) -> Res<()> {
    let port = ascend_launch::free_port()?;
    let n = devices.len().to_string();
    let (tx, ends) = channel();
    let mut ranks = Vec::new();
    for (r, d) in devices.iter().enumerate() {
        let env = [
            ("RANK", r.to_string()),
            ("LOCAL_RANK", r.to_string()),
            ("WORLD_SIZE", n.clone()),
            ("LOCAL_WORLD_SIZE", n.clone()),
            ("MASTER_ADDR", "127.0.0.1".to_string()),
            ("MASTER_PORT", port.to_string()),
            (DEVICE, d.to_string()),
        ];
        let mut rank = Peer::named(format!("rank {r} (device {d})"), role, &env)?;
        rank.tell_end(r, tx.clone());
        ranks.push(rank);
    }
    drop(tx);
    let deadline = Instant::now() + STEP;
    let mut running: Vec<usize> = (0..ranks.len()).collect();
    while let Some(&first) = running.first() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(r) = ends.recv_timeout(left) else {
            return Err(ranks[first].failure(&format!("did not finish within {STEP:?}")));
        };
        running.retain(|&i| i != r);
        ranks[r].exited()?;
    }
    Ok(())
}

// ---- the child's side ----

/// In a child: the device its parent named, on the backend the parent's environment picks.
pub fn child_device() -> Res<Device> {
    let id: i32 = std::env::var(DEVICE)
        .map_err(|_| format!("{DEVICE} is not set"))?
        .parse()?;
    let rt = Runtime::from_env_or_emulator()?;
    Ok(rt.device(id)?)
}

/// In a child: prints an answer line for the parent.
pub fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// In a child: one command on memory it offers, `FILL <name> <seed>` (writes pattern
/// `seed` over all of it; answers `FILLED`) or `CHECK <name> <seed>` (answers `SAME yes`, or
/// `SAME no: <the first difference>`); the answer line.
pub fn serve(line: &str, mems: &[(&str, MappingSlice<'_>)]) -> Res<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let [cmd, name, seed] = words[..] else {
        return Err(format!("not a command: {line:?}").into());
    };
    let (_, view) = mems
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| format!("no memory named {name:?}"))?;
    let want = ascend_testkit::pattern(seed.parse()?, view.len());
    match cmd {
        "FILL" => {
            view.write_from(&want, 0)?;
            Ok("FILLED".into())
        }
        "CHECK" => Ok(match same_bytes(&view.to_vec()?, &want, name) {
            Ok(()) => "SAME yes".into(),
            Err(e) => format!("SAME no: {e}"),
        }),
        _ => Err(format!("not a command: {line:?}").into()),
    }
}

/// In a child: the parent's commands, one line each.
pub struct Commands {
    lines: Receiver<String>,
}

impl Commands {
    pub fn open() -> Commands {
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                if tx.send(line.trim().to_string()).is_err() {
                    break;
                }
            }
        });
        Commands { lines }
    }

    /// The next command; `None` once the parent closed our stdin (it is done, or gone).
    pub fn next(&self) -> Res<Option<String>> {
        match self.lines.recv_timeout(STEP) {
            Ok(line) => Ok(Some(line)),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("no command from the parent within {STEP:?}").into())
            }
        }
    }
}

/// In a rank or a nested run of the suite: exits at once (status 3) when the parent closes
/// our stdin, which it does only by ending.
pub fn exit_with_parent() {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        eprintln!("the parent has gone; exiting");
        std::process::exit(3);
    });
}

/// In a rank: its place in the job, the rendezvous with the others, and an HCCL
/// communicator on its device with a stream.
pub struct Rank {
    pub rank: u32,
    pub size: u32,
    pub rdv: Rendezvous,
    pub comm: Comm,
    pub stream: Stream,
    pub dev: Device,
}

impl Rank {
    /// Joins the job: rank 0 makes the root info and the rendezvous hands it to the others.
    pub fn join(name: &str) -> Res<Rank> {
        exit_with_parent();
        let env = RankEnv::from_env()?;
        let mut rdv = Rendezvous::join(&env, STEP)?;
        let dev = child_device()?;
        let cfg = CommConfig::new()
            .name(name)
            .sym_window_max_per_rank_gb(1)
            .exec_timeout(STEP);
        let root = match env.rank {
            0 => RootInfo::generate(&dev)?.to_bytes().to_vec(),
            _ => Vec::new(),
        };
        let root = RootInfo::from_bytes(&rdv.broadcast(&root)?)?;
        let comm = Comm::init(&dev, &root, env.rank, env.world_size, &cfg)?;
        let stream = Stream::new(&dev)?;
        Ok(Rank {
            rank: env.rank,
            size: env.world_size,
            rdv,
            comm,
            stream,
            dev,
        })
    }

    /// Waits for every rank to be done with the others' memory, then destroys the stream
    /// and the communicator, each checked.
    pub fn finish(mut self) -> Res<()> {
        self.rdv.barrier()?;
        self.stream.synchronize_timeout(STEP)?;
        self.stream.close()?;
        self.comm.close()?;
        self.dev.check_sticky()?;
        Ok(())
    }
}
