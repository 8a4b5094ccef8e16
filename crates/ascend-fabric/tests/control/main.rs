//! The control plane over real loopback sockets, one binary with a module per topic: the
//! server and client, the handshake's secret and allow list, and the server's bounds.

// Shared with control_emfile.rs and control_flood.rs, which alone use its descriptor and
// thread helpers.
#[allow(dead_code)]
mod util;

mod auth;
mod limits;
mod server;
