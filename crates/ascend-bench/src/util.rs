//! Small helpers: the backend and devices, environment, limits, /proc, ports, timing.

use std::time::{Duration, Instant};

use ascend_mem::{BackendChoice, Device, Runtime};

use crate::Res;

/// HBM per device and host cap given to the emulator in every bench process unless set:
/// capacities are bookkeeping only (memfd pages exist once touched), and the translate peer
/// allocates 10,000 segments of 2 MiB.
pub(crate) const SIM_HBM_BYTES: u64 = 64 << 30;
pub(crate) const SIM_HOST_BYTES: u64 = 16 << 30;

/// Sets the emulator's capacities (inherited by the child processes) unless the user did.
/// Called first thing in `main`, before any thread exists or the emulator reads them.
pub(crate) fn default_sim_env() {
    for (k, v) in [
        ("ASCEND_SIM_HBM_BYTES", SIM_HBM_BYTES),
        ("ASCEND_SIM_HOST_BYTES", SIM_HOST_BYTES),
    ] {
        if std::env::var_os(k).is_none() {
            std::env::set_var(k, v.to_string());
        }
    }
}

/// The runtime every bench process measures: [`ascend_mem::Runtime::from_env_or_emulator`]
/// (`ASCEND_MEM_BACKEND=cann`: CANN or its load error; `sim`: the emulator; unset: CANN if
/// found, else the emulator). The child processes inherit the environment, so the parent and
/// every peer and client role measure the same backend.
pub(crate) fn runtime() -> Res<Runtime> {
    Ok(Runtime::from_env_or_emulator()?)
}

/// The device of the measuring process (the transfer initiator, the translate and hixl
/// clients).
pub(crate) const DEVICE_VAR: &str = "ASCEND_BENCH_DEVICE";
/// The device of the peer processes (and of the in-process peers of the `inproc` role).
pub(crate) const PEER_DEVICE_VAR: &str = "ASCEND_BENCH_PEER_DEVICE";

/// Which process a device is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The measuring process: `ASCEND_BENCH_DEVICE` (default 0).
    Bench,
    /// A peer: `ASCEND_BENCH_PEER_DEVICE` (default: the measuring process's device).
    Peer,
}

/// A device number from `var`; `None` when unset or empty.
fn device_var(var: &str) -> Res<Option<i32>> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(None);
    };
    let v = v.to_string_lossy();
    let t = v.trim();
    if t.is_empty() {
        return Ok(None);
    }
    match t.parse::<u16>() {
        Ok(n) => Ok(Some(i32::from(n))),
        Err(_) => Err(format!("{var}={v:?} is not a device number (0, 1, ...)").into()),
    }
}

/// The device id of `side`, and the variable it came from (for messages).
pub(crate) fn device_id(side: Side) -> Res<(i32, &'static str)> {
    let bench = device_var(DEVICE_VAR)?.unwrap_or(0);
    Ok(match side {
        Side::Bench => (bench, DEVICE_VAR),
        Side::Peer => match device_var(PEER_DEVICE_VAR)? {
            Some(d) => (d, PEER_DEVICE_VAR),
            None => (bench, DEVICE_VAR),
        },
    })
}

/// The device id of `side`, checked against the devices `rt` has.
pub(crate) fn checked_device_id(rt: &Runtime, side: Side) -> Res<i32> {
    let (id, var) = device_id(side)?;
    let n = rt.device_count()?;
    if u32::try_from(id).map_or(true, |id| id >= n) {
        return Err(format!(
            "{var}={id}: the backend ({}) has {n} device(s), 0 to {}",
            rt.backend(),
            n.saturating_sub(1)
        )
        .into());
    }
    Ok(id)
}

/// Opens the device of `side` on `rt`.
pub(crate) fn device(rt: &Runtime, side: Side) -> Res<Device> {
    let id = checked_device_id(rt, side)?;
    Ok(rt.device(id)?)
}

/// What the measuring process found: printed first, and written to `results.csv`.
#[derive(Clone, Debug)]
pub(crate) struct Meta {
    /// The backend, as [`ascend_mem::Backend`] prints it.
    pub(crate) backend: String,
    /// The backend is the emulator (else CANN).
    pub(crate) emulator: bool,
    pub(crate) device: i32,
    pub(crate) peer_device: i32,
}

impl Meta {
    /// The backend and both devices of `rt`, checked.
    pub(crate) fn of(rt: &Runtime) -> Res<Meta> {
        Ok(Meta {
            backend: rt.backend().to_string(),
            emulator: rt.backend().is_emulator(),
            device: checked_device_id(rt, Side::Bench)?,
            peer_device: checked_device_id(rt, Side::Peer)?,
        })
    }

    /// The first output line: `backend: <backend>; device D, peers on device P`.
    pub(crate) fn line(&self) -> String {
        format!(
            "backend: {}; device {}, peers on device {}",
            self.backend, self.device, self.peer_device
        )
    }
}

/// Prints [`Meta::line`] (the first line of stdout), after a WARN line on stderr when the
/// emulator was chosen only because `ASCEND_MEM_BACKEND` is unset and no CANN was found.
pub(crate) fn announce(meta: &Meta) {
    if meta.emulator && matches!(BackendChoice::from_env(), Ok(BackendChoice::Unset)) {
        eprintln!(
            "WARN ascend-bench: ASCEND_MEM_BACKEND is unset and no CANN runtime was found: \
             measuring the emulator (host memory, no NPU); ASCEND_MEM_BACKEND=cann requires CANN"
        );
    }
    println!("{}", meta.line());
}

/// A part or flag that measures the emulator itself, so runs on the emulator only.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum SimOnly {
    Collectives,
    Soak,
    CallNs,
}

impl SimOnly {
    pub(crate) fn name(self) -> &'static str {
        match self {
            SimOnly::Collectives => "collectives",
            SimOnly::Soak => "soak",
            SimOnly::CallNs => "--call-ns",
        }
    }

    fn why(self) -> &'static str {
        match self {
            SimOnly::Collectives => {
                "it reads the emulator's HCCL statistics and calls its HCCL table directly"
            }
            SimOnly::Soak => "it arms the emulator's faults and counts the emulator's objects",
            SimOnly::CallNs => {
                "it sets the emulator's host cost per runtime copy call (ASCEND_SIM_CALL_NS)"
            }
        }
    }

    /// The line `all` prints instead of running the part.
    pub(crate) fn skipped(self, backend: &str) -> String {
        format!(
            "{}: skipped on {backend}: {}; ASCEND_MEM_BACKEND=sim runs it",
            self.name(),
            self.why()
        )
    }
}

/// Refuses `what` unless the backend is the emulator: with `rt`, when it is not; without a
/// runtime (before one is opened, so the refusal needs no CANN), when
/// `ASCEND_MEM_BACKEND=cann` asks for CANN ([`BackendChoice::from_env`]; a value naming no
/// backend is left to opening the runtime, which refuses it naming it).
pub(crate) fn need_emulator(what: SimOnly, rt: Option<&Runtime>) -> Res<()> {
    let backend = match rt {
        Some(rt) if rt.backend().is_emulator() => return Ok(()),
        Some(rt) => rt.backend().to_string(),
        None if matches!(BackendChoice::from_env(), Ok(BackendChoice::Cann)) => {
            "CANN (ASCEND_MEM_BACKEND=cann)".to_owned()
        }
        None => return Ok(()),
    };
    Err(format!(
        "{} needs the emulator: {}; the backend is {backend}. Run it with \
         ASCEND_MEM_BACKEND=sim",
        what.name(),
        what.why()
    )
    .into())
}

/// Raises the soft open-file limit to the hard one (10,000 imported segments are 10,000 fds).
pub(crate) fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls with a valid out-pointer / in-pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// A field of /proc/self/status in bytes (`VmHWM`, `VmRSS`, ...).
pub(crate) fn proc_status_bytes(field: &str) -> Res<u64> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    for l in s.lines() {
        if let Some(rest) = l.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            let kb: u64 = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .map_err(|e| format!("{field}: {e}"))?;
            return Ok(kb * 1024);
        }
    }
    Err(format!("{field} missing from /proc/self/status").into())
}

/// A loopback port nobody listens on right now, below the ephemeral range.
pub(crate) fn free_port() -> Res<u16> {
    Ok(ascend_testkit::free_port())
}

/// The median of ratios `v` (the upper one of an even count; NaN when empty).
pub(crate) fn median_ratio(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The median of `v` (the upper one of an even count; zero when empty).
pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Runs `f` `n` times and returns the shortest duration.
pub(crate) fn best_of(n: usize, mut f: impl FnMut() -> Res<()>) -> Res<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..n.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed());
    }
    Ok(best)
}

/// The best of `n` timed runs each of `a` and `b`, run alternately (a, b, a, b, ...), so a
/// change in the machine's load during the measurement falls on both.
pub(crate) fn best_of_alternating(
    n: usize,
    mut a: impl FnMut() -> Res<()>,
    mut b: impl FnMut() -> Res<()>,
) -> Res<(Duration, Duration)> {
    let (mut ba, mut bb) = (Duration::MAX, Duration::MAX);
    for _ in 0..n.max(1) {
        ba = ba.min(best_of(1, &mut a)?);
        bb = bb.min(best_of(1, &mut b)?);
    }
    Ok((ba, bb))
}

/// `bytes` over `d` in GB/s (10^9 bytes per second).
pub(crate) fn gbs(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

/// A block size as `4 KiB`, `64 MiB`.
pub(crate) fn size_name(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b >> 10)
    }
}

/// `a / b`, NaN when either is missing or `b` is zero.
pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() && b.is_finite() => Some(a / b),
        _ => None,
    }
}

/// A float or `nan`, with `prec` decimals.
pub(crate) fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.prec$}"),
        _ => "nan".into(),
    }
}
