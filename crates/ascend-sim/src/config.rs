//! The emulator's configuration: `ASCEND_SIM_DEVICES`, `ASCEND_SIM_SOC`,
//! `ASCEND_SIM_HBM_BYTES`, `ASCEND_SIM_HOST_BYTES` and `ASCEND_SIM_STREAM_MODE`, read once.

use std::sync::OnceLock;

/// Product emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Soc {
    A2,
    A3,
    S950,
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
    pub hbm_bytes: u64,
    pub host_bytes: u64,
    pub mode: StreamMode,
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

fn read_config() -> Config {
    let mut devices = env_u64("ASCEND_SIM_DEVICES", 16);
    if devices == 0 || devices > u64::from(MAX_DEVICES) {
        eprintln!("ascend-sim: ASCEND_SIM_DEVICES={devices} out of 1..={MAX_DEVICES}; using 16");
        devices = 16;
    }
    let soc = match std::env::var("ASCEND_SIM_SOC")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        None | Some("") | Some("A3") | Some("a3") => Soc::A3,
        Some("A2") | Some("a2") => Soc::A2,
        Some("950") => Soc::S950,
        Some(other) => {
            eprintln!("ascend-sim: unknown ASCEND_SIM_SOC={other}; using A3");
            Soc::A3
        }
    };
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
        hbm_bytes: env_u64("ASCEND_SIM_HBM_BYTES", 1 << 30),
        host_bytes: env_u64("ASCEND_SIM_HOST_BYTES", 4 << 30),
        mode,
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration, read from the environment on first use.
pub(crate) fn config() -> &'static Config {
    CONFIG.get_or_init(read_config)
}
