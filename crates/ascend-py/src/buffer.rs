//! `HostBuffer` (host DRAM mapped for the device; readable from Python without a copy through
//! `__array_interface__`) and `DeviceBuffer` (HBM: reached only by explicit copies).

use ascend_mem::prelude::*;
use ascend_mem::{DeviceBuffer, HostBuffer};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::error;

/// Host DRAM mapped in device VA. On the emulator `numpy.asarray(buf)` is a `uint8` view of it
/// without a copy (the array keeps the buffer alive); `read` and `write` copy everywhere.
#[pyclass(name = "HostBuffer", module = "ascend_fabric", frozen)]
pub(crate) struct PyHostBuffer {
    pub(crate) buf: HostBuffer,
    /// The runtime is the emulator, whose mappings the host reaches at their device VA.
    pub(crate) host_visible: bool,
}

/// Device memory (HBM): `read` and `write` copy through the runtime; there is no view.
#[pyclass(name = "DeviceBuffer", module = "ascend_fabric", frozen)]
pub(crate) struct PyDeviceBuffer {
    pub(crate) buf: DeviceBuffer,
}

/// The copies both kinds share.
fn read(
    py: Python<'_>,
    m: &(impl MemView + Sync),
    offset: usize,
    len: Option<usize>,
) -> PyResult<Py<PyBytes>> {
    let len = len.unwrap_or_else(|| m.len().saturating_sub(offset));
    // Checked before anything is allocated for it.
    if offset.checked_add(len).map_or(true, |end| end > m.len()) {
        return Err(error::mem(ascend_mem::Error::OutOfBounds {
            what: "read",
            offset,
            len,
            size: m.len(),
        }));
    }
    let mut out = vec![0u8; len];
    crate::detach::released(py, || m.read_into(&mut out, offset)).map_err(error::mem)?;
    Ok(PyBytes::new(py, &out).unbind())
}

fn write(py: Python<'_>, m: &(impl MemView + Sync), data: &[u8], offset: usize) -> PyResult<()> {
    crate::detach::released(py, || m.write_from(data, offset)).map_err(error::mem)
}

#[pymethods]
impl PyHostBuffer {
    /// Its address (device VA, which is also where the host reaches it).
    #[getter]
    fn addr(&self) -> u64 {
        self.buf.addr().get()
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    /// `len` bytes (or all from `offset`) from `offset`, copied.
    #[pyo3(signature = (offset = 0, len = None))]
    fn read(&self, py: Python<'_>, offset: usize, len: Option<usize>) -> PyResult<Py<PyBytes>> {
        read(py, &self.buf, offset, len)
    }

    /// Copies `data` in at `offset`.
    #[pyo3(signature = (data, offset = 0))]
    fn write(&self, py: Python<'_>, data: &[u8], offset: usize) -> PyResult<()> {
        write(py, &self.buf, data, offset)
    }

    /// numpy's array interface: the bytes as `uint8`, writable, in place. Only where the host
    /// reaches the mapping at its address (the emulator); elsewhere an AttributeError, and
    /// `read`/`write` copy.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if !self.host_visible {
            return Err(pyo3::exceptions::PyAttributeError::new_err(
                "HostBuffer.__array_interface__: this runtime's host mappings are not known to \
                 be readable by the CPU at their address; use read() and write()",
            ));
        }
        let d = PyDict::new(py);
        d.set_item("shape", (self.buf.len(),))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.buf.addr().get(), false))?;
        d.set_item("version", 3)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "HostBuffer(addr={:#x}, len={})",
            self.addr(),
            self.buf.len()
        )
    }
}

#[pymethods]
impl PyDeviceBuffer {
    /// Its address (device VA).
    #[getter]
    fn addr(&self) -> u64 {
        self.buf.addr().get()
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    /// `len` bytes (or all from `offset`) from `offset`, copied to the host.
    #[pyo3(signature = (offset = 0, len = None))]
    fn read(&self, py: Python<'_>, offset: usize, len: Option<usize>) -> PyResult<Py<PyBytes>> {
        read(py, &self.buf, offset, len)
    }

    /// Copies `data` in at `offset`.
    #[pyo3(signature = (data, offset = 0))]
    fn write(&self, py: Python<'_>, data: &[u8], offset: usize) -> PyResult<()> {
        write(py, &self.buf, data, offset)
    }

    fn __repr__(&self) -> String {
        format!(
            "DeviceBuffer(addr={:#x}, len={})",
            self.addr(),
            self.buf.len()
        )
    }
}

impl PyHostBuffer {
    pub(crate) fn new(buf: HostBuffer) -> PyHostBuffer {
        let host_visible = buf.mapping().device().runtime().backend().is_emulator();
        PyHostBuffer { buf, host_visible }
    }
}
