//! HIXL's client/server C API (`HixlCS*`, bound through `hixl-sys`): a [`Server`] registers
//! tagged device or host memory and listens; a [`Client`] connects, reads the server's memory
//! list with tags ([`RemoteMemList`]) and moves bytes one-sided with batch put/get, sync or
//! async ([`Completion`]).
//!
//! # Which HIXL surfaces are bound, which are native, and why
//!
//! | HIXL surface | here | why |
//! |---|---|---|
//! | HixlCS C API (`cs/hixl_cs.h`, `libcann_hixl.so`) | **bound**: `hixl-sys` + this module | plain C symbols and C structs: loaded with `dlopen`, called through a table |
//! | `hixl::Hixl` engine, FabricMem mode | **native**: [`Engine`](crate::Engine) in this crate | a C++ class (pimpl) taking `ge::AscendString` and `std::map`/`std::vector`: no C ABI to bind, so the FabricMem control plane is reimplemented wire-compatibly |
//! | ADXL (deprecated) | not bound | superseded by HIXL |
//!
//! # Backends
//! The function table follows the [`Runtime`] of the [`Device`] a server or client is made on,
//! as ascend-mem chooses ACL ([`table`]):
//! * `Runtime::emulated()` (feature `emulator`) → `ascend_sim::hixl_table()`, in process;
//! * the emulator's shared library opened as ACL (`ASCEND_ACL_LIB=…/libascend_sim.so`) → the
//!   same file opened again as HIXL (it exports every `HixlCS*` symbol), unless
//!   `ASCEND_HIXL_LIB` names another file;
//! * CANN → [`hixl_sys::hixl`] (`ASCEND_HIXL_LIB`, `$ASCEND_HOME_PATH/lib64/libcann_hixl.so`, …).
//!
//! # Ownership
//! ```text
//! Server <── ServerMem<'s> ──> Arc<M: CommMemory>      (registered memory lives while registered)
//! Client <── LocalMem<'c>  ──> Arc<M: CommMemory>
//! Client <── Completion<'c>   (in-flight table in the Client holds the LocalMem Arcs until the
//!                              batch is seen finished, so a forgotten Completion cannot free
//!                              memory under a copy; the Client then refuses to close and leaks)
//! ```
//!
//! # Checks before the C call
//! Batches are checked on the host first: a non-empty list ([`Error::EmptyBatch`]), non-zero
//! lengths ([`Error::ZeroLength`]), each local range inside its registration
//! ([`Error::LocalOutOfBounds`]) of this client ([`Error::ForeignRegistration`]), each remote
//! range inside its block of the server's list ([`Error::RemoteOutOfBounds`]); tags are looked
//! up in the list ([`Error::UnknownTag`]). What only the library knows comes back as
//! [`Error::Hixl`] with the C name, the [`HixlCode`] and the emulator's message when in process.
//!
//! # Example
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::{sync::Arc, time::Duration};
//! use ascend_fabric::cs::{Client, Endpoint, Op, Protocol, Server};
//! use ascend_mem::{DeviceBuffer, Runtime};
//! let rt = Runtime::from_env()?;
//! let dev = rt.device(0)?;
//! let ep = Endpoint::new(Protocol::Hccs).on_device(0);
//! let server = Server::new(&dev, "127.0.0.1".parse()?, 26000, &[ep])?;
//! let _kv = server.register("kv", Arc::new(DeviceBuffer::new(&dev, 2 << 20)?))?;
//! server.listen(16)?;
//! let client = Client::new(&dev, "127.0.0.1".parse()?, 26000, &ep, &ep)?;
//! client.connect(Duration::from_secs(2))?;
//! let list = client.remote_memory(Duration::from_secs(1))?;
//! let kv = list.get("kv")?;
//! let local = client.register(Arc::new(DeviceBuffer::new(&dev, 2 << 20)?))?;
//! client.put(&[Op::new(&local, 0, kv, 0, 4096)], Duration::from_secs(1))?;
//! # Ok(()) }
//! ```
#![allow(unsafe_code)]

use ascend_mem::CloseError;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ascend_mem::acl::AclLib;
use ascend_mem::{Backend, Device, DeviceBuffer, HostBuffer, Mapping, Runtime};
use hixl_sys as hixl;
use hixl_sys::HixlLib;

/// The raw bindings (`hixl-sys`), for calls through [`table`] and [`Client::as_raw`].
pub use hixl_sys as sys;
use parking_lot::Mutex;

// ---------------------------------------------------------------------------------------------
// Status codes and errors

/// A HIXL status (`HixlStatus`, a C `uint32_t`).
///
/// A newtype, not an enum: a newer library can return values we have never seen. (The
/// FabricMem engine's [`crate::HixlCode`] is the same idea for its wire statuses; this one is
/// the C API's, kept here so the module stands alone.)
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HixlCode(pub u32);

impl HixlCode {
    /// `HIXL_SUCCESS` 0.
    pub const SUCCESS: HixlCode = HixlCode(hixl::HIXL_SUCCESS);
    /// `HIXL_PARAM_INVALID` 103900: a bad argument or handle.
    pub const PARAM_INVALID: HixlCode = HixlCode(hixl::HIXL_PARAM_INVALID);
    /// `HIXL_TIMEOUT` 103901.
    pub const TIMEOUT: HixlCode = HixlCode(hixl::HIXL_TIMEOUT);
    /// `HIXL_NOT_CONNECTED` 103902.
    pub const NOT_CONNECTED: HixlCode = HixlCode(hixl::HIXL_NOT_CONNECTED);
    /// `HIXL_ALREADY_CONNECTED` 103903.
    pub const ALREADY_CONNECTED: HixlCode = HixlCode(hixl::HIXL_ALREADY_CONNECTED);
    /// `HIXL_NOTIFY_FAILED` 103904 (reserved).
    pub const NOTIFY_FAILED: HixlCode = HixlCode(hixl::HIXL_NOTIFY_FAILED);
    /// `HIXL_UNSUPPORTED` 103905: a protocol, call or feature not available.
    pub const UNSUPPORTED: HixlCode = HixlCode(hixl::HIXL_UNSUPPORTED);
    /// `HIXL_RESOURCE_EXHAUSTED` 203900.
    pub const RESOURCE_EXHAUSTED: HixlCode = HixlCode(hixl::HIXL_RESOURCE_EXHAUSTED);
    /// `HIXL_FAILED` 503900: generic failure.
    pub const FAILED: HixlCode = HixlCode(hixl::HIXL_FAILED);

    /// The C name of a known code.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::SUCCESS => "HIXL_SUCCESS",
            Self::PARAM_INVALID => "HIXL_PARAM_INVALID",
            Self::TIMEOUT => "HIXL_TIMEOUT",
            Self::NOT_CONNECTED => "HIXL_NOT_CONNECTED",
            Self::ALREADY_CONNECTED => "HIXL_ALREADY_CONNECTED",
            Self::NOTIFY_FAILED => "HIXL_NOTIFY_FAILED",
            Self::UNSUPPORTED => "HIXL_UNSUPPORTED",
            Self::RESOURCE_EXHAUSTED => "HIXL_RESOURCE_EXHAUSTED",
            Self::FAILED => "HIXL_FAILED",
            _ => return None,
        })
    }
}

impl fmt::Display for HixlCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "HIXL status {}", self.0),
        }
    }
}

/// Errors of the HixlCS wrapper.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `HixlCS*` call returned a failure status.
    #[error("{api} failed with {code}{}{msg}", if msg.is_empty() { "" } else { ": " })]
    Hixl {
        /// The C function.
        api: &'static str,
        /// Its status.
        code: HixlCode,
        /// The library's message, when it has one (the in-process emulator's), else empty.
        msg: Box<str>,
    },
    /// The HIXL library could not be opened.
    #[error("cannot load the HIXL library")]
    Load(#[source] Box<hixl::LoadError>),
    /// The library lacks a symbol (CANN too old).
    #[error(transparent)]
    MissingSymbol(#[from] hixl::MissingSymbol),
    /// An ACL-side failure (binding the device, ...).
    #[error(transparent)]
    Mem(#[from] ascend_mem::Error),
    /// An argument the host can reject (a string with a NUL, a timeout over `u32::MAX` ms, ...).
    #[error("{api}: {what} {value} is invalid")]
    InvalidArgument {
        /// The C function it was for.
        api: &'static str,
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: Box<str>,
    },
    /// A batch with no descriptor.
    #[error("{api}: the batch is empty")]
    EmptyBatch {
        /// The C function it was for.
        api: &'static str,
    },
    /// More descriptors than a `uint32_t` count holds.
    #[error("{api}: {count} descriptors, more than {max}")]
    TooManyOps {
        /// The C function it was for.
        api: &'static str,
        /// Descriptors given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A descriptor of length 0.
    #[error("descriptor {index} has length 0")]
    ZeroLength {
        /// Its index in the batch.
        index: usize,
    },
    /// A descriptor's local range runs past its registration.
    #[error(
        "descriptor {index}: local [{offset}, +{len}) runs past the registration of {size} bytes"
    )]
    LocalOutOfBounds {
        /// Its index in the batch.
        index: usize,
        /// Offset in the registration.
        offset: usize,
        /// Length.
        len: usize,
        /// The registration's size.
        size: usize,
    },
    /// A descriptor's remote range runs past its block of the server's list.
    #[error("descriptor {index}: remote [{offset}, +{len}) runs past the remote block \"{tag}\" of {size} bytes")]
    RemoteOutOfBounds {
        /// Its index in the batch.
        index: usize,
        /// The block's tag.
        tag: Box<str>,
        /// Offset in the block.
        offset: u64,
        /// Length.
        len: usize,
        /// The block's size.
        size: u64,
    },
    /// A descriptor names memory registered with another client.
    #[error("descriptor {index}: the local registration belongs to another client")]
    ForeignRegistration {
        /// Its index in the batch.
        index: usize,
    },
    /// No block of the server's list has this tag.
    #[error("the server has no memory tagged \"{tag}\" (tags: {known:?})")]
    UnknownTag {
        /// The tag asked for.
        tag: Box<str>,
        /// The tags the list has.
        known: Vec<String>,
    },
    /// An async batch finished with HIXL_COMPLETE_STATUS_FAILED.
    #[error("the {op} batch failed{}{msg}", if msg.is_empty() { "" } else { ": " })]
    BatchFailed {
        /// `put` or `get`.
        op: &'static str,
        /// The library's message, when it has one.
        msg: Box<str>,
    },
    /// An async batch did not finish in time: the library reported
    /// HIXL_COMPLETE_STATUS_TIMEOUT (`reported`: it will not run), or [`Completion::wait`]
    /// gave up while it was still waiting (it may still run).
    #[error("the {op} batch timed out ({})", if *reported { "reported by the library" } else { "still in flight" })]
    Timeout {
        /// `put` or `get`.
        op: &'static str,
        /// Whether the library reported the timeout (the batch is gone).
        reported: bool,
    },
    /// A client cannot close while async batches are in flight.
    #[error("{in_flight} async batch(es) in flight; wait for them before closing the client")]
    Busy {
        /// Batches this wrapper still tracks.
        in_flight: usize,
        /// The library's refusal.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// The HIXL status this error corresponds to (what the C API returns, or would return,
    /// for the same input).
    pub fn code(&self) -> HixlCode {
        match self {
            Error::Hixl { code, .. } => *code,
            Error::Load(_) | Error::MissingSymbol(_) | Error::Mem(_) => HixlCode::FAILED,
            Error::InvalidArgument { .. }
            | Error::EmptyBatch { .. }
            | Error::TooManyOps { .. }
            | Error::ZeroLength { .. }
            | Error::LocalOutOfBounds { .. }
            | Error::RemoteOutOfBounds { .. }
            | Error::ForeignRegistration { .. }
            | Error::UnknownTag { .. } => HixlCode::PARAM_INVALID,
            Error::BatchFailed { .. } => HixlCode::FAILED,
            Error::Timeout { .. } => HixlCode::TIMEOUT,
            Error::Busy { source, .. } => source.code(),
        }
    }
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

// ---------------------------------------------------------------------------------------------
// The table

fn chosen() -> &'static Mutex<HashMap<usize, &'static HixlLib>> {
    static M: OnceLock<Mutex<HashMap<usize, &'static HixlLib>>> = OnceLock::new();
    M.get_or_init(Default::default)
}

fn choose(rt: &Runtime) -> Result<&'static HixlLib> {
    #[cfg(feature = "emulator")]
    if std::ptr::eq(rt.acl(), ascend_sim::acl_table()) {
        return Ok(ascend_sim::hixl_table());
    }
    let explicit = std::env::var_os(hixl::SPEC.path_var).is_some_and(|p| !p.is_empty());
    if let (Backend::EmulatorDl { .. }, false) = (rt.backend(), explicit) {
        if let ascend_mem::acl::Source::Dl(libs) = rt.acl().source() {
            if let Some((path, _)) = libs.first() {
                // SAFETY: the file is the emulator's shared library, already trusted (and
                // opened) as this runtime's ACL library; it exports the HixlCS symbols with the
                // signatures hixl-sys declares. Leaked: handles made through it may live as
                // long as the process.
                let lib =
                    unsafe { HixlLib::open_path(path) }.map_err(|e| Error::Load(Box::new(e)))?;
                return Ok(Box::leak(Box::new(lib)));
            }
        }
    }
    hixl::hixl().map_err(|e| Error::Load(Box::new(e.clone())))
}

/// The HIXL table serving `rt` (see the module docs), chosen once per ACL table and kept for
/// the process.
///
/// # Errors
/// [`Error::Load`] when the library cannot be opened (the message lists every path tried).
pub fn table(rt: &Runtime) -> Result<&'static HixlLib> {
    let key = rt.acl() as *const AclLib as usize;
    let mut m = chosen().lock();
    if let Some(t) = m.get(&key) {
        return Ok(t);
    }
    let t = choose(rt)?;
    tracing::debug!(source = %t.source().describe(), "HIXL table chosen");
    m.insert(key, t);
    Ok(t)
}

fn message(lib: &HixlLib) -> Box<str> {
    #[cfg(feature = "emulator")]
    if std::ptr::eq(lib, ascend_sim::hixl_table()) {
        return ascend_sim::hixl_last_error_message()
            .unwrap_or_default()
            .into_boxed_str();
    }
    let _ = lib;
    Box::from("")
}

fn check(
    lib: &HixlLib,
    api: &'static str,
    r: std::result::Result<hixl::HixlStatus, hixl::MissingSymbol>,
) -> Result<()> {
    match r? {
        hixl::HIXL_SUCCESS => Ok(()),
        code => Err(Error::Hixl {
            api,
            code: HixlCode(code),
            msg: message(lib),
        }),
    }
}

/// `xcall!(lib, HixlCSFoo(a, b))`: calls through the table and checks the status with the C
/// name. Must be used inside an `unsafe` block.
macro_rules! xcall {
    ($lib:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let lib: &HixlLib = $lib;
        check(lib, stringify!($f), lib.$f($($arg),*))
    }};
}

fn millis(api: &'static str, t: Duration) -> Result<u32> {
    u32::try_from(t.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| Error::InvalidArgument {
            api,
            what: "timeout (ms, 1..=u32::MAX)",
            value: format!("{t:?}").into(),
        })
}

fn cstring(api: &'static str, what: &'static str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument {
        api,
        what,
        value: format!("{s:?} (contains NUL)").into(),
    })
}

// ---------------------------------------------------------------------------------------------
// Endpoints and memory

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
    raw: hixl::EndpointDesc,
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

/// Where registered memory lives (`CommMemType`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// `COMM_MEM_TYPE_DEVICE`.
    Device,
    /// `COMM_MEM_TYPE_HOST`.
    Host,
}

impl MemKind {
    fn raw(self) -> hixl::CommMemType {
        match self {
            MemKind::Device => hixl::COMM_MEM_TYPE_DEVICE,
            MemKind::Host => hixl::COMM_MEM_TYPE_HOST,
        }
    }

    fn from_raw(t: hixl::CommMemType) -> MemKind {
        if t == hixl::COMM_MEM_TYPE_HOST {
            MemKind::Host
        } else {
            MemKind::Device
        }
    }
}

/// Memory that can be registered with HIXL.
///
/// # Safety
/// [`CommMemory::range`] returns memory of that kind, made through the same runtime, valid for
/// as long as the value lives and the same every time it is called.
pub unsafe trait CommMemory: Send + Sync + 'static {
    /// Kind, first address and length in bytes.
    fn range(&self) -> (MemKind, *mut c_void, usize);
}

// SAFETY: the buffer's mapping is device memory, unmapped only when the buffer drops.
unsafe impl CommMemory for DeviceBuffer {
    fn range(&self) -> (MemKind, *mut c_void, usize) {
        (MemKind::Device, self.as_raw(), self.len())
    }
}

// SAFETY: device-accessible host memory, unmapped only when the buffer drops.
unsafe impl CommMemory for HostBuffer {
    fn range(&self) -> (MemKind, *mut c_void, usize) {
        (MemKind::Host, self.as_raw(), self.len())
    }
}

// SAFETY: the mapping stays mapped while the value lives; its kind follows the memory.
unsafe impl CommMemory for Mapping {
    fn range(&self) -> (MemKind, *mut c_void, usize) {
        let kind = if self.is_host() {
            MemKind::Host
        } else {
            MemKind::Device
        };
        (kind, self.as_raw(), self.len())
    }
}

type Keep = Arc<dyn Any + Send + Sync>;

fn comm_mem<M: CommMemory>(m: &M) -> (MemKind, hixl::CommMem) {
    let (kind, addr, size) = m.range();
    (
        kind,
        hixl::CommMem {
            type_: kind.raw(),
            addr,
            size: size as u64,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Server

/// A HixlCS server: endpoints, tagged registered memory, a listener. Destroyed on drop.
#[must_use = "dropping the Server stops serving and deregisters its memory"]
pub struct Server {
    lib: &'static HixlLib,
    dev: Device,
    raw: hixl::HixlServerHandle,
    destroyed: bool,
}

// SAFETY: the handle is an id, not tied to the thread that made it; every method and Drop
// makes `dev` current on the calling thread before calling HIXL. Not Sync: concurrent calls on
// one server are not documented as safe.
unsafe impl Send for Server {}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server").field("handle", &self.raw).finish()
    }
}

impl Server {
    /// Creates a server on `dev`'s runtime with `endpoints`, for `ip:port` (port 0: never
    /// listens).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no endpoint; [`Error::Load`]; `HixlCSServerCreate`
    /// failures: `HIXL_UNSUPPORTED` for a protocol the library does not serve,
    /// `HIXL_PARAM_INVALID` for a bad address or endpoint.
    #[doc(alias = "HixlCSServerCreate")]
    pub fn new(dev: &Device, ip: IpAddr, port: u16, endpoints: &[Endpoint]) -> Result<Server> {
        const API: &str = "HixlCSServerCreate";
        let n = u32::try_from(endpoints.len())
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| Error::InvalidArgument {
                api: API,
                what: "endpoint count",
                value: endpoints.len().to_string().into(),
            })?;
        let lib = table(dev.runtime())?;
        dev.bind()?;
        let ip_c = cstring(API, "ip", &ip.to_string())?;
        let eps: Vec<hixl::EndpointDesc> = endpoints.iter().map(|e| e.raw).collect();
        let desc = hixl::HixlServerDesc {
            endpoint_list: eps.as_ptr(),
            server_ip: ip_c.as_ptr(),
            server_port: u32::from(port),
            endpoint_list_num: n,
            reserved: [0; 104],
        };
        let config = hixl::HixlServerConfig {
            global_resource_config: std::ptr::null(),
            reserved: [0; 120],
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: `desc` and `config` point at live locals (endpoints, ip) for the call;
        // `raw` is a writable out-pointer.
        unsafe { xcall!(lib, HixlCSServerCreate(&desc, &config, &mut raw)) }?;
        Ok(Server {
            lib,
            dev: dev.clone(),
            raw,
            destroyed: false,
        })
    }

    /// Registers `mem` under `tag`; the registration keeps `mem` alive and unregisters on
    /// drop. Register before clients connect (they fetch the list at connect, or ask again
    /// with [`Client::remote_memory`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a tag with NUL; `HixlCSServerRegMem` failures
    /// (`HIXL_PARAM_INVALID`: a tag already used, memory overlapping a registration, memory
    /// the runtime does not know as that kind).
    #[doc(alias = "HixlCSServerRegMem")]
    pub fn register<M: CommMemory>(&self, tag: &str, mem: Arc<M>) -> Result<ServerMem<'_>> {
        let tag_c = cstring("HixlCSServerRegMem", "mem_tag", tag)?;
        let (kind, cm) = comm_mem(&*mem);
        self.dev.bind()?;
        let mut h = std::ptr::null_mut();
        // SAFETY: live server handle; `tag_c` and `cm` outlive the call; `cm` describes
        // memory `mem` keeps valid (CommMemory contract), and the registration holds `mem`.
        unsafe {
            xcall!(
                self.lib,
                HixlCSServerRegMem(self.raw, tag_c.as_ptr(), &cm, &mut h)
            )
        }?;
        Ok(ServerMem {
            server: self,
            raw: h,
            tag: tag.into(),
            kind,
            addr: cm.addr as usize,
            len: cm.size as usize,
            done: false,
            _keep: mem,
        })
    }

    /// Starts listening for clients.
    ///
    /// # Errors
    /// `HixlCSServerListen` failures (`HIXL_FAILED` when the port is taken).
    #[doc(alias = "HixlCSServerListen")]
    pub fn listen(&self, backlog: u32) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: live server handle.
        unsafe { xcall!(self.lib, HixlCSServerListen(self.raw, backlog)) }
    }

    /// The raw handle (borrowed; do not destroy it).
    pub fn as_raw(&self) -> hixl::HixlServerHandle {
        self.raw
    }

    /// Destroys the server now, handing it back on failure.
    ///
    /// # Errors
    /// `HixlCSServerDestroy` failures.
    #[doc(alias = "HixlCSServerDestroy")]
    #[allow(clippy::result_large_err)] // as Client::close
    pub fn close(mut self) -> std::result::Result<(), CloseError<Server, Error>> {
        match self.destroy() {
            Ok(()) => {
                self.destroyed = true;
                Ok(())
            }
            Err(e) => Err(CloseError::new(e, self)),
        }
    }

    fn destroy(&self) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: we own the handle; registrations borrow `self`, so none is alive.
        unsafe { xcall!(self.lib, HixlCSServerDestroy(self.raw)) }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        if let Err(e) = self.destroy() {
            tracing::error!(error = %e, "destroying a HixlCS server failed");
        }
    }
}

/// A block registered with a [`Server`] (unregistered on drop).
pub struct ServerMem<'s> {
    server: &'s Server,
    raw: hixl::MemHandle,
    tag: Box<str>,
    kind: MemKind,
    addr: usize,
    len: usize,
    /// Unregistered explicitly (Drop does nothing).
    done: bool,
    _keep: Keep,
}

impl fmt::Debug for ServerMem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerMem")
            .field("tag", &self.tag)
            .field("kind", &self.kind)
            .field("addr", &(self.addr as *const c_void))
            .field("len", &self.len)
            .finish()
    }
}

impl ServerMem<'_> {
    /// The tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }
    /// The kind.
    pub fn kind(&self) -> MemKind {
        self.kind
    }
    /// The first address (in this process).
    pub fn addr(&self) -> *mut c_void {
        self.addr as *mut c_void
    }
    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Always false (registrations are non-empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Unregisters now.
    ///
    /// # Errors
    /// `HixlCSServerUnregMem` failures.
    #[doc(alias = "HixlCSServerUnregMem")]
    pub fn unregister(mut self) -> Result<()> {
        self.done = true;
        self.unreg()
    }

    fn unreg(&self) -> Result<()> {
        self.server.dev.bind()?;
        // SAFETY: live server and our registration handle.
        unsafe {
            xcall!(
                self.server.lib,
                HixlCSServerUnregMem(self.server.raw, self.raw)
            )
        }
    }
}

impl Drop for ServerMem<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Err(e) = self.unreg() {
            tracing::error!(error = %e, tag = %self.tag, "unregistering HixlCS server memory failed");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Client

/// A HixlCS client. Destroyed on drop; if async batches are still in flight then (their
/// [`Completion`]s were leaked), the client and the memory those batches use are leaked
/// instead, so no copy can run into freed memory.
#[must_use = "dropping the Client disconnects it"]
pub struct Client {
    lib: &'static HixlLib,
    dev: Device,
    raw: hixl::HixlClientHandle,
    /// Memory kept alive for each outstanding async batch, by completion handle.
    in_flight: Mutex<HashMap<usize, Vec<Keep>>>,
    /// Serialises `HixlCSClientGetRemoteMem` with the copy of its library-owned arrays.
    list_lock: Mutex<()>,
    destroyed: bool,
}

// SAFETY: the handle is an id, not tied to the thread that made it; every method and Drop
// makes `dev` current on the calling thread before calling HIXL; our own state is behind
// locks. Not Sync: concurrent calls on one client are not documented as safe.
unsafe impl Send for Client {}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("handle", &self.raw)
            .field("in_flight", &self.in_flight.lock().len())
            .finish()
    }
}

/// One block of the server's memory list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteMem {
    tag: Box<str>,
    kind: MemKind,
    addr: u64,
    len: u64,
}

impl RemoteMem {
    /// The tag the server registered it under.
    pub fn tag(&self) -> &str {
        &self.tag
    }
    /// The kind.
    pub fn kind(&self) -> MemKind {
        self.kind
    }
    /// Its first address in the server process.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Whether it is empty (never, for a real list).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The server's memory list with tags (a copy; the library's arrays are gone after the call).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteMemList {
    items: Vec<RemoteMem>,
}

impl RemoteMemList {
    /// The block tagged `tag`.
    pub fn find(&self, tag: &str) -> Option<&RemoteMem> {
        self.items.iter().find(|m| &*m.tag == tag)
    }

    /// The block tagged `tag`, or [`Error::UnknownTag`] naming the tags there are.
    ///
    /// # Errors
    /// [`Error::UnknownTag`].
    pub fn get(&self, tag: &str) -> Result<&RemoteMem> {
        self.find(tag).ok_or_else(|| Error::UnknownTag {
            tag: tag.into(),
            known: self.items.iter().map(|m| m.tag.to_string()).collect(),
        })
    }

    /// Every block, in the server's order.
    pub fn iter(&self) -> std::slice::Iter<'_, RemoteMem> {
        self.items.iter()
    }

    /// How many blocks.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the server registered nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Local memory registered with a [`Client`] (unregistered on drop); the `local` side of
/// an [`Op`].
pub struct LocalMem<'c> {
    client: &'c Client,
    raw: hixl::MemHandle,
    kind: MemKind,
    addr: usize,
    len: usize,
    keep: Keep,
}

impl fmt::Debug for LocalMem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalMem")
            .field("kind", &self.kind)
            .field("addr", &(self.addr as *const c_void))
            .field("len", &self.len)
            .finish()
    }
}

impl LocalMem<'_> {
    /// The kind.
    pub fn kind(&self) -> MemKind {
        self.kind
    }
    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The first address.
    pub fn addr(&self) -> *mut c_void {
        self.addr as *mut c_void
    }
}

impl Drop for LocalMem<'_> {
    fn drop(&mut self) {
        let r = self.client.dev.bind().map_err(Error::from).and_then(|()| {
            // SAFETY: live client and our registration handle; batches that use this memory
            // hold `keep` in the client's in-flight table, so the memory outlives them.
            unsafe {
                xcall!(
                    self.client.lib,
                    HixlCSClientUnregMem(self.client.raw, self.raw)
                )
            }
        });
        if let Err(e) = r {
            tracing::error!(error = %e, "unregistering HixlCS client memory failed");
        }
    }
}

/// One descriptor of a batch: `len` bytes between `local` at `local_offset` and `remote` at
/// `remote_offset`. Put copies local → remote, get remote → local.
#[derive(Clone, Copy, Debug)]
pub struct Op<'a> {
    local: &'a LocalMem<'a>,
    local_offset: usize,
    remote: &'a RemoteMem,
    remote_offset: u64,
    len: usize,
}

impl<'a> Op<'a> {
    /// A descriptor (checked when the batch is submitted).
    pub fn new(
        local: &'a LocalMem<'a>,
        local_offset: usize,
        remote: &'a RemoteMem,
        remote_offset: u64,
        len: usize,
    ) -> Op<'a> {
        Op {
            local,
            local_offset,
            remote,
            remote_offset,
            len,
        }
    }
}

/// The status of an async batch (`HixlCompleteStatus`).
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompleteStatus(pub u32);

impl CompleteStatus {
    /// Still queued or running.
    pub const WAITING: CompleteStatus = CompleteStatus(hixl::HIXL_COMPLETE_STATUS_WAITING);
    /// Done.
    pub const COMPLETED: CompleteStatus = CompleteStatus(hixl::HIXL_COMPLETE_STATUS_COMPLETED);
    /// Did not start in time; will not run.
    pub const TIMEOUT: CompleteStatus = CompleteStatus(hixl::HIXL_COMPLETE_STATUS_TIMEOUT);
    /// A copy failed.
    pub const FAILED: CompleteStatus = CompleteStatus(hixl::HIXL_COMPLETE_STATUS_FAILED);

    /// Whether the batch is finished (anything but WAITING).
    pub fn is_finished(self) -> bool {
        self != Self::WAITING
    }
}

/// An async batch in flight. It borrows its client, so it cannot outlive it:
///
/// ```compile_fail,E0505
/// # fn f(c: ascend_fabric::cs::Client, ops: &[ascend_fabric::cs::Op<'_>]) {
/// let done = c.put_async(ops).unwrap();
/// drop(c); // error[E0505]: cannot move out of `c` because it is borrowed
/// drop(done);
/// # }
/// ```
///
/// Dropping it waits until the library reports the batch finished.
#[must_use = "dropping a Completion waits for the batch"]
pub struct Completion<'c> {
    client: &'c Client,
    raw: hixl::CompleteHandle,
    op: &'static str,
    finished: Option<CompleteStatus>,
}

impl fmt::Debug for Completion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("op", &self.op)
            .field("finished", &self.finished)
            .finish()
    }
}

impl Completion<'_> {
    /// Asks the library once. After a finished status the library forgets the request; the
    /// status is remembered here.
    ///
    /// # Errors
    /// `HixlCSClientQueryCompleteStatus` failures.
    #[doc(alias = "HixlCSClientQueryCompleteStatus")]
    pub fn status(&mut self) -> Result<CompleteStatus> {
        if let Some(s) = self.finished {
            return Ok(s);
        }
        let c = self.client;
        c.dev.bind()?;
        let mut st: hixl::HixlCompleteStatus = hixl::HIXL_COMPLETE_STATUS_WAITING;
        // SAFETY: live client and our outstanding request; `st` is writable.
        unsafe {
            xcall!(
                c.lib,
                HixlCSClientQueryCompleteStatus(c.raw, self.raw, &mut st)
            )
        }?;
        let s = CompleteStatus(st);
        if s.is_finished() {
            self.finished = Some(s);
            c.in_flight.lock().remove(&(self.raw as usize));
        }
        Ok(s)
    }

    /// Polls until the batch finishes or `timeout` passes.
    ///
    /// # Errors
    /// [`Error::BatchFailed`] (FAILED), [`Error::Timeout`] with `reported: true` (the library
    /// reported TIMEOUT) or `reported: false` (still WAITING after `timeout`: wait again or
    /// drop, which waits); query failures.
    pub fn wait(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_micros(20);
        loop {
            match self.status()? {
                CompleteStatus::COMPLETED => return Ok(()),
                CompleteStatus::FAILED => {
                    return Err(Error::BatchFailed {
                        op: self.op,
                        msg: message(self.client.lib),
                    })
                }
                CompleteStatus::WAITING => {}
                _ => {
                    return Err(Error::Timeout {
                        op: self.op,
                        reported: true,
                    })
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    op: self.op,
                    reported: false,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(2));
        }
    }
}

impl Drop for Completion<'_> {
    fn drop(&mut self) {
        let mut pause = Duration::from_micros(20);
        loop {
            match self.status() {
                Ok(s) if s.is_finished() => return,
                Ok(_) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
                Err(e) => {
                    // The memory stays in the client's in-flight table (leaked with it).
                    tracing::error!(error = %e, "querying a HixlCS batch failed; leaving it in flight");
                    return;
                }
            }
        }
    }
}

impl Client {
    /// Creates a client of the server at `server_ip:port`, with this side's and the server's
    /// endpoints (same protocol).
    ///
    /// # Errors
    /// [`Error::Load`]; `HixlCSClientCreate` failures: `HIXL_UNSUPPORTED` for a protocol the
    /// library does not serve, `HIXL_PARAM_INVALID` for port 0 or mismatched endpoints.
    #[doc(alias = "HixlCSClientCreate")]
    pub fn new(
        dev: &Device,
        server_ip: IpAddr,
        port: u16,
        local: &Endpoint,
        remote: &Endpoint,
    ) -> Result<Client> {
        let lib = table(dev.runtime())?;
        dev.bind()?;
        let ip_c = cstring("HixlCSClientCreate", "server_ip", &server_ip.to_string())?;
        let desc = hixl::HixlClientDesc {
            local_endpoint: &local.raw,
            remote_endpoint: &remote.raw,
            server_ip: ip_c.as_ptr(),
            server_port: u32::from(port),
            tc: 0,
            sl: 0,
            reserved: [0; 98],
        };
        let config = hixl::HixlClientConfig {
            global_resource_config: std::ptr::null(),
            reserved: [0; 120],
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: `desc` and `config` point at live values for the call; `raw` is writable.
        unsafe { xcall!(lib, HixlCSClientCreate(&desc, &config, &mut raw)) }?;
        Ok(Client {
            lib,
            dev: dev.clone(),
            raw,
            in_flight: Mutex::new(HashMap::new()),
            list_lock: Mutex::new(()),
            destroyed: false,
        })
    }

    /// Connects, waiting up to `timeout` for the server to accept, and prefetches its list.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero or huge timeout; `HixlCSClientConnect` failures:
    /// `HIXL_TIMEOUT` when nobody accepts in time, `HIXL_ALREADY_CONNECTED`,
    /// `HIXL_PARAM_INVALID` when the server has no endpoint of our protocol.
    #[doc(alias = "HixlCSClientConnect")]
    pub fn connect(&self, timeout: Duration) -> Result<()> {
        let ms = millis("HixlCSClientConnect", timeout)?;
        self.dev.bind()?;
        // SAFETY: live client handle.
        unsafe { xcall!(self.lib, HixlCSClientConnect(self.raw, ms)) }
    }

    /// The server's memory list with tags, asked for again.
    ///
    /// # Errors
    /// `HixlCSClientGetRemoteMem` failures (`HIXL_NOT_CONNECTED`, `HIXL_TIMEOUT`).
    #[doc(alias = "HixlCSClientGetRemoteMem")]
    pub fn remote_memory(&self, timeout: Duration) -> Result<RemoteMemList> {
        let ms = millis("HixlCSClientGetRemoteMem", timeout)?;
        self.dev.bind()?;
        let _g = self.list_lock.lock();
        let mut mems: *mut hixl::CommMem = std::ptr::null_mut();
        let mut tags: *mut *mut c_char = std::ptr::null_mut();
        let mut n = 0u32;
        // SAFETY: live client; the out-pointers are writable locals.
        unsafe {
            xcall!(
                self.lib,
                HixlCSClientGetRemoteMem(self.raw, &mut mems, &mut tags, &mut n, ms)
            )
        }?;
        let mut items = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            // SAFETY: the library returned `n` entries in each array, valid until its next
            // call on this client, which `list_lock` keeps from happening before we copy.
            let (m, t) = unsafe { (mems.add(i).read(), tags.add(i).read()) };
            let tag = if t.is_null() {
                String::new()
            } else {
                // SAFETY: a NUL-terminated string owned by the library (as above).
                unsafe { CStr::from_ptr(t) }.to_string_lossy().into_owned()
            };
            items.push(RemoteMem {
                tag: tag.into(),
                kind: MemKind::from_raw(m.type_),
                addr: m.addr as usize as u64,
                len: m.size,
            });
        }
        Ok(RemoteMemList { items })
    }

    /// Registers local memory for the `local` side of batches; keeps `mem` alive while
    /// registered (and while a batch uses it).
    ///
    /// # Errors
    /// `HixlCSClientRegMem` failures (`HIXL_PARAM_INVALID` for memory the runtime does not
    /// know as that kind, or overlapping a registration).
    #[doc(alias = "HixlCSClientRegMem")]
    pub fn register<M: CommMemory>(&self, mem: Arc<M>) -> Result<LocalMem<'_>> {
        let (kind, cm) = comm_mem(&*mem);
        self.dev.bind()?;
        let mut h = std::ptr::null_mut();
        // SAFETY: live client; `cm` describes memory `mem` keeps valid (CommMemory contract),
        // and the registration holds `mem`.
        unsafe {
            xcall!(
                self.lib,
                HixlCSClientRegMem(self.raw, std::ptr::null(), &cm, &mut h)
            )
        }?;
        Ok(LocalMem {
            client: self,
            raw: h,
            kind,
            addr: cm.addr as usize,
            len: cm.size as usize,
            keep: mem,
        })
    }

    /// Checks a batch on the host and builds its C descriptors and the memory to keep.
    fn build(
        &self,
        api: &'static str,
        ops: &[Op<'_>],
    ) -> Result<(Vec<hixl::HixlOneSideOpDesc>, Vec<Keep>)> {
        if ops.is_empty() {
            return Err(Error::EmptyBatch { api });
        }
        if u32::try_from(ops.len()).is_err() {
            return Err(Error::TooManyOps {
                api,
                count: ops.len(),
                max: u32::MAX as usize,
            });
        }
        let mut descs = Vec::with_capacity(ops.len());
        let mut keep: Vec<Keep> = Vec::new();
        for (index, op) in ops.iter().enumerate() {
            if op.len == 0 {
                return Err(Error::ZeroLength { index });
            }
            if !std::ptr::eq(op.local.client, self) {
                return Err(Error::ForeignRegistration { index });
            }
            if op
                .local_offset
                .checked_add(op.len)
                .map_or(true, |e| e > op.local.len)
            {
                return Err(Error::LocalOutOfBounds {
                    index,
                    offset: op.local_offset,
                    len: op.len,
                    size: op.local.len,
                });
            }
            let r = op.remote;
            if op
                .remote_offset
                .checked_add(op.len as u64)
                .map_or(true, |e| e > r.len)
            {
                return Err(Error::RemoteOutOfBounds {
                    index,
                    tag: r.tag.clone(),
                    offset: op.remote_offset,
                    len: op.len,
                    size: r.len,
                });
            }
            descs.push(hixl::HixlOneSideOpDesc {
                remote_buf: (r.addr + op.remote_offset) as usize as *mut c_void,
                local_buf: (op.local.addr + op.local_offset) as *mut c_void,
                len: op.len as u64,
            });
            if !keep.iter().any(|k| Arc::ptr_eq(k, &op.local.keep)) {
                keep.push(op.local.keep.clone());
            }
        }
        Ok((descs, keep))
    }

    /// Puts (local → remote) and waits up to `timeout`.
    ///
    /// # Errors
    /// The host checks ([`Error::EmptyBatch`], [`Error::ZeroLength`],
    /// [`Error::LocalOutOfBounds`], [`Error::RemoteOutOfBounds`], ...);
    /// `HixlCSClientBatchPutSync` failures (`HIXL_TIMEOUT`, `HIXL_NOT_CONNECTED`,
    /// `HIXL_PARAM_INVALID`, `HIXL_FAILED`).
    #[doc(alias = "HixlCSClientBatchPutSync")]
    pub fn put(&self, ops: &[Op<'_>], timeout: Duration) -> Result<()> {
        self.sync(true, ops, timeout)
    }

    /// Gets (remote → local) and waits up to `timeout`.
    ///
    /// # Errors
    /// As [`Client::put`], from `HixlCSClientBatchGetSync`.
    #[doc(alias = "HixlCSClientBatchGetSync")]
    pub fn get(&self, ops: &[Op<'_>], timeout: Duration) -> Result<()> {
        self.sync(false, ops, timeout)
    }

    fn sync(&self, put: bool, ops: &[Op<'_>], timeout: Duration) -> Result<()> {
        let api = if put {
            "HixlCSClientBatchPutSync"
        } else {
            "HixlCSClientBatchGetSync"
        };
        let ms = millis(api, timeout)?;
        let (descs, _keep) = self.build(api, ops)?;
        self.dev.bind()?;
        let n = descs.len() as u32;
        // SAFETY: live client; `descs` lives for the call and names registered memory kept
        // alive by the borrowed `LocalMem`s (and `_keep`) until the call returns. On
        // HIXL_TIMEOUT the library has dropped the unstarted batch.
        unsafe {
            if put {
                xcall!(
                    self.lib,
                    HixlCSClientBatchPutSync(self.raw, n, descs.as_ptr(), ms)
                )
            } else {
                xcall!(
                    self.lib,
                    HixlCSClientBatchGetSync(self.raw, n, descs.as_ptr(), ms)
                )
            }
        }
    }

    /// Queues a put (local → remote); the [`Completion`] reports it.
    ///
    /// # Errors
    /// As [`Client::put`], from `HixlCSClientBatchPutAsync` (also `HIXL_RESOURCE_EXHAUSTED`
    /// with 4096 batches outstanding).
    #[doc(alias = "HixlCSClientBatchPutAsync")]
    pub fn put_async(&self, ops: &[Op<'_>]) -> Result<Completion<'_>> {
        self.submit(true, ops)
    }

    /// Queues a get (remote → local); the [`Completion`] reports it.
    ///
    /// # Errors
    /// As [`Client::put_async`], from `HixlCSClientBatchGetAsync`.
    #[doc(alias = "HixlCSClientBatchGetAsync")]
    pub fn get_async(&self, ops: &[Op<'_>]) -> Result<Completion<'_>> {
        self.submit(false, ops)
    }

    fn submit(&self, put: bool, ops: &[Op<'_>]) -> Result<Completion<'_>> {
        let api = if put {
            "HixlCSClientBatchPutAsync"
        } else {
            "HixlCSClientBatchGetAsync"
        };
        let (descs, keep) = self.build(api, ops)?;
        self.dev.bind()?;
        let n = descs.len() as u32;
        let mut h = std::ptr::null_mut();
        // SAFETY: live client; `descs` is read during the call; the memory it names is
        // registered and kept alive by `keep`, stored in the in-flight table below until the
        // batch is seen finished (or leaked with the client).
        unsafe {
            if put {
                xcall!(
                    self.lib,
                    HixlCSClientBatchPutAsync(self.raw, n, descs.as_ptr(), &mut h)
                )
            } else {
                xcall!(
                    self.lib,
                    HixlCSClientBatchGetAsync(self.raw, n, descs.as_ptr(), &mut h)
                )
            }
        }?;
        self.in_flight.lock().insert(h as usize, keep);
        Ok(Completion {
            client: self,
            raw: h,
            op: if put { "put" } else { "get" },
            finished: None,
        })
    }

    /// Async batches this wrapper still tracks (their completion not yet seen).
    pub fn in_flight(&self) -> usize {
        self.in_flight.lock().len()
    }

    /// The raw handle (borrowed; do not destroy it).
    pub fn as_raw(&self) -> hixl::HixlClientHandle {
        self.raw
    }

    /// Destroys the client now, handing it back on failure.
    ///
    /// # Errors
    /// [`Error::Busy`] when the library refuses because batches are in flight (only after a
    /// [`Completion`] was leaked); other `HixlCSClientDestroy` failures.
    #[doc(alias = "HixlCSClientDestroy")]
    // The client is handed back on failure, as every `close` of this crate family does; the
    // error path is rare, so its size does not matter.
    #[allow(clippy::result_large_err)]
    pub fn close(mut self) -> std::result::Result<(), CloseError<Client, Error>> {
        match self.destroy() {
            Ok(()) => {
                self.destroyed = true;
                Ok(())
            }
            Err(e) => Err(CloseError::new(e, self)),
        }
    }

    fn destroy(&self) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: we own the handle; registrations and completions borrow `self`, so none is
        // alive (a leaked completion makes the library refuse).
        let r = unsafe { xcall!(self.lib, HixlCSClientDestroy(self.raw)) };
        match r {
            Err(e) if !self.in_flight.lock().is_empty() => Err(Error::Busy {
                in_flight: self.in_flight.lock().len(),
                source: Box::new(e),
            }),
            r => r,
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        if let Err(e) = self.destroy() {
            tracing::error!(error = %e, "destroying a HixlCS client failed; leaking it and the memory of its batches");
            std::mem::forget(std::mem::take(&mut *self.in_flight.lock()));
        }
    }
}

/// Compile-time checks of the thread-safety promises.
const _: () = {
    const fn send<T: Send>() {}
    const fn send_sync<T: Send + Sync>() {}
    send::<Server>();
    send::<Client>();
    send_sync::<RemoteMemList>();
    send_sync::<Error>();
    send_sync::<Endpoint>();
};
