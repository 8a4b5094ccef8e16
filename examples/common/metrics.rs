//! The examples' metrics endpoint: a Prometheus exporter installed as the process's recorder
//! (the libraries only record; the program picks the exporter).

use std::error::Error;
use std::net::SocketAddr;

/// Serves what this process records at `http://ADDR/metrics`, in Prometheus' text format, from
/// a thread of the exporter's own. Call before making any engine: engines register their
/// metrics with the recorder installed when they are made.
pub fn serve(addr: &str) -> Result<(), Box<dyn Error + Send + Sync>> {
    let sa: SocketAddr = addr
        .parse()
        .map_err(|e| format!("--metrics {addr}: not an ip:port ({e})"))?;
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(sa)
        .install()
        .map_err(|e| format!("--metrics {addr}: {e}"))?;
    ascend::fabric::metrics::describe();
    ascend::hccl::metrics::describe();
    Ok(())
}

/// Keeps the process (and its endpoint) up until its standard input closes, so a scraper can
/// read the final figures.
pub fn hold(addr: &str) {
    println!("metrics at http://{addr}/metrics; holding until stdin closes");
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
}
