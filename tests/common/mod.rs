//! Shared helpers of the root integration tests.
//!
//! The emulator's counters, fault injection and call log are process-global, so every test
//! takes [`LOCK`] (through [`setup`]) for its whole run. Child-process roles re-run the test
//! binary with `ROLE_VAR` set.
#![allow(dead_code)]

use std::process::{Command, Output};

use ascend_mem::{Device, Error, ErrorKind, Runtime};
// std's Mutex (poison recovered): parking_lot is not a dev-dependency of the root package.
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Serialises every test of one binary.
pub static LOCK: Mutex<()> = Mutex::new(());

/// Env var naming the role of a child process.
pub const ROLE_VAR: &str = "ASCEND_MEM_TEST_ROLE";

/// One test's view: the lock, the emulated runtime and device 0.
pub struct Env {
    pub rt: Runtime,
    pub dev: Device,
    _guard: MutexGuard<'static, ()>,
}

/// Takes the lock, clears faults and the call log, opens the in-process emulator.
pub fn setup() -> Env {
    let guard = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    ascend_sim::fault::clear();
    ascend_sim::set_call_log(false);
    let rt = Runtime::emulated().expect("the in-process emulator opens");
    let dev = rt.device(0).expect("device 0");
    let _ = dev.check_sticky();
    Env {
        rt,
        dev,
        _guard: guard,
    }
}

impl Env {
    /// Drops the runtime handles and asserts no emulator object is left, still holding the
    /// lock (so no other test's objects are counted).
    #[track_caller]
    pub fn finish(self) {
        let Env { rt, dev, _guard } = self;
        drop(dev);
        drop(rt);
        assert_clean();
        drop(_guard);
    }
}

/// Asserts that the emulator holds no live object (call after everything is dropped).
#[track_caller]
pub fn assert_clean() {
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "emulator objects leaked: {c:?}");
}

/// Asserts an ACL error from `api` with `code`, and its kind.
#[track_caller]
pub fn assert_acl(e: &Error, api: &str, code: i32, kind: ErrorKind) {
    match e {
        Error::Acl {
            api: a, code: c, ..
        } => {
            assert_eq!(*a, api, "api of {e}");
            assert_eq!(c.0, code, "code of {e}");
        }
        other => panic!("expected an ACL error from {api} ({code}), got {other:?}"),
    }
    assert_eq!(e.kind(), kind, "kind of {e}");
}

/// Re-runs this test binary for one test function with a role; returns its output.
pub fn run_role(test_name: &str, role: &str, envs: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = Command::new(exe);
    cmd.args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_VAR, role);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("spawn child test process")
}

/// The role of this process, if it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE_VAR).ok().filter(|r| !r.is_empty())
}

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn from_hex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A deterministic byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The emulator's shared library built with the test binary (target/<profile>/deps), else
/// the copy in target/<profile>, which only a build naming ascend-sim refreshes.
pub fn sim_library() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [
        deps.join("libascend_sim.so"),
        deps.parent()?.join("libascend_sim.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
}
