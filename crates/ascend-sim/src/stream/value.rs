//! Stream-ordered values: `aclrtValueWrite` (a 64-bit store when the stream reaches it) and
//! `aclrtValueWait` (the stream stops until a 64-bit word satisfies a comparison).
//!
//! A blocked wait spins briefly, then parks on one process-wide notification that every value
//! write triggers; a parked wait also rechecks the word every [`POLL`], so a host thread that
//! stores to the word directly releases it too. It ends early when the stream is aborted
//! (the work behind it is discarded) or destroyed (the work behind it still runs). In
//! deterministic mode an unsatisfied wait drives the streams that have queued value writes, as
//! an event wait drives the stream that records the event.
//!
//! The word is read and written with 64-bit atomics, under the address table's read lock and
//! after checking that it lies in live device-accessible memory, at submission and again at
//! execution.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use acl_sys::*;
use parking_lot::{Condvar, Mutex};

use super::exports::resolve;
use super::queue::{deterministic, drive, ExtTask, Step, Stream, Task, POLL, SPIN};
use crate::rt::Res;
use crate::vmm::state::{MemState, MEM};

/// A wait's comparison (`ACL_STREAM_WAIT_VALUE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    /// `(int64_t)(word - value) >= 0`: at or past `value`, wrapping.
    Geq,
    /// `word == value`.
    Eq,
    /// `(word & value) != 0`.
    And,
    /// `~(word | value) != 0`.
    Nor,
}

impl Cmp {
    fn from_flag(flag: u32) -> Res<Cmp> {
        Ok(match flag {
            ACL_STREAM_WAIT_VALUE_GEQ => Cmp::Geq,
            ACL_STREAM_WAIT_VALUE_EQ => Cmp::Eq,
            ACL_STREAM_WAIT_VALUE_AND => Cmp::And,
            ACL_STREAM_WAIT_VALUE_NOR => Cmp::Nor,
            _ => bail!(
                ACL_ERROR_INVALID_PARAM,
                "flag {flag} is not an ACL_STREAM_WAIT_VALUE_* comparison (GEQ 0, EQ 1, AND 2, NOR 3)"
            ),
        })
    }

    fn holds(self, word: u64, value: u64) -> bool {
        match self {
            Cmp::Geq => word.wrapping_sub(value) as i64 >= 0,
            Cmp::Eq => word == value,
            Cmp::And => word & value != 0,
            Cmp::Nor => !(word | value) != 0,
        }
    }
}

/// Bumped by every value write; parked waits sleep on it.
static WRITES: Mutex<u64> = Mutex::new(0);
static WRITTEN: Condvar = Condvar::new();

/// Streams with value writes queued, in deterministic mode (which drives them from a blocked
/// wait).
static WRITERS: Mutex<Vec<Weak<Stream>>> = Mutex::new(Vec::new());

/// Checks that `addr` names a live, device-accessible, 8-byte aligned word (`write`: writable).
fn check_word(mem: &MemState, addr: usize, write: bool) -> Res {
    ensure!(
        addr % 8 == 0,
        ACL_ERROR_RT_ADDR_UNALIGNED,
        "devAddr {addr:#x} is not 8-byte aligned"
    );
    let c = mem.classify(addr, 8, write, "devAddr")?;
    ensure!(
        c.device_accessible(),
        ACL_ERROR_RT_PARAM_INVALID,
        "devAddr {addr:#x} is {}",
        c.describe()
    );
    Ok(())
}

/// The word at `addr`, valid while the caller holds `mem` (the address table's read lock).
fn atomic(_mem: &MemState, addr: usize) -> &AtomicU64 {
    // SAFETY: callers checked (`check_word`) that `addr` is an 8-byte aligned word inside live
    // emulated memory, and the returned reference borrows the read guard, so the memory stays
    // mapped while it is used; other accesses to the word are atomic or the C caller's own.
    unsafe { AtomicU64::from_ptr(addr as *mut u64) }
}

/// Stores `value` at `addr` now (the queued write) and wakes parked waits.
fn store(addr: usize, value: u64) -> Res {
    {
        let mem = MEM.read();
        check_word(&mem, addr, true)?;
        atomic(&mem, addr).store(value, Ordering::SeqCst);
    }
    *WRITES.lock() += 1;
    WRITTEN.notify_all();
    Ok(())
}

/// Whether the word at `addr` satisfies the comparison now.
fn satisfied(addr: usize, cmp: Cmp, value: u64) -> Res<bool> {
    let mem = MEM.read();
    check_word(&mem, addr, false)?;
    Ok(cmp.holds(atomic(&mem, addr).load(Ordering::SeqCst), value))
}

struct Write {
    addr: usize,
    value: u64,
}

impl ExtTask for Write {
    fn run(&self, _cancelled: &dyn Fn() -> bool) -> Res {
        store(self.addr, self.value)
    }
}

struct Wait {
    addr: usize,
    cmp: Cmp,
    value: u64,
}

impl Wait {
    /// Drives the streams with queued value writes (deterministic mode) as far as they go now.
    fn drive_writers(&self) {
        let writers: Vec<Arc<Stream>> = {
            let mut w = WRITERS.lock();
            w.retain(|s| s.strong_count() > 0);
            w.iter().filter_map(Weak::upgrade).collect()
        };
        for s in writers {
            drive(&s, Some(Instant::now()), &|| {
                satisfied(self.addr, self.cmp, self.value).unwrap_or(true)
            });
        }
    }

    /// Spins up to [`SPIN`] for the word, yielding the core between checks.
    fn spin(&self) -> Res<bool> {
        let t0 = Instant::now();
        loop {
            if satisfied(self.addr, self.cmp, self.value)? {
                return Ok(true);
            }
            if t0.elapsed() >= SPIN {
                return Ok(false);
            }
            std::thread::yield_now();
        }
    }
}

impl ExtTask for Wait {
    fn run(&self, cancelled: &dyn Fn() -> bool) -> Res {
        match self.step(cancelled, &|| false, None) {
            Step::Done(r) => r,
            Step::Blocked => Ok(()),
        }
    }

    fn step(
        &self,
        cancelled: &dyn Fn() -> bool,
        closing: &dyn Fn() -> bool,
        deadline: Option<Instant>,
    ) -> Step {
        match self.spin() {
            Ok(true) => return Step::Done(Ok(())),
            Ok(false) => {}
            Err(e) => return Step::Done(Err(e)),
        }
        loop {
            let seen = *WRITES.lock();
            if deterministic() {
                self.drive_writers();
            }
            match satisfied(self.addr, self.cmp, self.value) {
                Ok(true) => return Step::Done(Ok(())),
                Ok(false) => {}
                Err(e) => return Step::Done(Err(e)),
            }
            if cancelled() || closing() {
                return Step::Done(Ok(()));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Step::Blocked;
            }
            let mut g = WRITES.lock();
            if *g == seen {
                WRITTEN.wait_for(&mut g, POLL);
            }
        }
    }
}

/// The submission checks both calls share: the word, then the stream.
fn submit(dev_addr: *mut c_void, stream: aclrtStream, write: bool) -> Res<Arc<Stream>> {
    ensure!(
        !dev_addr.is_null(),
        ACL_ERROR_INVALID_PARAM,
        "devAddr is NULL"
    );
    check_word(&MEM.read(), dev_addr as usize, write)?;
    resolve(stream, "stream")
}

export! { Acl;
    /// Stream-ordered 64-bit store: `flag` must be 0, `devAddr` an 8-byte aligned word of
    /// device-accessible memory.
    fn aclrtValueWrite(devAddr: *mut c_void, value: u64, flag: u32, stream: aclrtStream) {
        ensure!(flag == 0, ACL_ERROR_INVALID_PARAM, "flag {flag} is reserved and must be 0");
        let s = submit(devAddr, stream, true)?;
        // Only deterministic mode's blocked waits drive writers (threaded streams run by
        // themselves): no process-wide list to scan on every write otherwise.
        if deterministic() {
            let mut w = WRITERS.lock();
            w.retain(|x| x.strong_count() > 0);
            if !w.iter().any(|x| x.as_ptr() == Arc::as_ptr(&s)) {
                w.push(Arc::downgrade(&s));
            }
        }
        s.push(Task::Ext(Arc::new(Write { addr: devAddr as usize, value })));
        Ok(())
    }
}

export! { Acl;
    /// The stream waits until the word at `devAddr` satisfies `flag` against `value`.
    fn aclrtValueWait(devAddr: *mut c_void, value: u64, flag: u32, stream: aclrtStream) {
        let cmp = Cmp::from_flag(flag)?;
        let s = submit(devAddr, stream, false)?;
        s.push(Task::Ext(Arc::new(Wait { addr: devAddr as usize, cmp, value })));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Cmp;

    #[test]
    fn comparisons() {
        assert!(Cmp::Geq.holds(5, 5));
        assert!(Cmp::Geq.holds(6, 5));
        assert!(!Cmp::Geq.holds(4, 5));
        // Wrapping: 1 is "after" u64::MAX - 1.
        assert!(Cmp::Geq.holds(1, u64::MAX - 1));
        assert!(!Cmp::Geq.holds(u64::MAX - 1, 1));
        assert!(Cmp::Eq.holds(7, 7) && !Cmp::Eq.holds(7, 8));
        assert!(Cmp::And.holds(0b110, 0b010) && !Cmp::And.holds(0b100, 0b011));
        assert!(Cmp::Nor.holds(0b01, 0b10) && !Cmp::Nor.holds(u64::MAX, 0));
    }
}
