//! The driver's actions besides transfers: checksums, registration changes on both sides,
//! connects (with faults), and killing and restarting peers.

use ascend_fabric::{Error, TransferRequest, TransferStatus};

use super::batch::{self, MemId};
use super::driver::{is_busy, region_span, wait_for, Driver, OP_TIMEOUT};
use super::faults::{judge, Class, Expect, Faults, Verdict};
use super::local::{LocalBuf, CHUNK};
use super::model::fnv64;
use crate::Res;

/// How long a killed peer's loss may take to be noticed.
const LOSS_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Driver {
    /// Asks peer `p` for the checksum of a random known range and compares it with the model.
    pub(crate) fn checksum(&mut self, p: usize) -> Res<()> {
        let ids: Vec<u32> = self.peers[p].regions.keys().copied().collect();
        if ids.is_empty() {
            return Ok(());
        }
        let id = ids[self.rng.below(ids.len() as u64) as usize];
        let rlen = self.peers[p].regions[&id].shadow.len();
        let len = batch::pick_len(&mut self.rng, rlen);
        let off = self.rng.below((rlen - len + 1) as u64) as usize;
        let busy: Vec<_> = self
            .outstanding
            .iter()
            .flat_map(|o| o.batch.spans())
            .collect();
        let shadow = &self.peers[p].regions[&id].shadow;
        if is_busy(&busy, &region_span(p, id, off, len)) || !shadow.all_known(off, len) {
            return Ok(());
        }
        let want = fnv64(shadow.bytes(off, len));
        let got = self.peers[p].sum(id, off, len)?;
        self.stats.checksums += 1;
        if got == want {
            self.stats.verified += len as u64;
        } else {
            let d = format!("peer {p} region {id} [{off:#x}, +{len}): {got:x} != model {want:x}");
            self.unexpected("peer checksum differs from the model", d);
        }
        Ok(())
    }

    /// Compares every local buffer with its model (when nothing is in flight).
    pub(crate) fn verify_locals(&mut self) -> Res<()> {
        if !self.outstanding.is_empty() {
            return Ok(());
        }
        for i in 0..self.locals.len() {
            let len = self.locals[i].chunks() * super::local::CHUNK;
            let got = self.locals[i].read(0, len)?;
            if let Err(m) = self.locals[i].shadow.check(0, &got) {
                self.unexpected(
                    "local memory differs from the model",
                    format!("buffer {i}: {m}"),
                );
            }
        }
        Ok(())
    }

    /// Registers or deregisters a random chunk of local memory (a register may get a fault).
    pub(crate) fn toggle_local(&mut self) -> Res<()> {
        let b = self.rng.below(self.locals.len() as u64) as usize;
        let c = self.rng.below(self.locals[b].chunks() as u64) as usize;
        let inject = self.rng.chance(300);
        self.stats.local_reg_changes += 1;
        if self.locals[b].is_registered(c) {
            self.deregister_chunk(b, c);
            return Ok(());
        }
        self.register_chunk(b, c, inject);
        Ok(())
    }

    /// Deregisters chunk `c` of local buffer `b`: refused with `Error::Busy` (the
    /// registration kept) while a transfer the engine has not yet seen complete uses it, done
    /// otherwise. The engine's progress thread may see a transfer complete before this driver
    /// waits for it, so a deregistration of a chunk that a transfer not yet waited for uses may
    /// also succeed, but only once every such transfer has ended (none still `Waiting`).
    fn deregister_chunk(&mut self, b: usize, c: usize) {
        let chunk = (MemId::Local(b), c * CHUNK, CHUNK);
        let users: Vec<&TransferRequest> = self
            .outstanding
            .iter()
            .filter(|o| o.batch.spans().any(|s| is_busy(&[s], &chunk)))
            .map(|o| &o.req)
            .collect();
        let in_use = !users.is_empty();
        let r = self.locals[b].deregister(&self.eng, c);
        let all_ended = users.iter().all(|q| q.status() != TransferStatus::Waiting);
        match (&r, in_use) {
            (Ok(()), false) => {}
            (Ok(()), true) if all_ended => self.stats.released_after_completion += 1,
            (Err(Error::Busy { .. }), true) if self.locals[b].is_registered(c) => {
                self.stats.busy_refusals += 1
            }
            _ => {
                let d = format!("buffer {b} chunk {c} (in use: {in_use}): {r:?}");
                self.unexpected("deregister", d);
            }
        }
    }

    /// Registers chunk `c` of local buffer `b`, with a fault armed if `inject`.
    fn register_chunk(&mut self, b: usize, c: usize, inject: bool) {
        let before = Faults::snapshot(Class::Register);
        let armed = if inject {
            self.faults.arm(&mut self.rng, Class::Register)
        } else {
            None
        };
        let r = self.locals[b].register(&self.eng, c);
        let expect = match &armed {
            Some(a) if Faults::disarm(a) => Expect::Fault(a.sym, a.nth),
            _ => Expect::Clean,
        };
        if armed.is_none() && r.is_ok() {
            self.faults.learn(Class::Register, &before);
        }
        self.judge_other("register", &expect, &r);
    }

    /// Replaces a local buffer by a fresh allocation with a new pattern, registering its
    /// chunks again (the first register exports the new allocation and may get a fault).
    pub(crate) fn replace_local(&mut self) -> Res<()> {
        self.drain(None)?;
        let b = self.rng.below(self.locals.len() as u64) as usize;
        let key = self.rng.next_u64();
        let regs = self.rng.below(16) | 1;
        let inject = self.rng.chance(500);
        let (host, chunks) = (self.locals[b].is_host(), self.locals[b].chunks());
        self.locals[b] = LocalBuf::new(&self.eng, host, chunks, key, 0)?;
        self.stats.local_reg_changes += 1;
        let mut first = true;
        for c in (0..chunks).filter(|c| regs & (1 << c) != 0) {
            self.register_chunk(b, c, inject && first);
            first = false;
        }
        Ok(())
    }

    /// Judges a non-transfer outcome and counts a fired fault.
    fn judge_other(&mut self, what: &str, expect: &Expect, r: &Result<(), Error>) -> Verdict {
        let v = judge(expect, r);
        if let Expect::Fault(s, _) = expect {
            self.stats.faults += 1;
            let e = self.faults.fired.entry(s).or_default();
            if v == Verdict::Absorbed {
                e.1 += 1
            } else {
                e.0 += 1
            }
        }
        match (&v, r) {
            (Verdict::Unexpected, Err(e)) => {
                self.unexpected(what, format!("expected {expect}, got {e:?}"))
            }
            (Verdict::Failed, _) => self.stats.failed_as_expected += 1,
            _ => {}
        }
        v
    }

    /// Connects to peer `p` (first with a fault armed half the time when `faults`), retrying
    /// once cleanly after an injected failure.
    pub(crate) fn connect_peer(&mut self, p: usize, faults: bool) -> Res<()> {
        let addr = self.peers[p].addr.clone();
        let pool0 = self.eng.pool_usage().0;
        let inject = faults && self.rng.chance(500);
        let before = Faults::snapshot(Class::Connect);
        let armed = if inject {
            self.faults.arm(&mut self.rng, Class::Connect)
        } else {
            None
        };
        let r = self.eng.connect(&addr, OP_TIMEOUT);
        self.stats.connects += 1;
        self.peer_slots[p] = self.eng.pool_usage().0.saturating_sub(pool0);
        let expect = match &armed {
            Some(a) if Faults::disarm(a) => Expect::Fault(a.sym, a.nth),
            _ => Expect::Clean,
        };
        if armed.is_none() && r.is_ok() {
            self.faults.learn(Class::Connect, &before);
        }
        self.note(format!("connect {addr}: {r:?} (expected {expect})"));
        let v = self.judge_other("connect", &expect, &r);
        if r.is_ok() {
            return Ok(());
        }
        if v == Verdict::Failed {
            // A failed connect undoes everything it imported.
            let pool = self.eng.pool_usage().0;
            if self.eng.is_connected(&addr) || pool != pool0 {
                let d = format!(
                    "after {expect}: connected {}, pool slots {pool0} -> {pool}",
                    self.eng.is_connected(&addr)
                );
                self.unexpected("failed connect left state behind", d);
            }
        }
        self.eng
            .connect(&addr, OP_TIMEOUT)
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        self.note(format!("connect {addr} again: Ok"));
        self.peer_slots[p] = self.eng.pool_usage().0.saturating_sub(pool0);
        Ok(())
    }

    /// Adds or removes a region of peer `p`, then disconnects and connects again (the soak
    /// reaches a peer's new regions through a reconnect). After a removal the peer's
    /// deregistration has revoked the region at this engine and left the channel up, which is
    /// checked.
    pub(crate) fn change_peer_regions(&mut self, p: usize) -> Res<()> {
        self.drain(Some(p))?;
        let n = self.peers[p].regions.len();
        let add = n < 2 || (n < 5 && self.rng.chance(500));
        let pick = self.rng.next_u64();
        let split = self.rng.chance(300);
        self.stats.peer_reg_changes += 1;
        let pool0 = self.eng.pool_usage().0;
        if add {
            let id = self.fresh_region();
            let spec = self.region_spec(id, split);
            self.peers[p].add(spec)?;
        } else {
            let ids: Vec<u32> = self.peers[p].regions.keys().copied().collect();
            self.peers[p].del(ids[(pick % ids.len() as u64) as usize])?;
        }
        let addr = self.peers[p].addr.clone();
        // The peer deregistered memory this engine imported: its deregistration returned only
        // once this engine had dropped what it no longer offers, the channel kept.
        if !add && !self.eng.is_connected(&addr) {
            self.unexpected("revocation", format!("{addr}: the channel went down"));
        }
        match self.eng.disconnect(&addr, OP_TIMEOUT) {
            Ok(()) => self.check_imports_gone(
                &addr,
                "disconnected",
                pool0.saturating_sub(self.peer_slots[p]),
            ),
            Err(e) => self.unexpected("disconnect", format!("{addr}: {e:?}")),
        }
        self.connect_peer(p, true)
    }

    /// SIGKILLs peer `p` (transfers may be in flight), probes the dead peer, checks the loss
    /// is noticed and the errors are the expected ones, then starts a fresh peer.
    pub(crate) fn kill_and_restart(&mut self, p: usize) -> Res<()> {
        let probe = self.rng.below(3);
        let addr = self.peers[p].addr.clone();
        let pool0 = self.eng.pool_usage().0;
        self.peers[p].kill()?;
        self.stats.kills += 1;
        if self.outstanding.iter().any(|o| o.batch.peer == p) {
            self.stats.kills_in_flight += 1;
        }
        for o in self.outstanding.iter_mut().filter(|o| o.batch.peer == p) {
            o.expect = Expect::Dead;
        }
        match probe {
            0 => self.dead_transfer(p)?,
            1 => {
                // The listener is gone: refused (or still connected if not yet noticed).
                let r = self.eng.connect(&addr, OP_TIMEOUT);
                if !matches!(r, Err(Error::Control(_) | Error::AlreadyConnected { .. })) {
                    self.unexpected("connect to a killed peer", format!("{addr}: {r:?}"));
                }
            }
            _ => {}
        }
        self.drain_killed(p, pool0.saturating_sub(self.peer_slots[p]))?;
        if !wait_for(LOSS_LIMIT, || !self.eng.is_connected(&addr)) {
            self.unexpected(
                "killed peer still connected",
                format!("{addr} after {LOSS_LIMIT:?}"),
            );
        }
        self.check_imports_gone(&addr, "lost", pool0.saturating_sub(self.peer_slots[p]));
        // After the loss: NotConnected.
        if let Some(b) = self.plan_dead(p) {
            let descs = b.to_descs(&self.locals, &self.peers[p].regions);
            let r = self.eng.transfer_sync(&addr, b.op, &descs, OP_TIMEOUT);
            self.stats.ops += 1;
            if !matches!(r, Err(Error::NotConnected { .. })) {
                self.unexpected("transfer after loss", format!("{}: {r:?}", b.describe()));
            }
        }
        // The same address comes back: a connect while it starts is refused or succeeds.
        let starting = self.spawn_peer_on(self.peers[p].port())?;
        if self.rng.chance(500) {
            self.connect_while_restarting(&addr);
        }
        self.peers[p] = starting.ready()?;
        self.connect_peer(p, true)
    }

    /// Connects, again and again, to a peer that is starting on its old address:
    /// `Error::Control` while it does not listen yet; once accepted (maybe before the peer
    /// registered everything), disconnects.
    fn connect_while_restarting(&mut self, addr: &str) {
        let pool0 = self.eng.pool_usage().0;
        let t = std::time::Instant::now();
        while t.elapsed() < LOSS_LIMIT {
            match self.eng.connect(addr, OP_TIMEOUT) {
                // Not listening yet, or accepted and not answering yet (a control timeout).
                Err(Error::Control(_) | Error::Timeout { .. }) => {
                    self.stats.restart_connects[0] += 1;
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Ok(()) => {
                    self.stats.restart_connects[1] += 1;
                    self.note(format!("early connect to restarting {addr} accepted"));
                    if let Err(e) = self.eng.disconnect(addr, OP_TIMEOUT) {
                        self.unexpected("disconnect", format!("{addr}: {e:?}"));
                    }
                    self.check_imports_gone(addr, "disconnected", pool0);
                    return;
                }
                Err(e) => {
                    let d = format!("{addr}: {e:?}");
                    return self.unexpected("connect while the peer restarts", d);
                }
            }
        }
    }

    /// Once a peer is no longer connected (lost or disconnected, and nothing of it in
    /// flight), its imports must be back in the VA pool (`want` slots left in use): at once
    /// per the design, or else late (a finding).
    pub(crate) fn check_imports_gone(&mut self, addr: &str, how: &str, want: usize) {
        if self.eng.pool_usage().0 == want {
            return;
        }
        let now = self.eng.pool_usage().0;
        let t = std::time::Instant::now();
        if wait_for(LOSS_LIMIT, || self.eng.pool_usage().0 == want) {
            self.stats.late_teardown += 1;
            self.stats.findings += 1;
            if self.stats.late_teardown <= 3 {
                println!(
                    "FINDING: {addr} {how}: is_connected was false with {now} VA pool slot(s) \
                     in use, {want} expected; the imports went back within {:?}",
                    t.elapsed()
                );
            }
        } else {
            let d = format!(
                "{addr}: {} slot(s) in use, {want} expected",
                self.eng.pool_usage().0
            );
            self.unexpected("a lost peer's imports stay mapped", d);
        }
    }

    /// Waits for the killed peer `p`'s transfers one by one; each `PeerLost` is checked
    /// against the VA pool (`want` slots once the peer's imports are gone), noting how many
    /// of its requests the soak still held.
    fn drain_killed(&mut self, p: usize, want: usize) -> Res<()> {
        while let Some(i) = self.outstanding.iter().position(|o| o.batch.peer == p) {
            let o = self.outstanding.remove(i);
            let r = o.req.wait(OP_TIMEOUT);
            drop(o.req);
            let held = self
                .outstanding
                .iter()
                .filter(|o| o.batch.peer == p)
                .count();
            self.kill_pool = Some((p, want, held));
            let f = self.finish(o.batch, r, &o.expect);
            self.kill_pool = None;
            f?;
        }
        Ok(())
    }

    fn plan_dead(&mut self, p: usize) -> Option<super::batch::Batch> {
        let busy: Vec<_> = self
            .outstanding
            .iter()
            .flat_map(|o| o.batch.spans())
            .collect();
        batch::plan(
            &mut self.rng,
            &self.locals,
            p,
            &self.peers[p].regions,
            &busy,
        )
    }

    /// A transfer right after the kill: done, `PeerLost` or `NotConnected`.
    fn dead_transfer(&mut self, p: usize) -> Res<()> {
        let Some(mut b) = self.plan_dead(p) else {
            return Ok(());
        };
        self.prepare(&mut b)?;
        let descs = b.to_descs(&self.locals, &self.peers[p].regions);
        let addr = self.peers[p].addr.clone();
        let r = self.eng.transfer_sync(&addr, b.op, &descs, OP_TIMEOUT);
        self.finish(b, r, &Expect::Dead)
    }
}
