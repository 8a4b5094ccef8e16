//! A peer's segment as a value ([`RemoteSegment`], from [`Engine::remote_segment`]), the
//! remote side of a descriptor made from what the caller holds
//! ([`TransferDesc::between`](crate::TransferDesc::between)).

use ascend_mem::Addr;

use crate::engine::Engine;
use crate::error::{Error, Result, Side};
use crate::prepared::SegmentRef;
use crate::registry::Registration;
use crate::transfer::TransferDesc;

/// A segment a connected peer offers, by its address and length as the peer sees them: the
/// remote side of [`TransferDesc::between`](crate::TransferDesc::between). A plain value: it
/// holds nothing of the channel (a transfer into a segment the peer has since revoked fails
/// with [`Error::NotRegistered`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteSegment {
    pub(crate) peer: String,
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

impl RemoteSegment {
    /// The peer.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The peer's address of the segment's first byte.
    pub fn addr(&self) -> Addr {
        Addr::new(self.addr)
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Always false (a segment has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Engine {
    /// The segment of `peer` that `seg` names (an entry of [`Engine::remote_segments`] by
    /// index, or a registration the peer named), refreshing the peer's segments first when it
    /// is not known yet (as [`Engine::prepare_remote`] does).
    ///
    /// # Errors
    /// [`Error::NotConnected`]; [`Error::Prepare`] for an index past the peer's segments or a
    /// name it does not offer.
    pub fn remote_segment(&self, peer: &str, seg: impl Into<SegmentRef>) -> Result<RemoteSegment> {
        const CALL: &str = "remote_segment";
        let seg = seg.into();
        let not_connected = || Error::NotConnected {
            peer: peer.to_owned(),
        };
        let ch = self.inner.channel(peer)?;
        let find = || {
            ch.with_remote(|r| match &seg {
                SegmentRef::Index(i) => r.live_spans().nth(*i),
                SegmentRef::Name(n) => r.names.get(n).copied(),
            })
        };
        let found = match find() {
            Some(None) if self.refresh_on_miss(&ch, None) => find(),
            f => f,
        };
        let (addr, len) = found
            .ok_or_else(not_connected)?
            .ok_or_else(|| Error::Prepare {
                call: CALL,
                reason: format!("{peer} offers no segment {seg:?}"),
            })?;
        Ok(RemoteSegment {
            peer: peer.to_owned(),
            addr,
            len,
        })
    }
}

impl TransferDesc {
    /// `len` bytes between `local_offset` of the registration `local` and `remote_offset` of
    /// the peer's segment `remote` (the direction is the transfer's), each range checked to
    /// lie inside now.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming the side whose range does not fit; [`Error::ZeroLength`]
    /// for a zero `len`.
    pub fn between(
        local: &Registration,
        local_offset: usize,
        remote: &RemoteSegment,
        remote_offset: usize,
        len: usize,
    ) -> Result<TransferDesc> {
        if len == 0 {
            return Err(Error::ZeroLength { index: 0 });
        }
        let fits = |offset: usize, size: usize, side| match offset.checked_add(len) {
            Some(e) if e <= size => Ok(offset),
            _ => Err(Error::OutOfRange {
                side,
                offset,
                len,
                size,
            }),
        };
        let l = fits(local_offset, local.len(), Side::Local)?;
        let r = fits(remote_offset, remote.len(), Side::Remote)?;
        Ok(TransferDesc::raw(local.addr() + l, remote.addr() + r, len))
    }
}
