//! What a transfer is made of, as HIXL names it: the direction, the descriptors, the status
//! of a request. The request itself is in `request.rs`, its stream slot in `slots.rs`, its
//! plan in `plan.rs`.

/// Transfer direction (`hixl::TransferOp`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransferOp {
    /// Remote → local (`READ` 0).
    Read,
    /// Local → remote (`WRITE` 1).
    Write,
}

/// One copy of a transfer, laid out as HIXL's `TransferOpDesc` (local address first).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TransferDesc {
    /// Address in this engine's registered memory.
    pub local_addr: u64,
    /// Address in memory the peer registered (as the peer sees it).
    pub remote_addr: u64,
    /// Bytes to copy.
    pub len: u64,
}

impl TransferDesc {
    /// A descriptor.
    pub fn new(local_addr: u64, remote_addr: u64, len: u64) -> Self {
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
