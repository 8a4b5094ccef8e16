//! What the runtime behind a [`Runtime`] can do: [`Capabilities`], found once per runtime and
//! device and kept for the process.
//!
//! Each answer says how it was found ([`How`]): the symbols the library exports, a query the
//! runtime answers (its version, the device count, the SoC name), or a probe: a small real
//! use of the feature on the device (a FABRIC export of one granule of HBM, an export, import
//! and mapping of one granule of host DRAM, a one-copy batch each way between host and device,
//! a value written into pinned host memory), whose resources are freed before the probe
//! returns, and whose streams wait a bounded time. Probes leave nothing behind but a context on
//! the probed device (device 0 for [`Runtime::capabilities`]). No probe imports device memory
//! in the process that exported it: CANN documents that import as cross-process only, so
//! [`Capabilities::fabric`] answers for the export, and the acceptance suite imports in a
//! second process.
//!
//! [`Capabilities::check`] turns an answer into what a program needs to know before it relies
//! on a [`Feature`]: `Ok`, or a [`Missing`] naming the feature, why, and how to fix it.

mod probe;
mod soc;
mod symbols;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::error::Result;
use crate::runtime::{Backend, Runtime};
use crate::spec::MemKind;

pub use soc::{Soc, SocFamily};
pub use symbols::{GroupAnswer, SymbolGroup};

/// How an answer of [`Capabilities`] was found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum How {
    /// From the symbols the library exports (nothing was called).
    Symbols,
    /// The runtime was asked (a version, a count, a name).
    Queried,
    /// The feature was used once on the device and the outcome observed.
    Probed,
    /// Not found out, and why (no device, a symbol the probe needs is missing, ...).
    NotProbed(Box<str>),
    /// Fixed by what this library (or one built on it) does, whatever the runtime offers.
    ByDesign,
}

impl fmt::Display for How {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            How::Symbols => f.write_str("symbols"),
            How::Queried => f.write_str("queried"),
            How::Probed => f.write_str("probed"),
            How::NotProbed(why) => write!(f, "not probed: {why}"),
            How::ByDesign => f.write_str("by design"),
        }
    }
}

/// One answer: the value when it is known, how it was found, and what the runtime said when
/// that is worth showing (the error of a refused probe, the symbol that is missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer<T> {
    /// The value; `None` when not known.
    pub value: Option<T>,
    /// How it was found.
    pub how: How,
    /// What the runtime said, when it refused or failed.
    pub detail: Option<Box<str>>,
}

impl<T> Answer<T> {
    fn known(value: T, how: How) -> Answer<T> {
        Answer {
            value: Some(value),
            how,
            detail: None,
        }
    }

    fn with_detail(mut self, detail: impl fmt::Display) -> Answer<T> {
        self.detail = Some(detail.to_string().into_boxed_str());
        self
    }

    /// Adds `note` to the detail (after what the runtime said, if it said anything).
    fn with_note(mut self, note: &str) -> Answer<T> {
        self.detail = Some(match self.detail.take() {
            Some(d) => format!("{d}; {note}").into_boxed_str(),
            None => note.into(),
        });
        self
    }

    fn not_probed(why: impl Into<Box<str>>) -> Answer<T> {
        Answer {
            value: None,
            how: How::NotProbed(why.into()),
            detail: None,
        }
    }
}

bitflags::bitflags! {
    /// Copy directions a runtime's batched copies (`aclrtMemcpyBatch`) accept.
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
    pub struct BatchDirections: u8 {
        /// Host memory to device memory.
        const HOST_TO_DEVICE = 1;
        /// Device memory to host memory.
        const DEVICE_TO_HOST = 2;
        /// Device memory to device memory.
        const DEVICE_TO_DEVICE = 4;
    }
}

/// What the runtime behind a [`Runtime`] offers, as found on one device
/// ([`Runtime::capabilities`]). The probed answers are about that device.
#[derive(Clone, Debug)]
pub struct Capabilities {
    pub(crate) backend: Backend,
    pub(crate) library: String,
    pub(crate) runtime_version: Answer<String>,
    pub(crate) groups: Vec<GroupAnswer>,
    pub(crate) device_count: Answer<u32>,
    pub(crate) device: Option<i32>,
    pub(crate) soc: Answer<Soc>,
    pub(crate) fabric: Answer<bool>,
    pub(crate) host_import: Answer<MemKind>,
    pub(crate) batch: Answer<BatchDirections>,
    pub(crate) host_values: Answer<bool>,
}

impl Capabilities {
    /// Which implementation serves the runtime (the emulator says so here).
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The library file(s) the runtime was opened from, or the in-process emulator.
    pub fn library(&self) -> &str {
        &self.library
    }

    /// The version of the CANN runtime package (`aclsysGetVersionStr("runtime")`).
    pub fn runtime_version(&self) -> &Answer<String> {
        &self.runtime_version
    }

    /// Every optional symbol group, present or not, with the symbols missing.
    pub fn groups(&self) -> &[GroupAnswer] {
        &self.groups
    }

    /// The answer for one symbol group.
    pub fn group(&self, group: SymbolGroup) -> &GroupAnswer {
        self.groups
            .iter()
            .find(|g| g.group == group)
            .expect("every group is answered")
    }

    /// The number of devices (`aclrtGetDeviceCount`).
    pub fn device_count(&self) -> Option<u32> {
        self.device_count.value
    }

    /// The device count's answer.
    pub fn device_count_answer(&self) -> &Answer<u32> {
        &self.device_count
    }

    /// The device the probes ran on, if any did.
    pub fn probed_device(&self) -> Option<i32> {
        self.device
    }

    /// The SoC (`aclrtGetSocName`) and its family.
    pub fn soc(&self) -> &Answer<Soc> {
        &self.soc
    }

    /// Whether FABRIC export of device memory works on the device (one granule of HBM
    /// exported as a FABRIC handle). Importing is not tried here (CANN imports in another
    /// process than the exporter); a refused export means no FABRIC sharing at all.
    pub fn fabric(&self) -> &Answer<bool> {
        &self.fabric
    }

    /// What an imported FABRIC handle of host DRAM reports as its memory: [`MemKind::Host`]
    /// lets copies to it go in host-device batches; [`MemKind::Device`] means they cannot.
    pub fn host_import_location(&self) -> &Answer<MemKind> {
        &self.host_import
    }

    /// The directions a one-copy `aclrtMemcpyBatch` was accepted in.
    pub fn batch_directions(&self) -> &Answer<BatchDirections> {
        &self.batch
    }

    /// Whether `aclrtValueWrite` into `aclrtMallocHost` memory reaches the host.
    pub fn host_value_write(&self) -> &Answer<bool> {
        &self.host_values
    }
}

/// A feature a program may rely on, for [`Capabilities::check`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Feature {
    /// Reserved VA, physical allocations and mappings.
    Vmm,
    /// The reservation outside the unified cache (`aclrtReserveMemAddressNoUCMemory`), which
    /// HIXL's Fabric Mem engine uses on A3.
    NoUc,
    /// `aclrtMemRetainAllocationHandle` (registering memory someone else mapped).
    RetainAllocation,
    /// The V2 share-handle calls (FABRIC handles between processes and hosts).
    ShareV2,
    /// Batched host-device copies (`aclrtMemcpyBatchAsync`; without them copies go one call
    /// each).
    BatchCopy,
    /// Stream-ordered values (`aclrtValueWrite`, `aclrtValueWait`).
    StreamValues,
    /// Values written by a stream into pinned host memory (the engine's completion flags).
    HostValueWrite,
    /// HCCL communicators and collectives.
    Hccl,
    /// HCCL symmetric windows.
    SymWindows,
    /// Host-side peer pointers into symmetric windows (one-sided put, get and signal).
    PeerPointers,
    /// FABRIC handles of device memory (the export probed; imports happen in other processes).
    Fabric,
}

impl Feature {
    /// Every feature, in the order [`Feature::name`] lists them.
    pub const ALL: [Feature; 11] = [
        Feature::Vmm,
        Feature::NoUc,
        Feature::RetainAllocation,
        Feature::ShareV2,
        Feature::BatchCopy,
        Feature::StreamValues,
        Feature::HostValueWrite,
        Feature::Hccl,
        Feature::SymWindows,
        Feature::PeerPointers,
        Feature::Fabric,
    ];

    /// The feature's short name (what [`Feature::from_name`] reads).
    pub fn name(self) -> &'static str {
        match self {
            Feature::Vmm => "vmm",
            Feature::NoUc => "nouc",
            Feature::RetainAllocation => "retain",
            Feature::ShareV2 => "share-v2",
            Feature::BatchCopy => "batch",
            Feature::StreamValues => "values",
            Feature::HostValueWrite => "host-values",
            Feature::Hccl => "hccl",
            Feature::SymWindows => "symwin",
            Feature::PeerPointers => "peer-pointers",
            Feature::Fabric => "fabric",
        }
    }

    /// The feature of a short name (case-insensitive), if any.
    pub fn from_name(name: &str) -> Option<Feature> {
        let name = name.trim().to_ascii_lowercase();
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A feature the runtime lacks: its name, why, and how to get it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{feature} is not available: {why} (fix: {fix})")]
pub struct Missing {
    /// The feature's short name ([`Feature::name`], or a name of a crate built on this one).
    pub feature: &'static str,
    /// What is missing or refused.
    pub why: String,
    /// What to do about it.
    pub fix: String,
}

/// One line of a capability table: what, the value, and how it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapRow {
    /// What the row is about (`runtime version`, `group vmm`, `fabric export`, ...).
    pub name: String,
    /// The value as text (`yes`, `no`, `unknown`, a version, a name).
    pub value: String,
    /// How it was found ([`How`] as text), with the runtime's words when it refused.
    pub how: String,
}

impl CapRow {
    /// A row from an answer, the value shown by `show`.
    pub fn of<T>(name: impl Into<String>, a: &Answer<T>, show: impl Fn(&T) -> String) -> CapRow {
        // A table line: a many-line message (a load error lists every path) shows its first.
        let how = match a.detail.as_deref().map(|d| d.lines().next().unwrap_or("")) {
            Some(d) => format!("{} ({d})", a.how),
            None => a.how.to_string(),
        };
        CapRow {
            name: name.into(),
            value: a.value.as_ref().map_or_else(|| "unknown".into(), show),
            how,
        }
    }
}

impl CapRow {
    /// A row from a yes-or-no answer.
    pub fn flag(name: impl Into<String>, a: &Answer<bool>) -> CapRow {
        CapRow::of(name, a, |b| if *b { "yes" } else { "no" }.to_string())
    }
}

impl Capabilities {
    /// Whether `feature` can be relied on here; a [`Missing`] saying why not and what to do.
    ///
    /// # Errors
    /// [`Missing`] when a symbol the feature needs is absent, a probe was refused, or the
    /// product does not have it.
    pub fn check(&self, feature: Feature) -> std::result::Result<(), Missing> {
        match feature {
            Feature::Vmm => self.need_group(feature, SymbolGroup::Vmm),
            Feature::NoUc => {
                self.need_group(feature, SymbolGroup::NoUc)?;
                self.need_family(feature, &[SocFamily::A3])
            }
            Feature::RetainAllocation => self.need_group(feature, SymbolGroup::Retain),
            Feature::ShareV2 => self.need_group(feature, SymbolGroup::ShareV2),
            Feature::BatchCopy => self.need_group(feature, SymbolGroup::BatchCopy),
            Feature::StreamValues => self.need_group(feature, SymbolGroup::StreamValues),
            Feature::HostValueWrite => {
                self.need_group(feature, SymbolGroup::StreamValues)?;
                need_probe(
                    feature,
                    &self.host_values,
                    "aclrtValueWrite into pinned host memory",
                )
            }
            Feature::Hccl => self.need_group(feature, SymbolGroup::Hccl),
            Feature::SymWindows => {
                self.need_group(feature, SymbolGroup::SymWindows)?;
                self.need_family(feature, &[SocFamily::A3, SocFamily::Ascend950])
            }
            Feature::PeerPointers => {
                self.check(Feature::SymWindows)?;
                self.need_group(feature, SymbolGroup::PeerPointers)
            }
            Feature::Fabric => {
                self.need_group(feature, SymbolGroup::ShareV2)?;
                need_probe(feature, &self.fabric, "FABRIC export of HBM")
            }
        }
    }

    fn need_group(&self, f: Feature, g: SymbolGroup) -> std::result::Result<(), Missing> {
        let a = self.group(g);
        if a.present() {
            return Ok(());
        }
        let why = match &a.unavailable {
            Some(e) => format!("{} could not be opened: {e}", g.library()),
            None => format!("{} lacks {}", g.library(), a.missing.join(", ")),
        };
        Err(Missing {
            feature: f.name(),
            why,
            fix: format!("use a CANN with {} ({}+)", g.name(), g.since()),
        })
    }

    fn need_family(&self, f: Feature, families: &[SocFamily]) -> std::result::Result<(), Missing> {
        match &self.soc.value {
            Some(soc) if families.contains(&soc.family) => Ok(()),
            Some(soc) => Err(Missing {
                feature: f.name(),
                why: format!("{} ({}) does not have it", soc.name, soc.family),
                fix: format!("run on {}", list(families)),
            }),
            None => Err(Missing {
                feature: f.name(),
                why: "the SoC name is unknown (aclrtGetSocName)".into(),
                fix: format!("run on {} with a CANN that names its SoC", list(families)),
            }),
        }
    }
}

fn list(families: &[SocFamily]) -> String {
    families
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(" or ")
}

fn need_probe(f: Feature, a: &Answer<bool>, what: &str) -> std::result::Result<(), Missing> {
    match (a.value, &a.how) {
        (Some(true), _) => Ok(()),
        (Some(false), _) => Err(Missing {
            feature: f.name(),
            why: format!(
                "{what} was refused: {}",
                a.detail.as_deref().unwrap_or("no reason given")
            ),
            fix: "check the driver, firmware and product (ascend-doctor shows the rest)".into(),
        }),
        (None, how) => Err(Missing {
            feature: f.name(),
            why: format!("{what}: {how}"),
            fix: "make a device visible (ASCEND_RT_VISIBLE_DEVICES) and ask again".into(),
        }),
    }
}

impl Capabilities {
    /// Every answer as a row of a table, in a fixed order: the runtime, the symbol groups,
    /// the devices, the probes.
    pub fn rows(&self) -> Vec<CapRow> {
        let mut rows = vec![
            CapRow {
                name: "backend".into(),
                value: self.backend.to_string(),
                how: if self.backend.is_emulator() {
                    "emulated: no NPU".into()
                } else {
                    "loaded".into()
                },
            },
            CapRow::of("runtime version", &self.runtime_version, String::clone),
        ];
        rows.extend(self.groups.iter().map(GroupAnswer::row));
        rows.push(CapRow::of(
            "device count",
            &self.device_count,
            u32::to_string,
        ));
        rows.push(CapRow::of("soc", &self.soc, Soc::to_string));
        rows.push(CapRow::flag("fabric export", &self.fabric));
        rows.push(CapRow::of(
            "imported host memory reports",
            &self.host_import,
            |k| format!("{k:?}").to_lowercase(),
        ));
        rows.push(CapRow::of("batch copy directions", &self.batch, |d| {
            directions(*d)
        }));
        rows.push(CapRow::flag(
            "value write into pinned host memory",
            &self.host_values,
        ));
        rows
    }
}

fn directions(d: BatchDirections) -> String {
    let names: Vec<&str> = d.iter().map(BatchDirections::label).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

impl BatchDirections {
    /// `H2D`, `D2H` or `D2D` for one direction; the first one's label for a set.
    pub fn label(self) -> &'static str {
        if self.contains(BatchDirections::HOST_TO_DEVICE) {
            "H2D"
        } else if self.contains(BatchDirections::DEVICE_TO_HOST) {
            "D2H"
        } else if self.contains(BatchDirections::DEVICE_TO_DEVICE) {
            "D2D"
        } else {
            "none"
        }
    }
}

/// Capabilities found so far, by ACL table and device: one cell per key, so that probing one
/// device never waits for another's probes.
type Cache = Mutex<HashMap<(usize, Option<i32>), Arc<OnceLock<Arc<Capabilities>>>>>;

fn cache() -> &'static Cache {
    static C: OnceLock<Cache> = OnceLock::new();
    C.get_or_init(Default::default)
}

impl Runtime {
    /// What this runtime offers, probed on device 0 (or, with no device, without the probes),
    /// found on the first call and kept for the process. Use
    /// [`capabilities_on`](Runtime::capabilities_on) to probe the device a program uses.
    ///
    /// Never fails: what could not be found is an answer that says so. Answers are kept as
    /// found, a probe whose stream did not finish within its wait (5 s) included: ask while
    /// the device is not busy with other work.
    pub fn capabilities(&self) -> Arc<Capabilities> {
        let device = match self.device_count() {
            Ok(n) if n > 0 => Some(0),
            _ => None,
        };
        self.capabilities_cached(device)
    }

    /// What this runtime offers, probed on `device`, found on the first call for that device
    /// and kept for the process.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming `device` when it is
    /// not one of the runtime's devices.
    pub fn capabilities_on(&self, device: i32) -> Result<Arc<Capabilities>> {
        let count = self.device_count()?;
        if device < 0 || device as u32 >= count {
            return Err(crate::error::Error::InvalidArgument {
                api: "Runtime::capabilities_on",
                what: if count == 0 {
                    "device (the runtime has no device)"
                } else {
                    "device (not below the device count)"
                },
                value: device as i128,
            });
        }
        Ok(self.capabilities_cached(Some(device)))
    }

    fn capabilities_cached(&self, device: Option<i32>) -> Arc<Capabilities> {
        let key = (self.acl() as *const acl::AclLib as usize, device);
        let cell = cache().lock().entry(key).or_default().clone();
        // Outside the map's lock: a second caller for the same key waits for the first's
        // answer (never probes twice); callers for other keys do not wait.
        cell.get_or_init(|| Arc::new(probe::find(self, device)))
            .clone()
    }
}
