//! A test's session on the in-process emulator.

use std::path::PathBuf;
use std::sync::MutexGuard;

use ascend_mem::{Device, Runtime};

/// One test's view: the process-wide test lock, the emulated runtime and device 0.
#[derive(Debug)]
pub struct Env {
    /// The in-process emulator.
    pub rt: Runtime,
    /// Its device 0.
    pub dev: Device,
    _guard: MutexGuard<'static, ()>,
}

/// Takes the lock, clears injected faults, the call log and the HCCL statistics, opens the
/// in-process emulator and drops any sticky error a previous test left on device 0.
pub fn setup() -> Env {
    let guard = crate::lock();
    ascend_sim::fault::clear();
    ascend_sim::set_call_log(false);
    ascend_sim::reset_hccl_stats();
    let rt = Runtime::emulated().expect("the in-process emulator opens");
    let dev = rt.device(0).expect("device 0");
    let _ = dev.check_sticky();
    Env {
        rt,
        dev,
        _guard: guard,
    }
}

impl Env {
    /// Drops the runtime handles and asserts no emulator object is left, still holding the
    /// lock (so no other test's objects are counted).
    #[track_caller]
    pub fn finish(self) {
        let Env { rt, dev, _guard } = self;
        drop(dev);
        drop(rt);
        assert_clean();
        drop(_guard);
    }
}

/// Asserts that the emulator holds no live object (call after everything is dropped).
#[track_caller]
pub fn assert_clean() {
    let c = ascend_sim::counters();
    assert!(c.is_zero(), "emulator objects leaked: {c:?}");
}

/// The emulator's shared library built with the test binary (target/<profile>/deps), else
/// the copy in target/<profile>, which only a build naming ascend-sim refreshes.
pub fn sim_library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [
        deps.join("libascend_sim.so"),
        deps.parent()?.join("libascend_sim.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

/// The calls of `aclrtMemcpyBatchAsync` and of `aclrtMemcpyAsync` (in that order) the
/// emulator received while `f` ran: how many batch calls and single copies a piece of work
/// reached the runtime as.
pub fn copy_calls(f: impl FnOnce()) -> (u64, u64) {
    let calls = || {
        (
            ascend_sim::fault::calls("aclrtMemcpyBatchAsync"),
            ascend_sim::fault::calls("aclrtMemcpyAsync"),
        )
    };
    let (b0, c0) = calls();
    f();
    let (b1, c1) = calls();
    (b1 - b0, c1 - c0)
}

/// A runtime over the in-process emulator whose table resolves `symbols` as absent (an older
/// CANN): hides them and builds a fresh table, leaked for the test. It is a runtime of its own:
/// objects of [`Env::rt`] are another runtime's to it. A table resolves each symbol at its
/// first use, so [`Env::rt`] misses a hidden symbol it had not used yet: make what needs it
/// first. The caller clears the fault state (`ascend_sim::fault::clear`) when done.
pub fn runtime_without(symbols: &[&str]) -> Runtime {
    for s in symbols {
        ascend_sim::fault::hide_symbol(s);
    }
    // SAFETY: the emulator's lookup returns its exports, which have acl-sys's signatures.
    let table = unsafe {
        ascend_mem::acl::AclLib::from_source(ascend_mem::acl::Source::InProcess {
            name: "ascend-sim (symbols hidden)",
            lookup: ascend_sim::lookup,
        })
    };
    let table: &'static ascend_mem::acl::AclLib = Box::leak(Box::new(table));
    // SAFETY: as above.
    unsafe { Runtime::from_table_unchecked(table) }.expect("a runtime over the emulator")
}
