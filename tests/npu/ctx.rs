//! What every test gets: the runtime, its capabilities, the devices to use, and child
//! processes of this binary in a role.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use ascend::fabric::{EngineCapabilities, Need};
use ascend::{Device, Runtime};

use crate::harness::Skip;

/// The variable naming a child's role.
pub const ROLE: &str = "ASCEND_NPU_ROLE";

/// How long a child may take to say it is ready, or a step to finish.
pub const STEP: Duration = Duration::from_secs(60);

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The suite's view of the machine.
pub struct Ctx {
    pub rt: Runtime,
    pub caps: EngineCapabilities,
    /// The devices to use (`ASCEND_TEST_DEVICES`).
    pub devices: Vec<i32>,
}

/// Returns the skip of `$need` from the test when the runtime lacks it.
#[macro_export]
macro_rules! need {
    ($ctx:expr, $need:expr) => {
        if let Some(skip) = $ctx.need($need) {
            return Ok(Some(skip));
        }
    };
}

impl Ctx {
    pub fn open() -> Res<Ctx> {
        let rt = Runtime::from_env_or_emulator()?;
        let devices = devices(&rt)?;
        let caps = EngineCapabilities::probe_on(&rt, devices[0])?;
        Ok(Ctx { rt, caps, devices })
    }

    /// The skip for `need` when the runtime lacks it.
    pub fn need(&self, need: Need) -> Option<Skip> {
        self.caps.check(need).err().map(|m| Skip {
            capability: m.feature.to_string(),
            why: format!("{}; {}", m.why, m.fix),
        })
    }

    /// The skip when fewer than `n` devices are listed.
    pub fn need_devices(&self, n: usize) -> Option<Skip> {
        (self.devices.len() < n).then(|| Skip {
            capability: "devices".into(),
            why: format!(
                "needs {n} devices, {} listed; set ASCEND_TEST_DEVICES=0,1",
                self.devices.len()
            ),
        })
    }

    /// The first device.
    pub fn dev(&self) -> Res<Device> {
        Ok(self.rt.device(self.devices[0])?)
    }

    /// The devices as the variable a child reads.
    pub fn devices_var(&self) -> String {
        self.devices
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `ASCEND_TEST_DEVICES`, or `0,1,2,3` on the emulator and `0` on CANN.
pub fn devices(rt: &Runtime) -> Res<Vec<i32>> {
    let text = std::env::var("ASCEND_TEST_DEVICES").unwrap_or_default();
    let text = match text.trim() {
        "" if rt.backend().is_emulator() => "0,1,2,3".to_string(),
        "" => "0".to_string(),
        t => t.to_string(),
    };
    let list = text
        .split(',')
        .map(|d| d.trim().parse::<i32>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("ASCEND_TEST_DEVICES={text:?}: {e}"))?;
    Ok(list)
}

/// A child of this binary in a role: its stdout lines arrive on a channel, its stdin stays
/// open until it is dropped (a child waits for that end), and it is killed on drop.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Peer {
    pub fn start(role: &str, envs: &[(&str, String)]) -> Res<Peer> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Ok(Peer {
            child,
            stdin,
            lines,
        })
    }

    /// The rest of the first line that starts with `prefix`, within [`STEP`].
    pub fn expect(&self, prefix: &str) -> Res<String> {
        loop {
            let line = self
                .lines
                .recv_timeout(STEP)
                .map_err(|_| format!("the child said no {prefix:?} line"))?;
            if let Some(rest) = line.strip_prefix(prefix) {
                return Ok(rest.trim().to_string());
            }
        }
    }

    /// Sends one line to the child.
    pub fn say(&mut self, line: &str) -> Res<()> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the child (SIGKILL) and waits for it.
    pub fn kill(&mut self) -> Res<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Closes its stdin and waits for it to exit; an error unless it exited 0.
    pub fn finish(mut self) -> Res<()> {
        drop(self.stdin.take());
        let status = self.child.wait()?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("the child ended with {status}").into())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// In a child: the next line of stdin (`None` at its end: the parent is done or gone).
pub fn read_line() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim().to_string()),
    }
}

/// A byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// A check that fails the test with `what` when false.
pub fn ensure(ok: bool, what: impl Into<String>) -> Res<()> {
    ok.then_some(()).ok_or_else(|| what.into().into())
}
