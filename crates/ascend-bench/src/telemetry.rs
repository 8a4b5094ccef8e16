//! The cost of metrics: synchronous WRITEs of 4 KiB and 1 MiB between two engines of this
//! process, by a pair made while a recorder was installed (the Prometheus exporter's, as the
//! examples install it: counters, gauges and summaries with quantiles) against a pair made
//! without one (every handle a no-op), passes alternated so a change in the machine's load
//! falls on both. `metrics_on_vs_off_<size>` is the best pass's time with over without.

use std::time::Duration;

use ascend_fabric::{Engine, EngineOptions, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{Device, DeviceBuffer};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::util::{best_of_alternating, free_port};
use crate::{Args, Res};

const T: Duration = Duration::from_secs(30);

/// The sizes measured, with their RESULT keys.
pub(crate) const SIZES: [(usize, &str); 2] = [
    (4 << 10, "metrics_on_vs_off_4KiB"),
    (1 << 20, "metrics_on_vs_off_1MiB"),
];

/// What the part found: per size of [`SIZES`], the time per transfer without and with
/// metrics.
#[derive(Debug, Clone, Default)]
pub(crate) struct Telemetry {
    pub(crate) per_size: Vec<(usize, Duration, Duration)>,
}

impl Telemetry {
    /// With over without, for `size`.
    pub(crate) fn on_vs_off(&self, size: usize) -> Option<f64> {
        self.per_size
            .iter()
            .find(|r| r.0 == size)
            .map(|(_, off, on)| on.as_secs_f64() / off.as_secs_f64())
    }
}

/// A listening engine with a registered buffer, and a client connected to it with its own.
struct Pair {
    _server: Engine,
    addr: String,
    remote: DeviceBuffer,
    client: Engine,
    local: DeviceBuffer,
    _regs: [ascend_fabric::Registration; 2],
}

impl Pair {
    fn new(dev: &Device) -> Res<Pair> {
        let opts = || EngineOptions::builder().pool_capacity(4 << 30).build();
        let addr = format!("127.0.0.1:{}", free_port()?);
        let server = Engine::new(dev, &addr, opts()?)?;
        let len = SIZES[1].0;
        let remote = server.alloc_device(len)?;
        let client = Engine::new(dev, "127.0.0.1", opts()?)?;
        let local = client.alloc_device(len)?;
        let regs = [server.register(&remote)?, client.register(&local)?];
        client.connect(&addr, T)?;
        Ok(Pair {
            _server: server,
            addr,
            remote,
            client,
            local,
            _regs: regs,
        })
    }

    /// `n` synchronous WRITEs of `size` bytes.
    fn writes(&self, n: usize, size: usize) -> Res<()> {
        let d = [TransferDesc::raw(
            self.local.addr(),
            self.remote.addr(),
            size,
        )];
        for _ in 0..n {
            self.client
                .transfer_sync(&self.addr, TransferOp::Write, &d, T)?;
        }
        Ok(())
    }
}

pub(crate) fn run(args: &Args, dev: &Device) -> Res<Telemetry> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let off = Pair::new(dev)?;
    let on = metrics::with_local_recorder(&recorder, || Pair::new(dev))?;
    let passes = if args.quick { 5 } else { 15 };
    let mut per_size = Vec::new();
    for (size, _) in SIZES {
        let n = if size <= 4 << 10 { 500 } else { 50 } / if args.quick { 5 } else { 1 };
        // Warm both (slots, pages) before timing.
        off.writes(n, size)?;
        on.writes(n, size)?;
        let (t_off, t_on) =
            best_of_alternating(passes, || off.writes(n, size), || on.writes(n, size))?;
        per_size.push((size, t_off / n as u32, t_on / n as u32));
    }
    // The recorder saw every transfer of the pair made with it.
    let text = recorder.handle().render();
    if !text.contains(ascend_fabric::metrics::TRANSFERS) {
        return Err("the recorder saw no transfer of the engines made with it".into());
    }
    Ok(Telemetry { per_size })
}
