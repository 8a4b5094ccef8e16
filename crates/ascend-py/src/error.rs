//! Rust errors as `ascend_fabric.AscendError` (defined in `python/ascend_fabric/_errors.py`):
//! the message, the HIXL status code and the error's kind.

use pyo3::prelude::*;

/// An error of the memory layer or the engine, as the Python exception.
pub(crate) fn py_err(status: u32, kind: &str, message: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("ascend_fabric._errors")
            .and_then(|m| m.getattr("AscendError"))
            .and_then(|cls| cls.call1((message.clone(), status, kind)));
        match made {
            Ok(e) => PyErr::from_value(e),
            // The package is broken (its Python half missing): say so, with the error.
            Err(why) => pyo3::exceptions::PyRuntimeError::new_err(format!("{message} ({why})")),
        }
    })
}

/// An engine error.
pub(crate) fn fabric(e: ascend_fabric::Error) -> PyErr {
    py_err(e.status().0, &format!("{:?}", e.status()), e.to_string())
}

/// A memory-layer error (HIXL's status for it: as the engine reports a memory error).
pub(crate) fn mem(e: ascend_mem::Error) -> PyErr {
    fabric(ascend_fabric::Error::Mem(e))
}
