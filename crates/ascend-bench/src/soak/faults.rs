//! Fault injection in the driver process and the judgement of every outcome.
//!
//! A fault is armed with [`ascend_sim::fault::fail_nth`] on one ACL symbol of the class of the
//! operation about to run, at a call number the operation makes (learnt from the calls that
//! clean operations of the class made, counted with [`ascend_sim::fault::calls`]), and
//! disarmed right after the operation.

use std::collections::BTreeMap;

use ascend_fabric::Error;
use ascend_sim::fault;

use super::model::Rng;

/// The code injected faults return.
pub(crate) const CODE: i32 = acl_sys::ACL_ERROR_RT_DRV_INTERNAL_ERROR;

/// Kinds of operation, each with the ACL calls of it that may fail.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Class {
    /// A transfer: submission, completion and its checks.
    Transfer,
    /// A connect: importing and mapping the peer's segments.
    Connect,
    /// Registering a chunk of local memory (the export of a new allocation).
    Register,
}

impl Class {
    /// Candidate symbols (those absent from the emulator are dropped at start).
    fn symbols(self) -> &'static [&'static str] {
        match self {
            Class::Transfer => &[
                "aclrtMemcpyAsync",
                "aclrtMemcpyBatchAsync",
                "aclrtValueWrite",
                "aclrtStreamQuery",
                "aclrtSynchronizeStreamWithTimeout",
                "aclrtSynchronizeStream",
                "aclrtCreateStreamWithConfig",
                "aclrtMallocHost",
            ],
            Class::Connect => &[
                "aclrtMemImportFromShareableHandleV2",
                "aclrtMapMem",
                "aclrtMemSetAccess",
            ],
            Class::Register => &["aclrtMemExportToShareableHandleV2"],
        }
    }
}

/// An armed fault.
#[derive(Clone, Debug)]
pub(crate) struct Armed {
    pub(crate) sym: &'static str,
    /// Fires when the symbol's call count reaches this.
    at: u64,
    pub(crate) nth: u64,
}

/// The learnt call counts and the tallies.
#[derive(Default)]
pub(crate) struct Faults {
    /// Most calls of each (class, symbol) one clean operation made.
    seen: BTreeMap<(Class, &'static str), u64>,
    /// Faults that fired, by symbol: (expected error, absorbed).
    pub(crate) fired: BTreeMap<&'static str, (u64, u64)>,
    /// Symbols of the candidate lists the emulator does not have.
    pub(crate) missing: Vec<&'static str>,
}

fn known(sym: &str) -> bool {
    acl_sys::SYMBOLS.contains(&sym)
}

impl Faults {
    pub(crate) fn new() -> Faults {
        let mut f = Faults::default();
        for c in [Class::Transfer, Class::Connect, Class::Register] {
            f.missing
                .extend(c.symbols().iter().copied().filter(|s| !known(s)));
        }
        f
    }

    /// Call counts of a class's symbols, to pass to [`Faults::learn`] after a clean operation.
    pub(crate) fn snapshot(class: Class) -> Vec<u64> {
        class.symbols().iter().map(|s| fault::calls(s)).collect()
    }

    /// Records the calls a clean operation of `class` made since `before`.
    pub(crate) fn learn(&mut self, class: Class, before: &[u64]) {
        for (s, b) in class.symbols().iter().zip(before) {
            let d = fault::calls(s).saturating_sub(*b);
            let e = self.seen.entry((class, *s)).or_default();
            *e = (*e).max(d);
        }
    }

    /// Chooses a symbol of `class` and a call number, and arms it; `None` when the chosen
    /// symbol is not called by such operations (two draws either way).
    pub(crate) fn arm(&self, rng: &mut Rng, class: Class) -> Option<Armed> {
        let syms = class.symbols();
        let sym = syms[rng.below(syms.len() as u64) as usize];
        let pick = rng.next_u64();
        let seen = self.seen.get(&(class, sym)).copied().unwrap_or(0);
        if seen == 0 || !known(sym) {
            return None;
        }
        let nth = 1 + pick % seen;
        let at = fault::calls(sym) + nth;
        fault::fail_nth(sym, nth, CODE);
        Some(Armed { sym, at, nth })
    }

    /// Candidate symbols no clean operation of their class called (never armed).
    pub(crate) fn never_called(&self) -> Vec<&'static str> {
        [Class::Transfer, Class::Connect, Class::Register]
            .iter()
            .flat_map(|c| c.symbols().iter().map(move |s| (*c, *s)))
            .filter(|k| known(k.1) && self.seen.get(k).copied().unwrap_or(0) == 0)
            .map(|k| k.1)
            .collect()
    }

    /// Disarms; returns whether the armed fault fired.
    pub(crate) fn disarm(a: &Armed) -> bool {
        fault::clear();
        fault::calls(a.sym) >= a.at
    }
}

/// What an operation's outcome is judged against.
#[derive(Clone, Debug)]
pub(crate) enum Expect {
    /// Nothing injected, the peer alive: it must succeed.
    Clean,
    /// A fault fired in call `nth` of `sym` (counted from the start of the operation):
    /// `Error::Mem` (or `Error::CopyRefused`, for a copy refused as it was queued) naming `sym`
    /// with the injected code, or success if it was absorbed.
    Fault(&'static str, u64),
    /// The peer was killed: success (done before), `PeerLost` or `NotConnected`.
    Dead,
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Clean => f.write_str("success"),
            Expect::Fault(sym, nth) => write!(
                f,
                "Error::Mem or CopyRefused from the injected failure of call {nth} of {sym}"
            ),
            Expect::Dead => f.write_str("success, PeerLost or NotConnected (peer killed)"),
        }
    }
}

/// The judgement of one outcome.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Ok,
    /// Failed as expected.
    Failed,
    /// A fired fault that the operation absorbed (it succeeded; its data is still checked).
    Absorbed,
    Unexpected,
}

/// Judges `r` against `e`.
pub(crate) fn judge(e: &Expect, r: &Result<(), Error>) -> Verdict {
    match (e, r) {
        (Expect::Fault(..), Ok(())) => Verdict::Absorbed,
        (_, Ok(())) => Verdict::Ok,
        (Expect::Fault(sym, _), Err(Error::Mem(m) | Error::CopyRefused { source: m, .. }))
            if m.api() == Some(*sym) && m.code().map(|c| c.0) == Some(CODE) =>
        {
            Verdict::Failed
        }
        (Expect::Dead, Err(Error::PeerLost { .. } | Error::NotConnected { .. })) => Verdict::Failed,
        _ => Verdict::Unexpected,
    }
}
