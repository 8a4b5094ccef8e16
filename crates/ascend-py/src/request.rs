//! `Request`: a running transfer (`Engine.transfer_async`, `Engine.transfer_prepared_async`),
//! polled, waited for, cancelled, or handed to a `CompletionQueue`.

use std::sync::RwLock;

use ascend_fabric::{TransferRequest, TransferStatus};
use pyo3::prelude::*;

use crate::args::seconds;
use crate::detach::drop_detached;
use crate::error;

/// A running transfer. Dropping it while it runs aborts it (its copies are discarded; what
/// they use is let go once the runtime says they are done). `CompletionQueue.push` takes it
/// over: the object is empty from then on.
#[pyclass(name = "Request", module = "ascend_fabric", frozen)]
pub(crate) struct PyRequest {
    /// Read by every call; taken (written) by `CompletionQueue.push` and by `Drop`.
    req: RwLock<Option<TransferRequest>>,
}

impl PyRequest {
    pub(crate) fn new(req: TransferRequest) -> PyRequest {
        PyRequest {
            req: RwLock::new(Some(req)),
        }
    }

    /// Runs `f` on the request, or says it was handed to a queue.
    fn with<T>(&self, call: &str, f: impl FnOnce(&TransferRequest) -> T) -> PyResult<T> {
        let guard = self.req.read().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(r) => Ok(f(r)),
            None => Err(moved(call)),
        }
    }

    /// The request, taken out for `call` (a completion queue). Refused while another thread
    /// uses it (a wait, a status).
    pub(crate) fn take(&self, call: &str) -> PyResult<TransferRequest> {
        let mut guard = self.req.try_write().map_err(|_| {
            error::invalid(
                call,
                "another thread is using the request (waiting on it, or asking its status)",
            )
        })?;
        guard.take().ok_or_else(|| moved(call))
    }
}

fn moved(call: &str) -> PyErr {
    error::invalid(call, "the request was handed to a CompletionQueue")
}

#[pymethods]
impl PyRequest {
    /// Its id, unique in the process.
    #[getter]
    fn id(&self) -> PyResult<u64> {
        self.with("Request.id", TransferRequest::id)
    }

    /// `"waiting"`, `"completed"` or `"failed"` (asking the runtime without waiting).
    fn status(&self, py: Python<'_>) -> PyResult<&'static str> {
        let st =
            crate::detach::released(py, || self.with("Request.status", TransferRequest::status))?;
        Ok(status_name(st))
    }

    /// Waits up to `timeout` seconds for it to end; raises its error if it failed (and
    /// `InvalidArgument` naming the earlier report on a second wait).
    #[pyo3(signature = (timeout = 30.0))]
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let t = seconds("Request.wait", timeout)?;
        crate::detach::released(py, || self.with("Request.wait", |r| r.wait(t)))?
            .map_err(error::fabric)
    }

    /// Cancels it if its copies have not ended, waiting for the aborted copies; whether it did.
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        crate::detach::released(py, || self.with("Request.cancel", TransferRequest::cancel))
    }

    fn __repr__(&self) -> String {
        match self
            .req
            .read()
            .ok()
            .and_then(|g| g.as_ref().map(TransferRequest::id))
        {
            Some(id) => format!("Request(id={id})"),
            None => "Request(handed to a CompletionQueue)".to_owned(),
        }
    }
}

/// A status as the package names it.
pub(crate) fn status_name(st: TransferStatus) -> &'static str {
    match st {
        TransferStatus::Waiting => "waiting",
        TransferStatus::Completed => "completed",
        TransferStatus::Failed => "failed",
    }
}

impl Drop for PyRequest {
    fn drop(&mut self) {
        let req = self.req.get_mut().map(Option::take).unwrap_or(None);
        drop_detached(req);
    }
}
