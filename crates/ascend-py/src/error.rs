//! Rust errors as the package's exceptions (defined in `python/ascend_fabric/_errors.py`): the
//! subclass of `AscendError` for the HIXL status (`PeerLost` for a lost peer), carrying the
//! status, the Rust error's variant and its text.

use pyo3::prelude::*;

/// HIXL's PARAM_INVALID, the status of an argument refused before anything is done.
const PARAM_INVALID: u32 = 103_900;

/// An error of the memory layer or the engine, as the Python exception.
pub(crate) fn py_err(status: u32, kind: &str, message: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("ascend_fabric._errors")
            .and_then(|m| m.getattr("_from_native"))
            .and_then(|make| make.call1((message.clone(), status, kind)));
        match made {
            Ok(e) => PyErr::from_value(e),
            // The package is broken (its Python half missing): say so, with the error.
            Err(why) => pyo3::exceptions::PyRuntimeError::new_err(format!("{message} ({why})")),
        }
    })
}

/// The name of the variant a `Debug` rendering starts with (`OutOfRange { .. }` → `OutOfRange`).
pub(crate) fn variant(debug: &str) -> &str {
    debug
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or(debug)
}

/// What the exception of an engine error is made of: the HIXL status, the Rust error's
/// variant, its text.
#[derive(Clone, Debug)]
pub(crate) struct Parts {
    pub(crate) status: u32,
    pub(crate) kind: String,
    pub(crate) message: String,
}

impl Parts {
    pub(crate) fn of(e: &ascend_fabric::Error) -> Parts {
        let kind = match e {
            // The memory layer's own variant says more than `Mem`.
            ascend_fabric::Error::Mem(m) => variant(&format!("{m:?}")).to_owned(),
            other => variant(&format!("{other:?}")).to_owned(),
        };
        Parts {
            status: e.status().0,
            kind,
            message: e.to_string(),
        }
    }

    /// The exception.
    pub(crate) fn to_err(&self) -> PyErr {
        py_err(self.status, &self.kind, self.message.clone())
    }
}

/// An engine error.
pub(crate) fn fabric(e: ascend_fabric::Error) -> PyErr {
    Parts::of(&e).to_err()
}

/// A memory-layer error (HIXL's status for it: as the engine reports a memory error).
pub(crate) fn mem(e: ascend_mem::Error) -> PyErr {
    fabric(ascend_fabric::Error::Mem(e))
}

/// An argument refused by this module before any call (`InvalidArgument`, PARAM_INVALID):
/// `call` names the method, `what` says what is wrong with which value.
pub(crate) fn invalid(call: &str, what: impl std::fmt::Display) -> PyErr {
    py_err(PARAM_INVALID, "InvalidArgument", format!("{call}: {what}"))
}
