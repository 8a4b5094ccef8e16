//! The GIL and the engine's threads: Rust values let go with the GIL released (a drop may
//! wait for the engine's threads, which may themselves wait for the GIL to wake an asyncio
//! loop), and no thread taking the GIL once the interpreter has begun to exit.
//!
//! A thread that asks for the GIL while the interpreter finalizes is ended by Python in a way
//! Rust frames cannot unwind through (the process aborts): an engine thread waking a loop
//! ([`attach`]), or a Python thread (a daemon one) coming back from a call that released the
//! GIL ([`released`]). So the package's `atexit` handler ([`at_exit`]) closes a gate: from
//! then on `attach` runs nothing, and a thread coming back from `released` parks for good
//! (the process is exiting) instead of asking for the GIL; the handler returns only once
//! every thread that had passed the gate has finished with the GIL.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

use pyo3::prelude::*;

/// Whether the interpreter is exiting (and which thread runs the exit), and how many threads
/// passed the gate and have not yet finished with the GIL.
struct Gate {
    exiting: Option<ThreadId>,
    inside: usize,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    exiting: None,
    inside: 0,
});
static LEFT: Condvar = Condvar::new();

fn gate() -> MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A thread past the gate; leaving it (also by a panic) is counted.
struct Inside;

impl Inside {
    /// Passes the gate, unless the interpreter is exiting and this is not the exiting thread.
    fn enter() -> Option<Inside> {
        let mut g = gate();
        match g.exiting {
            Some(t) if t != std::thread::current().id() => None,
            _ => {
                g.inside += 1;
                Some(Inside)
            }
        }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let mut g = gate();
        g.inside -= 1;
        if g.inside == 0 {
            LEFT.notify_all();
        }
    }
}

/// Runs `f` with the GIL, unless the interpreter is exiting (or gone): then None.
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    let _inside = Inside::enter()?;
    Python::try_attach(f)
}

/// Runs `f` with the GIL released (as `Python::detach`), and takes the GIL back only while the
/// interpreter is not exiting: a thread coming back once it is, parks for good.
pub(crate) fn released<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    let (out, inside) = py.detach(|| {
        let out = f();
        match Inside::enter() {
            Some(i) => (out, i),
            None => loop {
                std::thread::park();
            },
        }
    });
    drop(inside);
    out
}

/// The package's `atexit` handler: closes the gate, then waits (the GIL released, so the
/// threads inside can finish) until no thread is inside.
#[pyfunction]
pub(crate) fn at_exit(py: Python<'_>) {
    py.detach(|| {
        let mut g = gate();
        g.exiting = Some(std::thread::current().id());
        while g.inside > 0 {
            g = LEFT.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    });
}

/// Drops `value` with the GIL released; as it is when the GIL cannot be had (at exit, the
/// value is dropped with the GIL held).
pub(crate) fn drop_detached<T: Send>(value: T) {
    let mut value = Some(value);
    let _ = attach(|py| released(py, || drop(value.take())));
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
