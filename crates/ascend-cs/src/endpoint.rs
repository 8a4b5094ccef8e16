//! Endpoints (`EndpointDesc`) and the protocols they name.

use std::fmt;

use hixl_sys as hixl;

/// A communication protocol (`CommProtocol`). Inputs only; the emulator serves
/// [`Protocol::Hccs`] and [`Protocol::UbMem`] and answers `HIXL_UNSUPPORTED` for the rest.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// `COMM_PROTOCOL_HCCS`.
    Hccs,
    /// `COMM_PROTOCOL_ROCE`.
    Roce,
    /// `COMM_PROTOCOL_PCIE`.
    Pcie,
    /// `COMM_PROTOCOL_SIO`.
    Sio,
    /// `COMM_PROTOCOL_UBC_CTP`.
    UbcCtp,
    /// `COMM_PROTOCOL_UBC_TP`.
    UbcTp,
    /// `COMM_PROTOCOL_UB_MEM`.
    UbMem,
    /// `COMM_PROTOCOL_UBOE`.
    Uboe,
    /// `COMM_PROTOCOL_HCCS_ONLY`.
    HccsOnly,
    /// `COMM_PROTOCOL_UBG`.
    Ubg,
}

impl Protocol {
    /// The C value.
    pub fn raw(self) -> hixl::CommProtocol {
        match self {
            Protocol::Hccs => hixl::COMM_PROTOCOL_HCCS,
            Protocol::Roce => hixl::COMM_PROTOCOL_ROCE,
            Protocol::Pcie => hixl::COMM_PROTOCOL_PCIE,
            Protocol::Sio => hixl::COMM_PROTOCOL_SIO,
            Protocol::UbcCtp => hixl::COMM_PROTOCOL_UBC_CTP,
            Protocol::UbcTp => hixl::COMM_PROTOCOL_UBC_TP,
            Protocol::UbMem => hixl::COMM_PROTOCOL_UB_MEM,
            Protocol::Uboe => hixl::COMM_PROTOCOL_UBOE,
            Protocol::HccsOnly => hixl::COMM_PROTOCOL_HCCS_ONLY,
            Protocol::Ubg => hixl::COMM_PROTOCOL_UBG,
        }
    }
}

/// An endpoint (`EndpointDesc`, 160 bytes), initialised as `EndpointDescInit` does.
#[derive(Copy, Clone)]
pub struct Endpoint {
    pub(crate) raw: hixl::EndpointDesc,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("protocol", &self.raw.protocol)
            .field("loc_type", &self.raw.loc.locType)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint of `protocol`, every other field reserved (`EndpointDescInit`).
    pub fn new(protocol: Protocol) -> Endpoint {
        let mut e = [hixl::EndpointDesc::default()];
        hixl::endpoint_desc_init(&mut e);
        e[0].protocol = protocol.raw();
        Endpoint { raw: e[0] }
    }

    /// Located on the device with physical id `dev_phy_id` (address type `ID`, the same id).
    pub fn on_device(mut self, dev_phy_id: u32) -> Endpoint {
        self.raw.loc.locType = hixl::ENDPOINT_LOC_TYPE_DEVICE;
        self.raw.loc.__bindgen_anon_1.device = hixl::EndpointLocDevice {
            devPhyId: dev_phy_id,
            superDevId: 0,
            serverIdx: 0,
            superPodIdx: 0,
        };
        self.raw.commAddr.type_ = hixl::COMM_ADDR_TYPE_ID;
        self.raw.commAddr.__bindgen_anon_1.id = dev_phy_id;
        self
    }

    /// Wraps a descriptor built elsewhere.
    pub fn from_raw(raw: hixl::EndpointDesc) -> Endpoint {
        Endpoint { raw }
    }

    /// The descriptor.
    pub fn as_raw(&self) -> &hixl::EndpointDesc {
        &self.raw
    }
}
