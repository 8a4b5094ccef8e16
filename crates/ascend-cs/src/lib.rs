//! ascend-cs: safe Rust over HIXL's client/server one-sided C API, HixlCS (`HixlCS*`, bound
//! through `hixl-sys` and loaded at run time): a [`Server`] registers tagged device or host
//! memory and listens; a [`Client`] connects, reads the server's memory list with tags
//! ([`RemoteMemList`]) and moves bytes one-sided with batch put/get, sync or async
//! ([`Completion`]). It builds on ascend-mem's types alone ([`Device`](ascend_mem::Device),
//! buffers and mappings); the Fabric Mem transfer engine is another crate, ascend-fabric.
//!
//! # Which HIXL surfaces are bound, which are native, and why
//!
//! | HIXL surface | here | why |
//! |---|---|---|
//! | HixlCS C API (`cs/hixl_cs.h`, `libcann_hixl.so`) | **bound**: `hixl-sys` + this crate | plain C symbols and C structs: loaded with `dlopen`, called through a table |
//! | `hixl::Hixl` engine, FabricMem mode | **native**: `ascend_fabric::Engine` (the ascend-fabric crate) | a C++ class (pimpl) taking `ge::AscendString` and `std::map`/`std::vector`: no C ABI to bind, so the FabricMem control plane is reimplemented wire-compatibly |
//! | ADXL (deprecated) | not bound | superseded by HIXL |
//!
//! # Backends
//! The function table follows the [`Runtime`](ascend_mem::Runtime) of the
//! [`Device`](ascend_mem::Device) a server or client is made on, by the rule ascend-mem's HCCL
//! table follows too ([`ascend_mem::sibling`]; [`table`]):
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
//! [`HixlCode`] (HIXL's status codes) is defined here and shared with ascend-fabric, whose
//! engine speaks the same statuses on its control wire (it re-exports it); [`MemKind`] (device
//! or host memory) is ascend-mem's, the one such type of every crate.
//!
//! # Files
//! `code` (HIXL's status codes), `error` (the errors and their statuses), `library` (which
//! library, checked calls), `endpoint`, `memory` (what can be registered), `server`, `client`,
//! `remote` (the server's list as read), `completion` (async batches).
//!
//! # Example
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::{sync::Arc, time::Duration};
//! use ascend_cs::{Client, Endpoint, Op, Protocol, Server};
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
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod code;
mod completion;
mod endpoint;
mod error;
mod library;
mod memory;
mod remote;
mod server;

pub use ascend_mem::Addr;
pub use client::{Client, LocalMem, Op};
pub use code::HixlCode;
pub use completion::{CompleteStatus, Completion};
pub use endpoint::{Endpoint, Protocol};
pub use error::{Error, Result};
pub use library::table;
pub use memory::{CommMemory, MemKind};
pub use remote::{RemoteMem, RemoteMemList};
pub use server::{Server, ServerMem};

/// The raw bindings (`hixl-sys`), for calls through [`table`] and [`Client::as_raw`].
pub use hixl_sys as sys;

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
