//! Prepared block lists from Python: `LocalBlocks` (a registration cut into blocks) and
//! `RemoteBlocks` (segments a peer offers, by index or name), and the transfers that name
//! blocks by index pairs, checked against the lists and nothing else.

use ascend_fabric::{LocalBlocks, RemoteBlocks, SegmentRef};
use pyo3::prelude::*;

use crate::aio;
use crate::args::{op_of, seconds};
use crate::detach::Detached;
use crate::engine::{PyEngine, PyRegistration};
use crate::error;
use crate::request::PyRequest;

/// A registration of this process cut into blocks of one size (`Engine.prepare_local`).
#[pyclass(name = "LocalBlocks", module = "ascend_fabric", frozen)]
pub(crate) struct PyLocalBlocks {
    /// A list holds a copy table over the memory: letting it go may unmap.
    blocks: Detached<LocalBlocks>,
}

/// Segments a peer offers cut into blocks of one size, numbered across the segments in the
/// order given (`Engine.prepare_remote`).
#[pyclass(name = "RemoteBlocks", module = "ascend_fabric", frozen)]
pub(crate) struct PyRemoteBlocks {
    /// A list holds the peer's imports: letting it go may unmap them.
    blocks: Detached<RemoteBlocks>,
}

/// A segment as `prepare_remote` takes it: an index into `remote_segments`, or a name.
#[derive(FromPyObject)]
enum Segment {
    Index(usize),
    Name(String),
}

#[pymethods]
impl PyEngine {
    /// `registration` as blocks of `block_len` bytes from its start (a shorter tail is left
    /// out): block `i` is `[addr + i * block_len, + block_len)`.
    fn prepare_local(
        &self,
        py: Python<'_>,
        registration: &PyRegistration,
        block_len: usize,
    ) -> PyResult<PyLocalBlocks> {
        let reg = registration.get("Engine.prepare_local")?;
        let blocks = crate::detach::released(py, || self.engine().prepare_local(&reg, block_len))
            .map_err(error::fabric)?;
        Ok(PyLocalBlocks {
            blocks: Detached::new(blocks),
        })
    }

    /// The segments `peer` offers (each an index into `remote_segments(peer)` or a name the
    /// peer registered with `register_named`) as blocks of `block_len` bytes, numbered across
    /// the segments in the order given. A segment not known yet makes the engine ask the
    /// peer again first.
    fn prepare_remote(
        &self,
        py: Python<'_>,
        peer: &str,
        segments: Vec<Segment>,
        block_len: usize,
    ) -> PyResult<PyRemoteBlocks> {
        let segs: Vec<SegmentRef> = segments
            .into_iter()
            .map(|s| match s {
                Segment::Index(i) => SegmentRef::Index(i),
                Segment::Name(n) => SegmentRef::Name(n),
            })
            .collect();
        let blocks =
            crate::detach::released(py, || self.engine().prepare_remote(peer, &segs, block_len))
                .map_err(error::fabric)?;
        Ok(PyRemoteBlocks {
            blocks: Detached::new(blocks),
        })
    }

    /// The segments `peer` offers, as (address, length) pairs in the order they became known;
    /// None when not connected.
    fn remote_segments(&self, py: Python<'_>, peer: &str) -> Option<Vec<(u64, usize)>> {
        crate::detach::released(py, || self.engine().remote_segments(peer))
            .map(|v| v.into_iter().map(|(a, n)| (a.get(), n)).collect())
    }

    /// Copies the blocks `pairs` names ((local block, remote block) indices) to (`op="write"`)
    /// or from (`"read"`) the remote list's peer, and waits up to `timeout` seconds (on timeout
    /// the transfer is aborted).
    #[pyo3(signature = (op, local, remote, pairs, timeout = 30.0))]
    fn transfer_prepared_sync(
        &self,
        py: Python<'_>,
        op: &str,
        local: &PyLocalBlocks,
        remote: &PyRemoteBlocks,
        pairs: Vec<(usize, usize)>,
        timeout: f64,
    ) -> PyResult<()> {
        const CALL: &str = "Engine.transfer_prepared_sync";
        let (op, t) = (op_of(CALL, op)?, seconds(CALL, timeout)?);
        let (l, r) = (&local.blocks, &remote.blocks);
        crate::detach::released(py, || {
            self.engine().transfer_prepared_sync(op, l, r, &pairs, t)
        })
        .map_err(error::fabric)
    }

    /// Starts the prepared transfer and returns at once with its request: fails at once when
    /// every stream slot is busy.
    fn transfer_prepared_async(
        &self,
        py: Python<'_>,
        op: &str,
        local: &PyLocalBlocks,
        remote: &PyRemoteBlocks,
        pairs: Vec<(usize, usize)>,
    ) -> PyResult<PyRequest> {
        let op = op_of("Engine.transfer_prepared_async", op)?;
        let (l, r) = (&local.blocks, &remote.blocks);
        let req = crate::detach::released(py, || {
            self.engine().transfer_prepared_async(op, l, r, &pairs)
        })
        .map_err(error::fabric)?;
        Ok(PyRequest::new(req))
    }

    /// The prepared transfer, awaitable on the running asyncio loop, as `Engine.transfer`:
    /// it waits for a free stream slot in turn, then for its copies; cancelling the task
    /// cancels it.
    fn transfer_prepared<'py>(
        &self,
        py: Python<'py>,
        op: &str,
        local: &PyLocalBlocks,
        remote: &PyRemoteBlocks,
        pairs: Vec<(usize, usize)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = op_of("Engine.transfer_prepared", op)?;
        let fut = self
            .engine()
            .transfer_prepared(op, &local.blocks, &remote.blocks, &pairs);
        aio::awaitable(py, fut)
    }
}

#[pymethods]
impl PyLocalBlocks {
    /// The number of blocks.
    fn __len__(&self) -> usize {
        self.blocks.len()
    }

    /// The block size in bytes.
    #[getter]
    fn block_len(&self) -> usize {
        self.blocks.block_len()
    }

    /// Where block `i` starts; None past the list.
    fn block_addr(&self, i: usize) -> Option<u64> {
        self.blocks.block_addr(i).map(|a| a.get())
    }

    fn __repr__(&self) -> String {
        format!(
            "LocalBlocks({} of {} bytes)",
            self.blocks.len(),
            self.blocks.block_len()
        )
    }
}

#[pymethods]
impl PyRemoteBlocks {
    /// The number of blocks.
    fn __len__(&self) -> usize {
        self.blocks.len()
    }

    /// The block size in bytes.
    #[getter]
    fn block_len(&self) -> usize {
        self.blocks.block_len()
    }

    /// The peer whose segments these are.
    #[getter]
    fn peer(&self) -> String {
        self.blocks.peer().to_owned()
    }

    /// The index of segment `i`'s first block (segments as given to `prepare_remote`).
    fn first_block(&self, i: usize) -> Option<usize> {
        self.blocks.first_block(i)
    }

    /// Where block `i` starts in the peer's addresses; None past the list.
    fn block_addr(&self, i: usize) -> Option<u64> {
        self.blocks.block_addr(i).map(|a| a.get())
    }

    fn __repr__(&self) -> String {
        format!(
            "RemoteBlocks({} of {} bytes at {})",
            self.blocks.len(),
            self.blocks.block_len(),
            self.blocks.peer()
        )
    }
}
