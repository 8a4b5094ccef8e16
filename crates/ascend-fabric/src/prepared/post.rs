//! Transfers of prepared lists: (local block, remote block) index pairs, bounds-checked and
//! turned into pieces without any address lookup.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{LocalBlocks, RemoteBlocks, CROSSES};
use ascend_mem::Addr;

use crate::engine::{Engine, EngineInner};
use crate::error::{Error, Result, Side};
use crate::plan::{self, Piece, PieceSink, Span};
use crate::remote::Remote;
use crate::request::{Observer, ReqInner};
use crate::slots::SlotFrom;
use crate::transfer::{TransferOp, TransferOptions};
use crate::transfer_request::TransferRequest;

const CALL: &str = "transfer_prepared";

fn prep_err(reason: String) -> Error {
    Error::Prepare { call: CALL, reason }
}

impl Engine {
    /// Starts copying the blocks named by `pairs` ((local block, remote block) indices into
    /// `local` and `remote`) to or from `remote`'s peer, and returns at once: each pair copies
    /// one block (WRITE local → remote, READ remote → local). Only the indices are checked
    /// here; everything else was when the lists were made.
    ///
    /// # Errors
    /// [`Error::EmptyBatch`]; [`Error::BlockIndex`] naming the first pair with an index past
    /// its list; [`Error::Prepare`] for lists of another engine, of different block sizes, or
    /// a local list whose registration was deregistered; [`Error::StalePrepared`] for a
    /// remote list prepared on an earlier connection to a peer the engine has connected to
    /// again (prepare it again); [`Error::PeerLost`] once the list's channel is gone and no
    /// newer one exists; as [`Engine::transfer_async`] otherwise.
    pub fn transfer_prepared_async(
        &self,
        op: TransferOp,
        local: &LocalBlocks,
        remote: &RemoteBlocks,
        pairs: &[(usize, usize)],
    ) -> Result<TransferRequest> {
        self.transfer_prepared_async_with(op, local, remote, pairs, &TransferOptions::default())
    }

    /// [`Engine::transfer_prepared_async`] with per-request options (a stall deadline), as
    /// [`Engine::transfer_async_with`].
    ///
    /// # Errors
    /// As [`Engine::transfer_prepared_async`].
    pub fn transfer_prepared_async_with(
        &self,
        op: TransferOp,
        local: &LocalBlocks,
        remote: &RemoteBlocks,
        pairs: &[(usize, usize)],
        opts: &TransferOptions,
    ) -> Result<TransferRequest> {
        let how = (SlotFrom::Acquire(None), opts, Observer::Progress);
        let inner = self.submit_prepared(op, local, remote, pairs, how)?;
        Ok(self.request(inner, &remote.ch.peer))
    }

    /// As [`Engine::transfer_prepared_async`], and waits up to `timeout` (on timeout the
    /// transfer is aborted), as [`Engine::transfer_sync`].
    ///
    /// # Errors
    /// As [`Engine::transfer_prepared_async`] and [`Engine::transfer_sync`].
    pub fn transfer_prepared_sync(
        &self,
        op: TransferOp,
        local: &LocalBlocks,
        remote: &RemoteBlocks,
        pairs: &[(usize, usize)],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Self::sync_deadline(timeout);
        let opts = TransferOptions::default();
        let how = (SlotFrom::Acquire(Some(deadline)), &opts, Observer::Caller);
        let req = self.submit_prepared(op, local, remote, pairs, how)?;
        Self::wait_sync(&req, deadline, timeout)
    }

    /// A remote list names the imports of the connection it was prepared on: once that
    /// channel is gone and the engine has connected to the peer again, the list is stale
    /// (while no newer channel exists, the submission reports the loss itself).
    fn check_current(&self, remote: &RemoteBlocks) -> Result<()> {
        if remote.ch.is_open() {
            return Ok(());
        }
        let now = self.inner.channels.read().get(&remote.ch.peer).cloned();
        match now {
            Some(c) if !Arc::ptr_eq(&c, &remote.ch) => Err(Error::StalePrepared {
                peer: remote.ch.peer.clone(),
            }),
            _ => Ok(()),
        }
    }

    pub(crate) fn submit_prepared(
        &self,
        op: TransferOp,
        local: &LocalBlocks,
        remote: &RemoteBlocks,
        pairs: &[(usize, usize)],
        (slot, opts, observer): (SlotFrom, &TransferOptions, Observer),
    ) -> Result<Arc<ReqInner>> {
        if pairs.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let me = |w: &Weak<EngineInner>| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.inner));
        if !me(&local.engine) || !me(&remote.engine) {
            return Err(prep_err("a list was prepared by another engine".into()));
        }
        self.check_current(remote)?;
        let bl = local.blocks.block_len;
        if bl != remote.blocks.block_len {
            return Err(prep_err(format!(
                "block sizes differ: local {bl}, remote {}",
                remote.blocks.block_len
            )));
        }
        let write = op == TransferOp::Write;
        let size = (bl.saturating_mul(pairs.len() as u64), pairs.len() as u64);
        let how = (slot, opts, observer);
        self.submit_on(&remote.ch, write, size, how, |rem, slot, (regs, segs)| {
            if let Some((addr, len)) = remote.slots.iter().find_map(|&s| rem.revoked(s)) {
                return Err(Error::Revoked {
                    peer: remote.ch.peer.clone(),
                    addr: Addr::new(addr),
                    len: len as usize,
                });
            }
            {
                // Under the registry's lock, as a deregistration checks `in_flight` under it.
                let _st = self.inner.registry.state.read();
                if local.reg.is_removed() {
                    return Err(prep_err(format!(
                        "the local list's registration at {:#x} was deregistered",
                        local.reg.addr
                    )));
                }
                regs.add(&local.reg);
            }
            let mut dealer = plan::Dealer::new(slot.streams(), write, pairs.len(), segs);
            pieces(pairs, local, remote, rem, &mut dealer)?;
            let batches = dealer.finish();
            let tables = (&rem.table, &local.table);
            Ok(plan::issue(slot, &batches, tables, self.issue_mode(write)))
        })
    }
}

/// The pieces of `pairs`, given to `out` in order: one per pair when both blocks lie in one
/// table entry each (the usual case), else cut where either side crosses an entry.
fn pieces(
    pairs: &[(usize, usize)],
    local: &LocalBlocks,
    remote: &RemoteBlocks,
    rem: &Remote,
    out: &mut impl PieceSink,
) -> Result<()> {
    let (nl, nr) = (local.blocks.count, remote.blocks.count);
    let bl = local.blocks.block_len;
    if let (Some(l), Some(r)) = (local.blocks.one_entry(), remote.blocks.one_entry()) {
        // Both lists in one table entry each (a registration, an import): no lookup at all.
        for (index, &(i, j)) in pairs.iter().enumerate() {
            if i as u64 >= nl || j as u64 >= nr {
                return Err(index_error(index, (i, nl), (j, nr)));
            }
            let (lo, ro) = (l.1 + i as u64 * bl, r.1 + j as u64 * bl);
            out.piece(Piece::new(index, (l.0, lo), (r.0, ro), bl));
        }
        return Ok(());
    }
    for (index, &(i, j)) in pairs.iter().enumerate() {
        if i as u64 >= nl || j as u64 >= nr {
            return Err(index_error(index, (i, nl), (j, nr)));
        }
        let (lr, lo) = local.blocks.locate(i as u64);
        let (rr, ro) = remote.blocks.locate(j as u64);
        if lr.entry != CROSSES && rr.entry != CROSSES {
            out.piece(Piece::new(
                index,
                (lr.entry as usize, lr.off + lo),
                (rr.entry as usize, rr.off + ro),
                bl,
            ));
            continue;
        }
        let mut lp: Vec<Span> = Vec::new();
        let mut rp: Vec<Span> = Vec::new();
        let walked = local
            .segs
            .for_each_piece(lr.addr + lo, bl, |p, _| lp.push((p.index, p.offset, p.len)))
            .and_then(|()| {
                rem.map.for_each_piece(rr.addr + ro, bl, |p, seg| {
                    rp.push((seg.value.slot, p.offset, p.len))
                })
            });
        if let Err(e) = walked {
            // Lists are checked when made and their tables do not change: not reached.
            return Err(prep_err(format!("pair {index}: {e}")));
        }
        plan::merge(index, &lp, &rp, out);
    }
    Ok(())
}

/// The error for pair `index`, whose local or remote block (block, blocks in its list) is
/// past its list (the local side named first when both are).
#[cold]
fn index_error(index: usize, local: (usize, u64), remote: (usize, u64)) -> Error {
    let (side, (block, n)) = if local.0 as u64 >= local.1 {
        (Side::Local, local)
    } else {
        (Side::Remote, remote)
    };
    Error::BlockIndex {
        index,
        side,
        block,
        blocks: n as usize,
    }
}
