//! [`RootInfo`] (the bootstrap bytes) and [`CommConfig`] (the `HcclCommConfig` builder).

use std::fmt;
use std::os::raw::c_char;
use std::time::Duration;

use hccl_sys::{HcclCommConfig, HcclRootInfo};

use super::table;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ffi::hcall;

/// The bootstrap blob of a communicator (`HcclRootInfo`, 4108 opaque bytes).
///
/// One rank makes it ([`RootInfo::generate`]); it travels to every other rank out of band
/// ([`RootInfo::to_bytes`], e.g. over `ascend_launch::Rendezvous::broadcast`, then
/// [`RootInfo::from_bytes`]) and every rank, the maker included, passes it unchanged to
/// [`Comm::init`](super::Comm::init).
#[derive(Clone, PartialEq, Eq)]
pub struct RootInfo {
    bytes: Box<[u8; RootInfo::LEN]>,
}

impl fmt::Debug for RootInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RootInfo")
            .field("len", &Self::LEN)
            .finish_non_exhaustive()
    }
}

impl RootInfo {
    /// The size of a root info (`HCCL_ROOT_INFO_BYTES`).
    pub const LEN: usize = hccl_sys::HCCL_ROOT_INFO_BYTES as usize;

    /// Makes a new root info on this rank (`HcclGetRootInfo`), with `dev` current. On the
    /// emulator this also starts the process's rendezvous listener.
    ///
    /// # Errors
    /// [`Error::Load`] when HCCL cannot be opened; an `HcclGetRootInfo` failure
    /// ([`Error::Hccl`]).
    #[doc(alias = "HcclGetRootInfo")]
    #[allow(unsafe_code)]
    pub fn generate(dev: &Device) -> Result<RootInfo> {
        let h = table::table(dev.runtime())?;
        dev.enter()?;
        let mut raw = HcclRootInfo::default();
        // SAFETY: `raw` is a writable root info; the call runs on the device just bound.
        unsafe { hcall!(h, dev.lib(), HcclGetRootInfo(&mut raw)) }?;
        let mut bytes = Box::new([0u8; Self::LEN]);
        for (d, s) in bytes.iter_mut().zip(raw.internal) {
            *d = s as u8;
        }
        Ok(RootInfo { bytes })
    }

    /// The bytes to send to the other ranks.
    pub fn to_bytes(&self) -> &[u8; RootInfo::LEN] {
        &self.bytes
    }

    /// A root info received from the rank that generated it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `bytes` is exactly [`RootInfo::LEN`] long. (The
    /// content is checked by HCCL at [`Comm::init`](super::Comm::init).)
    pub fn from_bytes(bytes: &[u8]) -> Result<RootInfo> {
        let bytes: [u8; Self::LEN] = bytes.try_into().map_err(|_| Error::InvalidArgument {
            api: "RootInfo::from_bytes",
            what: "length in bytes (an HCCL root info is 4108)",
            value: bytes.len() as i128,
        })?;
        Ok(RootInfo {
            bytes: Box::new(bytes),
        })
    }

    /// The C struct.
    pub fn to_raw(&self) -> HcclRootInfo {
        let mut raw = HcclRootInfo::default();
        for (d, s) in raw.internal.iter_mut().zip(self.bytes.iter()) {
            *d = *s as c_char;
        }
        raw
    }
}

/// `hcclDeterministic`: whether reductions must give the same bits run to run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Deterministic {
    /// 0: off.
    Off,
    /// 1: on.
    On,
    /// 2: on, and order-preserving.
    OrderPreserving,
}

/// `hcclOpExpansionMode` of the config (0..=6; **not** the numbering of `HcclOpExpansionMode`
/// in `hccl_comm.h`). Symmetric windows need AI CPU expansion: on A3 [`OpExpansion::Default`]
/// or [`OpExpansion::AiCpu`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum OpExpansion {
    /// 0: the product's default.
    Default,
    /// 1: host.
    Host,
    /// 2: AI CPU.
    AiCpu,
    /// 3: AIV.
    Aiv,
    /// 4: AIV only.
    AivOnly,
    /// 5: CCU MS.
    CcuMs,
    /// 6: CCU scheduling.
    CcuSched,
}

impl OpExpansion {
    /// The config value.
    pub fn raw(self) -> u32 {
        match self {
            OpExpansion::Default => 0,
            OpExpansion::Host => 1,
            OpExpansion::AiCpu => 2,
            OpExpansion::Aiv => 3,
            OpExpansion::AivOnly => 4,
            OpExpansion::CcuMs => 5,
            OpExpansion::CcuSched => 6,
        }
    }
}

/// Builder of an `HcclCommConfig` in the version-10 layout (2240 bytes, read by version-10 and
/// -11 libraries), starting from what `HcclCommConfigInit` writes: every field left unset
/// keeps the library's default.
///
/// ```
/// use std::time::Duration;
/// use ascend_mem::hccl::CommConfig;
/// let cfg = CommConfig::new()
///     .name("tp0")
///     .buffer_size_mb(64)
///     .sym_window_max_per_rank_gb(4)
///     .exec_timeout(Duration::from_secs(30));
/// let raw = cfg.to_raw().unwrap();
/// assert_eq!(raw.hcclBufferSize, 64);
/// assert_eq!(raw.hcclSymWinMaxMemSizePerRank, 4);
/// assert_eq!(raw.hcclExecTimeOut, 30);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommConfig {
    buffer_size_mb: Option<u32>,
    deterministic: Option<Deterministic>,
    name: Option<String>,
    op_expansion: Option<OpExpansion>,
    world_rank_id: Option<u32>,
    job_id: Option<u64>,
    graph_zero_copy: Option<bool>,
    exec_timeout: Option<Duration>,
    algo: Option<String>,
    buffer_name: Option<String>,
    qos: Option<u32>,
    sym_window_max_gb: Option<u64>,
}

/// `hcclSymWinMaxMemSizePerRank` when the config leaves it unset (GB).
pub const DEFAULT_SYM_WINDOW_MAX_GB: u64 = hccl_sys::HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE as u64;

fn put_str(dst: &mut [c_char], s: &str, what: &'static str) -> Result<()> {
    if s.len() >= dst.len() || s.bytes().any(|b| b == 0) {
        return Err(Error::InvalidArgument {
            api: "HcclCommConfig",
            what,
            value: s.len() as i128,
        });
    }
    for (d, b) in dst.iter_mut().zip(s.bytes()) {
        *d = b as c_char;
    }
    dst[s.len()] = 0;
    Ok(())
}

impl CommConfig {
    /// Every field unset (the library's defaults).
    pub fn new() -> CommConfig {
        CommConfig::default()
    }

    /// `hcclBufferSize`: the size in MB of each of the communicator's staging buffers (at
    /// least 1; unset: `HCCL_BUFFSIZE` or 200).
    pub fn buffer_size_mb(mut self, mb: u32) -> Self {
        self.buffer_size_mb = Some(mb);
        self
    }

    /// `hcclDeterministic`.
    pub fn deterministic(mut self, d: Deterministic) -> Self {
        self.deterministic = Some(d);
        self
    }

    /// `hcclCommName` (at most 127 bytes, no NUL; unset: a generated name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// `hcclOpExpansionMode`.
    pub fn op_expansion(mut self, mode: OpExpansion) -> Self {
        self.op_expansion = Some(mode);
        self
    }

    /// `hcclWorldRankID`.
    pub fn world_rank_id(mut self, id: u32) -> Self {
        self.world_rank_id = Some(id);
        self
    }

    /// `hcclJobID`.
    pub fn job_id(mut self, id: u64) -> Self {
        self.job_id = Some(id);
        self
    }

    /// `aclGraphZeroCopyEnable`.
    pub fn graph_zero_copy(mut self, on: bool) -> Self {
        self.graph_zero_copy = Some(on);
        self
    }

    /// `hcclExecTimeOut`: how long a collective (and the init rendezvous) may wait for peers,
    /// in whole seconds (rounded up; zero means the library's default).
    pub fn exec_timeout(mut self, t: Duration) -> Self {
        self.exec_timeout = Some(t);
        self
    }

    /// `hcclAlgo` (at most 1599 bytes).
    pub fn algo(mut self, algo: impl Into<String>) -> Self {
        self.algo = Some(algo.into());
        self
    }

    /// `hcclBufferName` (at most 127 bytes).
    pub fn buffer_name(mut self, name: impl Into<String>) -> Self {
        self.buffer_name = Some(name.into());
        self
    }

    /// `hcclQos` (0..=7).
    pub fn qos(mut self, qos: u32) -> Self {
        self.qos = Some(qos);
        self
    }

    /// `hcclSymWinMaxMemSizePerRank`: the most memory, in GB, one rank may register as
    /// symmetric windows; each communicator reserves `rank_size ×` this much VA for its
    /// symmetric heap (default 16).
    pub fn sym_window_max_per_rank_gb(mut self, gb: u64) -> Self {
        self.sym_window_max_gb = Some(gb);
        self
    }

    /// The symmetric-window maximum per rank in bytes (the default when unset).
    pub fn sym_window_max_per_rank_bytes(&self) -> usize {
        let gb = self.sym_window_max_gb.unwrap_or(DEFAULT_SYM_WINDOW_MAX_GB);
        usize::try_from(gb.saturating_mul(1 << 30)).unwrap_or(usize::MAX)
    }

    /// The exec timeout set, if any.
    pub fn exec_timeout_value(&self) -> Option<Duration> {
        self.exec_timeout
    }

    /// The C struct: [`hccl_sys::comm_config_init`] over a zeroed struct (header size 2240,
    /// version 10), then every field set here.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a buffer size of 0, a string too long for its field or
    /// holding a NUL, an exec timeout above `i32::MAX` seconds, a QoS above 7, or a
    /// symmetric-window maximum of 0.
    pub fn to_raw(&self) -> Result<HcclCommConfig> {
        let bad = |what: &'static str, value: i128| Error::InvalidArgument {
            api: "HcclCommConfig",
            what,
            value,
        };
        let mut c = HcclCommConfig::default();
        hccl_sys::comm_config_init(&mut c);
        if let Some(mb) = self.buffer_size_mb {
            if mb == 0 {
                return Err(bad("hcclBufferSize (MB, at least 1)", 0));
            }
            c.hcclBufferSize = mb;
        }
        if let Some(d) = self.deterministic {
            c.hcclDeterministic = match d {
                Deterministic::Off => 0,
                Deterministic::On => 1,
                Deterministic::OrderPreserving => 2,
            };
        }
        if let Some(n) = &self.name {
            put_str(
                &mut c.hcclCommName,
                n,
                "hcclCommName length (at most 127 bytes, no NUL)",
            )?;
        }
        if let Some(m) = self.op_expansion {
            c.hcclOpExpansionMode = m.raw();
        }
        if let Some(id) = self.world_rank_id {
            c.hcclWorldRankID = id;
        }
        if let Some(id) = self.job_id {
            c.hcclJobID = id;
        }
        if let Some(z) = self.graph_zero_copy {
            c.aclGraphZeroCopyEnable = u8::from(z);
        }
        if let Some(t) = self.exec_timeout {
            let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
            c.hcclExecTimeOut = i32::try_from(secs)
                .map_err(|_| bad("hcclExecTimeOut (seconds)", i128::from(secs)))?;
        }
        if let Some(a) = &self.algo {
            put_str(
                &mut c.hcclAlgo,
                a,
                "hcclAlgo length (at most 1599 bytes, no NUL)",
            )?;
        }
        if let Some(n) = &self.buffer_name {
            put_str(
                &mut c.hcclBufferName,
                n,
                "hcclBufferName length (at most 127 bytes, no NUL)",
            )?;
        }
        if let Some(q) = self.qos {
            if q > 7 {
                return Err(bad("hcclQos (0..=7)", i128::from(q)));
            }
            c.hcclQos = q;
        }
        if let Some(gb) = self.sym_window_max_gb {
            if gb == 0 {
                return Err(bad("hcclSymWinMaxMemSizePerRank (GB, at least 1)", 0));
            }
            c.hcclSymWinMaxMemSizePerRank = gb;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_layout_and_checks() {
        let raw = CommConfig::new().to_raw().unwrap();
        let mut want = HcclCommConfig::default();
        hccl_sys::comm_config_init(&mut want);
        assert_eq!(raw, want, "an empty builder is HcclCommConfigInit");
        assert_eq!(std::mem::size_of::<HcclCommConfig>(), 2240);
        let raw = CommConfig::new()
            .name("abc")
            .op_expansion(OpExpansion::AiCpu)
            .deterministic(Deterministic::On)
            .exec_timeout(Duration::from_millis(1500))
            .qos(3)
            .to_raw()
            .unwrap();
        assert_eq!(
            raw.hcclCommName[..4],
            [b'a' as c_char, b'b' as _, b'c' as _, 0]
        );
        assert_eq!(raw.hcclOpExpansionMode, 2);
        assert_eq!(raw.hcclDeterministic, 1);
        assert_eq!(raw.hcclExecTimeOut, 2, "rounded up to whole seconds");
        assert_eq!(raw.hcclQos, 3);
        assert!(CommConfig::new().buffer_size_mb(0).to_raw().is_err());
        assert!(CommConfig::new().name("x".repeat(128)).to_raw().is_err());
        assert!(CommConfig::new().name("a\0b").to_raw().is_err());
        assert!(CommConfig::new().qos(8).to_raw().is_err());
        assert!(CommConfig::new()
            .sym_window_max_per_rank_gb(0)
            .to_raw()
            .is_err());
        assert_eq!(CommConfig::new().sym_window_max_per_rank_bytes(), 16 << 30);
    }

    #[test]
    fn root_info_bytes() {
        let e = RootInfo::from_bytes(&[0u8; 10]).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { value: 10, .. }), "{e}");
        let r = RootInfo::from_bytes(&[7u8; RootInfo::LEN]).unwrap();
        assert_eq!(r.to_bytes()[..], [7u8; RootInfo::LEN][..]);
        assert_eq!(r.to_raw().internal[0], 7);
    }
}
