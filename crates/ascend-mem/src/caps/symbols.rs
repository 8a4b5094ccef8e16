//! The optional symbol groups: the calls each feature needs, and which of them a library lacks.

use super::{Answer, CapRow, How};
use crate::runtime::Runtime;

/// A group of C calls that arrived together, or that one feature needs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SymbolGroup {
    /// VA reservation, physical allocation, mapping, access.
    Vmm,
    /// `aclrtReserveMemAddressNoUCMemory`.
    NoUc,
    /// `aclrtMemRetainAllocationHandle` and the calls that read a retained handle back.
    Retain,
    /// The V2 share-handle calls (export, import, pid allow-list).
    ShareV2,
    /// Batched copies.
    BatchCopy,
    /// Stream-ordered value writes and waits.
    StreamValues,
    /// HCCL communicators and the collectives.
    Hccl,
    /// HCCL symmetric windows.
    SymWindows,
    /// `HcclSymWinGetPeerPointer` callable from the host.
    PeerPointers,
}

/// Which library a group's symbols come from.
enum Lib {
    Acl,
    Hccl,
}

impl SymbolGroup {
    /// Every group, in table order.
    pub const ALL: [SymbolGroup; 9] = [
        SymbolGroup::Vmm,
        SymbolGroup::NoUc,
        SymbolGroup::Retain,
        SymbolGroup::ShareV2,
        SymbolGroup::BatchCopy,
        SymbolGroup::StreamValues,
        SymbolGroup::Hccl,
        SymbolGroup::SymWindows,
        SymbolGroup::PeerPointers,
    ];

    /// The group's short name.
    pub fn name(self) -> &'static str {
        match self {
            SymbolGroup::Vmm => "vmm",
            SymbolGroup::NoUc => "nouc",
            SymbolGroup::Retain => "retain-allocation",
            SymbolGroup::ShareV2 => "share-v2",
            SymbolGroup::BatchCopy => "batch-copies",
            SymbolGroup::StreamValues => "stream-values",
            SymbolGroup::Hccl => "hccl",
            SymbolGroup::SymWindows => "hccl-symwin",
            SymbolGroup::PeerPointers => "hccl-peer-pointers",
        }
    }

    /// The C symbols of the group.
    pub fn symbols(self) -> &'static [&'static str] {
        match self {
            SymbolGroup::Vmm => &[
                "aclrtReserveMemAddress",
                "aclrtReleaseMemAddress",
                "aclrtMallocPhysical",
                "aclrtFreePhysical",
                "aclrtMapMem",
                "aclrtUnmapMem",
                "aclrtMemGetAllocationGranularity",
                "aclrtMemSetAccess",
            ],
            SymbolGroup::NoUc => &["aclrtReserveMemAddressNoUCMemory"],
            SymbolGroup::Retain => &[
                "aclrtMemRetainAllocationHandle",
                "aclrtMemGetAddressRange",
                "aclrtMemGetAllocationPropertiesFromHandle",
            ],
            SymbolGroup::ShareV2 => &[
                "aclrtMemExportToShareableHandleV2",
                "aclrtMemImportFromShareableHandleV2",
                "aclrtMemSetPidToShareableHandleV2",
            ],
            SymbolGroup::BatchCopy => &["aclrtMemcpyBatch", "aclrtMemcpyBatchAsync"],
            SymbolGroup::StreamValues => &["aclrtValueWrite", "aclrtValueWait"],
            SymbolGroup::Hccl => &[
                "HcclGetRootInfo",
                "HcclCommInitRootInfoConfig",
                "HcclCommDestroy",
                "HcclAllGather",
                "HcclReduceScatter",
                "HcclAllReduce",
                "HcclAlltoAll",
            ],
            SymbolGroup::SymWindows => &[
                "HcclCommSymWinRegister",
                "HcclCommSymWinDeregister",
                "HcclCommSymWinGet",
            ],
            SymbolGroup::PeerPointers => &["HcclSymWinGetPeerPointer"],
        }
    }

    fn lib(self) -> Lib {
        match self {
            SymbolGroup::Hccl | SymbolGroup::SymWindows | SymbolGroup::PeerPointers => Lib::Hccl,
            _ => Lib::Acl,
        }
    }

    /// The library the group's symbols come from, for messages.
    pub fn library(self) -> &'static str {
        match self.lib() {
            Lib::Acl => "the ACL runtime",
            Lib::Hccl => "the HCCL library",
        }
    }

    /// The first CANN release whose headers declare the group, for messages.
    pub fn since(self) -> &'static str {
        match self {
            SymbolGroup::NoUc | SymbolGroup::SymWindows => "9.0.0",
            SymbolGroup::PeerPointers => "a host-side build of hcomm",
            _ => "8.5.0",
        }
    }
}

/// Whether a library exports every symbol of a group, and the ones it lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupAnswer {
    /// The group.
    pub group: SymbolGroup,
    /// The symbols the library lacks (empty: the group is present).
    pub missing: Vec<&'static str>,
    /// Why the group's library could not be opened at all, when it could not.
    pub unavailable: Option<Box<str>>,
}

impl GroupAnswer {
    /// Whether every symbol is there.
    pub fn present(&self) -> bool {
        self.unavailable.is_none() && self.missing.is_empty()
    }

    /// The group's row of a capability table.
    pub fn row(&self) -> CapRow {
        let mut a = Answer::known(self.present(), How::Symbols);
        if let Some(e) = &self.unavailable {
            a = a.with_detail(format!("library not opened: {e}"));
        } else if !self.missing.is_empty() {
            a = a.with_detail(format!("missing {}", self.missing.join(", ")));
        }
        CapRow::flag(format!("group {}", self.group.name()), &a)
    }
}

/// Every group's answer for `rt`. The HCCL library is opened to look (it is not loaded
/// otherwise until a communicator is made).
pub(super) fn groups(rt: &Runtime) -> Vec<GroupAnswer> {
    let hccl = rt.hccl();
    SymbolGroup::ALL
        .into_iter()
        .map(|group| {
            let lib = match (group.lib(), &hccl) {
                (Lib::Acl, _) => Ok(None),
                (Lib::Hccl, Ok(h)) => Ok(Some(*h)),
                (Lib::Hccl, Err(e)) => Err(e.to_string().into_boxed_str()),
            };
            match lib {
                Ok(h) => GroupAnswer {
                    group,
                    missing: group
                        .symbols()
                        .iter()
                        .copied()
                        .filter(|s| {
                            !h.map_or_else(|| rt.acl().is_available(s), |h| h.is_available(s))
                        })
                        .collect(),
                    unavailable: None,
                },
                Err(e) => GroupAnswer {
                    group,
                    missing: group.symbols().to_vec(),
                    unavailable: Some(e),
                },
            }
        })
        .collect()
}
