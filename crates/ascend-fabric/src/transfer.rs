//! What a transfer is made of, as HIXL names it: the direction, the descriptors, the status
//! of a request. The request itself is in `request.rs`, its stream slot in `slots.rs`, its
//! plan in `plan.rs`.

use std::time::Duration;

use ascend_mem::Addr;

/// Transfer direction (`hixl::TransferOp`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransferOp {
    /// Remote → local (`READ` 0).
    Read,
    /// Local → remote (`WRITE` 1).
    Write,
}

/// One copy of a transfer, laid out as HIXL's `TransferOpDesc` (local address, remote
/// address, length: three 64-bit words).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TransferDesc {
    /// Address in this engine's registered memory.
    pub local_addr: Addr,
    /// Address in memory the peer registered (as the peer sees it).
    pub remote_addr: Addr,
    /// Bytes to copy.
    pub len: usize,
}

// HIXL's `TransferOpDesc` layout: three 64-bit words.
const _: () =
    assert!(std::mem::size_of::<TransferDesc>() == 24 && std::mem::align_of::<TransferDesc>() == 8);

impl TransferDesc {
    /// A descriptor from raw addresses, as HIXL's `TransferOpDesc`: the low-level door (every
    /// address is still checked against the registrations and the peer's segments when the
    /// transfer is submitted). Prefer [`TransferDesc::between`], made from what you hold.
    pub fn raw(local_addr: Addr, remote_addr: Addr, len: usize) -> Self {
        TransferDesc {
            local_addr,
            remote_addr,
            len,
        }
    }
}

/// The state of a request (`hixl::TransferStatus`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransferStatus {
    /// Still running.
    Waiting,
    /// Done; the data is in place.
    Completed,
    /// Failed; [`TransferRequest::wait`](crate::TransferRequest::wait) returns why.
    Failed,
}

/// Options of one transfer (the `TransferArgs` of HIXL's `TransferAsync`, for what it has).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransferOptions {
    /// The stall deadline: a request still running this long after its copies were queued
    /// is aborted (its streams aborted and waited for) and ends with
    /// [`Error::Timeout`](crate::Error::Timeout), `what` = "transfer (stall deadline)", when
    /// next observed (by a wait, a status call, its future or completion queue, or the
    /// engine's progress thread for awaited and queued requests). Time spent waiting for a
    /// free stream slot does not count. Under `AutoConnect` the peer is disconnected, as after
    /// a failed copy. `None` (the default): no deadline.
    pub stall_timeout: Option<Duration>,
}

impl TransferOptions {
    /// No options: no stall deadline.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the stall deadline (see [`TransferOptions::stall_timeout`]).
    pub fn stall_timeout(mut self, after: Duration) -> Self {
        self.stall_timeout = Some(after);
        self
    }
}
