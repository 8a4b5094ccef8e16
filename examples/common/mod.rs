//! Shared by the examples (a module, not an example: Cargo only builds `examples/*.rs` and
//! `examples/*/main.rs`).

/// Logs to stderr, filtered by `RUST_LOG` or else by `default` (e.g. `"info"`).
pub fn init_logging(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
