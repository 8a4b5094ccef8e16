//! A sorted map of non-overlapping address ranges, for translating remote addresses and
//! checking local ones.
//!
//! Lookups are a binary search (`O(log n)`), and a range that spans several adjacent segments
//! is split at the segment boundaries, in order. A range that touches a gap is an error.

use ascend_mem::Addr;

/// One segment of the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment<V> {
    /// First address.
    pub start: u64,
    /// Length in bytes (never zero).
    pub len: u64,
    /// What the segment maps to.
    pub value: V,
}

impl<V> Segment<V> {
    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// Why a range could not be inserted or resolved ([`Error::Range`](crate::Error::Range): a
/// registration of zero bytes or past the end of the address space).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeError {
    /// A zero-length range.
    #[error("zero-length range at {addr:#x}")]
    Empty {
        /// Its start.
        addr: Addr,
    },
    /// `addr + len` overflows.
    #[error("range at {addr:#x} of {len:#x} bytes overflows the address space")]
    Overflow {
        /// Start.
        addr: Addr,
        /// Length.
        len: usize,
    },
    /// The range overlaps an existing segment.
    #[error("range [{addr:#x}, +{len:#x}) overlaps the segment at {existing:#x}")]
    Overlap {
        /// Start.
        addr: Addr,
        /// Length.
        len: usize,
        /// Start of the segment it overlaps.
        existing: Addr,
    },
    /// Part of the range lies in no segment.
    #[error("address {addr:#x} lies in no registered segment")]
    Unmapped {
        /// The first address not covered.
        addr: Addr,
    },
}

/// A piece of a resolved range: `len` bytes starting `offset` bytes into segment `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index of the segment in [`RangeMap::segments`].
    pub index: usize,
    /// Offset from the segment's start.
    pub offset: u64,
    /// Bytes in this piece.
    pub len: u64,
}

/// Sorted, non-overlapping segments.
#[derive(Debug, Clone)]
pub struct RangeMap<V> {
    segs: Vec<Segment<V>>,
}

impl<V> Default for RangeMap<V> {
    fn default() -> Self {
        RangeMap { segs: Vec::new() }
    }
}

fn overlap(start: u64, len: u64, existing: u64) -> RangeError {
    RangeError::Overlap {
        addr: Addr::new(start),
        len: len as usize,
        existing: Addr::new(existing),
    }
}

fn check(addr: u64, len: u64) -> Result<u64, RangeError> {
    if len == 0 {
        return Err(RangeError::Empty {
            addr: Addr::new(addr),
        });
    }
    addr.checked_add(len).ok_or(RangeError::Overflow {
        addr: Addr::new(addr),
        len: len as usize,
    })
}

impl<V> RangeMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The segments in address order.
    pub fn segments(&self) -> &[Segment<V>] {
        &self.segs
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Index of the segment containing `addr`.
    pub fn find(&self, addr: u64) -> Option<usize> {
        let i = self.segs.partition_point(|s| s.start <= addr);
        (i > 0 && addr < self.segs[i - 1].end()).then(|| i - 1)
    }

    /// Inserts a segment.
    ///
    /// # Errors
    /// [`RangeError::Empty`], [`RangeError::Overflow`] or [`RangeError::Overlap`].
    pub fn insert(&mut self, start: u64, len: u64, value: V) -> Result<usize, RangeError> {
        let i = self.free_at(start, len)?;
        self.segs.insert(i, Segment { start, len, value });
        Ok(i)
    }

    /// Whether `[start, start + len)` is a valid range that no segment overlaps (what
    /// [`RangeMap::insert`] takes).
    pub fn is_free(&self, start: u64, len: u64) -> bool {
        self.free_at(start, len).is_ok()
    }

    /// Where a segment `[start, start + len)` would go, if nothing overlaps it.
    fn free_at(&self, start: u64, len: u64) -> Result<usize, RangeError> {
        let end = check(start, len)?;
        let i = self.segs.partition_point(|s| s.start < start);
        if let Some(prev) = i.checked_sub(1).map(|p| &self.segs[p]) {
            if prev.end() > start {
                return Err(overlap(start, len, prev.start));
            }
        }
        if let Some(next) = self.segs.get(i) {
            if next.start < end {
                return Err(overlap(start, len, next.start));
            }
        }
        Ok(i)
    }

    /// Removes the segment that starts exactly at `start`.
    pub fn remove(&mut self, start: u64) -> Option<Segment<V>> {
        let i = self.segs.binary_search_by_key(&start, |s| s.start).ok()?;
        Some(self.segs.remove(i))
    }

    /// Splits `[addr, addr + len)` at segment boundaries and calls `f` for each piece, in
    /// order; stops at the first gap.
    ///
    /// # Errors
    /// [`RangeError::Empty`], [`RangeError::Overflow`] or [`RangeError::Unmapped`] (naming the
    /// first address not covered; `f` may already have seen earlier pieces).
    pub fn for_each_piece(
        &self,
        addr: u64,
        len: u64,
        mut f: impl FnMut(Piece, &Segment<V>),
    ) -> Result<(), RangeError> {
        let end = check(addr, len)?;
        let mut at = addr;
        let mut i = self.find(addr).ok_or(RangeError::Unmapped {
            addr: Addr::new(addr),
        })?;
        loop {
            let seg = &self.segs[i];
            let piece_end = end.min(seg.end());
            f(
                Piece {
                    index: i,
                    offset: at - seg.start,
                    len: piece_end - at,
                },
                seg,
            );
            at = piece_end;
            if at == end {
                return Ok(());
            }
            i += 1;
            match self.segs.get(i) {
                Some(next) if next.start == at => {}
                _ => {
                    return Err(RangeError::Unmapped {
                        addr: Addr::new(at),
                    })
                }
            }
        }
    }

    /// Whether `[addr, addr + len)` is entirely covered.
    pub fn covers(&self, addr: u64, len: u64) -> bool {
        self.for_each_piece(addr, len, |_, _| {}).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn insert_rejects_overlap_and_bad_ranges() {
        let mut m = RangeMap::new();
        m.insert(0x1000, 0x1000, 'a').unwrap();
        m.insert(0x3000, 0x1000, 'c').unwrap();
        m.insert(0x2000, 0x1000, 'b').unwrap();
        assert_eq!(
            m.segments().iter().map(|s| s.value).collect::<String>(),
            "abc"
        );
        assert_eq!(
            m.insert(0x1800, 0x100, 'x'),
            Err(RangeError::Overlap {
                addr: Addr::new(0x1800),
                len: 0x100,
                existing: Addr::new(0x1000)
            })
        );
        assert_eq!(
            m.insert(0x0800, 0x1000, 'x'),
            Err(RangeError::Overlap {
                addr: Addr::new(0x800),
                len: 0x1000,
                existing: Addr::new(0x1000)
            })
        );
        assert_eq!(
            m.insert(0x5000, 0, 'x'),
            Err(RangeError::Empty {
                addr: Addr::new(0x5000)
            })
        );
        assert!(matches!(
            m.insert(u64::MAX, 2, 'x'),
            Err(RangeError::Overflow { .. })
        ));
        assert_eq!(m.remove(0x2000).map(|s| s.value), Some('b'));
        assert_eq!(m.remove(0x2000), None);
    }

    #[test]
    fn pieces_split_at_boundaries_and_stop_at_gaps() {
        let mut m = RangeMap::new();
        m.insert(100, 50, 0).unwrap();
        m.insert(150, 50, 1).unwrap();
        m.insert(300, 10, 2).unwrap();
        let mut got = Vec::new();
        m.for_each_piece(120, 60, |p, _| got.push(p)).unwrap();
        assert_eq!(
            got,
            [
                Piece {
                    index: 0,
                    offset: 20,
                    len: 30
                },
                Piece {
                    index: 1,
                    offset: 0,
                    len: 30
                }
            ]
        );
        assert_eq!(
            m.for_each_piece(190, 20, |_, _| {}),
            Err(RangeError::Unmapped {
                addr: Addr::new(200)
            })
        );
        assert_eq!(
            m.for_each_piece(90, 20, |_, _| {}),
            Err(RangeError::Unmapped {
                addr: Addr::new(90)
            })
        );
        assert!(m.covers(300, 10));
        assert!(!m.covers(300, 11));
        assert_eq!(m.find(149), Some(0));
        assert_eq!(m.find(150), Some(1));
        assert_eq!(m.find(200), None);
    }

    proptest! {
        /// Pieces of any covered range are contiguous, in order, inside their segments, and
        /// add up to the range.
        #[test]
        fn pieces_tile_the_range(lens in proptest::collection::vec(1u64..1000, 1..40), a in 0u64..40_000, l in 1u64..5000) {
            let mut m = RangeMap::new();
            let mut at = 1000u64;
            for (i, len) in lens.iter().enumerate() {
                m.insert(at, *len, i).unwrap();
                at += len;
            }
            let mut cursor = a;
            let r = m.for_each_piece(a, l, |p, s| {
                assert_eq!(s.start + p.offset, cursor);
                assert!(p.offset + p.len <= s.len);
                cursor += p.len;
            });
            let covered = a >= 1000 && a + l <= at;
            prop_assert_eq!(r.is_ok(), covered);
            if covered {
                prop_assert_eq!(cursor, a + l);
            }
        }
    }
}
