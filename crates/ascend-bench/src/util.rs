//! Small helpers: environment, limits, /proc, ports, timing.

use std::time::{Duration, Instant};

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

/// The runtime the bench measures: `ASCEND_MEM_BACKEND` (`cann`: CANN or an error, `sim`: the
/// emulator; unset: CANN if found, else the emulator). Every process of a run (the peers
/// inherit the environment) measures the same backend.
pub(crate) fn runtime() -> Res<ascend_mem::Runtime> {
    Ok(ascend_mem::Runtime::from_env_or_emulator()?)
}

/// An error naming `part` when the backend is not the emulator: a part that reads the
/// emulator's own statistics or arms its faults.
pub(crate) fn need_emulator(rt: &ascend_mem::Runtime, part: &str) -> Res<()> {
    if rt.backend().is_emulator() {
        return Ok(());
    }
    Err(format!(
        "{part} measures the emulator itself (its statistics, faults or call cost) and does not run on {}; use ASCEND_MEM_BACKEND=sim",
        rt.backend()
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
