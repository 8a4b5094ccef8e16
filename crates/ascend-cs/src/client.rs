//! The HixlCS client: connecting, the server's memory list, local registrations
//! ([`LocalMem`]), and batches of one-sided copies ([`Op`]), sync or async.

use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ascend_mem::{Addr, CloseError, Device};
use hixl_sys as hixl;
use hixl_sys::HixlLib;
use parking_lot::Mutex;

use crate::completion::{Completion, InFlight};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::library::{cstring, millis, table, xcall};
use crate::memory::{comm_mem, kind_of_raw, CommMemory, Keep, MemKind};
use crate::remote::{RemoteMem, RemoteMemList};

/// A HixlCS client. Destroyed on drop; if async batches are still in flight then (their
/// [`Completion`]s were leaked), the client and the memory those batches use are leaked
/// instead, so no copy can run into freed memory.
#[must_use = "dropping the Client disconnects it"]
pub struct Client {
    lib: &'static HixlLib,
    dev: Device,
    raw: hixl::HixlClientHandle,
    /// Memory kept alive for each outstanding async batch, by completion handle.
    in_flight: InFlight,
    /// Serialises `HixlCSClientGetRemoteMem` with the copy of its library-owned arrays.
    list_lock: Mutex<()>,
    destroyed: bool,
}

#[allow(unsafe_code)]
// SAFETY: the handle is an id, not tied to the thread that made it; every method and Drop
// makes `dev` current on the calling thread before calling HIXL; our own state is behind
// locks. Not Sync: concurrent calls on one client are not documented as safe.
unsafe impl Send for Client {}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("handle", &self.raw)
            .field("in_flight", &self.in_flight.len())
            .finish()
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
    pub fn addr(&self) -> Addr {
        Addr::new(self.addr as u64)
    }
}

impl Drop for LocalMem<'_> {
    #[allow(unsafe_code)]
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
    remote_offset: usize,
    len: usize,
}

impl<'a> Op<'a> {
    /// A descriptor (checked when the batch is submitted).
    pub fn new(
        local: &'a LocalMem<'a>,
        local_offset: usize,
        remote: &'a RemoteMem,
        remote_offset: usize,
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

impl Client {
    /// Creates a client of the server at `server_ip:port`, with this side's and the server's
    /// endpoints (same protocol).
    ///
    /// # Errors
    /// [`Error::Load`]; `HixlCSClientCreate` failures: `HIXL_UNSUPPORTED` for a protocol the
    /// library does not serve, `HIXL_PARAM_INVALID` for port 0 or mismatched endpoints.
    #[doc(alias = "HixlCSClientCreate")]
    #[allow(unsafe_code)]
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
            in_flight: InFlight::default(),
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
    #[allow(unsafe_code)]
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
    #[allow(unsafe_code)]
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
                kind: kind_of_raw(m.type_),
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
    #[allow(unsafe_code)]
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
            // The block's address comes from the server's list: checked, never trusted.
            let remote_buf = op
                .remote_offset
                .checked_add(op.len)
                .filter(|&e| e <= r.len())
                .and_then(|e| r.addr().checked_add(e))
                .map(|_| r.addr() + op.remote_offset);
            let Some(remote_buf) = remote_buf else {
                return Err(Error::RemoteOutOfBounds {
                    index,
                    tag: r.tag.clone(),
                    offset: op.remote_offset,
                    len: op.len,
                    size: r.len(),
                });
            };
            descs.push(hixl::HixlOneSideOpDesc {
                remote_buf: remote_buf.as_ptr(),
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

    #[allow(unsafe_code)]
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

    #[allow(unsafe_code)]
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
        self.in_flight.insert(h, keep);
        Ok(Completion::new(
            self.lib,
            &self.dev,
            self.raw,
            &self.in_flight,
            h,
            if put { "put" } else { "get" },
        ))
    }

    /// Async batches this wrapper still tracks (their completion not yet seen).
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
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

    #[allow(unsafe_code)]
    fn destroy(&self) -> Result<()> {
        self.dev.bind()?;
        // SAFETY: we own the handle; registrations and completions borrow `self`, so none is
        // alive (a leaked completion makes the library refuse).
        let r = unsafe { xcall!(self.lib, HixlCSClientDestroy(self.raw)) };
        match r {
            Err(e) if self.in_flight.len() > 0 => Err(Error::Busy {
                in_flight: self.in_flight.len(),
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
            self.in_flight.leak();
        }
    }
}
