//! Transfer batches: random descriptors between registered ranges, planned against the
//! model and kept apart from the ranges of transfers still in flight.

use std::collections::BTreeMap;

use ascend_fabric::{Addr, TransferDesc, TransferOp, TransferRequest};

use super::faults::Expect;
use super::local::LocalBuf;
use super::model::Rng;
use super::peer::RemoteRegion;

/// Which memory a range lies in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum MemId {
    /// A driver buffer.
    Local(usize),
    /// A region of a peer.
    Remote(usize, u32),
}

/// A range of some memory: `(memory, offset, len)`.
pub(crate) type Span = (MemId, usize, usize);

/// One descriptor, by buffer and region offsets.
#[derive(Debug)]
pub(crate) struct Desc {
    pub(crate) lbuf: usize,
    pub(crate) loff: usize,
    pub(crate) region: u32,
    pub(crate) roff: usize,
    pub(crate) len: usize,
    /// A WRITE's source bytes (written to the local buffer before submitting).
    pub(crate) src: Vec<u8>,
}

/// A batch of descriptors to one peer.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) peer: usize,
    pub(crate) op: TransferOp,
    pub(crate) descs: Vec<Desc>,
}

/// An async transfer not yet waited for.
pub(crate) struct Outstanding {
    pub(crate) batch: Batch,
    pub(crate) req: TransferRequest,
    pub(crate) expect: Expect,
}

impl Batch {
    /// Every range the batch touches, on both sides.
    pub(crate) fn spans(&self) -> impl Iterator<Item = Span> + '_ {
        self.descs.iter().flat_map(move |d| {
            [
                (MemId::Local(d.lbuf), d.loff, d.len),
                (MemId::Remote(self.peer, d.region), d.roff, d.len),
            ]
        })
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.descs.iter().map(|d| d.len as u64).sum()
    }

    /// The engine's descriptors, with the peer's addresses of the regions.
    pub(crate) fn to_descs(
        &self,
        locals: &[LocalBuf],
        regions: &BTreeMap<u32, RemoteRegion>,
    ) -> Vec<TransferDesc> {
        self.descs
            .iter()
            .map(|d| {
                let raddr = regions
                    .get(&d.region)
                    .map_or(Addr::NULL, |r| Addr::new(r.addr));
                TransferDesc::raw(locals[d.lbuf].addr() + d.loff, raddr + d.roff, d.len)
            })
            .collect()
    }

    /// A short description for reports.
    pub(crate) fn describe(&self) -> String {
        let d: Vec<String> = self
            .descs
            .iter()
            .map(|d| {
                format!(
                    "L{}+{:#x}<->R{}+{:#x} len {}",
                    d.lbuf, d.loff, d.region, d.roff, d.len
                )
            })
            .collect();
        format!("{:?} to peer {} [{}]", self.op, self.peer, d.join(", "))
    }
}

fn overlaps(a: &Span, b: &Span) -> bool {
    a.0 == b.0 && a.1 < b.1 + b.2 && b.1 < a.1 + a.2
}

/// A length: tiny, small, medium, large or up to 4 MiB (clipped to `max`).
pub(crate) fn pick_len(rng: &mut Rng, max: usize) -> usize {
    let len = match rng.below(5) {
        0 => rng.range(1, 64),
        1 => rng.range(65, 4096),
        2 => rng.range(4097, 256 << 10),
        3 => rng.range(256 << 10, 2 << 20),
        _ => rng.range(2 << 20, 4 << 20),
    };
    len.min(max).max(1)
}

/// Plans a batch of 1..=6 descriptors to `peer`: each between a run of registered local
/// chunks and a region of the peer, apart from `busy` and from each other.
pub(crate) fn plan(
    rng: &mut Rng,
    locals: &[LocalBuf],
    peer: usize,
    regions: &BTreeMap<u32, RemoteRegion>,
    busy: &[Span],
) -> Option<Batch> {
    let op = if rng.below(2) == 0 {
        TransferOp::Write
    } else {
        TransferOp::Read
    };
    let want = rng.range(1, 6);
    let ids: Vec<(u32, usize)> = regions.iter().map(|(i, r)| (*i, r.shadow.len())).collect();
    let mut descs: Vec<Desc> = Vec::new();
    let mut taken: Vec<Span> = Vec::new();
    for _ in 0..want * 3 {
        if descs.len() == want || ids.is_empty() {
            break;
        }
        let lbuf = rng.below(locals.len() as u64) as usize;
        let runs = locals[lbuf].runs();
        let (rid, rlen) = ids[rng.below(ids.len() as u64) as usize];
        if runs.is_empty() {
            continue;
        }
        let (ro, rl) = runs[rng.below(runs.len() as u64) as usize];
        let len = pick_len(rng, rl.min(rlen));
        let loff = ro + rng.below((rl - len + 1) as u64) as usize;
        let roff = rng.below((rlen - len + 1) as u64) as usize;
        let l = (MemId::Local(lbuf), loff, len);
        let r = (MemId::Remote(peer, rid), roff, len);
        if busy
            .iter()
            .chain(&taken)
            .any(|s| overlaps(s, &l) || overlaps(s, &r))
        {
            continue;
        }
        taken.extend([l, r]);
        descs.push(Desc {
            lbuf,
            loff,
            region: rid,
            roff,
            len,
            src: Vec::new(),
        });
    }
    (!descs.is_empty()).then_some(Batch { peer, op, descs })
}
