//! The cost of metrics: synchronous WRITEs of 4 KiB and 1 MiB into one listening engine's
//! memory by two clients of this process, one made while a recorder was installed (the
//! Prometheus exporter's, as the examples install it: counters, gauges and summaries with
//! quantiles), one made without (every handle a no-op). Passes alternate between the two,
//! the one going first alternating too, so a change in the machine's load falls on both;
//! `metrics_on_vs_off_<size>` is the median over rounds of the pass time with over without.

use std::time::{Duration, Instant};

use ascend_fabric::{Engine, EngineOptions, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_mem::{Device, DeviceBuffer};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::util::{free_port, median, median_ratio};
use crate::{Args, Res};

const T: Duration = Duration::from_secs(30);

/// The sizes measured, with their RESULT keys.
pub(crate) const SIZES: [(usize, &str); 2] = [
    (4 << 10, "metrics_on_vs_off_4KiB"),
    (1 << 20, "metrics_on_vs_off_1MiB"),
];

/// One size's figures: the median time per transfer without and with metrics, and the
/// median over rounds of with over without.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SizeRow {
    pub(crate) size: usize,
    pub(crate) off: Duration,
    pub(crate) on: Duration,
    pub(crate) ratio: f64,
}

/// What the part found, per size of [`SIZES`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Telemetry {
    pub(crate) rows: Vec<SizeRow>,
}

impl Telemetry {
    /// With over without, for `size`.
    pub(crate) fn on_vs_off(&self, size: usize) -> Option<f64> {
        self.rows.iter().find(|r| r.size == size).map(|r| r.ratio)
    }
}

fn options() -> Res<EngineOptions> {
    Ok(EngineOptions::builder().pool_capacity(4 << 30).build()?)
}

/// A client connected to the server at `addr`, with a registered buffer of its own.
struct Client {
    engine: Engine,
    local: DeviceBuffer,
    _reg: ascend_fabric::Registration,
}

impl Client {
    fn new(dev: &Device, addr: &str) -> Res<Client> {
        let engine = Engine::new(dev, "127.0.0.1", options()?)?;
        let local = engine.alloc_device(SIZES[1].0)?;
        let reg = engine.register(&local)?;
        engine.connect(addr, T)?;
        Ok(Client {
            engine,
            local,
            _reg: reg,
        })
    }

    /// The time of `n` synchronous WRITEs of `size` bytes to `remote` at `addr`.
    fn writes(&self, addr: &str, remote: &DeviceBuffer, n: usize, size: usize) -> Res<Duration> {
        let d = [TransferDesc::raw(self.local.addr(), remote.addr(), size)];
        let t = Instant::now();
        for _ in 0..n {
            self.engine.transfer_sync(addr, TransferOp::Write, &d, T)?;
        }
        Ok(t.elapsed() / n as u32)
    }
}

pub(crate) fn run(args: &Args, dev: &Device) -> Res<Telemetry> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let addr = format!("127.0.0.1:{}", free_port()?);
    let server = Engine::new(dev, &addr, options()?)?;
    let remote = server.alloc_device(SIZES[1].0)?;
    let _reg = server.register(&remote)?;
    let off = Client::new(dev, &addr)?;
    let on = metrics::with_local_recorder(&recorder, || Client::new(dev, &addr))?;
    let rounds = if args.quick { 5 } else { 21 };
    let mut rows = Vec::new();
    for (size, _) in SIZES {
        let n = if size <= 4 << 10 { 5000 } else { 500 } / if args.quick { 50 } else { 1 };
        // Warm both (slots, pages) before timing.
        off.writes(&addr, &remote, n, size)?;
        on.writes(&addr, &remote, n, size)?;
        let (mut offs, mut ons, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            let pass = |c: &Client| c.writes(&addr, &remote, n, size);
            let (a, b) = if r % 2 == 0 {
                let a = pass(&off)?;
                (a, pass(&on)?)
            } else {
                let b = pass(&on)?;
                (pass(&off)?, b)
            };
            ratios.push(b.as_secs_f64() / a.as_secs_f64());
            offs.push(a);
            ons.push(b);
        }
        rows.push(SizeRow {
            size,
            off: median(offs),
            on: median(ons),
            ratio: median_ratio(ratios),
        });
    }
    // The recorder saw the transfers of the client made with it.
    if !recorder
        .handle()
        .render()
        .contains(ascend_fabric::metrics::TRANSFERS)
    {
        return Err("the recorder saw no transfer of the client made with it".into());
    }
    Ok(Telemetry { rows })
}
