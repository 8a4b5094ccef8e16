//! The emulator's configuration: `ASCEND_SIM_DEVICES`, `ASCEND_SIM_SOC`,
//! `ASCEND_SIM_HBM_BYTES`, `ASCEND_SIM_HOST_BYTES`, `ASCEND_SIM_STREAM_MODE`,
//! `ASCEND_SIM_CALL_NS`, `ASCEND_SIM_HOST` and `ASCEND_SIM_SUPERNODE`, read once; the host
//! cost of a copy call that `ASCEND_SIM_CALL_NS` models.

use std::ffi::CStr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Product emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Soc {
    A2,
    A3,
    S950,
}

/// The SoC names of the A2 family (SoC V2) that HIXL recognises.
pub(crate) const A2_NAMES: [&CStr; 6] = [
    c"Ascend910B1",
    c"Ascend910B2",
    c"Ascend910B3",
    c"Ascend910B4",
    c"Ascend910B2C",
    c"Ascend910B4-1",
];

/// The SoC names of the A3 family (SoC V3) that HIXL recognises; the first is the default.
pub(crate) const A3_NAMES: [&CStr; 6] = [
    c"Ascend910_9391",
    c"Ascend910_9381",
    c"Ascend910_9392",
    c"Ascend910_9382",
    c"Ascend910_9372",
    c"Ascend910_9362",
];

/// The name reported for `ASCEND_SIM_SOC=950`: the public fact is only that a 950's name
/// contains `Ascend950`.
pub(crate) const S950_NAME: &CStr = c"Ascend950";

/// The product and SoC name for a value of `ASCEND_SIM_SOC`: a family alias (`A3`, `A2`,
/// `950`, which report the family's first name), one of the names above, or any name
/// containing `Ascend950`. Unset or empty is the A3 default; anything else warns and is the
/// default too.
pub(crate) fn soc_from_env(value: Option<&str>) -> (Soc, &'static CStr) {
    let v = value.map(str::trim).unwrap_or("");
    match v {
        "" | "A3" | "a3" => return (Soc::A3, A3_NAMES[0]),
        "A2" | "a2" => return (Soc::A2, A2_NAMES[0]),
        "950" => return (Soc::S950, S950_NAME),
        _ => {}
    }
    let named =
        |list: &[&'static CStr]| list.iter().copied().find(|n| n.to_bytes() == v.as_bytes());
    if let Some(n) = named(&A3_NAMES) {
        return (Soc::A3, n);
    }
    if let Some(n) = named(&A2_NAMES) {
        return (Soc::A2, n);
    }
    if v.contains("Ascend950") && !v.contains('\0') {
        // Leaked once: the configuration is read once per process.
        let owned = std::ffi::CString::new(v).expect("no NUL, checked above");
        return (Soc::S950, Box::leak(owned.into_boxed_c_str()));
    }
    eprintln!(
        "ascend-sim: unknown ASCEND_SIM_SOC={v}; using A3 ({})",
        A3_NAMES[0].to_string_lossy()
    );
    (Soc::A3, A3_NAMES[0])
}

/// How stream work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamMode {
    Threaded,
    Deterministic,
}

#[derive(Debug)]
pub(crate) struct Config {
    pub devices: u32,
    pub soc: Soc,
    /// What `aclrtGetSocName` returns.
    pub soc_name: &'static CStr,
    pub hbm_bytes: u64,
    pub host_bytes: u64,
    pub mode: StreamMode,
    /// Host cost of one runtime copy, in nanoseconds (`ASCEND_SIM_CALL_NS`, default 0).
    pub call_ns: u64,
    /// `ASCEND_SIM_IMPORT=cross-process`: importing device memory in the process that exported
    /// it is refused, as CANN documents imports (default: allowed, which tests of two engines
    /// in one process rely on).
    pub cross_process_import: bool,
    /// The emulated host this process runs on (`ASCEND_SIM_HOST`, default 0): memory shared
    /// with a process of another host follows the cross-host rules of the `share` module.
    pub host: u32,
    /// The supernode that host belongs to (`ASCEND_SIM_SUPERNODE`, default 0): FABRIC
    /// handles reach across the hosts of one supernode, not beyond it.
    pub supernode: u32,
}

/// Upper bound of `ASCEND_SIM_DEVICES`.
pub(crate) const MAX_DEVICES: u32 = 64;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(x) => x,
            Err(_) => {
                eprintln!("ascend-sim: {name}={v} is not a number; using {default}");
                default
            }
        },
        _ => default,
    }
}

/// `name` as a `u32` (`default` when unset, or with a warning when not one).
fn env_u32(name: &str, default: u32) -> u32 {
    let v = env_u64(name, u64::from(default));
    u32::try_from(v).unwrap_or_else(|_| {
        eprintln!("ascend-sim: {name}={v} does not fit 32 bits; using {default}");
        default
    })
}

/// `ASCEND_SIM_IMPORT`: `cross-process` (true) or `any` (false, the default).
fn import_rule() -> bool {
    match std::env::var("ASCEND_SIM_IMPORT")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        None | Some("") | Some("any") => false,
        Some("cross-process") => true,
        Some(other) => {
            eprintln!("ascend-sim: unknown ASCEND_SIM_IMPORT={other}; using any");
            false
        }
    }
}

fn read_config() -> Config {
    let mut devices = env_u64("ASCEND_SIM_DEVICES", 16);
    if devices == 0 || devices > u64::from(MAX_DEVICES) {
        eprintln!("ascend-sim: ASCEND_SIM_DEVICES={devices} out of 1..={MAX_DEVICES}; using 16");
        devices = 16;
    }
    let (soc, soc_name) = soc_from_env(std::env::var("ASCEND_SIM_SOC").ok().as_deref());
    let mode = match std::env::var("ASCEND_SIM_STREAM_MODE")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        None | Some("") | Some("threaded") => StreamMode::Threaded,
        Some("deterministic") => StreamMode::Deterministic,
        Some(other) => {
            eprintln!("ascend-sim: unknown ASCEND_SIM_STREAM_MODE={other}; using threaded");
            StreamMode::Threaded
        }
    };
    Config {
        devices: devices as u32,
        soc,
        soc_name,
        hbm_bytes: env_u64("ASCEND_SIM_HBM_BYTES", 1 << 30),
        host_bytes: env_u64("ASCEND_SIM_HOST_BYTES", 4 << 30),
        mode,
        call_ns: env_u64("ASCEND_SIM_CALL_NS", 0),
        cross_process_import: import_rule(),
        host: env_u32("ASCEND_SIM_HOST", 0),
        supernode: env_u32("ASCEND_SIM_SUPERNODE", 0),
    }
}

/// Charges the host cost of `copies` runtime copy submissions to the calling thread, as
/// configured by `ASCEND_SIM_CALL_NS`: a busy wait of that many nanoseconds per copy. It models
/// the real runtime's submission cost (HIXL publishes about 5.7 µs per descriptor from one
/// submitting thread on an A3, in its published benchmark table), so a benchmark can show the
/// submission-bound regime; the emulator's own copies cost what they cost on top. Off (0) by
/// default, and never turned on by the emulator itself.
pub(crate) fn charge_copy_calls(copies: usize) {
    let ns = config().call_ns;
    if ns == 0 || copies == 0 {
        return;
    }
    let cost = Duration::from_nanos(ns.saturating_mul(copies as u64));
    let t0 = Instant::now();
    while t0.elapsed() < cost {
        std::hint::spin_loop();
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration, read from the environment on first use.
pub(crate) fn config() -> &'static Config {
    CONFIG.get_or_init(read_config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soc_names() {
        let name = |v| {
            let (soc, n) = soc_from_env(v);
            (soc, n.to_str().unwrap().to_owned())
        };
        assert_eq!(name(None), (Soc::A3, "Ascend910_9391".into()));
        assert_eq!(name(Some(" a3 ")), (Soc::A3, "Ascend910_9391".into()));
        assert_eq!(name(Some("A2")), (Soc::A2, "Ascend910B1".into()));
        assert_eq!(name(Some("950")), (Soc::S950, "Ascend950".into()));
        for n in A3_NAMES {
            assert_eq!(name(n.to_str().ok()).0, Soc::A3);
        }
        for n in A2_NAMES {
            assert_eq!(name(n.to_str().ok()).0, Soc::A2);
        }
        assert_eq!(
            name(Some("Ascend950PR_X")),
            (Soc::S950, "Ascend950PR_X".into())
        );
        // Unknown names are the A3 default (with a warning), never a product of their own.
        assert_eq!(
            name(Some("Ascend910B9")),
            (Soc::A3, "Ascend910_9391".into())
        );
    }
}
