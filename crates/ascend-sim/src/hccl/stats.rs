//! Data-movement statistics of the HCCL emulation.

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) static STAGED_BYTES: AtomicU64 = AtomicU64::new(0);
pub(crate) static SYM_BYTES: AtomicU64 = AtomicU64::new(0);
pub(crate) static STAGED_OPS: AtomicU64 = AtomicU64::new(0);
pub(crate) static SYM_OPS: AtomicU64 = AtomicU64::new(0);

/// Per-process data-movement statistics of the HCCL emulation (see [`hccl_stats`]).
///
/// Bytes count every copy from one buffer into another: the staged path's copy-in, transfer
/// and copy-out, the symmetric path's reads of windows; a reduction counts every input it
/// reads. An AllGather of `b` bytes per rank on `n` ranks costs `(2n + 1)·b` bytes staged and
/// `n·b` symmetric (`(n − 1)·b` in place) per rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HcclStats {
    /// Bytes copied by collectives that took the staged path.
    pub staged_bytes_copied: u64,
    /// Bytes copied by collectives that took the symmetric path.
    pub symmetric_bytes_copied: u64,
    /// Collectives that took the staged path (Barrier not counted).
    pub staged_ops: u64,
    /// Collectives that took the symmetric path.
    pub symmetric_ops: u64,
}

/// The HCCL statistics of this process (all ranks it hosts).
pub fn hccl_stats() -> HcclStats {
    HcclStats {
        staged_bytes_copied: STAGED_BYTES.load(Ordering::Relaxed),
        symmetric_bytes_copied: SYM_BYTES.load(Ordering::Relaxed),
        staged_ops: STAGED_OPS.load(Ordering::Relaxed),
        symmetric_ops: SYM_OPS.load(Ordering::Relaxed),
    }
}

/// Zeroes the HCCL statistics.
pub fn reset_hccl_stats() {
    STAGED_BYTES.store(0, Ordering::Relaxed);
    SYM_BYTES.store(0, Ordering::Relaxed);
    STAGED_OPS.store(0, Ordering::Relaxed);
    SYM_OPS.store(0, Ordering::Relaxed);
}
