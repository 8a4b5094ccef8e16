//! The engine's view of a runtime's capabilities: ascend-mem's [`Capabilities`], HIXL's
//! client/server C API (HixlCS), and whether this engine's Fabric Mem mode can run.

use std::fmt;
use std::sync::Arc;

use ascend_mem::{Answer, CapRow, Capabilities, Feature, How, Missing, Runtime};

/// The HixlCS calls a client and a server need.
const HIXL_CS_SYMBOLS: [&str; 8] = [
    "HixlCSServerCreate",
    "HixlCSServerRegMem",
    "HixlCSServerListen",
    "HixlCSClientCreate",
    "HixlCSClientConnect",
    "HixlCSClientBatchPutAsync",
    "HixlCSClientBatchGetAsync",
    "HixlCSClientQueryCompleteStatus",
];

/// What a program may need of the runtime: one of ascend-mem's [`Feature`]s or one of the
/// engine's own.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Need {
    /// A feature of the memory layer.
    Mem(Feature),
    /// HIXL's client/server C API (`libcann_hixl.so`), for `ascend-cs`.
    HixlCs,
    /// This engine's Fabric Mem mode: VMM, the V2 share calls and a FABRIC export that works.
    FabricMem,
}

impl Need {
    /// Every need, memory features first.
    pub fn all() -> Vec<Need> {
        let mut all: Vec<Need> = Feature::ALL.into_iter().map(Need::Mem).collect();
        all.extend([Need::HixlCs, Need::FabricMem]);
        all
    }

    /// The short name (`fabric`, `symwin`, `hixlcs`, `fabricmem`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Need::Mem(f) => f.name(),
            Need::HixlCs => "hixlcs",
            Need::FabricMem => "fabricmem",
        }
    }

    /// The need of a short name (case-insensitive), if any.
    pub fn from_name(name: &str) -> Option<Need> {
        let lower = name.trim().to_ascii_lowercase();
        Need::all().into_iter().find(|n| n.name() == lower)
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The runtime's capabilities as the engine sees them ([`EngineCapabilities::probe`]).
#[derive(Clone, Debug)]
pub struct EngineCapabilities {
    mem: Arc<Capabilities>,
    hixl_cs: Answer<bool>,
    fabric_mem: Answer<bool>,
    aicpu: Answer<bool>,
}

impl EngineCapabilities {
    /// The capabilities of `rt` probed on device 0 ([`Runtime::capabilities`]), with the
    /// engine's own answers. The HixlCS library is opened to look at its symbols.
    pub fn probe(rt: &Runtime) -> EngineCapabilities {
        Self::with(rt, rt.capabilities())
    }

    /// As [`EngineCapabilities::probe`], on `device`.
    ///
    /// # Errors
    /// As [`Runtime::capabilities_on`]: a device the runtime does not have.
    pub fn probe_on(rt: &Runtime, device: i32) -> ascend_mem::Result<EngineCapabilities> {
        Ok(Self::with(rt, rt.capabilities_on(device)?))
    }

    fn with(rt: &Runtime, mem: Arc<Capabilities>) -> EngineCapabilities {
        let fabric_mem = fabric_mem(&mem);
        EngineCapabilities {
            hixl_cs: hixl_cs(rt),
            fabric_mem,
            aicpu: Answer {
                value: Some(false),
                how: How::ByDesign,
                detail: Some(
                    "this engine copies on the host path (HIXL's AICPU kernels are not used)"
                        .into(),
                ),
            },
            mem,
        }
    }

    /// The memory layer's answers.
    pub fn mem(&self) -> &Capabilities {
        &self.mem
    }

    /// Whether HixlCS is there (every call `ascend-cs` makes), with what is missing.
    pub fn hixl_cs(&self) -> &Answer<bool> {
        &self.hixl_cs
    }

    /// Whether this engine's Fabric Mem mode can run here.
    pub fn fabric_mem(&self) -> &Answer<bool> {
        &self.fabric_mem
    }

    /// Whether transfers can run on HIXL's AICPU path (never, with this engine: it says so).
    pub fn aicpu(&self) -> &Answer<bool> {
        &self.aicpu
    }

    /// Whether `need` can be relied on here.
    ///
    /// # Errors
    /// [`Missing`] saying why not and what to do.
    pub fn check(&self, need: Need) -> Result<(), Missing> {
        match need {
            Need::Mem(f) => self.mem.check(f),
            Need::HixlCs => refused(
                need,
                &self.hixl_cs,
                "install CANN 9.0.0 or newer with HIXL (libcann_hixl.so), or set ASCEND_HIXL_LIB",
            ),
            Need::FabricMem => refused(
                need,
                &self.fabric_mem,
                "run on an Atlas A3 whose driver exports FABRIC handles",
            ),
        }
    }

    /// The memory layer's rows, then the engine's.
    pub fn rows(&self) -> Vec<CapRow> {
        let mut rows = self.mem.rows();
        rows.push(CapRow::flag("hixlcs", &self.hixl_cs));
        rows.push(CapRow::flag("fabric mem engine", &self.fabric_mem));
        rows.push(CapRow::flag("aicpu transfer path", &self.aicpu));
        rows
    }
}

fn refused(need: Need, a: &Answer<bool>, fix: &str) -> Result<(), Missing> {
    let why = match (a.value, a.detail.as_deref()) {
        (Some(true), _) => return Ok(()),
        (Some(false), Some(d)) => d.to_string(),
        (Some(false), None) => format!("refused ({})", a.how),
        (None, Some(d)) => format!("unknown ({}): {d}", a.how),
        (None, None) => format!("unknown ({})", a.how),
    };
    Err(Missing {
        feature: need.name(),
        why,
        fix: fix.to_string(),
    })
}

/// The engine needs the VMM calls, the V2 share calls and a FABRIC export that works; the
/// answer is the probe's, unknown when the probe did not run (no device).
fn fabric_mem(mem: &Capabilities) -> Answer<bool> {
    let lacking: Vec<(Feature, String)> = [Feature::Vmm, Feature::ShareV2, Feature::Fabric]
        .into_iter()
        .filter_map(|f| {
            mem.check(f)
                .err()
                .map(|m| (f, format!("{}: {}", m.feature, m.why)))
        })
        .collect();
    let value = match lacking.as_slice() {
        [] => Some(true),
        [(Feature::Fabric, _)] if mem.fabric().value.is_none() => None,
        _ => Some(false),
    };
    let detail: Vec<&str> = lacking.iter().map(|(_, why)| why.as_str()).collect();
    Answer {
        value,
        how: mem.fabric().how.clone(),
        detail: (!detail.is_empty()).then(|| detail.join("; ").into_boxed_str()),
    }
}

fn hixl_cs(rt: &Runtime) -> Answer<bool> {
    match ascend_cs::table(rt) {
        Ok(t) => {
            let missing: Vec<&str> = HIXL_CS_SYMBOLS
                .into_iter()
                .filter(|s| !t.is_available(s))
                .collect();
            Answer {
                value: Some(missing.is_empty()),
                how: How::Symbols,
                detail: (!missing.is_empty())
                    .then(|| format!("the HIXL library lacks {}", missing.join(", ")).into()),
            }
        }
        Err(e) => Answer {
            value: Some(false),
            how: How::Symbols,
            detail: Some(format!("the HIXL library could not be opened: {e}").into()),
        },
    }
}
