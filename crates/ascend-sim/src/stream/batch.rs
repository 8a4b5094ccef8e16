//! Stream-ordered batched copies (`aclrtMemcpyBatchAsync[V2]`): checked at submission like the
//! synchronous batch (`vmm/batch.rs`), then queued as one task that runs the copies in order
//! when the stream reaches it, each re-checked as it runs (a failure there is the stream's
//! error, reported by its next synchronize).

use std::ffi::c_void;
use std::sync::Arc;

use acl_sys::*;

use super::exports::resolve;
use super::queue::{deterministic, ExtTask, Task, HOLD_BYTES};
use crate::rt::Res;
use crate::vmm::batch::{read, with_fail_index, Batch, BatchErr, RawBatch};
use crate::vmm::copy::{exec_copy_hinted, CopyHints};
use crate::vmm::state::MEM;

/// A queued batch.
struct BatchTask(Batch);

impl ExtTask for BatchTask {
    /// Runs the copies in order; the address table's read lock is taken again after every
    /// [`HOLD_BYTES`], so an unmap waits at most that long. An abort stops between copies.
    fn run(&self, cancelled: &dyn Fn() -> bool) -> Res {
        // The batch has started: a running-copy hold keeps it here, abort or not (threaded
        // mode only: a deterministic stream runs on the caller's thread).
        if !deterministic() {
            super::hold::wait_copy_hold();
        }
        let b = &self.0;
        let mut i = 0;
        while i < b.pieces.len() {
            let mem = MEM.read();
            let mut hints = CopyHints::default();
            let mut bytes = 0usize;
            while let Some(p) = b.pieces.get(i) {
                if bytes > 0 && bytes.saturating_add(p.n) > HOLD_BYTES {
                    break;
                }
                if cancelled() {
                    return Ok(());
                }
                exec_copy_hinted(&mem, (p.dst, p.src, p.n), b.kind, &mut hints)?;
                bytes = bytes.saturating_add(p.n);
                i += 1;
            }
        }
        Ok(())
    }
}

/// Checks the batch and its stream, then queues it.
fn submit(r: &RawBatch, stream: aclrtStream) -> Result<(), BatchErr> {
    let b = read(r)?;
    let s = resolve(stream, "stream")?;
    b.check_memory(&MEM.read())?;
    s.push(Task::Ext(Arc::new(BatchTask(b))));
    // On A2/A3 the runtime's batch call is a loop of one copy call per copy.
    crate::config::charge_copy_calls(r.num);
    Ok(())
}

export! { Acl;
    /// Stream-ordered batched copy; `failIndex` names the copy that failed a check (SIZE_MAX:
    /// none, or an error not tied to one copy).
    fn aclrtMemcpyBatchAsync(dsts: *mut *mut c_void, destMaxs: *mut usize, srcs: *mut *mut c_void, sizes: *mut usize, numBatches: usize, attrs: *mut aclrtMemcpyBatchAttr, attrsIndexes: *mut usize, numAttrs: usize, failIndex: *mut usize, stream: aclrtStream) {
        let r = RawBatch { dsts, dest_maxs: destMaxs, srcs, sizes, num: numBatches, attrs, attrs_indexes: attrsIndexes, num_attrs: numAttrs };
        with_fail_index(Some(failIndex), || submit(&r, stream))
    }
}

export! { Acl;
    /// As aclrtMemcpyBatchAsync without `failIndex`.
    fn aclrtMemcpyBatchAsyncV2(dsts: *mut *mut c_void, destMaxs: *mut usize, srcs: *mut *mut c_void, sizes: *mut usize, numBatches: usize, attrs: *mut aclrtMemcpyBatchAttr, attrsIndexes: *mut usize, numAttrs: usize, stream: aclrtStream) {
        let r = RawBatch { dsts, dest_maxs: destMaxs, srcs, sizes, num: numBatches, attrs, attrs_indexes: attrsIndexes, num_attrs: numAttrs };
        with_fail_index(None, || submit(&r, stream))
    }
}
