//! Prepared block lists, as NIXL's prepared descriptor lists: a local registration
//! ([`LocalBlocks`]) or segments a peer offered ([`RemoteBlocks`], found by index or by the
//! name the peer gave a registration) described once as blocks of a fixed size. Transfers
//! then name (local block, remote block) index pairs
//! ([`Engine::transfer_prepared_async`](crate::Engine::transfer_prepared_async)): every
//! address was translated and checked when the list was made, so a transfer only checks that
//! each index lies in its list.
//!
//! A list's blocks are numbered from 0 across its ranges, in the order given; each range is
//! cut into as many whole blocks as fit (a tail shorter than a block is not part of the list).

use std::sync::{Arc, Weak};

use ascend_mem::{Addr, MappingTable};

use crate::channel::Channel;
use crate::engine::EngineInner;
use crate::ranges::RangeMap;
use crate::registry::RegInner;

mod build;
mod post;

pub(crate) use crate::names::check_name;

/// One of the segments a peer offered, as [`Engine::prepare_remote`](crate::Engine::prepare_remote)
/// takes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SegmentRef {
    /// The `i`-th entry of [`Engine::remote_segments`](crate::Engine::remote_segments) (the
    /// order segments became known in, which a refresh only extends).
    Index(usize),
    /// The registration the peer named so
    /// ([`Engine::register_named`](crate::Engine::register_named)).
    Name(String),
}

impl From<usize> for SegmentRef {
    fn from(i: usize) -> Self {
        SegmentRef::Index(i)
    }
}

impl From<&str> for SegmentRef {
    fn from(n: &str) -> Self {
        SegmentRef::Name(n.to_owned())
    }
}

/// Where a list entry's table entry is not one: the range crosses entries and its blocks are
/// resolved through the range map when used.
const CROSSES: u32 = u32::MAX;

/// One range of a list: where it starts in its side's addresses, the table entry holding it
/// (and the offset of its start there) when one entry holds all of it, its first block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Range {
    pub(crate) addr: u64,
    pub(crate) entry: u32,
    pub(crate) off: u64,
    pub(crate) first: u64,
}

/// Block numbers over a list's ranges.
#[derive(Debug)]
pub(crate) struct BlockMap {
    pub(crate) block_len: u64,
    pub(crate) count: u64,
    /// Blocks per range when every range has the same number (block `k` is then in range
    /// `k / per_range`), else 0 (a search over the ranges' first blocks).
    per_range: u64,
    /// `log2(per_range)` when it is a power of two (block `k` is in range `k >> shift`: no
    /// division per block), else `None`.
    shift: Option<u32>,
    ranges: Box<[Range]>,
}

impl BlockMap {
    /// Cuts each of `ranges` ((addr, len, entry and offset if one entry holds it)) into
    /// blocks of `block_len`; `Err` names the first range with no whole block.
    pub(crate) fn new(
        block_len: u64,
        ranges: impl IntoIterator<Item = (u64, u64, Option<(usize, u64)>)>,
    ) -> Result<BlockMap, (usize, u64)> {
        let mut out = Vec::new();
        let mut count = 0u64;
        let mut per: Option<u64> = None;
        let mut uniform = true;
        for (i, (addr, len, at)) in ranges.into_iter().enumerate() {
            let n = len / block_len;
            if n == 0 {
                return Err((i, len));
            }
            uniform &= *per.get_or_insert(n) == n;
            let (entry, off) = match at {
                Some((e, o)) if e < CROSSES as usize => (e as u32, o),
                _ => (CROSSES, 0),
            };
            out.push(Range {
                addr,
                entry,
                off,
                first: count,
            });
            count += n;
        }
        let per_range = if uniform { per.unwrap_or(0) } else { 0 };
        Ok(BlockMap {
            block_len,
            count,
            per_range,
            shift: per_range
                .is_power_of_two()
                .then(|| per_range.trailing_zeros()),
            ranges: out.into_boxed_slice(),
        })
    }

    /// The range of block `k` (which must be below `count`) and the block's offset in it.
    #[inline]
    pub(crate) fn locate(&self, k: u64) -> (&Range, u64) {
        let i = if self.ranges.len() == 1 {
            0
        } else if let Some(sh) = self.shift {
            (k >> sh) as usize
        } else {
            match k.checked_div(self.per_range) {
                Some(i) => i as usize,
                None => self.ranges.partition_point(|r| r.first <= k) - 1,
            }
        };
        let r = &self.ranges[i];
        (r, (k - r.first) * self.block_len)
    }

    /// The table entry and the offset of block 0 in it, when the list is one range that one
    /// entry holds (block `k` is then at that offset plus `k * block_len`).
    pub(crate) fn one_entry(&self) -> Option<(usize, u64)> {
        match *self.ranges {
            [r] if r.entry != CROSSES => Some((r.entry as usize, r.off)),
            _ => None,
        }
    }

    /// The address of block `i`, if it is in the list.
    pub(crate) fn addr_of(&self, i: usize) -> Option<Addr> {
        ((i as u64) < self.count).then(|| {
            let (r, off) = self.locate(i as u64);
            Addr::new(r.addr + off)
        })
    }

    /// Ranges in the list.
    pub(crate) fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// The first block of range `i`.
    pub(crate) fn first_block(&self, i: usize) -> Option<usize> {
        self.ranges.get(i).map(|r| r.first as usize)
    }
}

/// A local registration described as blocks of a fixed size
/// ([`Engine::prepare_local`](crate::Engine::prepare_local)).
///
/// It holds the registration's memory mapped (not the registration: once the registration is
/// deregistered, transfers of the list fail with [`Error::Prepare`](crate::Error::Prepare)).
/// Cheap to clone (clones share everything); `Send + Sync`.
#[derive(Clone)]
pub struct LocalBlocks {
    pub(crate) engine: Weak<EngineInner>,
    pub(crate) reg: Arc<RegInner>,
    /// The registration's segments as a copy table of their own.
    pub(crate) table: MappingTable,
    /// Local address → entry of `table`, for blocks that cross entries.
    pub(crate) segs: Arc<RangeMap<()>>,
    pub(crate) blocks: Arc<BlockMap>,
}

impl std::fmt::Debug for LocalBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBlocks")
            .field("addr", &format_args!("{:#x}", self.reg.addr))
            .field("block_len", &self.blocks.block_len)
            .field("blocks", &self.blocks.count)
            .finish()
    }
}

impl LocalBlocks {
    /// Blocks in the list.
    pub fn len(&self) -> usize {
        self.blocks.count as usize
    }

    /// Always false (a list has at least one block).
    pub fn is_empty(&self) -> bool {
        self.blocks.count == 0
    }

    /// Bytes per block.
    pub fn block_len(&self) -> usize {
        self.blocks.block_len as usize
    }

    /// The local address of block `i`, if it is in the list.
    pub fn block_addr(&self, i: usize) -> Option<Addr> {
        self.blocks.addr_of(i)
    }
}

/// Segments a peer offered, described as blocks of a fixed size
/// ([`Engine::prepare_remote`](crate::Engine::prepare_remote)).
///
/// It is bound to the channel it was made on: once that channel is lost or disconnected,
/// transfers of the list fail with [`Error::PeerLost`](crate::Error::PeerLost), and after a
/// reconnect with [`Error::StalePrepared`](crate::Error::StalePrepared) (prepare the list
/// again). Cheap to clone (clones share everything); `Send + Sync`.
#[derive(Clone)]
pub struct RemoteBlocks {
    pub(crate) engine: Weak<EngineInner>,
    pub(crate) ch: Arc<Channel>,
    pub(crate) blocks: Arc<BlockMap>,
    /// The copy-table slots of the peer's segments the blocks lie in.
    pub(crate) slots: Arc<[usize]>,
}

impl std::fmt::Debug for RemoteBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBlocks")
            .field("peer", &self.ch.peer)
            .field("block_len", &self.blocks.block_len)
            .field("blocks", &self.blocks.count)
            .finish()
    }
}

impl RemoteBlocks {
    /// The peer.
    pub fn peer(&self) -> &str {
        &self.ch.peer
    }

    /// Blocks in the list.
    pub fn len(&self) -> usize {
        self.blocks.count as usize
    }

    /// Always false (a list has at least one block).
    pub fn is_empty(&self) -> bool {
        self.blocks.count == 0
    }

    /// Bytes per block.
    pub fn block_len(&self) -> usize {
        self.blocks.block_len as usize
    }

    /// The index of the first block of the `i`-th segment given to `prepare_remote`.
    pub fn first_block(&self, i: usize) -> Option<usize> {
        self.blocks.first_block(i)
    }

    /// The segments given to `prepare_remote`.
    pub fn segments(&self) -> usize {
        self.blocks.ranges()
    }

    /// The peer's address of block `i`, if it is in the list.
    pub fn block_addr(&self, i: usize) -> Option<Addr> {
        self.blocks.addr_of(i)
    }
}

#[cfg(test)]
mod tests;
