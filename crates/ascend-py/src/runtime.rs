//! `Runtime` and `Device`: the backend `ASCEND_MEM_BACKEND` names (`cann`, or `sim` for the
//! emulator built into the package; unset means CANN), and a device of it.

use ascend_mem::{Device, Runtime};
use pyo3::prelude::*;

use crate::error;

/// The CANN runtime, or the emulator when `ASCEND_MEM_BACKEND=sim` says so.
#[pyclass(name = "Runtime", module = "ascend_fabric", frozen)]
pub(crate) struct PyRuntime {
    pub(crate) rt: Runtime,
}

#[pymethods]
impl PyRuntime {
    /// The runtime `ASCEND_MEM_BACKEND` names: `cann` or unset, CANN (an error naming what is
    /// missing when it does not load: never the emulator); `sim`, the built-in emulator.
    #[new]
    fn new(py: Python<'_>) -> PyResult<PyRuntime> {
        let rt = crate::detach::released(py, Runtime::from_env).map_err(error::mem)?;
        Ok(PyRuntime { rt })
    }

    /// Which implementation serves the runtime (`emulator (in-process)`, or the CANN library).
    #[getter]
    fn backend(&self) -> String {
        self.rt.backend().to_string()
    }

    /// Whether the emulator serves it.
    #[getter]
    fn is_emulator(&self) -> bool {
        self.rt.backend().is_emulator()
    }

    /// The number of devices.
    fn device_count(&self, py: Python<'_>) -> PyResult<u32> {
        crate::detach::released(py, || self.rt.device_count()).map_err(error::mem)
    }

    /// Device `id` (opened on first use).
    fn device(&self, py: Python<'_>, id: i32) -> PyResult<PyDevice> {
        let dev = crate::detach::released(py, || self.rt.device(id)).map_err(error::mem)?;
        Ok(PyDevice { dev })
    }

    fn __repr__(&self) -> String {
        format!("Runtime(backend={:?})", self.backend())
    }
}

/// One device of a runtime.
#[pyclass(name = "Device", module = "ascend_fabric", frozen)]
pub(crate) struct PyDevice {
    pub(crate) dev: Device,
}

#[pymethods]
impl PyDevice {
    /// The device id.
    #[getter]
    fn id(&self) -> i32 {
        self.dev.id()
    }

    /// Device memory of at least `size` bytes (whole allocation granules), of no engine:
    /// for memory a program registers by address (`Engine.register_raw`, `Hixl.register_mem`).
    fn alloc_device(&self, py: Python<'_>, size: usize) -> PyResult<crate::buffer::PyDeviceBuffer> {
        let buf = crate::detach::released(py, || ascend_mem::DeviceBuffer::new(&self.dev, size))
            .map_err(error::mem)?;
        Ok(crate::buffer::PyDeviceBuffer { buf })
    }

    /// Host DRAM of at least `size` bytes mapped for the device, of no engine.
    fn alloc_host(&self, py: Python<'_>, size: usize) -> PyResult<crate::buffer::PyHostBuffer> {
        let buf = crate::detach::released(py, || ascend_mem::HostBuffer::new(&self.dev, size))
            .map_err(error::mem)?;
        Ok(crate::buffer::PyHostBuffer::new(buf))
    }

    /// Where the memory at `addr` lives, as the runtime says (`aclrtPointerGetAttributes`):
    /// `"device"` (HBM) or `"host"`.
    fn pointer_kind(&self, py: Python<'_>, addr: u64) -> PyResult<&'static str> {
        let info =
            crate::detach::released(py, || self.dev.pointer_info(ascend_mem::Addr::new(addr)))
                .map_err(error::mem)?;
        Ok(if info.device.is_some() {
            "device"
        } else {
            "host"
        })
    }

    fn __repr__(&self) -> String {
        format!("Device({})", self.dev.id())
    }
}

/// The emulator's live objects (allocations, mappings, reservations, streams, ...) as a dict,
/// for tests that check nothing is left behind; empty counts are zero. The emulator's, whatever
/// the backend: on CANN it counts nothing.
#[pyfunction]
pub(crate) fn emulator_live_objects() -> std::collections::BTreeMap<String, u64> {
    ascend_sim::counters()
        .named()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
}

/// The emulator holding every stream before its next task, until released (a test hook for
/// work that must stay queued while a test acts: cancels, drops, lost peers). Use it as a
/// context manager, or call `release()`; dropping it releases too.
#[pyclass(name = "EmulatorHold", module = "ascend_fabric", frozen)]
pub(crate) struct PyEmulatorHold {
    hold: std::sync::Mutex<Option<ascend_sim::testing::Hold>>,
}

#[pymethods]
impl PyEmulatorHold {
    /// Lets the streams run again; a second call does nothing.
    fn release(&self, py: Python<'_>) {
        let h = self.hold.lock().map(|mut h| h.take()).unwrap_or(None);
        crate::detach::released(py, || drop(h));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: Option<Bound<'_, PyAny>>,
        _value: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> bool {
        self.release(py);
        false
    }
}

impl Drop for PyEmulatorHold {
    fn drop(&mut self) {
        let h = self.hold.get_mut().map(Option::take).unwrap_or(None);
        crate::detach::drop_detached(h);
    }
}

/// Holds every stream of the emulator before its next task (see `EmulatorHold`). Only for
/// tests on the emulator: it holds nothing of a CANN runtime.
#[pyfunction]
pub(crate) fn emulator_hold_streams() -> PyEmulatorHold {
    PyEmulatorHold {
        hold: std::sync::Mutex::new(Some(ascend_sim::testing::hold_all_streams())),
    }
}
