//! Helpers of every engine test: the emulator session, free loopback ports, small engine
//! options and a byte pattern.

use std::time::Duration;

use ascend_fabric::EngineOptions;

pub use ascend_testkit::emulator::setup;

/// A loopback port nobody listens on right now, from outside the ephemeral range (so no
/// outgoing connection of another test takes it before the engine binds it).
pub use ascend_testkit::free_port;

/// `127.0.0.1:<a free port>`: an address for a listening engine.
pub fn listen_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// An engine on `dev` listening on a free loopback port, and its address. A port found free
/// can be taken by another process before the engine binds it: then another port is tried
/// (up to 20).
pub fn listening(dev: &ascend_mem::Device, opts: EngineOptions) -> (ascend_fabric::Engine, String) {
    for _ in 0..20 {
        let addr = listen_addr();
        match ascend_fabric::Engine::new(dev, &addr, opts.clone()) {
            Err(ascend_fabric::Error::Listen { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse => {}
            r => return (r.expect("a listening engine"), addr),
        }
    }
    panic!("no free loopback port could be bound in 20 tries");
}

/// Options with `streams` copy streams per transfer, a VA pool of `pool_gib` GiB and quick
/// heartbeats.
pub fn options(streams: u32, pool_gib: usize) -> EngineOptions {
    EngineOptions::builder()
        .task_stream_num(streams)
        .heartbeat_interval(Duration::from_millis(100))
        .pool_capacity(pool_gib << 30)
        .build()
        .expect("valid options")
}

/// The code injected faults return (`ACL_ERROR_RT_INTERNAL_ERROR`).
pub const INTERNAL: i32 = acl_sys::ACL_ERROR_RT_INTERNAL_ERROR;

/// [`options`] with a 64 GiB pool.
pub fn test_options(streams: u32) -> EngineOptions {
    options(streams, 64)
}

// Not every test binary that includes this file uses it.
#[allow(unused_imports)]
pub use ascend_testkit::pattern;
