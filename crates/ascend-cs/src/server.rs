//! The HixlCS server: endpoints, tagged registered memory ([`ServerMem`]), a listener.

use std::ffi::c_void;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ascend_mem::{Addr, CloseError, Device};
use hixl_sys as hixl;
use hixl_sys::HixlLib;

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::library::{cstring, table, xcall};
use crate::memory::{comm_mem, CommMemory, Keep, MemKind};

/// A HixlCS server: endpoints, tagged registered memory, a listener. Destroyed on drop.
#[must_use = "dropping the Server stops serving and deregisters its memory"]
pub struct Server {
    lib: &'static HixlLib,
    dev: Device,
    raw: hixl::HixlServerHandle,
    destroyed: bool,
}

#[allow(unsafe_code)]
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
    #[allow(unsafe_code)]
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
    /// with [`Client::remote_memory`](crate::client::Client::remote_memory)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a tag with NUL; `HixlCSServerRegMem` failures
    /// (`HIXL_PARAM_INVALID`: a tag already used, memory overlapping a registration, memory
    /// the runtime does not know as that kind).
    #[doc(alias = "HixlCSServerRegMem")]
    #[allow(unsafe_code)]
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
    #[allow(unsafe_code)]
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

    #[allow(unsafe_code)]
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
    pub fn addr(&self) -> Addr {
        Addr::new(self.addr as u64)
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

    #[allow(unsafe_code)]
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
