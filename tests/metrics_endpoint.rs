//! The engine's metrics served over HTTP by the Prometheus exporter the examples use
//! (`--metrics ADDR`): two engines move data while the exporter's recorder is installed, and
//! a real HTTP client scrapes `/metrics` and finds each documented figure with a non-zero
//! value.

use std::time::Duration;

use ascend_fabric::metrics::*;
use ascend_fabric::{Engine, EngineOptions, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_testkit::emulator::setup;
use ascend_testkit::free_port;
use metrics_exporter_prometheus::PrometheusBuilder;

const T: Duration = Duration::from_secs(20);
const LEN: usize = 1 << 20;

/// A client engine writes and reads back `LEN` bytes of a listening engine's memory, four
/// times, then disconnects. Returns the listening engine (still live) and its address.
fn workload(dev: &ascend_mem::Device) -> (Engine, String) {
    let opts = || {
        EngineOptions::builder()
            .task_stream_num(2)
            .pool_capacity(4 << 30)
            .build()
            .unwrap()
    };
    let addr = loop {
        let a = format!("127.0.0.1:{}", free_port());
        match Engine::new(dev, &a, opts()) {
            Ok(server) => break (server, a),
            Err(ascend_fabric::Error::Listen { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse => {}
            Err(e) => panic!("{e}"),
        }
    };
    let (server, addr) = addr;
    let remote = server.alloc_device(LEN).unwrap();
    let _rreg = server.register(&remote).unwrap();
    let client = Engine::new(dev, "127.0.0.1", opts()).unwrap();
    let local = client.alloc_device(LEN).unwrap();
    let _lreg = client.register(&local).unwrap();
    client.connect(&addr, T).unwrap();
    let d = [TransferDesc::raw(local.addr(), remote.addr(), LEN)];
    for op in [TransferOp::Write, TransferOp::Read].repeat(2) {
        client.transfer_sync(&addr, op, &d, T).unwrap();
    }
    client.disconnect(&addr, T).unwrap();
    (server, addr)
}

/// The value of the first sample line of `name` whose labels contain every one of `labels`
/// (`k="v"` pairs), in Prometheus' text format.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|k| l.contains(k)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn a_scrape_over_http_shows_the_documented_figures() {
    let env = setup();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // A port found free may be taken before the exporter binds it: try another.
    let (recorder, port) = (0..20)
        .find_map(|_| {
            let port = free_port();
            let _in_rt = rt.enter();
            let built = PrometheusBuilder::new()
                .with_http_listener(([127, 0, 0, 1], port))
                .build()
                .ok()?;
            let (recorder, serve) = built;
            rt.spawn(serve);
            Some((recorder, port))
        })
        .expect("an exporter on a free port");
    let (engine, server) = metrics::with_local_recorder(&recorder, || {
        describe();
        workload(&env.dev)
    });
    let url = format!("http://127.0.0.1:{port}/metrics");
    let text = ureq::get(&url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .into_body()
        .read_to_string()
        .unwrap();
    let peer = format!("peer=\"{server}\"");
    let engine_label = format!("engine=\"{server}\"");
    let write = [peer.as_str(), "op=\"write\""];
    let ok = [peer.as_str(), "op=\"read\"", "outcome=\"ok\""];
    for (name, labels, at_least) in [
        (TRANSFERS, &ok[..], 2.0),
        (TRANSFER_BYTES, &write[..], 2.0 * LEN as f64),
        (TRANSFER_DESCRIPTORS, &write[..], 2.0),
        (&format!("{TRANSFER_DURATION}_count"), &write[..], 2.0),
        (&format!("{TRANSFER_DURATION}_sum"), &write[..], 1e-9),
        (CONNECTS, &[peer.as_str()][..], 1.0),
        (
            DISCONNECTS,
            &[peer.as_str(), "reason=\"disconnected\""][..],
            1.0,
        ),
        (ENGINE_INFO, &[engine_label.as_str()][..], 1.0),
    ] {
        let v = sample(&text, name, labels)
            .unwrap_or_else(|| panic!("no {name} {labels:?} in the scrape:\n{text}"));
        assert!(v >= at_least, "{name} {labels:?} = {v}, want >= {at_least}");
    }
    // The transfer latency is a summary with quantiles.
    assert!(
        text.contains(&format!("{TRANSFER_DURATION}{{")) && text.contains("quantile=\"0.99\""),
        "{text}"
    );
    assert!(text.contains(&format!("# HELP {TRANSFERS}")), "{text}");
    drop((engine, recorder));
    rt.shutdown_background();
    env.finish();
}
