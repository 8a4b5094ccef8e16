//! Test data: a deterministic byte pattern, different for each seed.

/// `len` bytes that depend on their position and on `seed`, so that two blocks of different
/// seeds (or a shifted copy) never compare equal.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}
