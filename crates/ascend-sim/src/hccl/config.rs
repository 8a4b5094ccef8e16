//! `HcclCommConfig` read the way the library reads it, plus environment
//! defaults.

use std::time::Duration;

use hccl_sys::*;

use super::error::{herr, HRes};

/// The settings of one communicator.
#[derive(Debug, Clone)]
pub(crate) struct CommCfg {
    /// Bytes of each of the two HCCL buffers (in and out).
    pub buffer_bytes: usize,
    pub deterministic: u32,
    /// Empty: a generated name.
    pub name: String,
    /// The config field's numbering (0 default, 1 host, 2 AI CPU, 3 AIV, ...).
    pub op_expansion: u32,
    pub world_rank: u32,
    pub job_id: u64,
    /// Collective and rendezvous timeout.
    pub timeout: Duration,
    /// Whether the timeout came from the config (`hcclExecTimeOut`).
    pub timeout_from_config: bool,
    /// GB of VA per rank in the symmetric heap.
    pub symwin_gb: u64,
}

fn env_num(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<u64>() {
        Ok(x) => Some(x),
        Err(_) => {
            eprintln!("ascend-sim: {name}={v} is not a number; ignored");
            None
        }
    }
}

/// `ASCEND_SIM_HCCL_TIMEOUT_MS` (overrides every HCCL timeout when set).
pub(crate) fn timeout_override() -> Option<Duration> {
    env_num("ASCEND_SIM_HCCL_TIMEOUT_MS")
        .filter(|x| *x > 0)
        .map(Duration::from_millis)
}

/// Default collective timeout: `HCCL_EXEC_TIMEOUT` seconds, else 120 s.
fn default_exec_timeout() -> Duration {
    Duration::from_secs(
        env_num("HCCL_EXEC_TIMEOUT")
            .filter(|x| *x > 0)
            .unwrap_or(120),
    )
}

/// Default rendezvous timeout: `HCCL_CONNECT_TIMEOUT` seconds, else 120 s.
pub(crate) fn default_connect_timeout() -> Duration {
    timeout_override().unwrap_or_else(|| {
        Duration::from_secs(
            env_num("HCCL_CONNECT_TIMEOUT")
                .filter(|x| *x > 0)
                .unwrap_or(120),
        )
    })
}

/// Default HCCL buffer size: `HCCL_BUFFSIZE` MB, else 200 MB.
fn default_buffer_mb() -> u64 {
    env_num("HCCL_BUFFSIZE")
        .filter(|x| *x >= 1)
        .unwrap_or(u64::from(HCCL_COMM_DEFAULT_BUFFSIZE))
}

impl CommCfg {
    /// The settings without a config struct (environment defaults).
    pub(crate) fn defaults() -> CommCfg {
        CommCfg {
            buffer_bytes: (default_buffer_mb() << 20) as usize,
            deterministic: HCCL_COMM_DEFAULT_DETERMINISTIC,
            name: String::new(),
            op_expansion: HCCL_COMM_DEFAULT_OP_EXPANSION_MODE,
            world_rank: 0,
            job_id: 0,
            timeout: timeout_override().unwrap_or_else(default_exec_timeout),
            timeout_from_config: false,
            symwin_gb: u64::from(HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE),
        }
    }

    /// Reads a caller's `HcclCommConfig`.
    ///
    /// # Safety
    /// `p` is non-null and readable for the `size` its header declares (at least 8 bytes).
    pub(crate) unsafe fn read(p: *const HcclCommConfig) -> HRes<CommCfg> {
        // SAFETY: the header's first field is readable per the contract.
        let size = unsafe { p.cast::<u64>().read_unaligned() } as usize;
        let ours = std::mem::size_of::<HcclCommConfig>();
        if size < HCCL_COMM_CONFIG_INFO_BYTES as usize {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "config header size {size} is smaller than the {HCCL_COMM_CONFIG_INFO_BYTES}-byte header"
                ),
            ));
        }
        // Our copy starts as HcclCommConfigInit leaves it, then takes min(size, ours) bytes.
        let mut c = HcclCommConfig::default();
        comm_config_init(&mut c);
        let n = size.min(ours);
        // SAFETY: the caller's struct is readable for `size >= n` bytes; `c` is a plain C
        // struct of `ours >= n` bytes, every bit pattern valid.
        unsafe {
            std::ptr::copy_nonoverlapping(
                p.cast::<u8>(),
                (&mut c as *mut HcclCommConfig).cast::<u8>(),
                n,
            )
        };
        let hdr: Vec<u8> = c.reserved.iter().map(|b| *b as u8).collect();
        let magic = u32::from_ne_bytes(hdr[8..12].try_into().unwrap_or([0; 4]));
        let version = u32::from_ne_bytes(hdr[12..16].try_into().unwrap_or([0; 4]));
        if magic != HCCL_COMM_CONFIG_MAGIC_WORD {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "config magic word {magic:#x} is not {HCCL_COMM_CONFIG_MAGIC_WORD:#x} (HcclCommConfigInit not called?)"
                ),
            ));
        }
        let mut cfg = CommCfg::defaults();
        cfg.apply_early(&c, version)?;
        cfg.apply_late(&c, version)?;
        Ok(cfg)
    }

    /// The fields of config versions 1 to 6: buffer size, determinism, name, op expansion,
    /// world rank and job id.
    fn apply_early(&mut self, c: &HcclCommConfig, version: u32) -> HRes {
        if version >= 1 {
            if c.hcclBufferSize != HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET {
                if c.hcclBufferSize < 1 {
                    return Err(herr(
                        HCCL_E_PARA,
                        format!(
                            "hcclBufferSize {} MB is below the 1 MB minimum",
                            c.hcclBufferSize
                        ),
                    ));
                }
                self.buffer_bytes = (u64::from(c.hcclBufferSize) << 20) as usize;
            }
            if c.hcclDeterministic != HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET {
                if c.hcclDeterministic > 2 {
                    return Err(herr(
                        HCCL_E_PARA,
                        format!(
                            "hcclDeterministic {} is not 0 (off), 1 (on) or 2 (order-preserving)",
                            c.hcclDeterministic
                        ),
                    ));
                }
                self.deterministic = c.hcclDeterministic;
            }
        }
        if version >= 2 {
            let raw: Vec<u8> = c.hcclCommName.iter().map(|b| *b as u8).collect();
            let Some(end) = raw.iter().position(|b| *b == 0) else {
                return Err(herr(
                    HCCL_E_PARA,
                    "hcclCommName is not NUL-terminated within its 128 bytes",
                ));
            };
            self.name = String::from_utf8_lossy(&raw[..end]).into_owned();
        }
        if version >= 4 {
            if c.hcclOpExpansionMode > 6 {
                return Err(herr(
                    HCCL_E_PARA,
                    format!(
                        "hcclOpExpansionMode {} is outside 0..=6",
                        c.hcclOpExpansionMode
                    ),
                ));
            }
            self.op_expansion = c.hcclOpExpansionMode;
        }
        if version >= 6 {
            self.world_rank = c.hcclWorldRankID;
            self.job_id = c.hcclJobID;
        }
        Ok(())
    }

    /// The fields of config versions 7 to 10: graph zero-copy, exec timeout, QoS and the
    /// symmetric-window maximum.
    fn apply_late(&mut self, c: &HcclCommConfig, version: u32) -> HRes {
        if version >= 7 && c.aclGraphZeroCopyEnable > 1 {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "aclGraphZeroCopyEnable {} is neither 0 nor 1",
                    c.aclGraphZeroCopyEnable
                ),
            ));
        }
        if version >= 8 && c.hcclExecTimeOut != HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET {
            if c.hcclExecTimeOut < 0 {
                return Err(herr(
                    HCCL_E_PARA,
                    format!(
                        "hcclExecTimeOut {} is negative (and not -1, not set)",
                        c.hcclExecTimeOut
                    ),
                ));
            }
            if c.hcclExecTimeOut > 0 && timeout_override().is_none() {
                self.timeout = Duration::from_secs(c.hcclExecTimeOut as u64);
                self.timeout_from_config = true;
            }
        }
        if version >= 10 {
            if c.hcclQos != HCCL_COMM_QOS_CONFIG_NOT_SET && c.hcclQos > 7 {
                return Err(herr(
                    HCCL_E_PARA,
                    format!("hcclQos {} is outside 0..=7", c.hcclQos),
                ));
            }
            if c.hcclSymWinMaxMemSizePerRank == 0 {
                return Err(herr(HCCL_E_PARA, "hcclSymWinMaxMemSizePerRank is 0 GB"));
            }
            if c.hcclSymWinMaxMemSizePerRank > 1024 {
                return Err(herr(
                    HCCL_E_PARA,
                    format!(
                        "hcclSymWinMaxMemSizePerRank {} GB exceeds the emulator's 1024 GB limit",
                        c.hcclSymWinMaxMemSizePerRank
                    ),
                ));
            }
            self.symwin_gb = c.hcclSymWinMaxMemSizePerRank;
        }
        Ok(())
    }
}
