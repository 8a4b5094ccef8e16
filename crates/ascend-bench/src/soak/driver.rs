//! The driver: the engine under test, its memory, the peers, and the actions it takes.

use std::time::{Duration, Instant};

use ascend_fabric::{Engine, Error, TransferOp};

use super::batch::{self, Batch, MemId, Outstanding, Span};
use super::faults::{judge, Class, Expect, Faults, Verdict};
use super::local::LocalBuf;
use super::model::{fnv64, Rng};
use super::peer::{RegionSpec, SoakPeer, Starting};
use crate::Res;

/// Timeout of transfers, connects and disconnects.
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Most async transfers in flight at once.
const MAX_OUTSTANDING: usize = 4;

/// Tallies of a run.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) ops: u64,
    pub(crate) verified: u64,
    pub(crate) kills: u64,
    pub(crate) faults: u64,
    pub(crate) unexpected: u64,
    pub(crate) leaked: u64,
    pub(crate) failed_as_expected: u64,
    pub(crate) checksums: u64,
    /// Connections to live peers lost for no reason the soak knows.
    pub(crate) unexplained_losses: u64,
    /// Deregistrations refused with `Busy` while a transfer used the chunk.
    pub(crate) busy_refusals: u64,
    /// Deregistrations of chunks that transfers not yet waited for used, done because the
    /// engine had already seen every one of those transfers end.
    pub(crate) released_after_completion: u64,
    pub(crate) local_reg_changes: u64,
    pub(crate) peer_reg_changes: u64,
    pub(crate) connects: u64,
    pub(crate) bytes_moved: u64,
    /// Descriptors of completed transfers whose local range spanned two registrations, and
    /// whose remote range spanned the two segments of a split region.
    pub(crate) spanning: [u64; 2],
    /// Outcomes of transfers to killed peers: done, `PeerLost`, `NotConnected`.
    pub(crate) dead: [u64; 3],
    /// Kills with transfers to that peer in flight.
    pub(crate) kills_in_flight: u64,
    /// Connects while a killed peer restarted on its port: refused, or accepted early.
    pub(crate) restart_connects: [u64; 2],
    /// Losses whose imports went back to the VA pool only after `is_connected` was false.
    pub(crate) late_teardown: u64,
    /// Transfers that reported `PeerLost` while the lost peer's imports were still mapped:
    /// in all, and with no other request to the peer alive.
    pub(crate) lost_before_unmap: u64,
    pub(crate) lost_before_unmap_alone: u64,
    /// Behaviour against the design's ordering guarantees (printed as `FINDING`).
    pub(crate) findings: u64,
    /// A digest of the first choices, to compare runs with the same seed.
    pub(crate) choices: u64,
    pub(crate) choices_n: u64,
}

/// The driver's state.
pub(crate) struct Driver {
    pub(crate) eng: Engine,
    pub(crate) rng: Rng,
    data: Rng,
    pub(crate) locals: Vec<LocalBuf>,
    pub(crate) peers: Vec<SoakPeer>,
    pub(crate) outstanding: Vec<Outstanding>,
    pub(crate) faults: Faults,
    pub(crate) stats: Stats,
    next_region: u32,
    /// VA pool slots each peer's connect took.
    pub(crate) peer_slots: Vec<usize>,
    /// While a killed peer's transfers are waited for: the peer, the VA pool slots that
    /// should be in use once its imports are gone, and how many of its requests are held.
    pub(crate) kill_pool: Option<(usize, usize, usize)>,
    /// The last steps taken.
    trail: std::collections::VecDeque<String>,
}

/// Steps remembered for context.
const TRAIL: usize = 16;

impl Driver {
    /// An engine with `locals` buffers and `npeers` peers, all connected.
    pub(crate) fn new(eng: Engine, seed: u64, npeers: usize) -> Res<Driver> {
        let mut rng = Rng::new(seed);
        let data = rng.fork();
        let mut locals = Vec::new();
        for i in 0..3 {
            let chunks = 4;
            let regs = rng.below(16) | 1;
            locals.push(LocalBuf::new(&eng, i == 2, chunks, rng.next_u64(), regs)?);
        }
        let mut d = Driver {
            eng,
            rng,
            data,
            locals,
            peers: Vec::new(),
            outstanding: Vec::new(),
            faults: Faults::new(),
            stats: Stats::default(),
            next_region: 0,
            peer_slots: vec![0; npeers],
            kill_pool: None,
            trail: Default::default(),
        };
        for i in 0..npeers {
            let p = d.spawn_peer()?;
            d.peers.push(p);
            d.connect_peer(i, false)?;
        }
        Ok(d)
    }

    /// Records an unexpected outcome.
    pub(crate) fn unexpected(&mut self, what: &str, detail: String) {
        self.stats.unexpected += 1;
        println!("UNEXPECTED {what}: {detail}");
        if self.stats.unexpected <= 3 {
            let t: Vec<&str> = self.trail.iter().map(String::as_str).collect();
            println!("  recent steps (oldest first): {}", t.join("; "));
        }
    }

    /// Remembers a step for the context of an unexpected outcome.
    pub(crate) fn note(&mut self, step: String) {
        if self.trail.len() == TRAIL {
            self.trail.pop_front();
        }
        self.trail.push_back(step);
    }

    /// Mixes a choice into the digest (the first 1,000 choices).
    fn choice(&mut self, c: u64) {
        if self.stats.choices_n < 1000 {
            self.stats.choices = super::model::mix(self.stats.choices ^ c);
            self.stats.choices_n += 1;
        }
    }

    /// A random region layout: 1..=3 regions, one of them split in two segments.
    fn layout(&mut self) -> Vec<RegionSpec> {
        let n = self.rng.range(1, 3);
        (0..n)
            .map(|i| {
                let id = self.fresh_region();
                self.region_spec(id, i == 0)
            })
            .collect()
    }

    /// A region id not used before in this run.
    pub(crate) fn fresh_region(&mut self) -> u32 {
        self.next_region += 1;
        self.next_region
    }

    pub(crate) fn region_spec(&mut self, id: u32, split: bool) -> RegionSpec {
        if split {
            return (id, self.rng.range(1, 2) * (4 << 20), "s");
        }
        let kind = if self.rng.chance(300) { "h" } else { "d" };
        (id, self.rng.range(1, 3) * (2 << 20), kind)
    }

    pub(crate) fn spawn_peer(&mut self) -> Res<SoakPeer> {
        self.spawn_peer_on(crate::util::free_port()?)?.ready()
    }

    /// Starts a peer with a fresh key and layout on `port`, without waiting for it.
    pub(crate) fn spawn_peer_on(&mut self, port: u16) -> Res<Starting> {
        let key = self.rng.next_u64();
        let layout = self.layout();
        SoakPeer::spawn(port, key, &layout)
    }

    /// Every busy range (of transfers in flight).
    fn busy(&self) -> Vec<Span> {
        self.outstanding
            .iter()
            .flat_map(|o| o.batch.spans())
            .collect()
    }

    /// One step: a random action.
    pub(crate) fn step(&mut self) -> Res<()> {
        let a = self.rng.below(1000);
        self.choice(a);
        let p = self.rng.below(self.peers.len() as u64) as usize;
        let name = match a {
            0..=379 => "sync transfer",
            380..=579 => "async submit",
            580..=679 => "wait one",
            680..=739 => "checksum",
            740..=779 => "local (de)register",
            780..=794 => "peer regions change",
            795..=804 => "verify locals",
            805..=811 => "kill",
            812..=819 => "replace local",
            _ => "transfer with fault",
        };
        self.note(format!("{name} (peer {p})"));
        match a {
            0..=379 => self.transfer(p, false, None),
            380..=579 => self.submit_async(p),
            580..=679 => self.complete_one(),
            680..=739 => self.checksum(p),
            740..=779 => self.toggle_local(),
            780..=794 => self.change_peer_regions(p),
            795..=804 => self.verify_locals(),
            805..=811 => self.kill_and_restart(p),
            812..=819 => self.replace_local(),
            _ => self.fault_transfer(p),
        }
    }

    /// Writes fresh bytes to a WRITE batch's local sources (and the model).
    pub(crate) fn prepare(&mut self, b: &mut Batch) -> Res<()> {
        if b.op != TransferOp::Write {
            return Ok(());
        }
        for d in &mut b.descs {
            d.src = vec![0u8; d.len];
            self.data.fill(&mut d.src);
            self.locals[d.lbuf].write(d.loff, &d.src)?;
            self.locals[d.lbuf].shadow.set(d.loff, &d.src);
        }
        Ok(())
    }

    /// Plans a batch to peer `p` apart from the transfers in flight.
    fn plan(&mut self, p: usize) -> Option<Batch> {
        let busy = self.busy();
        batch::plan(
            &mut self.rng,
            &self.locals,
            p,
            &self.peers[p].regions,
            &busy,
        )
    }

    /// A sync transfer (or an async one waited for at once), with `fault` armed if given.
    fn transfer(&mut self, p: usize, via_async: bool, class: Option<Class>) -> Res<()> {
        let Some(mut b) = self.plan(p) else {
            return Ok(());
        };
        self.prepare(&mut b)?;
        let descs = b.to_descs(&self.locals, &self.peers[p].regions);
        let addr = self.peers[p].addr.clone();
        let before = Faults::snapshot(Class::Transfer);
        let armed = class.and_then(|c| self.faults.arm(&mut self.rng, c));
        let r = if via_async {
            self.eng
                .transfer_async(&addr, b.op, &descs)
                .and_then(|req| req.wait(OP_TIMEOUT))
        } else {
            self.eng.transfer_sync(&addr, b.op, &descs, OP_TIMEOUT)
        };
        let expect = match &armed {
            Some(a) if Faults::disarm(a) => Expect::Fault(a.sym, a.nth),
            _ => Expect::Clean,
        };
        if armed.is_none() && r.is_ok() && !via_async {
            self.faults.learn(Class::Transfer, &before);
        }
        self.finish(b, r, &expect)
    }

    /// A transfer with a fault armed in one of its ACL calls. The transfers still outstanding
    /// are waited for first: the engine's progress thread observes every request's completion
    /// as it happens, so a fault armed in a completion call while others are in flight could
    /// fire in one of theirs instead of this one.
    fn fault_transfer(&mut self, p: usize) -> Res<()> {
        self.drain(None)?;
        let via_async = self.rng.chance(500);
        self.transfer(p, via_async, Some(Class::Transfer))
    }

    fn submit_async(&mut self, p: usize) -> Res<()> {
        if self.outstanding.len() >= MAX_OUTSTANDING {
            return self.complete_one();
        }
        let Some(mut b) = self.plan(p) else {
            return Ok(());
        };
        self.prepare(&mut b)?;
        let descs = b.to_descs(&self.locals, &self.peers[p].regions);
        match self.eng.transfer_async(&self.peers[p].addr, b.op, &descs) {
            Ok(req) => self.outstanding.push(Outstanding {
                batch: b,
                req,
                expect: Expect::Clean,
            }),
            Err(e) => self.finish(b, Err(e), &Expect::Clean)?,
        }
        Ok(())
    }

    /// Waits for a random transfer in flight.
    fn complete_one(&mut self) -> Res<()> {
        if self.outstanding.is_empty() {
            return Ok(());
        }
        let i = self.rng.below(self.outstanding.len() as u64) as usize;
        let o = self.outstanding.swap_remove(i);
        let r = o.req.wait(OP_TIMEOUT);
        drop(o.req);
        self.finish(o.batch, r, &o.expect)
    }

    /// Waits for every transfer in flight (to peer `only`, if given).
    pub(crate) fn drain(&mut self, only: Option<usize>) -> Res<()> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.outstanding)
            .into_iter()
            .partition(|o| only.map_or(true, |p| o.batch.peer == p));
        self.outstanding = rest;
        for o in mine {
            let r = o.req.wait(OP_TIMEOUT);
            drop(o.req);
            self.finish(o.batch, r, &o.expect)?;
        }
        Ok(())
    }

    /// Judges a batch's outcome and brings the model up to date.
    pub(crate) fn finish(&mut self, b: Batch, r: Result<(), Error>, expect: &Expect) -> Res<()> {
        self.stats.ops += 1;
        let v = judge(expect, &r);
        match (&v, &r) {
            (Verdict::Unexpected, Err(e)) => {
                let what = format!("transfer error (expected {expect})");
                self.unexpected(&what, format!("{}: {e:?}", b.describe()));
                self.reconnect_if_lost(b.peer)?;
            }
            (Verdict::Failed, _) => self.stats.failed_as_expected += 1,
            _ => {}
        }
        if matches!(expect, Expect::Fault(..)) {
            let e = self.faults.fired.entry(fault_sym(expect)).or_default();
            if v == Verdict::Absorbed {
                e.1 += 1
            } else {
                e.0 += 1
            }
            self.stats.faults += 1;
        }
        if matches!(expect, Expect::Dead) {
            self.check_lost_order(&b, &r);
            let i = match &r {
                Ok(()) => 0,
                Err(Error::PeerLost { .. }) => 1,
                Err(_) => 2,
            };
            self.stats.dead[i] += 1;
        }
        if r.is_err() {
            self.forget(&b);
            return Ok(());
        }
        self.stats.bytes_moved += b.bytes();
        self.count_spanning(&b);
        let dead = matches!(expect, Expect::Dead);
        match b.op {
            TransferOp::Write if dead => Ok(()),
            TransferOp::Write if v == Verdict::Absorbed => self.apply_write_checked(&b),
            TransferOp::Write => {
                self.apply_write(&b);
                Ok(())
            }
            TransferOp::Read => self.check_read(&b),
        }
    }

    /// A waiter that sees `PeerLost` should find the peer's imports unmapped already.
    fn check_lost_order(&mut self, b: &Batch, r: &Result<(), Error>) {
        let Some((p, want, held)) = self.kill_pool else {
            return;
        };
        let now = self.eng.pool_usage().0;
        if p == b.peer && matches!(r, Err(Error::PeerLost { .. })) && now > want {
            self.stats.lost_before_unmap += 1;
            self.stats.lost_before_unmap_alone += u64::from(held == 0);
            self.stats.findings += 1;
            if self.stats.lost_before_unmap <= 3 {
                println!(
                    "FINDING: a transfer reported PeerLost while {now} VA pool slot(s) were in \
                     use, {want} once the lost peer's imports are gone ({held} other request(s) \
                     to the peer not yet dropped): {}",
                    b.describe()
                );
            }
        }
    }

    fn count_spanning(&mut self, b: &Batch) {
        use super::local::CHUNK;
        for d in &b.descs {
            if d.loff / CHUNK != (d.loff + d.len - 1) / CHUNK {
                self.stats.spanning[0] += 1;
            }
            if let Some(r) = self.peers[b.peer].regions.get(&d.region) {
                let mid = r.shadow.len() / 2;
                if r.split && d.roff < mid && d.roff + d.len > mid {
                    self.stats.spanning[1] += 1;
                }
            }
        }
    }

    /// A peer that is not killed but no longer connected was lost for no reason the soak
    /// knows: counted once more, then connected again so one loss is not reported by every
    /// later transfer.
    fn reconnect_if_lost(&mut self, p: usize) -> Res<()> {
        let addr = self.peers[p].addr.clone();
        if self.eng.is_connected(&addr) {
            return Ok(());
        }
        self.stats.unexplained_losses += 1;
        self.unexpected("peer connection lost without a kill", addr);
        self.connect_peer(p, false)
    }

    /// The destinations of a failed batch are unknown until rewritten.
    fn forget(&mut self, b: &Batch) {
        for d in &b.descs {
            match b.op {
                TransferOp::Write => {
                    if let Some(r) = self.peers[b.peer].regions.get_mut(&d.region) {
                        r.shadow.forget(d.roff, d.len);
                    }
                }
                TransferOp::Read => self.locals[d.lbuf].shadow.forget(d.loff, d.len),
            }
        }
    }

    fn apply_write(&mut self, b: &Batch) {
        for d in &b.descs {
            if let Some(r) = self.peers[b.peer].regions.get_mut(&d.region) {
                r.shadow.set(d.roff, &d.src);
            }
        }
    }

    /// A WRITE that succeeded although a fault fired: the peer's checksum must agree.
    fn apply_write_checked(&mut self, b: &Batch) -> Res<()> {
        self.apply_write(b);
        for d in &b.descs {
            let got = self.peers[b.peer].sum(d.region, d.roff, d.len)?;
            if got != fnv64(&d.src) {
                let what = "WRITE reported done after an absorbed fault, data differs";
                self.unexpected(what, b.describe());
            } else {
                self.stats.verified += d.len as u64;
            }
        }
        Ok(())
    }

    /// Compares what a READ brought with the model of the peer's memory.
    fn check_read(&mut self, b: &Batch) -> Res<()> {
        for d in &b.descs {
            let got = self.locals[d.lbuf].read(d.loff, d.len)?;
            let res = match self.peers[b.peer].regions.get(&d.region) {
                Some(r) => r.shadow.check(d.roff, &got),
                None => Ok(0),
            };
            match res {
                Ok(n) => self.stats.verified += n,
                Err(m) => {
                    let detail = format!("{}: region {}: {m}", b.describe(), d.region);
                    self.unexpected("READ data differs from the model", detail);
                }
            }
            self.locals[d.lbuf].shadow.set(d.loff, &got);
        }
        Ok(())
    }
}

fn fault_sym(e: &Expect) -> &'static str {
    match e {
        Expect::Fault(s, _) => s,
        _ => "",
    }
}

/// Whether `s` overlaps a busy range.
pub(crate) fn is_busy(busy: &[Span], s: &Span) -> bool {
    busy.iter()
        .any(|b| b.0 == s.0 && b.1 < s.1 + s.2 && s.1 < b.1 + b.2)
}

/// The busy check for a checksum of a peer region.
pub(crate) fn region_span(p: usize, id: u32, off: usize, len: usize) -> Span {
    (MemId::Remote(p, id), off, len)
}

/// Waits up to `limit` for `f` to hold.
pub(crate) fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while !f() {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}
