//! Helpers of every test: the emulator session, free loopback ports and a byte pattern.

pub use ascend_testkit::emulator::setup;

/// A loopback port nobody listens on right now, from outside the ephemeral range (so no
/// outgoing connection of another test takes it before a server binds it).
pub use ascend_testkit::free_port;

/// A deterministic byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}
