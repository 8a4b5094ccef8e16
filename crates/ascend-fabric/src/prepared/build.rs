//! Making prepared lists: naming registrations, and translating a registration or a peer's
//! segments into blocks once.

use std::sync::Arc;

use ascend_mem::prelude::*;
use ascend_mem::MappingTable;

use super::{check_name, BlockMap, LocalBlocks, RemoteBlocks, SegmentRef};
use crate::channel::Gate;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::ranges::RangeMap;
use crate::registry::{Registrable, Registration};
use crate::remote::Remote;

fn prep_err(call: &'static str, reason: String) -> Error {
    Error::Prepare { call, reason }
}

impl Engine {
    /// Registers `mem` as [`Engine::register`] does and gives the registration `name`, which
    /// peers that connect afterwards see with the export list and can prepare blocks of by
    /// name ([`SegmentRef::Name`]). A name is free again once its registration is gone.
    ///
    /// # Errors
    /// [`Error::BadName`] for an empty name, one over
    /// [`MAX_SEGMENT_NAME`](crate::MAX_SEGMENT_NAME) bytes (256) or with control
    /// characters, or one that names another live registration; as [`Engine::register`].
    pub fn register_named<R: Registrable + ?Sized>(
        &self,
        mem: &R,
        name: &str,
    ) -> Result<Registration> {
        let names = &self.inner.registry.names;
        check_name(name)?;
        names.available(name, None)?;
        let reg = self.register(mem)?;
        names.insert(name, reg.inner())?;
        Ok(reg)
    }

    /// Describes `reg` as blocks of `block_len` bytes from its start (a tail shorter than a
    /// block is left out): block `i` is `[reg.addr() + i * block_len, + block_len)`. The
    /// list maps the registration's memory through a copy table of its own, so transfers of
    /// it do no address lookup.
    ///
    /// # Errors
    /// [`Error::Prepare`] for a zero `block_len`, one longer than the registration, or a
    /// registration of another engine or already deregistered; [`Error::Mem`] if the table
    /// cannot be made.
    pub fn prepare_local(&self, reg: &Registration, block_len: usize) -> Result<LocalBlocks> {
        const CALL: &str = "prepare_local";
        let block_len = block_len as u64;
        if block_len == 0 {
            return Err(prep_err(CALL, "block_len is 0".into()));
        }
        let ri = reg.inner();
        let st = self.inner.registry.state.read();
        // (block, offset in it, length) of each piece of the registration.
        let mut parts = Vec::new();
        let mut segs = RangeMap::new();
        let mut ours = !ri.is_removed();
        let walked = st.ranges.for_each_piece(ri.addr, ri.len, |p, seg| {
            ours &= Arc::ptr_eq(&seg.value.reg, ri);
            let b = seg.value.block.clone();
            let at = (seg.start + p.offset - b.base) as usize;
            parts.push((b, at, p.len as usize));
            let _ = segs.insert(seg.start + p.offset, p.len, ());
        });
        if walked.is_err() || !ours {
            return Err(prep_err(
                CALL,
                format!(
                    "the registration at {:#x} (+{:#x}) is not registered with this engine",
                    ri.addr, ri.len
                ),
            ));
        }
        let views = parts
            .iter()
            .map(|(b, at, len)| b.mapping().slice(*at..*at + *len))
            .collect::<ascend_mem::Result<Vec<_>>>()?;
        // The table holds the blocks too (a block mapped in a pool slot gives the slot back
        // only once no table uses it), as the registry's own table does.
        let blocks: Vec<_> = parts.iter().map(|(b, _, _)| b.clone()).collect();
        let table = MappingTable::with_keepalive(&self.inner.dev, views, blocks)?;
        drop(st);
        let at = (segs.len() == 1).then_some((0, 0));
        let blocks = BlockMap::new(block_len, [(ri.addr, ri.len, at)]).map_err(|(_, len)| {
            prep_err(
                CALL,
                format!("block_len {block_len} is longer than the registration ({len} bytes)"),
            )
        })?;
        Ok(LocalBlocks {
            engine: Arc::downgrade(&self.inner),
            reg: ri.clone(),
            table,
            segs: Arc::new(segs),
            blocks: Arc::new(blocks),
        })
    }

    /// Describes segments `peer` offered as blocks of `block_len` bytes: each segment (an
    /// entry of [`Engine::remote_segments`] by index, or a registration the peer named) is
    /// cut into whole blocks from its start, and the blocks are numbered across the segments
    /// in the order given ([`RemoteBlocks::first_block`]).
    ///
    /// A segment not known yet (a name, or an index past the segments seen so far) may be a
    /// registration the peer made after the connect: the peer's segments are refreshed first
    /// ([`Engine::refresh_segments`]; a C++ HIXL peer's stay those of the connect). A list
    /// stays valid while the peer's segments grow.
    ///
    /// # Errors
    /// [`Error::NotConnected`]; [`Error::PeerLost`]; [`Error::Prepare`] for an empty segment
    /// list, a zero `block_len`, an index past the peer's segments, a name the peer did not
    /// offer (or whose range it does not offer whole), or a segment shorter than a block.
    pub fn prepare_remote(
        &self,
        peer: &str,
        segments: &[SegmentRef],
        block_len: usize,
    ) -> Result<RemoteBlocks> {
        const CALL: &str = "prepare_remote";
        let block_len = block_len as u64;
        if block_len == 0 {
            return Err(prep_err(CALL, "block_len is 0".into()));
        }
        if segments.is_empty() {
            return Err(prep_err(CALL, "the segment list is empty".into()));
        }
        let ch = self.inner.channel(peer)?;
        // A segment not known yet may be one the peer registered since we connected.
        let known = ch.with_remote(|rem| segments.iter().all(|s| knows(rem, s)));
        if known == Some(false) {
            self.refresh_on_miss(&ch, None);
        }
        let gate = ch.gate.read();
        let rem = match &*gate {
            Gate::Open(r) => r,
            Gate::Lost(r) => return Err(ch.lost_error(*r)),
        };
        let mut ranges = Vec::with_capacity(segments.len());
        let mut slots = Vec::new();
        for s in segments {
            let (addr, len) = match s {
                SegmentRef::Index(i) => rem.live_spans().nth(*i).ok_or_else(|| {
                    prep_err(
                        CALL,
                        format!(
                            "segment index {i} is out of range ({peer} offers {})",
                            rem.map.len()
                        ),
                    )
                })?,
                SegmentRef::Name(n) => *rem.names.get(n).ok_or_else(|| {
                    prep_err(CALL, format!("{peer} offers no segment named {n:?}"))
                })?,
            };
            let mut pieces = Vec::new();
            rem.map
                .for_each_piece(addr, len, |p, seg| pieces.push((seg.value.slot, p.offset)))
                .map_err(|e| prep_err(CALL, format!("{s:?} of {peer}: {e}")))?;
            slots.extend(pieces.iter().map(|p| p.0));
            ranges.push((addr, len, (pieces.len() == 1).then(|| pieces[0])));
        }
        drop(gate);
        let blocks = BlockMap::new(block_len, ranges).map_err(|(i, len)| {
            prep_err(
                CALL,
                format!(
                    "{:?} ({len} bytes) holds no whole block of {block_len}",
                    segments[i]
                ),
            )
        })?;
        slots.sort_unstable();
        slots.dedup();
        Ok(RemoteBlocks {
            engine: Arc::downgrade(&self.inner),
            ch,
            blocks: Arc::new(blocks),
            slots: slots.into(),
        })
    }
}

/// Whether `rem` has the segment `s` names.
fn knows(rem: &Remote, s: &SegmentRef) -> bool {
    match s {
        SegmentRef::Index(i) => *i < rem.map.len(),
        SegmentRef::Name(n) => rem.names.contains_key(n),
    }
}
