//! [`AddrMap`]: the address-keyed map of the address table (regions, and the mappings inside
//! each reservation), as sorted vectors with a summary for fast predecessor lookups.

/// What an [`AddrMap`] keeps of each value next to its key: its length and a tag (for a
/// mapping, its class and effective access flags), so a lookup reads no value.
pub(crate) trait Spanned {
    /// Bytes covered from the key.
    fn span_len(&self) -> usize;
    /// Anything else lookups need, packed.
    fn tag(&self) -> u64 {
        0
    }
}

/// A key with its value's length and tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ent {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) tag: u64,
}

/// An address-keyed map as sorted vectors: lookups (the predecessor of an address, on every
/// copy's validation, at submission and again at execution) search a small summary of every
/// [`AddrMap::BLOCK`]-th key (hot in cache), then one block of dense entries holding each
/// value's length and tag, so a lookup among 10,000 mappings of one reservation touches a
/// few cache lines and no value (a `BTreeMap` range query walks its nodes twice; a plain
/// binary search misses on most of its 14 steps, then on the value). Inserts and removals
/// shift the vectors and rebuild the summary, which only map, unmap, reserve and free do;
/// a value changed in place is re-read with [`AddrMap::refresh`].
pub(crate) struct AddrMap<V> {
    pub(crate) ents: Vec<Ent>,
    pub(crate) vals: Vec<V>,
    /// `ents[0].start, ents[BLOCK].start, ents[2 * BLOCK].start, ...`
    pub(crate) top: Vec<usize>,
}

impl<V: Spanned> AddrMap<V> {
    const BLOCK: usize = 8;

    pub(crate) const fn new() -> Self {
        AddrMap {
            ents: Vec::new(),
            vals: Vec::new(),
            top: Vec::new(),
        }
    }

    pub(crate) fn rebuild_top(&mut self) {
        self.top.clear();
        self.top
            .extend(self.ents.iter().step_by(Self::BLOCK).map(|e| e.start));
    }

    pub(crate) fn len(&self) -> usize {
        self.ents.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    pub(crate) fn index(&self, k: usize) -> Result<usize, usize> {
        self.ents.binary_search_by_key(&k, |e| e.start)
    }

    pub(crate) fn get(&self, k: &usize) -> Option<&V> {
        self.index(*k).ok().map(|i| &self.vals[i])
    }

    pub(crate) fn get_mut(&mut self, k: &usize) -> Option<&mut V> {
        self.index(*k).ok().map(|i| &mut self.vals[i])
    }

    /// Re-reads the length and tag of the value at `k` after a change through `get_mut`.
    pub(crate) fn refresh(&mut self, k: usize) {
        if let Ok(i) = self.index(k) {
            self.ents[i].len = self.vals[i].span_len();
            self.ents[i].tag = self.vals[i].tag();
        }
    }

    pub(crate) fn insert(&mut self, k: usize, v: V) -> Option<V> {
        let e = Ent {
            start: k,
            len: v.span_len(),
            tag: v.tag(),
        };
        match self.index(k) {
            Ok(i) => {
                self.ents[i] = e;
                Some(std::mem::replace(&mut self.vals[i], v))
            }
            Err(i) => {
                self.ents.insert(i, e);
                self.vals.insert(i, v);
                self.rebuild_top();
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, k: &usize) -> Option<V> {
        let i = self.index(*k).ok()?;
        self.ents.remove(i);
        let v = self.vals.remove(i);
        self.rebuild_top();
        Some(v)
    }

    /// Index of the last key `<= addr`.
    #[inline]
    pub(crate) fn pred_index(&self, addr: usize) -> Option<usize> {
        let b = self.top.partition_point(|&k| k <= addr).checked_sub(1)?;
        let lo = b * Self::BLOCK;
        let hi = (lo + Self::BLOCK).min(self.ents.len());
        // ents[lo].start == top[b] <= addr, and ents[hi].start (if any) == top[b + 1] > addr.
        // A counting scan, not a binary search: its loads do not depend on each other, so a
        // cold block costs about one cache miss, not one per step.
        Some(lo + self.ents[lo..hi].iter().filter(|e| e.start <= addr).count() - 1)
    }

    /// The entry (no value) with the last key `<= addr`.
    #[inline]
    pub(crate) fn pred_ent(&self, addr: usize) -> Option<Ent> {
        self.pred_index(addr).map(|i| self.ents[i])
    }

    /// The entry with the last key `<= addr` (`range(..=addr).next_back()`).
    #[inline]
    pub(crate) fn pred(&self, addr: usize) -> Option<(usize, &V)> {
        self.pred_index(addr)
            .map(|i| (self.ents[i].start, &self.vals[i]))
    }

    pub(crate) fn pred_mut(&mut self, addr: usize) -> Option<(usize, &mut V)> {
        self.pred_index(addr)
            .map(move |i| (self.ents[i].start, &mut self.vals[i]))
    }

    /// The entry with the last key `< end` (`range(..end).next_back()`).
    pub(crate) fn pred_lt(&self, end: usize) -> Option<(usize, &V)> {
        let i = self
            .ents
            .partition_point(|e| e.start < end)
            .checked_sub(1)?;
        Some((self.ents[i].start, &self.vals[i]))
    }

    /// The first key in `[lo, hi)` (`range(lo..hi).next()`).
    pub(crate) fn first_in(&self, lo: usize, hi: usize) -> Option<usize> {
        let i = self.ents.partition_point(|e| e.start < lo);
        self.ents.get(i).map(|e| e.start).filter(|&k| k < hi)
    }
}

#[cfg(test)]
mod tests {
    use super::{AddrMap, Spanned};
    use std::collections::BTreeMap;

    impl Spanned for i32 {
        fn span_len(&self) -> usize {
            1
        }
    }

    #[test]
    fn agrees_with_a_btreemap() {
        let mut m = AddrMap::new();
        let mut b = BTreeMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 5000) as usize * 16
        };
        for round in 0..4000 {
            let k = rnd();
            if round % 3 == 2 {
                assert_eq!(m.remove(&k), b.remove(&k));
            } else {
                assert_eq!(m.insert(k, round), b.insert(k, round));
            }
            let q = rnd() + 3;
            assert_eq!(
                m.pred(q).map(|(k, v)| (k, *v)),
                b.range(..=q).next_back().map(|(k, v)| (*k, *v))
            );
            assert_eq!(
                m.pred_lt(q).map(|(k, v)| (k, *v)),
                b.range(..q).next_back().map(|(k, v)| (*k, *v))
            );
            assert_eq!(
                m.first_in(q, q + 700),
                b.range(q..q + 700).next().map(|(k, _)| *k)
            );
            assert_eq!(m.get(&k), b.get(&k));
            assert_eq!(m.len(), b.len());
        }
    }
}
