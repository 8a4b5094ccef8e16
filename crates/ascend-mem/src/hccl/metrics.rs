//! The HCCL layer's metrics, recorded through the [`metrics`] facade into whatever recorder
//! the application installed when the communicator was made (nothing without one: every
//! handle is a no-op). Labels: `device` (the communicator's device id), `rank`, and `op`.
//!
//! | name | kind | unit | labels | what |
//! |---|---|---|---|---|
//! | `ascend_mem_hccl_collectives_total` | counter | collectives | `device`, `rank`, `op` | collectives queued: `all_gather`, `reduce_scatter`, `all_reduce`, `all_to_all`, `broadcast`, `barrier` |
//! | `ascend_mem_hccl_collective_bytes_total` | counter | bytes | `device`, `rank`, `op` | bytes of this rank's send buffer (the buffer, for a broadcast) of the collectives queued |
//! | `ascend_mem_hccl_onesided_total` | counter | operations | `device`, `rank`, `op` | one-sided operations queued: `put`, `get`, `signal` |
//! | `ascend_mem_hccl_onesided_bytes_total` | counter | bytes | `device`, `rank`, `op` | bytes of the puts and gets queued (a signal's series stays 0: it moves a value, not bytes) |
//! | `ascend_mem_hccl_windows` | gauge | windows | `device`, `rank` | symmetric windows registered on the communicator |
//!
//! Counted when the operation is queued on its stream (its failures surface at the stream's
//! synchronize, as the operation's own do).

use metrics::{Counter, Gauge};

/// Collectives queued, by `op`.
pub const COLLECTIVES: &str = "ascend_mem_hccl_collectives_total";
/// Bytes of the send buffers of the collectives queued, by `op`.
pub const COLLECTIVE_BYTES: &str = "ascend_mem_hccl_collective_bytes_total";
/// One-sided operations queued, by `op`.
pub const ONESIDED: &str = "ascend_mem_hccl_onesided_total";
/// Bytes of the puts and gets queued, by `op`.
pub const ONESIDED_BYTES: &str = "ascend_mem_hccl_onesided_bytes_total";
/// Symmetric windows registered.
pub const WINDOWS: &str = "ascend_mem_hccl_windows";

/// The collectives, as the HCCL call names them and as the `op` label does.
const COLLECTIVE_OPS: [(&str, &str); 6] = [
    ("HcclAllGather", "all_gather"),
    ("HcclReduceScatter", "reduce_scatter"),
    ("HcclAllReduce", "all_reduce"),
    ("HcclAlltoAll", "all_to_all"),
    ("HcclBroadcast", "broadcast"),
    ("HcclBarrier", "barrier"),
];

/// A one-sided operation.
#[derive(Copy, Clone, Debug)]
pub(crate) enum OneSided {
    Put,
    Get,
    Signal,
}

/// Tells the installed recorder the unit and meaning of every metric above.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(COLLECTIVES, "HCCL collectives queued");
    describe_counter!(
        COLLECTIVE_BYTES,
        Unit::Bytes,
        "bytes of the send buffers of the collectives queued"
    );
    describe_counter!(ONESIDED, "one-sided window operations queued");
    describe_counter!(
        ONESIDED_BYTES,
        Unit::Bytes,
        "bytes of the puts and gets queued"
    );
    describe_gauge!(WINDOWS, "symmetric windows registered");
}

/// A communicator's handles, registered when it is made.
pub(crate) struct CommMetrics {
    collectives: [(Counter, Counter); 6],
    onesided: [(Counter, Counter); 3],
    pub(crate) windows: Gauge,
}

impl CommMetrics {
    pub(crate) fn new(device: i32, rank: u32) -> CommMetrics {
        let (d, r) = (device.to_string(), rank.to_string());
        let pair = |op: &'static str, count: &'static str, bytes: &'static str| {
            let labels = [
                ("device", d.clone()),
                ("rank", r.clone()),
                ("op", op.into()),
            ];
            (
                metrics::counter!(count, &labels),
                metrics::counter!(bytes, &labels),
            )
        };
        CommMetrics {
            collectives: COLLECTIVE_OPS.map(|(_, op)| pair(op, COLLECTIVES, COLLECTIVE_BYTES)),
            onesided: ["put", "get", "signal"].map(|op| pair(op, ONESIDED, ONESIDED_BYTES)),
            windows: metrics::gauge!(WINDOWS, "device" => d.clone(), "rank" => r.clone()),
        }
    }

    /// The collective `api` (its HCCL call's name) was queued with `bytes` to send.
    pub(crate) fn collective(&self, api: &str, bytes: usize) {
        if let Some(i) = COLLECTIVE_OPS.iter().position(|(a, _)| *a == api) {
            let (n, b) = &self.collectives[i];
            n.increment(1);
            b.increment(bytes as u64);
        }
    }

    /// A one-sided operation was queued, moving `bytes` (0 for a signal).
    pub(crate) fn onesided(&self, op: OneSided, bytes: usize) {
        let (n, b) = &self.onesided[op as usize];
        n.increment(1);
        b.increment(bytes as u64);
    }
}
