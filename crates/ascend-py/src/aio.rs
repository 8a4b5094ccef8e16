//! Rust futures as asyncio futures: `Pending` polls the engine's future from the event loop's
//! thread and is polled again when the engine wakes it (its progress thread, or the thread
//! that freed a stream slot, schedules the next poll with `call_soon_threadsafe`): no thread
//! waits per request. Cancelling the asyncio future (`task.cancel()`) drops the Rust future
//! (when the loop runs the future's done callbacks, a turn after the cancel),
//! which cancels the transfer with the Rust API's guarantee (the drop never waits; the memory
//! it used is let go once the runtime says the aborted copies are done).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use pyo3::prelude::*;

use crate::error;

/// What an ended Rust future gives its asyncio future: the result, made with the GIL.
pub(crate) type Settle = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

type EngineFuture = Pin<Box<dyn Future<Output = Settle> + Send>>;

/// A Rust future bound to an asyncio future of a loop.
#[pyclass(name = "_Pending", module = "ascend_fabric", frozen)]
pub(crate) struct PyPending {
    fut: Mutex<Option<EngineFuture>>,
    aio: Py<PyAny>,
    event_loop: Py<PyAny>,
}

/// Schedules the next poll of a `Pending` on its loop.
struct LoopWaker(Py<PyPending>);

impl Wake for LoopWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // At interpreter exit there is no loop left to tell.
        let _ = crate::detach::attach(|py| {
            let p = self.0.bind(py);
            let poll = p.getattr("_poll");
            let sched = poll.and_then(|cb| {
                p.get()
                    .event_loop
                    .bind(py)
                    .call_method1("call_soon_threadsafe", (cb,))
            });
            if sched.is_err() {
                // The loop is closed: nobody will poll the future again. Let it go (which
                // cancels its transfer), so it holds no slot and no memory for ever.
                let fut = p.get().fut.try_lock().ok().and_then(|mut f| f.take());
                crate::detach::released(py, || drop(fut));
            }
        });
    }
}

/// The asyncio future of an engine call that returns nothing (`None`, or its error raised),
/// on the running loop, polled the first time now.
pub(crate) fn awaitable<'py, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = ascend_fabric::Result<()>> + Send + 'static,
{
    awaitable_with(py, async move {
        let r = fut.await;
        Box::new(move |py: Python<'_>| r.map(|()| py.None()).map_err(error::fabric)) as Settle
    })
}

/// The asyncio future of `fut`, whose output makes the result, on the running loop, polled
/// the first time now.
pub(crate) fn awaitable_with<'py, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Settle> + Send + 'static,
{
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let aio = event_loop.call_method0("create_future")?;
    let pending = Py::new(
        py,
        PyPending {
            fut: Mutex::new(Some(Box::pin(fut))),
            aio: aio.clone().unbind(),
            event_loop: event_loop.unbind(),
        },
    )?;
    aio.call_method1("add_done_callback", (pending.bind(py).getattr("_done")?,))?;
    PyPending::_poll(pending.bind(py))?;
    Ok(aio)
}

#[pymethods]
impl PyPending {
    /// Polls the Rust future (without the GIL); settles the asyncio future when it is done.
    fn _poll(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let aio = this.aio.bind(py);
        if aio.call_method0("done")?.is_truthy()? {
            // Cancelled (a wake-up queued before the cancel runs before `_done`): the Rust
            // future is not polled again, so it takes nothing (a completion stays in its
            // queue) and submits nothing; it is let go here.
            this._done(py, aio);
            return Ok(());
        }
        let waker = Waker::from(Arc::new(LoopWaker(slf.clone().unbind())));
        let out = crate::detach::released(py, || {
            let mut guard = this.fut.lock().unwrap_or_else(|p| p.into_inner());
            let fut = guard.as_mut()?; // settled or cancelled already
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fut.as_mut().poll(&mut Context::from_waker(&waker))
            }));
            match polled {
                Ok(Poll::Pending) => None,
                Ok(Poll::Ready(r)) => {
                    *guard = None;
                    Some(r)
                }
                // A bug: said to the awaiting task rather than left pending for ever.
                Err(_) => {
                    *guard = None;
                    Some(Box::new(|_: Python<'_>| {
                        Err(pyo3::exceptions::PyRuntimeError::new_err(
                            "ascend_fabric: the engine's future panicked",
                        ))
                    }) as Settle)
                }
            }
        });
        let Some(settle) = out else { return Ok(()) };
        match settle(py) {
            Ok(v) => aio.call_method1("set_result", (v,))?,
            Err(e) => aio.call_method1("set_exception", (e.into_value(py),))?,
        };
        Ok(())
    }

    /// The asyncio future is done: if it was cancelled, the Rust future is dropped (which
    /// cancels its transfer).
    fn _done(&self, py: Python<'_>, _aio: &Bound<'_, PyAny>) {
        let fut = self.fut.lock().unwrap_or_else(|p| p.into_inner()).take();
        crate::detach::released(py, || drop(fut));
    }
}
