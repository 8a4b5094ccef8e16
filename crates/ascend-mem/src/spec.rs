//! What kind of physical memory to allocate: where it lives and its page attribute.

/// Host or device memory: the one "which side" type of every crate here (a registration's
/// kind, HixlCS's `CommMemType`, HIXL's `MemType`); [`Location::kind`] of an allocation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// Device HBM.
    Device,
    /// Host DRAM the device can reach.
    Host,
}

impl MemKind {
    /// `Host` when `host`, else `Device`.
    pub fn host_if(host: bool) -> MemKind {
        if host {
            MemKind::Host
        } else {
            MemKind::Device
        }
    }
}

/// Where a physical allocation lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Location {
    /// HBM of the device the allocation is made on.
    Device,
    /// Host DRAM (`ACL_MEM_LOCATION_TYPE_HOST`, id 0).
    Host,
    /// Host DRAM on one NUMA node (`ACL_MEM_LOCATION_TYPE_HOST_NUMA`, id = node).
    HostNuma(u32),
}

impl Location {
    /// Host or device memory.
    pub fn kind(self) -> MemKind {
        MemKind::host_if(!matches!(self, Location::Device))
    }
}

/// The page attribute of a physical allocation (`aclrtMemAttr`), limited to the values
/// `aclrtMallocPhysical` accepts (rule R7). `Ddr*` kinds are host-only (R6).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemAttr {
    /// `ACL_HBM_MEM_HUGE`: device HBM, 2 MiB pages (the usual choice).
    HbmHuge,
    /// `ACL_HBM_MEM_NORMAL` (allocated as huge by the runtime).
    HbmNormal,
    /// `ACL_HBM_MEM_HUGE1G`: 1 GiB pages.
    HbmHuge1G,
    /// `ACL_DDR_MEM_HUGE` (host only).
    DdrHuge,
    /// `ACL_DDR_MEM_NORMAL` (host only).
    DdrNormal,
    /// `ACL_DDR_MEM_P2P_HUGE` (host only).
    DdrP2pHuge,
    /// `ACL_DDR_MEM_P2P_NORMAL` (host only).
    DdrP2pNormal,
    /// `ACL_MEM_NORMAL`.
    Normal,
    /// `ACL_MEM_HUGE`.
    Huge,
    /// `ACL_MEM_HUGE1G`.
    Huge1G,
    /// `ACL_MEM_P2P_NORMAL`.
    P2pNormal,
    /// `ACL_MEM_P2P_HUGE` (HIXL's choice for host memory devices reach).
    P2pHuge,
    /// `ACL_MEM_P2P_HUGE1G`.
    P2pHuge1G,
}

impl MemAttr {
    /// The C value.
    pub fn raw(self) -> acl::aclrtMemAttr {
        match self {
            MemAttr::HbmHuge => acl::ACL_HBM_MEM_HUGE,
            MemAttr::HbmNormal => acl::ACL_HBM_MEM_NORMAL,
            MemAttr::HbmHuge1G => acl::ACL_HBM_MEM_HUGE1G,
            MemAttr::DdrHuge => acl::ACL_DDR_MEM_HUGE,
            MemAttr::DdrNormal => acl::ACL_DDR_MEM_NORMAL,
            MemAttr::DdrP2pHuge => acl::ACL_DDR_MEM_P2P_HUGE,
            MemAttr::DdrP2pNormal => acl::ACL_DDR_MEM_P2P_NORMAL,
            MemAttr::Normal => acl::ACL_MEM_NORMAL,
            MemAttr::Huge => acl::ACL_MEM_HUGE,
            MemAttr::Huge1G => acl::ACL_MEM_HUGE1G,
            MemAttr::P2pNormal => acl::ACL_MEM_P2P_NORMAL,
            MemAttr::P2pHuge => acl::ACL_MEM_P2P_HUGE,
            MemAttr::P2pHuge1G => acl::ACL_MEM_P2P_HUGE1G,
        }
    }

    /// Whether the runtime allows this attribute only for host locations (rule R6).
    pub fn is_host_only(self) -> bool {
        matches!(
            self,
            MemAttr::DdrHuge | MemAttr::DdrNormal | MemAttr::DdrP2pHuge | MemAttr::DdrP2pNormal
        )
    }
}

/// A location and attribute: everything `aclrtPhysicalMemProp` varies by.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemSpec {
    /// Where the memory lives.
    pub location: Location,
    /// Its page attribute.
    pub attr: MemAttr,
}

impl MemSpec {
    /// Device HBM with 2 MiB pages (`ACL_HBM_MEM_HUGE` on the device).
    pub const DEVICE_HBM: MemSpec = MemSpec {
        location: Location::Device,
        attr: MemAttr::HbmHuge,
    };

    /// Host DRAM that devices can reach (`ACL_MEM_P2P_HUGE` on HOST id 0).
    pub const HOST: MemSpec = MemSpec {
        location: Location::Host,
        attr: MemAttr::P2pHuge,
    };

    /// Host DRAM on NUMA node `node` (`ACL_MEM_P2P_HUGE` on HOST_NUMA).
    pub fn host_numa(node: u32) -> MemSpec {
        MemSpec {
            location: Location::HostNuma(node),
            attr: MemAttr::P2pHuge,
        }
    }

    /// Whether the memory lives on the host.
    pub fn is_host(&self) -> bool {
        !matches!(self.location, Location::Device)
    }

    /// The C property struct for an allocation on `device`: handle type NONE and allocation
    /// type PINNED as rule R5 requires, `reserve` 0.
    pub fn to_prop(&self, device: i32) -> acl::aclrtPhysicalMemProp {
        let (type_, id) = match self.location {
            Location::Device => (acl::ACL_MEM_LOCATION_TYPE_DEVICE, device as u32),
            Location::Host => (acl::ACL_MEM_LOCATION_TYPE_HOST, 0),
            Location::HostNuma(n) => (acl::ACL_MEM_LOCATION_TYPE_HOST_NUMA, n),
        };
        acl::aclrtPhysicalMemProp {
            handleType: acl::ACL_MEM_HANDLE_TYPE_NONE,
            allocationType: acl::ACL_MEM_ALLOCATION_TYPE_PINNED,
            memAttr: self.attr.raw(),
            location: acl::aclrtMemLocation { id, type_ },
            reserve: 0,
        }
    }
}
