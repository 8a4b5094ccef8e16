//! Planning a transfer before anything is queued: the descriptor checks, the translation of
//! every descriptor into pieces that each lie in one local and one remote segment, and the
//! dealing of those pieces, as table copies, to the streams of a slot.

use std::sync::atomic::{AtomicBool, Ordering};

use ascend_mem::{MappingTable, StreamLease, TableCopy};

use crate::error::{Error, Result, Side};
use crate::ranges::{RangeError, RangeMap};
use crate::registry::{LocalSeg, RegUse};
use crate::remote::{Import, Remote, SegIndex, SegMask};
use crate::slots::SlotGuard;
use crate::transfer::TransferDesc;

/// Pieces of at least this size are spread over the slot's streams. Below it a piece is one
/// copy: cutting a 1 MiB piece into four made four streams' workers compete for the cores
/// (the walk of 1 MiB transfers ran at 0.70-0.79 of memcpy cut, 0.85-0.93 whole, on 2 cores).
const SPLIT_MIN: usize = 4 << 20;
/// ... in chunks of at least this size.
const SPLIT_CHUNK_MIN: usize = 256 << 10;

/// A piece to copy, by segment index in the local and remote maps, and the descriptor (or
/// prepared pair) it belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    desc: u32,
    l_idx: usize,
    l_off: u64,
    r_idx: usize,
    r_off: u64,
    len: u64,
}

impl Piece {
    /// `len` bytes at `l_off` of local entry `l_idx` and `r_off` of remote entry `r_idx`, of
    /// descriptor `desc`.
    #[inline]
    pub(crate) fn new(desc: usize, l: (usize, u64), r: (usize, u64), len: u64) -> Piece {
        Piece {
            desc: desc as u32,
            l_idx: l.0,
            l_off: l.1,
            r_idx: r.0,
            r_off: r.1,
            len,
        }
    }
}

/// Where translation puts the pieces it makes: a [`Dealer`] when a transfer is submitted
/// (the pieces go straight to the streams' batches, never into a list of their own), a `Vec`
/// in tests.
pub(crate) trait PieceSink {
    /// Takes the next piece (pieces arrive in descriptor order).
    fn piece(&mut self, p: Piece);
}

impl PieceSink for Vec<Piece> {
    #[inline]
    fn piece(&mut self, p: Piece) {
        self.push(p);
    }
}

/// Checks what needs no lookup (an empty batch, zero lengths, overflowing ranges); returns
/// the total byte count.
pub(crate) fn check_descs(descs: &[TransferDesc]) -> Result<u64> {
    if descs.is_empty() {
        return Err(Error::EmptyBatch);
    }
    let mut bytes = 0u64;
    for (index, d) in descs.iter().enumerate() {
        if d.len == 0 {
            return Err(Error::ZeroLength { index });
        }
        for (side, addr) in [(Side::Local, d.local_addr), (Side::Remote, d.remote_addr)] {
            if addr.checked_add(d.len).is_none() {
                return Err(Error::Overflow {
                    index,
                    side,
                    addr,
                    len: d.len,
                });
            }
        }
        bytes = bytes.saturating_add(d.len as u64);
    }
    Ok(bytes)
}

/// A segment-relative span: (segment index, offset in it, length).
pub(crate) type Span = (usize, u64, u64);

/// Translates every descriptor: one lookup per side (the local pieces, then the remote
/// ones), merged into pieces that lie in one local and one remote segment each, given to
/// `out` in order. Each local registration used is counted in `regs`. The error names the
/// first descriptor and side that are not covered (`out` may have taken the pieces of the
/// descriptors before it).
pub(crate) fn translate(
    descs: &[TransferDesc],
    local: &RangeMap<LocalSeg>,
    remote: &Remote,
    regs: &mut RegUse,
    out: &mut impl PieceSink,
) -> Result<()> {
    translate_in(
        descs,
        local,
        |seg| regs.add(&seg.reg),
        (&remote.map, |_, imp: &Import| imp.slot),
        &remote.index,
        out,
    )
}

/// [`translate`] over any maps: `used` sees the local segment of every local piece; a remote
/// piece names the copy-table entry `slot` gives for (position, segment value); `seg_index`
/// indexes `remote` (an empty index sends every lookup through the map).
fn translate_in<L, R>(
    descs: &[TransferDesc],
    local: &RangeMap<L>,
    mut used: impl FnMut(&L),
    (remote, slot): (&RangeMap<R>, impl Fn(usize, &R) -> usize),
    seg_index: &SegIndex,
    pieces: &mut impl PieceSink,
) -> Result<()> {
    let mut lp: Vec<Span> = Vec::new();
    let mut rp: Vec<Span> = Vec::new();
    // The local segment of the last descriptor that lay in one: most lie in the same.
    let mut last: Option<usize> = None;
    let segs = local.segments();
    for (index, d) in descs.iter().enumerate() {
        let (l_addr, r_addr, len) = (d.local_addr.get(), d.remote_addr.get(), d.len as u64);
        // Fast path: the descriptor inside one local and one remote segment.
        let inside = |i: usize| l_addr >= segs[i].start && l_addr + len <= segs[i].end();
        let l_seg = match last {
            Some(i) if inside(i) => Some(i),
            _ => local.find(l_addr).filter(|&i| inside(i)),
        };
        if let (Some(li), Some((ri, start))) = (l_seg, seg_index.holding(r_addr, len)) {
            if last != Some(li) {
                used(&segs[li].value);
                last = Some(li);
            }
            let s = slot(ri, &remote.segments()[ri].value);
            pieces.piece(Piece {
                desc: index as u32,
                l_idx: li,
                l_off: l_addr - segs[li].start,
                r_idx: s,
                r_off: r_addr - start,
                len,
            });
            continue;
        }
        lp.clear();
        rp.clear();
        let l = local
            .for_each_piece(l_addr, len, |p, seg| {
                used(&seg.value);
                lp.push((p.index, p.offset, p.len));
            })
            .map_err(|e| (Side::Local, e));
        let r = l.and_then(|()| {
            // The whole range inside the segment the index finds.
            if let Some((i, start)) = seg_index.holding(r_addr, len) {
                let s = slot(i, &remote.segments()[i].value);
                rp.push((s, r_addr - start, len));
                return Ok(());
            }
            remote
                .for_each_piece(r_addr, len, |p, seg| {
                    rp.push((slot(p.index, &seg.value), p.offset, p.len))
                })
                .map_err(|e| (Side::Remote, e))
        });
        if let Err((side, e)) = r {
            let addr = match side {
                Side::Local => d.local_addr,
                Side::Remote => d.remote_addr,
            };
            let uncovered = match e {
                RangeError::Unmapped { addr } => addr,
                _ => addr,
            };
            return Err(Error::NotRegistered {
                index,
                side,
                addr,
                len: d.len,
                uncovered,
            });
        }
        merge(index, &lp, &rp, pieces);
    }
    Ok(())
}

/// Cuts the local and remote spans of descriptor `desc` at every boundary of either into
/// pieces.
pub(crate) fn merge(desc: usize, lp: &[Span], rp: &[Span], pieces: &mut impl PieceSink) {
    let (mut i, mut j) = (0, 0);
    let (mut li, mut ri) = (lp[0], rp[0]);
    while i < lp.len() && j < rp.len() {
        let n = li.2.min(ri.2);
        pieces.piece(Piece {
            desc: desc as u32,
            l_idx: li.0,
            l_off: li.1,
            r_idx: ri.0,
            r_off: ri.1,
            len: n,
        });
        li = (li.0, li.1 + n, li.2 - n);
        ri = (ri.0, ri.1 + n, ri.2 - n);
        if li.2 == 0 {
            i += 1;
            if let Some(x) = lp.get(i) {
                li = *x;
            }
        }
        if ri.2 == 0 {
            j += 1;
            if let Some(x) = rp.get(j) {
                ri = *x;
            }
        }
    }
}

/// One stream's share of a transfer: its table copies, and for each the descriptor its run
/// of coalesced pieces starts in (what an error about the copy names).
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamBatch {
    pub(crate) copies: Vec<TableCopy>,
    pub(crate) descs: Vec<u32>,
}

/// Cuts the pieces it is given into copies, coalescing ones contiguous on both sides, and
/// deals them round-robin to the slot's streams as they come: one batch of table copies per
/// stream, queued by [`issue`]. It marks the remote slots the pieces lie in. A large piece
/// is cut into up to one chunk per stream, so one big op uses every stream of the slot (HIXL
/// issues it whole, on one stream). WRITE copies local to remote, READ remote to local.
pub(crate) struct Dealer<'m> {
    batches: Vec<StreamBatch>,
    /// The next stream, in turn (no division on this path: it runs once per copy).
    rr: usize,
    write: bool,
    /// The piece the next one may continue (none while its length is 0: pieces have bytes).
    pending: Piece,
    /// The remote slots used.
    used: &'m mut SegMask,
}

impl<'m> Dealer<'m> {
    /// A dealer to `streams` streams (at least one) of about `pieces` pieces in all.
    pub(crate) fn new(streams: usize, write: bool, pieces: usize, used: &'m mut SegMask) -> Self {
        let k = streams.max(1);
        // Each stream gets about its share of the pieces (more when large ones are cut).
        let share = pieces / k + 1;
        Dealer {
            batches: (0..k)
                .map(|_| StreamBatch {
                    copies: Vec::with_capacity(share),
                    descs: Vec::with_capacity(share),
                })
                .collect(),
            rr: 0,
            write,
            pending: Piece::new(0, (0, 0), (0, 0), 0),
            used,
        }
    }

    /// The streams' batches, once every piece was given.
    pub(crate) fn finish(mut self) -> Vec<StreamBatch> {
        let q = self.pending;
        if q.len != 0 {
            self.put(q);
        }
        self.batches
    }

    /// Deals a coalesced piece: whole, or cut across the streams when large.
    #[inline(always)]
    fn put(&mut self, p: Piece) {
        self.used.add(p.r_idx);
        let len = p.len as usize;
        let (l, r) = ((p.l_idx, p.l_off as usize), (p.r_idx, p.r_off as usize));
        if len < SPLIT_MIN || self.batches.len() == 1 {
            self.push(p.desc, l, r, len);
        } else {
            self.split(p.desc, l, r, len);
        }
    }

    /// Deals a large piece cut into up to one chunk per stream.
    #[cold]
    fn split(&mut self, desc: u32, l: (usize, usize), r: (usize, usize), len: usize) {
        let k = self.batches.len();
        let parts = k.min(len / SPLIT_CHUNK_MIN);
        let chunk = len.div_ceil(parts).next_multiple_of(4096);
        let mut at = 0;
        while at < len {
            let n = chunk.min(len - at);
            self.push(desc, (l.0, l.1 + at), (r.0, r.1 + at), n);
            at += n;
        }
    }

    #[inline]
    fn push(&mut self, desc: u32, l: (usize, usize), r: (usize, usize), len: usize) {
        let ((dst, dst_offset), (src, src_offset)) = if self.write { (r, l) } else { (l, r) };
        let b = &mut self.batches[self.rr];
        b.copies.push(TableCopy {
            dst,
            dst_offset,
            src,
            src_offset,
            len,
        });
        b.descs.push(desc);
        self.rr += 1;
        if self.rr == self.batches.len() {
            self.rr = 0;
        }
    }
}

impl PieceSink for Dealer<'_> {
    #[inline(always)]
    fn piece(&mut self, p: Piece) {
        let q = &mut self.pending;
        if q.l_idx == p.l_idx
            && q.r_idx == p.r_idx
            && q.l_off + q.len == p.l_off
            && q.r_off + q.len == p.r_off
            && q.len != 0
        {
            q.len += p.len;
            return;
        }
        let q = std::mem::replace(q, p);
        if q.len != 0 {
            self.put(q);
        }
    }
}

/// Copies a stream is given in the first round when a transfer's copies are queued: the
/// streams are served in turn, a few copies each (HIXL alternates copy by copy), so each
/// stream's worker starts early and a submitter and one worker do not contend for the same
/// queue through a whole batch. Each round gives twice as many as the last, up to
/// [`DEAL_RUN_MAX`]: once every worker has work, fewer, larger calls cost the submitter less.
pub(crate) const DEAL_RUN: usize = 8;
/// Most copies a stream is given in one round (by the fifth round, 120 copies queued on each
/// stream: a run this long costs the submitter about 1% less per copy than one of 32).
pub(crate) const DEAL_RUN_MAX: usize = 128;

/// Fewest copies per submitting thread for a transfer to use more than one (below it the
/// calling thread queues them all: starting a helper costs tens of microseconds).
pub const SUBMIT_THREAD_MIN_COPIES: usize = 64;

/// How a transfer's copies are queued: the copy calls (host-device runs batched unless
/// `batch` is off, see [`ascend_mem::Stream::copy_table_async`]) and the threads queuing
/// them.
#[derive(Copy, Clone, Debug)]
pub(crate) struct IssueMode {
    pub(crate) write: bool,
    pub(crate) batch: bool,
    /// `EngineOptions::submit_threads`.
    pub(crate) threads: usize,
}

/// Queues each stream's batch of `batches` on the slot's streams, addressed in the peer's
/// imports (`remote`) and the local segments (`local`): the one place copies reach the
/// runtime. The streams are served in turn, a few copies at a time ([`DEAL_RUN`], growing
/// each round to [`DEAL_RUN_MAX`]); with
/// `mode.threads` above 1 (and enough copies), the streams are shared among that many
/// threads, the calling one first, each serving its own streams in turn, and all stop once
/// one fails. Returns the failure first in that order (round, then stream: what one thread
/// would have met first), a copy the runtime refused as [`Error::CopyRefused`] naming its
/// descriptor (streams that got work are marked used in `slot`, so what was queued before
/// it is aborted with the request).
pub(crate) fn issue(
    slot: &mut SlotGuard,
    batches: &[StreamBatch],
    (remote, local): (&MappingTable, &MappingTable),
    mode: IssueMode,
) -> Option<Error> {
    let tables = if mode.write {
        (remote, local)
    } else {
        (local, remote)
    };
    let copies: usize = batches.iter().map(|b| b.copies.len()).sum();
    let threads = mode
        .threads
        .min(copies / SUBMIT_THREAD_MIN_COPIES)
        .clamp(1, batches.len().max(1));
    let used = batches
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.copies.is_empty())
        .fold(0u32, |m, (i, _)| m | 1 << i);
    let streams = slot.streams_mut(used);
    let stop = AtomicBool::new(false);
    let job = Job {
        batches,
        tables,
        batch: mode.batch,
        stop: &stop,
    };
    if threads == 1 {
        let mut all: Vec<_> = streams.iter_mut().enumerate().collect();
        return job.serve(&mut all).err().map(|f| f.error);
    }
    // Stream i goes to thread i % threads.
    let mut groups: Vec<Vec<(usize, &mut StreamLease)>> =
        (0..threads).map(|_| Vec::new()).collect();
    for (i, s) in streams.iter_mut().enumerate() {
        groups[i % threads].push((i, s));
    }
    let mut groups = groups.into_iter();
    let mut mine = groups.next().unwrap_or_default();
    let job = &job;
    let failures: Vec<Failure> = std::thread::scope(|t| {
        let helpers: Vec<_> = groups
            .map(|mut g| t.spawn(move || job.serve(&mut g)))
            .collect();
        let first = job.serve(&mut mine);
        std::iter::once(Ok(first))
            .chain(helpers.into_iter().map(|h| h.join()))
            .filter_map(|r| match r {
                Ok(r) => r.err(),
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    failures.into_iter().min_by_key(|f| f.at).map(|f| f.error)
}

/// Each copy of a run queued on stream `stream`, at `trace` level (a branch when off).
fn trace_copies(stream: usize, run: &[TableCopy]) {
    if !tracing::enabled!(tracing::Level::TRACE) {
        return;
    }
    for c in run {
        tracing::trace!(
            stream,
            dst_entry = c.dst,
            dst_offset = c.dst_offset,
            src_entry = c.src,
            src_offset = c.src_offset,
            len = c.len,
            "copy"
        );
    }
}

/// A failure queuing a stream's copies: where (round, stream) and the engine's error.
struct Failure {
    at: (usize, usize),
    error: Error,
}

/// What every submitting thread of one transfer shares.
struct Job<'a> {
    batches: &'a [StreamBatch],
    /// (destination, source) tables.
    tables: (&'a MappingTable, &'a MappingTable),
    batch: bool,
    /// Set by the first thread to fail: the others stop at their next round.
    stop: &'a AtomicBool,
}

impl Job<'_> {
    /// Queues the batches of `streams` (stream index, stream), serving them in turn,
    /// [`DEAL_RUN`] copies each in the first round and twice as many each round after, up to
    /// [`DEAL_RUN_MAX`] (a batch of host-device copies whole, when batching is on: one batch
    /// call); stops at a stream's first failure, or at the next round once
    /// another thread failed.
    fn serve(&self, streams: &mut [(usize, &mut StreamLease)]) -> Result<(), Failure> {
        let (dst, src) = self.tables;
        // A stream's host-device batch goes whole: it is one batch call (one stream task).
        // Its first copy decides (a transfer's local memory is one kind in practice).
        let whole = |b: &StreamBatch| {
            self.batch
                && b.copies
                    .first()
                    .is_some_and(|c| dst.is_host(c.dst) != src.is_host(c.src))
        };
        let whole: Vec<bool> = streams
            .iter()
            .map(|(i, _)| whole(&self.batches[*i]))
            .collect();
        // How far each stream's batch is queued.
        let mut at = vec![0usize; streams.len()];
        let mut run = DEAL_RUN;
        for r in 0.. {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut queued = false;
            for (((i, s), &whole), at) in streams.iter_mut().zip(&whole).zip(&mut at) {
                let b = &self.batches[*i];
                let n = if whole { b.copies.len() } else { run };
                let copies = &b.copies[*at..b.copies.len().min(*at + n)];
                if copies.is_empty() {
                    continue;
                }
                queued = true;
                trace_copies(*i, copies);
                let q = if self.batch {
                    s.copy_table_async(dst, src, copies)
                } else {
                    s.copy_table_each_async(dst, src, copies)
                };
                if let Err(e) = q {
                    self.stop.store(true, Ordering::Relaxed);
                    return Err(Failure {
                        at: (r, *i),
                        error: refused(e, &b.descs[*at..]),
                    });
                }
                *at += copies.len();
            }
            if !queued {
                break;
            }
            run = (run * 2).min(DEAL_RUN_MAX);
        }
        Ok(())
    }
}

/// The engine's error for `e`, a failure queuing copies whose descriptors (from the first
/// copy of the call on) are `descs`: a copy the runtime refused names its descriptor.
fn refused(e: ascend_mem::Error, descs: &[u32]) -> Error {
    match &e {
        ascend_mem::Error::BatchCopy { copy, .. } => Error::CopyRefused {
            index: descs.get(*copy).map_or(usize::MAX, |&d| d as usize),
            source: e,
        },
        _ => e.into(),
    }
}

#[cfg(test)]
mod tests;
