//! Helpers of every test: the emulator session, free loopback ports and a byte pattern.

pub use ascend_testkit::emulator::setup;

/// A loopback port nobody listens on right now, from outside the ephemeral range (so no
/// outgoing connection of another test takes it before a server binds it).
pub use ascend_testkit::free_port;

pub use ascend_testkit::pattern;
