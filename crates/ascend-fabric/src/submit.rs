//! Submitting a transfer: what every submission shares (a stream slot, the channel's gate,
//! the request entered in the channel's in-flight table before the gate is released, and
//! handed to the progress thread), the raw-descriptor submission over it, and the
//! synchronous wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::channel::{Channel, Gate};
use crate::engine::{Engine, AUTO_CONNECT_TIMEOUT};
use crate::error::{Error, Result, Side};
use crate::plan;
use crate::progress::Urgency;
use crate::registry::RegUse;
use crate::remote::{Remote, SegMask};
use crate::request::AutoDisconnect;
use crate::request::{self, Observer, Pending, ReqInner};
use crate::slots::{SlotFrom, SlotGuard};
use crate::transfer::{TransferDesc, TransferOp, TransferOptions};
use crate::transfer_request::TransferRequest;

/// What a submission's copies use, filled in while they are queued: the local registrations
/// and the peer's segments.
pub(crate) type Uses<'a> = (&'a mut RegUse, &'a mut SegMask);

impl Engine {
    /// Queues the copies of one transfer on a slot (taken here, or by a future already).
    /// Connects on demand under `AutoConnect` only when it takes the slot itself: with a
    /// given slot and no channel it fails with [`Error::NotConnected`].
    pub(crate) fn submit(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
        slot_from: SlotFrom,
        opts: &TransferOptions,
        observer: Observer,
    ) -> Result<Arc<ReqInner>> {
        let slot_deadline = match &slot_from {
            SlotFrom::Acquire(d) => *d,
            SlotFrom::Given(_) => None,
        };
        let inner = &self.inner;
        let bytes = plan::check_descs(descs)
            .inspect_err(|e| tracing::debug!(peer = remote, ?op, error = %e, "transfer refused"))?;
        let ch = match &slot_from {
            SlotFrom::Acquire(_) => self.channel_for(remote, slot_deadline)?,
            // A future's poll: no connect here (it blocks); the future connects on its
            // helper thread instead.
            SlotFrom::Given(_) => inner.channel(remote)?,
        };
        let write = op == TransferOp::Write;
        let size = (bytes, descs.len() as u64);
        let queue = |rem: &Remote, slot: &mut SlotGuard, (regs, segs): Uses<'_>| {
            let reg = inner.registry.state.read();
            // Check and translate every descriptor before queuing anything.
            let mut dealer = plan::Dealer::new(slot.streams(), write, descs.len(), segs);
            plan::translate(descs, &reg.ranges, rem, regs, &mut dealer)?;
            let ltab = reg.table(&inner.dev)?;
            let batches = dealer.finish();
            let mode = self.issue_mode(write);
            Ok(plan::issue(slot, &batches, (&rem.table, ltab), mode))
        };
        let again = match &slot_from {
            SlotFrom::Acquire(d) => Some(SlotFrom::Acquire(*d)),
            SlotFrom::Given(_) => None,
        };
        let r = self.submit_on(&ch, write, size, (slot_from, opts, observer), queue);
        match (r, again) {
            // A remote range in no known segment: the peer may have registered it since we
            // connected. Not from a future's poll (no network wait there).
            (
                Err(Error::NotRegistered {
                    side: Side::Remote, ..
                }),
                Some(slot_from),
            ) if self.refresh_on_miss(&ch, slot_deadline) => {
                self.submit_on(&ch, write, size, (slot_from, opts, observer), queue)
            }
            (r, _) => r,
        }
    }

    /// What every submission on `ch` shares: takes a stream slot and the channel's gate,
    /// lets `queue` check, translate and queue the copies (an `Err` from it: nothing was
    /// queued; `Ok(Some(e))`: queuing failed part way, and the request fails with `e`), and
    /// enters the request in the channel's in-flight table before releasing the gate, then
    /// hands it to its observer. `size` is (bytes, descriptors), for the counters.
    pub(crate) fn submit_on(
        &self,
        ch: &Arc<Channel>,
        write: bool,
        size: (u64, u64),
        (slot_from, opts, observer): (SlotFrom, &TransferOptions, Observer),
        queue: impl FnOnce(&Remote, &mut SlotGuard, Uses<'_>) -> Result<Option<Error>>,
    ) -> Result<Arc<ReqInner>> {
        let inner = &self.inner;
        if let Gate::Lost(r) = *ch.gate.read() {
            return Err(ch.lost_error(r));
        }
        let submitted = Instant::now();
        let id = request::next_id();
        // The request's span, from here to its end (the pending request holds it).
        let span = tracing::debug_span!(
            "request",
            id,
            peer = %ch.peer,
            op = if write { "write" } else { "read" },
            descs = size.1,
            bytes = size.0,
        );
        let _entered = span.enter();
        // Every exit from here until the request owns the slot gives it back.
        let mut slot = match slot_from {
            SlotFrom::Acquire(d) => SlotGuard::acquire(&inner.slots, d)?,
            SlotFrom::Given(g) => g,
        };
        let gate = ch.gate.read();
        let rem = match &*gate {
            Gate::Open(r) => r,
            Gate::Lost(r) => return Err(ch.lost_error(*r)),
        };
        let mut regs = RegUse(Vec::new());
        let mut segs = SegMask::default();
        let mut err = queue(rem, &mut slot, (&mut regs, &mut segs))
            .inspect_err(|e| tracing::debug!(error = %e, "transfer refused"))?;
        let (slot, used, slots) = slot.into_parts();
        let streams = used.count_ones();
        let mut p = Pending {
            slot,
            used,
            regs,
            segs,
            book: ch.book.clone(),
            slots,
            write,
            bytes: size.0,
            descs: size.1,
            submitted,
            span: span.clone(),
        };
        if err.is_none() {
            if let Err(e) = p.record() {
                err = Some(e);
            }
        }
        drop(_entered);
        let req = ReqInner::new(id, p, self.auto_disconnect(ch), opts.stall_timeout);
        drop(gate);
        if let Some(e) = err {
            req.fail(e);
            // The failure is the submission's result.
            let r = req.wait(None);
            req.disconnect_if_due(false);
            return match r {
                Some(Err(e)) => Err(e),
                _ => Err(Error::Aborted),
            };
        }
        // Watched from now on, held or not: its slot goes back once its copies end, even
        // if nobody looks at it (a caller holding many requests before awaiting any, or a
        // synchronous transfer queued behind finished asynchronous ones). If the progress
        // thread cannot watch it, the request's own waits and polls still observe it.
        if observer == Observer::Progress {
            inner.progress.watch(&req, Urgency::Soon);
        }
        tracing::debug!(parent: &span, streams, "submitted");
        Ok(req)
    }

    /// How this engine queues a transfer's copies (see [`plan::issue`]).
    pub(crate) fn issue_mode(&self, write: bool) -> plan::IssueMode {
        let o = self.options();
        plan::IssueMode {
            write,
            batch: o.batch_copies,
            threads: o.submit_threads as usize,
        }
    }

    /// The deadline of a synchronous transfer given `timeout` from now; a timeout too long
    /// for the clock (`Duration::MAX` as "no limit") is cut to [`FOREVER`](crate::control::FOREVER).
    pub(crate) fn sync_deadline(timeout: Duration) -> Instant {
        crate::control::deadline_after(timeout)
    }

    /// Waits for a submitted request until `deadline` (`timeout` after the call began), as
    /// the synchronous transfers do: on timeout the request is aborted; under `AutoConnect`
    /// a failed copy or a timeout disconnects the peer.
    pub(crate) fn wait_sync(req: &ReqInner, deadline: Instant, timeout: Duration) -> Result<()> {
        let r = req.wait(Some(deadline));
        let e = || Error::Timeout {
            what: "transfer",
            after: timeout,
        };
        if r.is_none() {
            // Ends it as the timeout it is (its streams aborted), unless it ended now, before
            // AutoConnect's disconnect could end it as the channel's loss.
            req.fail(e());
        }
        req.disconnect_if_due(r.is_none());
        r.unwrap_or_else(|| Err(e()))
    }
}

impl Engine {
    /// Copies `descs` to or from `remote` and waits up to `timeout` (`TransferSync`).
    ///
    /// Every descriptor is checked against local registrations and the peer's segments
    /// before any copy; pieces are split at segment boundaries and spread over the slot's
    /// streams. On timeout the transfer is aborted.
    ///
    /// # Errors
    /// [`Error::EmptyBatch`], [`Error::ZeroLength`], [`Error::Overflow`],
    /// [`Error::NotRegistered`] (naming the descriptor and address); [`Error::NotConnected`]
    /// (with [`EngineOptions::auto_connect`](crate::EngineOptions::auto_connect), the connect's own errors instead);
    /// [`Error::PeerLost`]; [`Error::Timeout`] (no free slot, or the copies took too long);
    /// [`Error::Mem`] for a failed copy; [`Error::CopyRefused`] naming the descriptor of a
    /// copy the runtime refused when it was queued. With `auto_connect`, a failed copy or a timeout also
    /// disconnects the peer.
    pub fn transfer_sync(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Self::sync_deadline(timeout);
        let req = self.submit(
            remote,
            op,
            descs,
            SlotFrom::Acquire(Some(deadline)),
            &TransferOptions::default(),
            Observer::Caller,
        )?;
        Self::wait_sync(&req, deadline, timeout)
    }

    /// Starts copying `descs` to or from `remote` and returns at once (`TransferAsync`); with
    /// [`EngineOptions::auto_connect`](crate::EngineOptions::auto_connect) and no channel to `remote`, after connecting (at most
    /// 3 s); when a remote range lies in no segment known yet, after asking the peer for the
    /// segments it registered since (at most 3 s; see [`Engine::refresh_segments`]).
    ///
    /// # Errors
    /// As [`Engine::transfer_sync`] for the checks; [`Error::ResourceExhausted`] when every
    /// stream slot is busy (HIXL fails at once too).
    pub fn transfer_async(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
    ) -> Result<TransferRequest> {
        self.transfer_async_with(remote, op, descs, &TransferOptions::default())
    }

    /// [`Engine::transfer_async`] with per-request options (a stall deadline).
    ///
    /// # Errors
    /// As [`Engine::transfer_async`].
    pub fn transfer_async_with(
        &self,
        remote: &str,
        op: TransferOp,
        descs: &[TransferDesc],
        opts: &TransferOptions,
    ) -> Result<TransferRequest> {
        let slot = SlotFrom::Acquire(None);
        let inner = self.submit(remote, op, descs, slot, opts, Observer::Progress)?;
        Ok(self.request(inner, remote))
    }

    /// The channel to `remote`; with `AutoConnect` and none, connects first (HIXL's connect on
    /// demand, within 3 s and `deadline`).
    pub(crate) fn channel_for(
        &self,
        remote: &str,
        deadline: Option<Instant>,
    ) -> Result<Arc<Channel>> {
        let inner = &self.inner;
        let lookup = || inner.channels.read().get(remote).cloned();
        let not_connected = || Error::NotConnected {
            peer: remote.to_owned(),
        };
        match lookup() {
            Some(c) => Ok(c),
            None if inner.opts.auto_connect => {
                // HIXL's AutoConnect: connect on demand, within 3 s and the caller's deadline.
                // Another thread may connect first, or disconnect again before the lookup
                // after the connect: then try again while time is left.
                let now = Instant::now();
                let until = deadline.map_or(now + AUTO_CONNECT_TIMEOUT, |d| {
                    d.min(now + AUTO_CONNECT_TIMEOUT)
                });
                loop {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(not_connected());
                    }
                    match self.connect_by(remote, left, Some(until)) {
                        Ok(()) | Err(Error::AlreadyConnected { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    if let Some(c) = lookup() {
                        break Ok(c);
                    }
                }
            }
            None => Err(not_connected()),
        }
    }

    /// With `AutoConnect`: what a request on `ch` does after a failed copy (disconnect `ch`,
    /// if this engine and the channel are still there).
    pub(crate) fn auto_disconnect(&self, ch: &Arc<Channel>) -> Option<AutoDisconnect> {
        if !self.inner.opts.auto_connect {
            return None;
        }
        let (eng, ch) = (Arc::downgrade(&self.inner), Arc::downgrade(ch));
        Some(Box::new(move || {
            if let (Some(eng), Some(ch)) = (eng.upgrade(), ch.upgrade()) {
                eng.auto_disconnect(&ch);
            }
        }))
    }
}
