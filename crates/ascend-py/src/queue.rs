//! `CompletionQueue` and `Completion`: many requests, each with user data, handed over to a
//! queue that gives back the ended ones in the order they ended, to one thread or several,
//! or to asyncio (`await queue.next()`).

use std::sync::Arc;

use ascend_fabric::{Completion, CompletionQueue};
use pyo3::prelude::*;

use crate::aio::{self, Settle};
use crate::args::seconds;
use crate::detach::Detached;
use crate::error;
use crate::request::{status_name, PyRequest};

type Queue = CompletionQueue<Py<PyAny>>;

/// Requests with user data; the ended ones come out in the order they ended. Dropping the
/// queue cancels every request still in it (their copies aborted, without waiting).
#[pyclass(name = "CompletionQueue", module = "ascend_fabric", frozen)]
pub(crate) struct PyCompletionQueue {
    queue: Detached<Arc<Queue>>,
}

/// An ended request taken from a queue: its id, peer, user data and outcome.
#[pyclass(name = "Completion", module = "ascend_fabric", frozen)]
pub(crate) struct PyCompletion {
    /// The request's id.
    #[pyo3(get)]
    id: u64,
    /// The peer.
    #[pyo3(get)]
    peer: String,
    /// What was pushed with the request.
    #[pyo3(get)]
    user_data: Py<PyAny>,
    /// Why it failed (kept as data: an exception object held here could hold this object
    /// back through its traceback, a cycle the collector cannot see through a native class).
    failure: Option<error::Parts>,
}

impl PyCompletion {
    fn new(c: Completion<Py<PyAny>>) -> PyCompletion {
        PyCompletion {
            id: c.id,
            peer: c.peer,
            user_data: c.user_data,
            failure: c.result.err().map(|e| error::Parts::of(&e)),
        }
    }
}

fn completions(cs: Vec<Completion<Py<PyAny>>>) -> Vec<PyCompletion> {
    cs.into_iter().map(PyCompletion::new).collect()
}

#[pymethods]
impl PyCompletionQueue {
    #[new]
    fn new() -> PyCompletionQueue {
        PyCompletionQueue {
            queue: Detached::new(Arc::new(Queue::new())),
        }
    }

    /// Takes `request` over (the Request object is empty afterwards) with `user_data`;
    /// returns its id. It is reported once it ends, or cancelled by `cancel(id)` or by
    /// dropping the queue.
    #[pyo3(signature = (request, user_data = None))]
    fn push(
        &self,
        py: Python<'_>,
        request: &PyRequest,
        user_data: Option<Py<PyAny>>,
    ) -> PyResult<u64> {
        let req = request.take("CompletionQueue.push")?;
        let data = user_data.unwrap_or_else(|| py.None());
        Ok(crate::detach::released(py, || self.queue.push(req, data)))
    }

    /// Requests in the queue, running or ended and not taken yet.
    fn __len__(&self, py: Python<'_>) -> usize {
        crate::detach::released(py, || self.queue.len())
    }

    /// Ended requests not taken yet.
    #[getter]
    fn ready(&self, py: Python<'_>) -> usize {
        crate::detach::released(py, || self.queue.ready())
    }

    /// Up to `max` ended requests, in the order they ended, without waiting.
    #[pyo3(signature = (max = 64))]
    fn completed(&self, py: Python<'_>, max: usize) -> Vec<PyCompletion> {
        let cs = crate::detach::released(py, || self.queue.completed(max));
        completions(cs)
    }

    /// Up to `max` ended requests, waiting up to `timeout` seconds for the first (with the GIL
    /// released); empty at once when the queue holds no request. Several threads may wait at
    /// once: each request is given to one of them.
    #[pyo3(signature = (max = 64, timeout = 30.0))]
    fn wait(&self, py: Python<'_>, max: usize, timeout: f64) -> PyResult<Vec<PyCompletion>> {
        let t = seconds("CompletionQueue.wait", timeout)?;
        let cs = crate::detach::released(py, || self.queue.wait(max, t));
        Ok(completions(cs))
    }

    /// The next request to end, awaitable on the running asyncio loop: a Completion, or None
    /// when the queue holds no request. Cancelling the awaiting task takes nothing.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let queue = Arc::clone(&self.queue);
        aio::awaitable_with(py, async move {
            let c = queue.next().await;
            Box::new(move |py: Python<'_>| {
                Ok(match c {
                    Some(c) => Py::new(py, PyCompletion::new(c))?.into_any(),
                    None => py.None(),
                })
            }) as Settle
        })
    }

    /// Takes request `id` out and cancels it (its copies aborted, without waiting); returns
    /// its user data, or None when it is not in the queue.
    fn cancel(&self, py: Python<'_>, id: u64) -> Option<Py<PyAny>> {
        crate::detach::released(py, || self.queue.cancel(id))
    }

    fn __repr__(&self) -> String {
        format!(
            "CompletionQueue(requests={}, ready={})",
            self.queue.len(),
            self.queue.ready()
        )
    }
}

#[pymethods]
impl PyCompletion {
    /// The exception it failed with (a new one at each call), or None when it completed.
    #[getter]
    fn error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.failure
            .as_ref()
            .map(|f| f.to_err().into_value(py).into_any())
    }

    /// `"completed"` or `"failed"`.
    #[getter]
    fn status(&self) -> &'static str {
        status_name(if self.failure.is_none() {
            ascend_fabric::TransferStatus::Completed
        } else {
            ascend_fabric::TransferStatus::Failed
        })
    }

    /// Raises the request's error if it failed.
    fn result(&self) -> PyResult<()> {
        match &self.failure {
            None => Ok(()),
            Some(f) => Err(f.to_err()),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Completion(id={}, peer={:?}, {})",
            self.id,
            self.peer,
            self.status()
        )
    }
}
