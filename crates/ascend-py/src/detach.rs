//! The GIL and the engine's threads: Rust values let go with the GIL released (a drop may
//! wait for the engine's threads, which may themselves wait for the GIL to wake an asyncio
//! loop), and no engine thread taking the GIL once the interpreter has begun to exit.
//!
//! A thread that asks for the GIL while the interpreter finalizes is ended by Python in a way
//! Rust frames cannot unwind through (the process aborts). So the package's `atexit` handler
//! ([`at_exit`]) closes the gate: from then on [`attach`] runs nothing, and the handler
//! returns only once every thread that had passed the gate has let the GIL go again.

use std::sync::{Condvar, Mutex};

use pyo3::prelude::*;

/// Whether the interpreter is exiting, and how many threads are inside [`attach`].
struct Gate {
    exiting: bool,
    inside: usize,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    exiting: false,
    inside: 0,
});
static LEFT: Condvar = Condvar::new();

fn gate() -> std::sync::MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` with the GIL, unless the interpreter is exiting (or gone): then None.
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    {
        let mut g = gate();
        if g.exiting {
            return None;
        }
        g.inside += 1;
    }
    let out = Python::try_attach(f);
    let mut g = gate();
    g.inside -= 1;
    if g.inside == 0 {
        LEFT.notify_all();
    }
    out
}

/// The package's `atexit` handler: closes the gate, then waits (the GIL released, so the
/// threads inside can finish) until no thread is inside.
#[pyfunction]
pub(crate) fn at_exit(py: Python<'_>) {
    py.detach(|| {
        let mut g = gate();
        g.exiting = true;
        while g.inside > 0 {
            g = LEFT.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    });
}

/// Drops `value` with the GIL released (as it is when the GIL cannot be had: at exit).
pub(crate) fn drop_detached<T: Send>(value: T) {
    let mut value = Some(value);
    let _ = attach(|py| py.detach(|| drop(value.take())));
    drop(value);
}

/// A value a Python object owns, dropped with the GIL released ([`drop_detached`]).
pub(crate) struct Detached<T: Send>(Option<T>);

impl<T: Send> Detached<T> {
    pub(crate) fn new(value: T) -> Detached<T> {
        Detached(Some(value))
    }
}

impl<T: Send> std::ops::Deref for Detached<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Only `Drop` takes the value.
        self.0
            .as_ref()
            .expect("a Detached value is present until dropped")
    }
}

impl<T: Send> Drop for Detached<T> {
    fn drop(&mut self) {
        drop_detached(self.0.take());
    }
}
