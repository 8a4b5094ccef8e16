//! Arguments as Python gives them: timeouts in seconds, `"read"`/`"write"`, descriptors as
//! tuples; each refused with `InvalidArgument` naming the call.

use std::time::Duration;

use ascend_fabric::{TransferDesc, TransferOp};
use ascend_mem::Addr;
use pyo3::prelude::*;

use crate::error;

/// A timeout in seconds as a duration; a negative or non-finite one is refused.
pub(crate) fn seconds(call: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| error::invalid(call, format_args!("timeout {s} s is not a duration")))
}

/// Descriptors from `(local_addr, remote_addr, len)` tuples.
pub(crate) fn raw_descs(descs: Vec<(u64, u64, usize)>) -> Vec<TransferDesc> {
    descs
        .into_iter()
        .map(|(l, r, n)| TransferDesc::raw(Addr::new(l), Addr::new(r), n))
        .collect()
}

/// `"read"` or `"write"`, for `call`.
pub(crate) fn op_of(call: &str, op: &str) -> PyResult<TransferOp> {
    match op.to_ascii_lowercase().as_str() {
        "read" => Ok(TransferOp::Read),
        "write" => Ok(TransferOp::Write),
        _ => Err(error::invalid(
            call,
            format_args!("op {op:?} is neither \"read\" nor \"write\""),
        )),
    }
}
