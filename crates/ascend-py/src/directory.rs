//! The engine directory on etcd from Python (feature `etcd`): `EtcdDirectory` (the store) and
//! `Member` (an engine published under a name, connecting to peers by name, told of arrivals
//! and departures).

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc, Mutex};

use ascend_fabric::directory::{
    Directory, DirectoryError, DirectoryEvent, EngineEntry, EtcdDirectory, EtcdOptions, Member,
    SegmentInfo,
};
use ascend_fabric::Addr;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::seconds;
use crate::detach::Detached;
use crate::engine::PyEngine;
use crate::error;

/// HIXL statuses a directory error is reported with.
const PARAM_INVALID: u32 = 103_900;
const NOT_CONNECTED: u32 = 103_902;
const FAILED: u32 = 503_900;

/// A directory error as the package's exception: the engine's own errors as the engine
/// reports them; a name or option refused, or a name not found, is `InvalidArgument`; a peer
/// that left while connecting is `NotConnected`; the store unreachable or failing, `Failed`.
fn dir_err(e: DirectoryError) -> PyErr {
    let status = match &e {
        DirectoryError::NameTaken { .. }
        | DirectoryError::NotFound { .. }
        | DirectoryError::BadName { .. }
        | DirectoryError::BadOption { .. } => PARAM_INVALID,
        DirectoryError::Left { .. } => NOT_CONNECTED,
        _ => FAILED,
    };
    match e {
        DirectoryError::Engine(inner) => error::fabric(inner),
        e => error::py_err(status, error::variant(&format!("{e:?}")), e.to_string()),
    }
}

/// An etcd holding the directory under `prefix`, entries kept alive with leases of `ttl`
/// seconds.
#[pyclass(name = "EtcdDirectory", module = "ascend_fabric", frozen)]
pub(crate) struct PyEtcdDirectory {
    /// Holds the client's runtime, whose drop waits for its tasks: let go without the GIL.
    dir: Detached<Arc<dyn Directory>>,
}

/// An engine published in a directory under a name. `leave()` (or dropping it) withdraws the
/// entry and ends the channels it made by name.
#[pyclass(name = "Member", module = "ascend_fabric", frozen)]
pub(crate) struct PyMember {
    /// Locked only to take a handle: calls run outside the lock (a connect may take its whole
    /// timeout) with the GIL released. The member goes when the last handle does.
    member: Mutex<Option<Arc<Member>>>,
    events: Mutex<mpsc::Receiver<DirectoryEvent>>,
    name: String,
}

/// An entry as a dict: `addr`, `device`, `product`, `version`, and `segments` as
/// `{name: (addr, len)}`.
fn entry_dict<'py>(py: Python<'py>, e: &EngineEntry) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("addr", &e.addr)?;
    d.set_item("device", e.device)?;
    d.set_item("product", &e.product)?;
    d.set_item("version", e.version)?;
    let segs: BTreeMap<&str, (u64, usize)> = e
        .segments
        .iter()
        .map(|s| (s.name.as_str(), (s.addr.get(), s.len)))
        .collect();
    d.set_item("segments", segs)?;
    Ok(d)
}

#[pymethods]
impl PyEtcdDirectory {
    /// Connects to etcd at `endpoints` (`host:port` or `http://host:port`) and checks it
    /// answers within `request_timeout` seconds.
    #[new]
    #[pyo3(signature = (endpoints, prefix = "/ascend", ttl = 10.0, request_timeout = 3.0))]
    fn new(
        py: Python<'_>,
        endpoints: Vec<String>,
        prefix: &str,
        ttl: f64,
        request_timeout: f64,
    ) -> PyResult<PyEtcdDirectory> {
        const CALL: &str = "EtcdDirectory";
        let mut opts = EtcdOptions::new(String::new())
            .prefix(prefix)
            .ttl(seconds(CALL, ttl)?)
            .request_timeout(seconds(CALL, request_timeout)?);
        opts.endpoints = endpoints;
        let dir = crate::detach::released(py, || EtcdDirectory::connect(opts)).map_err(dir_err)?;
        Ok(PyEtcdDirectory {
            dir: Detached::new(Arc::new(dir)),
        })
    }

    /// The entry published under `name`, or None.
    fn lookup<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let found = crate::detach::released(py, || self.dir.lookup(name)).map_err(dir_err)?;
        found.map(|e| entry_dict(py, &e)).transpose()
    }

    /// The entries whose names start with `name_prefix`, as (name, entry) pairs.
    #[pyo3(signature = (name_prefix = ""))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        name_prefix: &str,
    ) -> PyResult<Vec<(String, Bound<'py, PyDict>)>> {
        let all = crate::detach::released(py, || self.dir.list(name_prefix)).map_err(dir_err)?;
        all.into_iter()
            .map(|(n, e)| Ok((n, entry_dict(py, &e)?)))
            .collect()
    }
}

#[pymethods]
impl PyMember {
    /// Publishes `engine` (which must listen) in `directory` under `name`, with `product`
    /// and the `segments` it offers (`(name, addr, len)` each), and watches the directory.
    #[new]
    #[pyo3(signature = (engine, directory, name, product = "", segments = Vec::new()))]
    fn new(
        py: Python<'_>,
        engine: &PyEngine,
        directory: &PyEtcdDirectory,
        name: &str,
        product: &str,
        segments: Vec<(String, u64, usize)>,
    ) -> PyResult<PyMember> {
        let segs = segments
            .into_iter()
            .map(|(n, a, l)| SegmentInfo::new(n, Addr::new(a), l))
            .collect();
        let dir = Arc::clone(&directory.dir);
        let member = crate::detach::released(py, || {
            Member::join(engine.engine(), dir, name, product, segs)
        })
        .map_err(dir_err)?;
        let events = member.subscribe();
        Ok(PyMember {
            member: Mutex::new(Some(Arc::new(member))),
            events: Mutex::new(events),
            name: name.to_owned(),
        })
    }

    /// The name it is published under.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Connects to the engine published under `name` within `timeout` seconds; returns its
    /// entry (its segments name what it offers). When that engine leaves the directory, its
    /// channel ends as a lost peer's does.
    #[pyo3(signature = (name, timeout = 10.0))]
    fn connect_by_name<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let t = seconds("Member.connect_by_name", timeout)?;
        let m = self.member()?;
        let entry = crate::detach::released(py, || m.connect_by_name(name, t)).map_err(dir_err)?;
        entry_dict(py, &entry)
    }

    /// The peers connected by name, as (name, address) pairs.
    fn connected(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        let m = self.member()?;
        Ok(crate::detach::released(py, || m.connected()))
    }

    /// The next directory change within `timeout` seconds, after the member acted on it:
    /// `("joined", name)` or `("left", name)` (a departed peer's channel has ended by then);
    /// None when nothing changed in time or the member left.
    #[pyo3(signature = (timeout = 0.0))]
    fn next_event(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<(&'static str, String)>> {
        let t = seconds("Member.next_event", timeout)?;
        let ev = crate::detach::released(py, || {
            let rx = self.events.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv_timeout(t).ok()
        });
        Ok(ev.map(|e| match e {
            DirectoryEvent::Joined { name, .. } => ("joined", name),
            DirectoryEvent::Left { name } => ("left", name),
        }))
    }

    /// Withdraws the entry and stops watching (the channels made by name are left to the
    /// engine): now, or, while another thread is in `connect_by_name`, when that call
    /// returns. A second call does nothing.
    fn leave(&self, py: Python<'_>) {
        let m = self.member.lock().unwrap_or_else(|p| p.into_inner()).take();
        crate::detach::released(py, || drop(m));
    }

    fn __repr__(&self) -> String {
        format!("Member({:?})", self.name)
    }
}

impl PyMember {
    /// A handle of the member, unless it left.
    fn member(&self) -> PyResult<Arc<Member>> {
        let m = self.member.lock().unwrap_or_else(|p| p.into_inner());
        match m.as_ref() {
            Some(m) => Ok(Arc::clone(m)),
            None => Err(error::invalid(
                "Member",
                format_args!("{:?} has left the directory", self.name),
            )),
        }
    }
}

impl Drop for PyMember {
    fn drop(&mut self) {
        let m = self.member.get_mut().map(Option::take).unwrap_or(None);
        crate::detach::drop_detached(m);
    }
}
