//! The Python package `ascend_fabric`'s native module (`ascend_fabric._native`): the runtime and
//! its devices, host and device buffers, and the Fabric Mem engine, over the Rust crates.
//!
//! `Engine.transfer`, `Engine.transfer_prepared`, `Engine.connect_async` and
//! `CompletionQueue.next` are awaitable on the running asyncio loop (`aio.rs`): the engine
//! wakes the loop when they end, and cancelling the task cancels them. Every call into the
//! engine or the runtime releases the GIL (`detach.rs`: an engine thread may hold a lock the
//! call needs while it waits for the GIL to wake a loop). Errors are subclasses of
//! `ascend_fabric.AscendError` (`error.rs`), carrying the HIXL status code, the Rust error's
//! variant and its text. Host buffers expose `__array_interface__`, so
//! `numpy.asarray(buf)` is a view of the memory without a copy (numpy keeps the buffer alive);
//! device memory is only reached through explicit copies.
//!
//! Built as a wheel with maturin (`pyproject.toml`); the Python half is in `python/`.

mod aio;
mod args;
mod buffer;
mod detach;
#[cfg(feature = "etcd")]
mod directory;
mod engine;
mod error;
mod prepared;
mod queue;
mod request;
mod runtime;

use pyo3::prelude::*;

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<runtime::PyRuntime>()?;
    m.add_class::<runtime::PyDevice>()?;
    m.add_class::<buffer::PyHostBuffer>()?;
    m.add_class::<buffer::PyDeviceBuffer>()?;
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<engine::PyRegistration>()?;
    m.add_class::<request::PyRequest>()?;
    m.add_class::<prepared::PyLocalBlocks>()?;
    m.add_class::<prepared::PyRemoteBlocks>()?;
    m.add_class::<queue::PyCompletionQueue>()?;
    m.add_class::<queue::PyCompletion>()?;
    m.add_class::<aio::PyPending>()?;
    #[cfg(feature = "etcd")]
    {
        m.add_class::<directory::PyEtcdDirectory>()?;
        m.add_class::<directory::PyMember>()?;
    }
    m.add_class::<runtime::PyEmulatorHold>()?;
    m.add_function(wrap_pyfunction!(runtime::emulator_live_objects, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::emulator_hold_streams, m)?)?;
    m.add_function(wrap_pyfunction!(detach::at_exit, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
