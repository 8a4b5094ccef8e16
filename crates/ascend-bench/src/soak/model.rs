//! The host-side model of registered memory, the seeded patterns and the random source.

/// A seeded pseudo-random source (splitmix64): the same seed gives the same choices.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo) as u64 + 1) as usize
    }

    /// True with probability `per_mille` / 1000.
    pub(crate) fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// An independent stream derived from this one.
    pub(crate) fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }

    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// The splitmix64 finaliser.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The pattern key of region `id` of a peer incarnation with key `peer_key`.
pub(crate) fn region_key(peer_key: u64, id: u32) -> u64 {
    mix(peer_key ^ (u64::from(id) << 40) ^ 0x5eed)
}

/// Fills `buf` with the pattern of `key` starting at byte `off` of the region.
pub(crate) fn fill_pattern(key: u64, off: usize, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let at = (off + i) as u64;
        *b = (mix(key ^ (at >> 3)) >> ((at & 7) * 8)) as u8;
    }
}

/// FNV-1a, 64 bit: the checksum a peer reports for a range.
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What the soak believes one registered region holds: a byte and whether it is known.
pub(crate) struct Shadow {
    data: Vec<u8>,
    known: Vec<bool>,
}

/// A byte that differs from the model.
#[derive(Debug)]
pub(crate) struct Mismatch {
    pub(crate) offset: usize,
    pub(crate) expected: u8,
    pub(crate) found: u8,
    pub(crate) differing: usize,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} byte(s) differ, the first at offset {:#x}: model {:#04x}, memory {:#04x}",
            self.differing, self.offset, self.expected, self.found
        )
    }
}

impl Shadow {
    /// A region that holds the pattern of `key`, all known.
    pub(crate) fn pattern(key: u64, len: usize) -> Shadow {
        let mut data = vec![0u8; len];
        fill_pattern(key, 0, &mut data);
        Shadow {
            data,
            known: vec![true; len],
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    pub(crate) fn bytes(&self, off: usize, len: usize) -> &[u8] {
        &self.data[off..off + len]
    }

    /// `bytes` are now at `off`, known.
    pub(crate) fn set(&mut self, off: usize, bytes: &[u8]) {
        self.data[off..off + bytes.len()].copy_from_slice(bytes);
        self.known[off..off + bytes.len()].fill(true);
    }

    /// The bytes at `off` are unknown until rewritten.
    pub(crate) fn forget(&mut self, off: usize, len: usize) {
        self.known[off..off + len].fill(false);
    }

    pub(crate) fn all_known(&self, off: usize, len: usize) -> bool {
        self.known[off..off + len].iter().all(|&k| k)
    }

    pub(crate) fn unknown_bytes(&self) -> usize {
        self.known.iter().filter(|&&k| !k).count()
    }

    /// Compares `actual` (the bytes found at `off`) with the known bytes of the model and
    /// returns how many were checked.
    pub(crate) fn check(&self, off: usize, actual: &[u8]) -> Result<u64, Mismatch> {
        let want = &self.data[off..off + actual.len()];
        let known = &self.known[off..off + actual.len()];
        let mut first = None;
        let mut differing = 0;
        let mut checked = 0u64;
        for (i, ((&w, &a), &k)) in want.iter().zip(actual).zip(known).enumerate() {
            if !k {
                continue;
            }
            checked += 1;
            if w != a {
                differing += 1;
                first.get_or_insert((i, w, a));
            }
        }
        match first {
            None => Ok(checked),
            Some((i, expected, found)) => Err(Mismatch {
                offset: off + i,
                expected,
                found,
                differing,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_position_independent() {
        let key = region_key(7, 3);
        let mut whole = vec![0u8; 100];
        fill_pattern(key, 0, &mut whole);
        let mut part = vec![0u8; 37];
        fill_pattern(key, 41, &mut part);
        assert_eq!(&whole[41..78], &part[..]);
    }

    #[test]
    fn shadow_checks_known_bytes_only() {
        let mut s = Shadow::pattern(1, 64);
        let mut actual = s.bytes(0, 64).to_vec();
        assert_eq!(s.check(0, &actual).unwrap(), 64);
        actual[10] ^= 1;
        assert_eq!(s.check(0, &actual).unwrap_err().offset, 10);
        s.forget(8, 4);
        assert_eq!(s.check(0, &actual).unwrap(), 60);
        s.set(8, &[1, 2]);
        assert!(!s.all_known(8, 4) && s.all_known(8, 2));
    }
}
