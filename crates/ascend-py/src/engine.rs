//! `Engine` (the Fabric Mem engine: memory, registrations, peers, synchronous transfers) and
//! `Registration` (memory offered to peers until it is deregistered or dropped).

use std::sync::Mutex;

use ascend_fabric::{Engine, EngineOptions, Registrable, Registration};
use ascend_mem::Addr;
use pyo3::prelude::*;

use crate::aio;
use crate::args::{op_of, raw_descs, seconds};
use crate::buffer::{PyDeviceBuffer, PyHostBuffer};
use crate::detach::{drop_detached, Detached};
use crate::error;
use crate::request::PyRequest;
use crate::runtime::PyDevice;

/// A Fabric Mem engine on a device, listening at `local` (`ip:port`) or not (`ip`).
#[pyclass(name = "Engine", module = "ascend_fabric", frozen)]
pub(crate) struct PyEngine {
    /// Let go without the GIL.
    engine: Detached<Engine>,
}

/// Memory offered to peers: deregistered by `deregister()` or when dropped. It keeps the
/// buffer it was made from alive.
#[pyclass(name = "Registration", module = "ascend_fabric", frozen)]
pub(crate) struct PyRegistration {
    reg: Mutex<Option<Registration>>,
    /// The buffer registered (None for raw memory the caller owns).
    _owner: Option<Py<PyAny>>,
    addr: u64,
    len: usize,
    kind: ascend_fabric::MemKind,
}

#[pymethods]
impl PyEngine {
    /// An engine on `device` at `local`, with `task_stream_num` copy streams per transfer and
    /// a VA pool of `pool_capacity` bytes (the engine's default when not given).
    #[new]
    #[pyo3(signature = (device, local, task_stream_num = 4, pool_capacity = None))]
    fn new(
        py: Python<'_>,
        device: &PyDevice,
        local: &str,
        task_stream_num: u32,
        pool_capacity: Option<usize>,
    ) -> PyResult<PyEngine> {
        let mut b = EngineOptions::builder().task_stream_num(task_stream_num);
        if let Some(c) = pool_capacity {
            b = b.pool_capacity(c);
        }
        let opts = b.build().map_err(|e| error::fabric(e.into()))?;
        let engine = crate::detach::released(py, || Engine::new(&device.dev, local, opts))
            .map_err(error::fabric)?;
        Ok(PyEngine {
            engine: Detached::new(engine),
        })
    }

    /// An engine configured by HIXL's option map (`Hixl.initialize`'s options: strings, with
    /// `EnableUseFabricMem` "1" selecting this engine), on `device` at `local`.
    #[staticmethod]
    fn from_hixl(
        py: Python<'_>,
        device: &PyDevice,
        local: &str,
        options: std::collections::BTreeMap<String, String>,
    ) -> PyResult<PyEngine> {
        let opts = EngineOptions::from_hixl(&options).map_err(|e| error::fabric(e.into()))?;
        let engine = crate::detach::released(py, || Engine::new(&device.dev, local, opts))
            .map_err(error::fabric)?;
        Ok(PyEngine {
            engine: Detached::new(engine),
        })
    }

    /// Its address as peers name it.
    #[getter]
    fn local_addr(&self) -> String {
        self.engine().local_addr().as_str().to_owned()
    }

    /// Its identity on the control wire.
    #[getter]
    fn channel_id(&self) -> String {
        self.engine().channel_id().to_owned()
    }

    /// Host DRAM of `size` bytes, mapped for the device.
    fn alloc_host(&self, py: Python<'_>, size: usize) -> PyResult<PyHostBuffer> {
        let buf = crate::detach::released(py, || self.engine().alloc_host(size))
            .map_err(error::fabric)?;
        Ok(PyHostBuffer::new(buf))
    }

    /// Device memory of `size` bytes.
    fn alloc_device(&self, py: Python<'_>, size: usize) -> PyResult<PyDeviceBuffer> {
        let buf = crate::detach::released(py, || self.engine().alloc_device(size))
            .map_err(error::fabric)?;
        Ok(PyDeviceBuffer { buf })
    }

    /// Offers `buffer` (a HostBuffer or DeviceBuffer) to peers.
    fn register(&self, py: Python<'_>, buffer: Bound<'_, PyAny>) -> PyResult<PyRegistration> {
        self.register_buffer(py, "Engine.register", buffer, None)
    }

    /// Offers `buffer` as `register` does, under `name`: peers that connect afterwards see
    /// the name and prepare blocks of it by name (`Engine.prepare_remote(peer, [name], ...)`).
    fn register_named(
        &self,
        py: Python<'_>,
        buffer: Bound<'_, PyAny>,
        name: &str,
    ) -> PyResult<PyRegistration> {
        self.register_buffer(py, "Engine.register_named", buffer, Some(name))
    }

    /// Offers `[addr, addr + len)`, memory the caller owns (mapped by another library, a
    /// `torch_npu` tensor's `data_ptr()`), with the same checks as for a buffer: the range
    /// must lie in memory the runtime knows. The caller keeps the memory mapped until the
    /// registration is gone.
    fn register_raw(&self, py: Python<'_>, addr: u64, len: usize) -> PyResult<PyRegistration> {
        let reg = crate::detach::released(py, || self.engine().register_raw(Addr::new(addr), len))
            .map_err(error::fabric)?;
        Ok(PyRegistration::new(reg, None))
    }

    /// Connects to the engine at `remote` (`ip:port`), within `timeout` seconds.
    #[pyo3(signature = (remote, timeout = 10.0))]
    fn connect(&self, py: Python<'_>, remote: &str, timeout: f64) -> PyResult<()> {
        let t = seconds("Engine.connect", timeout)?;
        crate::detach::released(py, || self.engine().connect(remote, t)).map_err(error::fabric)
    }

    /// Disconnects from `remote` (its transfers in flight fail with a peer-lost error).
    #[pyo3(signature = (remote, timeout = 10.0))]
    fn disconnect(&self, py: Python<'_>, remote: &str, timeout: f64) -> PyResult<()> {
        let t = seconds("Engine.disconnect", timeout)?;
        crate::detach::released(py, || self.engine().disconnect(remote, t)).map_err(error::fabric)
    }

    /// The peers connected to.
    fn peers(&self, py: Python<'_>) -> Vec<String> {
        crate::detach::released(py, || self.engine().peers())
    }

    /// Copies each `(local_addr, remote_addr, len)` of `descs` to (`op="write"`) or from
    /// (`"read"`) `remote`, and waits up to `timeout` seconds (on timeout the transfer is
    /// aborted). Every descriptor is checked against the registrations first.
    #[pyo3(signature = (remote, op, descs, timeout = 30.0))]
    fn transfer_sync(
        &self,
        py: Python<'_>,
        remote: &str,
        op: &str,
        descs: Vec<(u64, u64, usize)>,
        timeout: f64,
    ) -> PyResult<()> {
        let (op, t) = (
            op_of("Engine.transfer_sync", op)?,
            seconds("Engine.transfer_sync", timeout)?,
        );
        let descs = raw_descs(descs);
        crate::detach::released(py, || self.engine().transfer_sync(remote, op, &descs, t))
            .map_err(error::fabric)
    }

    /// Starts the transfer and returns at once with its request (`TransferAsync`): fails at
    /// once when every stream slot is busy.
    fn transfer_async(
        &self,
        py: Python<'_>,
        remote: &str,
        op: &str,
        descs: Vec<(u64, u64, usize)>,
    ) -> PyResult<PyRequest> {
        let op = op_of("Engine.transfer_async", op)?;
        let descs = raw_descs(descs);
        let req = crate::detach::released(py, || self.engine().transfer_async(remote, op, &descs))
            .map_err(error::fabric)?;
        Ok(PyRequest::new(req))
    }

    /// Sends the notify (`name`, `msg`) to `remote` (`SendNotify`).
    #[pyo3(signature = (remote, name, msg, timeout = 1.0))]
    fn send_notify(
        &self,
        py: Python<'_>,
        remote: &str,
        name: &str,
        msg: &str,
        timeout: f64,
    ) -> PyResult<()> {
        let t = seconds("Engine.send_notify", timeout)?;
        crate::detach::released(py, || self.engine().send_notify(remote, name, msg, t))
            .map_err(error::fabric)
    }

    /// The notifies received since the last call, as (name, message) pairs (`GetNotifies`).
    fn take_notifies(&self, py: Python<'_>) -> Vec<(String, String)> {
        crate::detach::released(py, || self.engine().take_notifies())
    }

    /// The same transfer, awaitable on the running asyncio loop: it waits for a free stream
    /// slot in turn (back-pressure), then for its copies; the loop is woken when it ends (no
    /// thread waits for it). Cancelling the awaiting task cancels the transfer: nothing was
    /// queued, or its copies are aborted and the memory they use is let go once the runtime
    /// says they are done.
    fn transfer<'py>(
        &self,
        py: Python<'py>,
        remote: &str,
        op: &str,
        descs: Vec<(u64, u64, usize)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = op_of("Engine.transfer", op)?;
        let fut = self.engine().transfer(remote, op, &raw_descs(descs));
        aio::awaitable(py, fut)
    }

    /// [`connect`](Self::connect), awaitable on the running asyncio loop (the exchange runs on
    /// a helper thread; the loop is woken when it ends).
    #[pyo3(signature = (remote, timeout = 10.0))]
    fn connect_async<'py>(
        &self,
        py: Python<'py>,
        remote: &str,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let t = seconds("Engine.connect_async", timeout)?;
        aio::awaitable(py, self.engine().connect_async(remote, t))
    }

    /// This engine's counters for `remote` (completed writes and reads, bytes, descriptors,
    /// errors, in flight, segments), or None when not connected.
    fn peer_stats(
        &self,
        py: Python<'_>,
        remote: &str,
    ) -> Option<std::collections::BTreeMap<&'static str, u64>> {
        crate::detach::released(py, || self.engine().peer_stats(remote)).map(|s| {
            [
                ("writes", s.writes),
                ("reads", s.reads),
                ("bytes_written", s.bytes_written),
                ("bytes_read", s.bytes_read),
                ("descriptors", s.descriptors),
                ("errors", s.errors),
                ("in_flight", s.in_flight),
                ("segments", s.segments),
            ]
            .into_iter()
            .collect()
        })
    }

    /// Stream slots made so far (each `task_stream_num` streams; at most 512 streams).
    #[getter]
    fn stream_slots(&self, py: Python<'_>) -> usize {
        crate::detach::released(py, || self.engine().stream_slots())
    }

    fn __repr__(&self) -> String {
        format!("Engine({:?})", self.local_addr())
    }
}

impl PyEngine {
    /// Registers a HostBuffer or DeviceBuffer, named or not; the registration keeps the
    /// buffer alive.
    fn register_buffer(
        &self,
        py: Python<'_>,
        call: &str,
        buffer: Bound<'_, PyAny>,
        name: Option<&str>,
    ) -> PyResult<PyRegistration> {
        fn reg<R: Registrable + ?Sized>(
            e: &Engine,
            mem: &R,
            name: Option<&str>,
        ) -> ascend_fabric::Result<Registration> {
            match name {
                Some(n) => e.register_named(mem, n),
                None => e.register(mem),
            }
        }
        let e = self.engine();
        let made = if let Ok(h) = buffer.cast::<PyHostBuffer>() {
            let h = h.get();
            crate::detach::released(py, || reg(e, &h.buf, name))
        } else if let Ok(d) = buffer.cast::<PyDeviceBuffer>() {
            let d = d.get();
            crate::detach::released(py, || reg(e, &d.buf, name))
        } else {
            return Err(error::invalid(
                call,
                format_args!(
                    "a HostBuffer or DeviceBuffer, not {}",
                    buffer.get_type().name()?
                ),
            ));
        };
        Ok(PyRegistration::new(
            made.map_err(error::fabric)?,
            Some(buffer.unbind()),
        ))
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }
}

impl Drop for PyRegistration {
    fn drop(&mut self) {
        let reg = self.reg.get_mut().map(Option::take).unwrap_or(None);
        drop_detached(reg);
    }
}

impl PyRegistration {
    /// The registration (a handle of it), unless it was deregistered.
    pub(crate) fn get(&self, call: &str) -> PyResult<Registration> {
        let reg = self.reg.lock().unwrap_or_else(|p| p.into_inner());
        reg.clone().ok_or_else(|| {
            error::invalid(
                call,
                format_args!("the registration at {:#x} was deregistered", self.addr),
            )
        })
    }

    fn new(reg: Registration, owner: Option<Py<PyAny>>) -> PyRegistration {
        PyRegistration {
            addr: reg.addr().get(),
            len: reg.len(),
            kind: reg.kind(),
            reg: Mutex::new(Some(reg)),
            _owner: owner,
        }
    }
}

#[pymethods]
impl PyRegistration {
    /// The first address registered.
    #[getter]
    fn addr(&self) -> u64 {
        self.addr
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// What the runtime says the memory is: `"device"` (HBM) or `"host"` (host DRAM).
    #[getter]
    fn kind(&self) -> &'static str {
        match self.kind {
            ascend_fabric::MemKind::Device => "device",
            ascend_fabric::MemKind::Host => "host",
        }
    }

    /// Deregisters now (waiting for transfers that use it, and for peers to let go of their
    /// imports of it); a second call does nothing.
    fn deregister(&self, py: Python<'_>) {
        let reg = self.reg.lock().map(|mut r| r.take()).unwrap_or(None);
        crate::detach::released(py, || drop(reg));
    }

    /// Whether it is still registered.
    #[getter]
    fn registered(&self) -> bool {
        self.reg.lock().map(|r| r.is_some()).unwrap_or(false)
    }

    fn __repr__(&self) -> String {
        format!("Registration(addr={:#x}, len={})", self.addr, self.len)
    }
}
