//! What a channel imports from its peer: each offered segment imported and mapped into the
//! engine's VA pool ([`Import`]), the copy table over them, and the index that finds the
//! segment holding a remote address; and the same grown by segments the peer registered
//! since ([`Remote::extend`]).
//!
//! A segment's place in the copy table (its slot) never changes once given: the first
//! segments get theirs in address order, later ones after them, so prepared lists, which name
//! table slots, stay right when the table grows.

use std::collections::HashMap;
use std::sync::Arc;

use ascend_mem::prelude::*;
use ascend_mem::{Addr, Device, MappingTable, ShareKind, SharedHandle};

use crate::error::{Error, Result};
use crate::pool::{SlotMapping, VaPool};
use crate::ranges::RangeMap;
use crate::wire::{SegmentName, ShareHandleEntry};

/// A peer segment imported and mapped into this engine's VA pool.
#[derive(Clone)]
pub(crate) struct Import {
    /// Shared with the channel's copy table, which holds it until the table is gone.
    pub(crate) map: Arc<SlotMapping>,
    /// Its entry in the copy table.
    pub(crate) slot: usize,
}

/// The segments of a range map as dense `(start, end)` pairs, with a summary of every
/// [`SegIndex::BLOCK`]-th start: finding the segment that holds a range touches the (hot)
/// summary and one block, a few cache lines, where a binary search over the segments
/// themselves misses on most of its steps once a peer offers thousands of segments.
#[derive(Default)]
pub(crate) struct SegIndex {
    spans: Vec<(u64, u64)>,
    top: Vec<u64>,
}

impl SegIndex {
    const BLOCK: usize = 8;

    pub(crate) fn new<V>(map: &RangeMap<V>) -> SegIndex {
        let spans: Vec<(u64, u64)> = map.segments().iter().map(|s| (s.start, s.end())).collect();
        let top = spans.iter().step_by(Self::BLOCK).map(|s| s.0).collect();
        SegIndex { spans, top }
    }

    /// Index and start of the segment holding all of `[addr, addr + len)`, if one does.
    #[inline]
    pub(crate) fn holding(&self, addr: u64, len: u64) -> Option<(usize, u64)> {
        let b = self.top.partition_point(|&k| k <= addr).checked_sub(1)?;
        let lo = b * Self::BLOCK;
        let hi = (lo + Self::BLOCK).min(self.spans.len());
        // A counting scan: independent loads, about one cache miss for a cold block.
        let i = lo + self.spans[lo..hi].iter().filter(|s| s.0 <= addr).count() - 1;
        let (start, end) = self.spans[i];
        (addr.checked_add(len)? <= end).then_some((i, start))
    }
}

/// Which of a peer's segments (copy-table slots) a transfer's pieces lie in: a bit per slot
/// below 128, and whether any lies at or above (then every such slot counts as used).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SegMask {
    /// Slot `s` below 128 is bit `s % 64` of word `s / 64` (two words: no 128-bit shifts on
    /// the path that marks every copy's slot).
    words: [u64; 2],
    high: bool,
}

impl SegMask {
    /// Marks `slot` used.
    #[inline]
    pub(crate) fn add(&mut self, slot: usize) {
        match self.words.get_mut(slot >> 6) {
            Some(w) => *w |= 1 << (slot & 63),
            None => self.high = true,
        }
    }

    /// Whether any of `slots` is used.
    pub(crate) fn any(&self, slots: &[usize]) -> bool {
        slots.iter().any(|&s| match self.words.get(s >> 6) {
            Some(w) => w & (1 << (s & 63)) != 0,
            None => self.high,
        })
    }
}

/// What a live channel imported from its peer. Dropping it unmaps every import and returns
/// its VA to the pool (once no stream holds the table any more).
pub(crate) struct Remote {
    /// `map`'s imports as a copy table (entry i = segment i). It holds the imports'
    /// `SlotMapping`s as well, so whichever goes last, table or map, unmaps an import
    /// before its VA goes back to the pool (even if a stream that failed to be destroyed
    /// leaked the table).
    pub(crate) table: MappingTable,
    /// Remote va → imported mapping, held inline (one pointer less to chase per
    /// descriptor than an `Arc` each). Replaced whole when the peer's segments grow.
    pub(crate) map: RangeMap<Import>,
    /// Search index over `map`'s segment starts.
    pub(crate) index: SegIndex,
    /// Names the peer gave its registrations: name → (va_addr, len), in its addresses.
    pub(crate) names: HashMap<String, (u64, u64)>,
    /// Each segment's (va_addr, len), by slot: the order they became known in.
    pub(crate) spans: Vec<(u64, u64)>,
    /// By slot: imported now (false: the peer revoked it).
    live: Vec<bool>,
    dev: Device,
}

impl Remote {
    /// The imports of `map`, with their copy table and search index. `spans` are the
    /// (va_addr, len) of every slot given before (those of revoked segments too: a slot is
    /// never given twice); a slot with no import keeps its place in the table with a stand-in
    /// (another import's mapping) that no piece ever names.
    pub(crate) fn new(
        dev: &Device,
        map: RangeMap<Import>,
        mut spans: Vec<(u64, u64)>,
    ) -> ascend_mem::Result<Remote> {
        let n = map
            .segments()
            .iter()
            .map(|s| s.value.slot + 1)
            .max()
            .unwrap_or(0)
            .max(spans.len());
        spans.resize(n, (0, 0));
        let mut by_slot: Vec<Option<&Import>> = vec![None; n];
        for s in map.segments() {
            spans[s.value.slot] = (s.start, s.len);
            by_slot[s.value.slot] = Some(&s.value);
        }
        let live = by_slot.iter().map(Option::is_some).collect();
        let entries: Vec<&Import> = match by_slot.iter().flatten().next() {
            Some(&stand_in) => by_slot.iter().map(|i| i.unwrap_or(stand_in)).collect(),
            None => Vec::new(),
        };
        let table = MappingTable::with_keepalive(
            dev,
            entries.iter().map(|i| i.map.mapping().as_slice()),
            entries.iter().map(|i| i.map.clone()).collect::<Vec<_>>(),
        )?;
        Ok(Remote {
            index: SegIndex::new(&map),
            table,
            map,
            names: HashMap::new(),
            spans,
            live,
            dev: dev.clone(),
        })
    }

    /// The segments imported now, `(va_addr, len)` by slot (those revoked left out).
    pub(crate) fn live_spans(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.spans
            .iter()
            .zip(&self.live)
            .filter_map(|(s, live)| live.then_some(*s))
    }

    /// The (va_addr, len) of slot `slot` if it was revoked.
    pub(crate) fn revoked(&self, slot: usize) -> Option<(u64, u64)> {
        (!self.live.get(slot).copied().unwrap_or(true)).then(|| self.spans[slot])
    }

    /// This remote without the segments starting at `va_addrs` (the peer revoked them) and
    /// the names that pointed into them, and their slots; `None` when none of them is
    /// imported. Their imports go once the old remote and every stream holding its table
    /// have let go of them.
    pub(crate) fn without(&self, va_addrs: &[u64]) -> Result<Option<(Remote, Vec<usize>)>> {
        let mut map = self.map.clone();
        let slots: Vec<usize> = va_addrs
            .iter()
            .filter_map(|&a| map.remove(a).map(|s| s.value.slot))
            .collect();
        if slots.is_empty() {
            return Ok(None);
        }
        let mut r = Remote::new(&self.dev, map, self.spans.clone())?;
        r.names = self.names.clone();
        r.names.retain(|_, (a, l)| r.map.covers(*a, *l));
        Ok(Some((r, slots)))
    }

    /// Imports and maps every entry `peer` offered, into `pool`, and keeps the names it gave
    /// its registrations (a name too long, or offered twice, is left out); on a failure,
    /// what was imported so far is undone (dropped) and the error names the entry.
    pub(crate) fn import_entries(
        dev: &Device,
        pool: &Arc<VaPool>,
        peer: &str,
        entries: &[ShareHandleEntry],
        names: &[SegmentName],
    ) -> Result<Remote> {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| entries[i].va_addr);
        let mut map = RangeMap::new();
        Self::import_into(dev, pool, peer, entries, (&order, 0), &mut map)?;
        let mut r = Remote::new(dev, map, Vec::new())?;
        r.names = Self::read_names(peer, names);
        Ok(r)
    }

    /// This remote grown by what `entries` offers that it has not imported (a peer's
    /// registrations made since), with `names` as the peer's names now; `None` when nothing
    /// is new. Imports already held are shared, never imported again, and keep their slots.
    /// An entry that overlaps an imported segment without being it is left out (logged).
    pub(crate) fn extend(
        &self,
        dev: &Device,
        pool: &Arc<VaPool>,
        peer: &str,
        entries: &[ShareHandleEntry],
        names: &[SegmentName],
    ) -> Result<Option<Remote>> {
        let mut order: Vec<usize> = Vec::new();
        let held = |e: &ShareHandleEntry| {
            self.map.find(e.va_addr).is_some_and(|p| {
                let s = &self.map.segments()[p];
                (s.start, s.len) == (e.va_addr, e.len)
            })
        };
        for (i, e) in entries.iter().enumerate() {
            if held(e) {
                continue;
            }
            if self.map.is_free(e.va_addr, e.len) {
                order.push(i);
            } else {
                tracing::warn!(
                    peer,
                    va_addr = e.va_addr,
                    len = e.len,
                    "offered entry overlaps an import; left out"
                );
            }
        }
        if order.is_empty() {
            return Ok(None);
        }
        order.sort_by_key(|&i| entries[i].va_addr);
        let mut map = self.map.clone();
        let first = self.spans.len();
        Self::import_into(dev, pool, peer, entries, (&order, first), &mut map)?;
        let mut r = Remote::new(dev, map, self.spans.clone())?;
        r.names = Self::read_names(peer, names);
        Ok(Some(r))
    }

    /// The names a peer gave its registrations (a name too long, or given twice, is left
    /// out).
    fn read_names(peer: &str, names: &[SegmentName]) -> HashMap<String, (u64, u64)> {
        let mut out = HashMap::new();
        for n in names {
            if n.name.len() > crate::wire::MAX_SEGMENT_NAME
                || out.insert(n.name.clone(), (n.va_addr, n.len)).is_some()
            {
                tracing::warn!(peer, name = %n.name.escape_debug(), "segment name left out");
            }
        }
        out
    }

    /// Imports `entries[i]` for each `i` of `order` into `map`, giving them the slots from
    /// `first` on in that order; on a failure the error names the entry (what was imported
    /// is dropped with `map`).
    fn import_into(
        dev: &Device,
        pool: &Arc<VaPool>,
        peer: &str,
        entries: &[ShareHandleEntry],
        (order, first): (&[usize], usize),
        remote_map: &mut RangeMap<Import>,
    ) -> Result<()> {
        for (k, &index) in order.iter().enumerate() {
            let e = &entries[index];
            let bad = |reason| Error::BadEntry {
                peer: peer.to_owned(),
                index,
                va_addr: Addr::new(e.va_addr),
                len: e.len as usize,
                reason,
            };
            let len = usize::try_from(e.len).map_err(|_| bad("length does not fit"))?;
            if len == 0 {
                return Err(bad("zero length"));
            }
            if e.va_addr.checked_add(e.len).is_none() {
                return Err(bad("address range overflows"));
            }
            let mem = SharedHandle::from_parts(ShareKind::Fabric, len, e.share_handle)
                .import(dev)
                .inspect_err(|err| tracing::warn!(peer, index, error = %err, "import failed"))?;
            let map = Arc::new(pool.map(dev, &mem)?);
            let slot = first + k;
            remote_map
                .insert(e.va_addr, e.len, Import { map, slot })
                .map_err(|_| bad("overlaps another entry"))?;
        }
        Ok(())
    }
}
