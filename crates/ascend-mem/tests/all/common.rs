//! Shared helpers of these tests.
//!
//! The emulator's counters, fault injection and call log are process-global, so every test
//! takes the process-wide test lock (through [`setup`]) for its whole run. Child processes
//! run in roles through `ascend_testkit::role`.

use ascend_mem::{Error, ErrorKind};

pub use ascend_testkit::emulator::{assert_clean, setup, sim_library, Env};

/// Asserts an ACL error from `api` with `code`, and its kind.
#[track_caller]
pub fn assert_acl(e: &Error, api: &str, code: i32, kind: ErrorKind) {
    match e {
        Error::Acl {
            api: a, code: c, ..
        } => {
            assert_eq!(*a, api, "api of {e}");
            assert_eq!(c.0, code, "code of {e}");
        }
        other => panic!("expected an ACL error from {api} ({code}), got {other:?}"),
    }
    assert_eq!(e.kind(), kind, "kind of {e}");
}

/// Runs `test` of this binary again as a child in `role` with `envs` set, to its end.
pub fn run_child(test: &str, role: &str, envs: &[(&str, &str)]) -> std::process::Output {
    ascend_testkit::Spawn::new(test, role).envs(envs).output()
}

/// A deterministic byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// `runtime_without` `aclrtMemcpyBatchAsync`.
pub fn runtime_without_batch_call() -> ascend_mem::Runtime {
    ascend_testkit::emulator::runtime_without(&["aclrtMemcpyBatchAsync"])
}

/// Device 1's HBM adopted as device 0's (`PhysicalMem::from_raw` claiming device 0) and
/// mapped in a reservation of `dev` (device 0): memory the host cannot tell from device 0's,
/// which the runtime refuses wherever a DEVICE location of device 0 names it. Returns the
/// memory, the reservation and the mapping (drop them in reverse order).
pub fn device1_as_device0(
    dev: &ascend_mem::Device,
    len: usize,
) -> (
    ascend_mem::PhysicalMem,
    ascend_mem::ReservedVa,
    ascend_mem::Mapping,
) {
    use ascend_mem::{MemSpec, Origin, PhysicalMem, ReservedVa};
    let size = dev.round_up(len).unwrap();
    let spec = MemSpec::DEVICE_HBM;
    let acl = dev.runtime().acl();
    // SAFETY: plain values and a writable out-slot, through the runtime's own table.
    let raw = unsafe { ascend_mem::ffi::phys::malloc(acl, size.get(), &spec.to_prop(1)) }.unwrap();
    // SAFETY: a live handle of this runtime, of `size` bytes, owned by nobody else (it claims
    // device 0, which is the point).
    let mem = unsafe { PhysicalMem::from_raw(dev, raw, size.get(), Origin::Allocated(spec)) };
    let va = ReservedVa::new(dev, size).unwrap();
    let map = va.map(&mem, size.zero()).unwrap();
    (mem, va, map)
}

/// Asserts `e` is `aclrtMemcpyBatchAsync` refusing copy `copy` of the caller's slice with
/// `ACL_ERROR_RT_PARAM_INVALID` (a copy whose memory contradicts its location).
#[track_caller]
pub fn assert_batch_refused(e: &Error, copy: usize) {
    assert!(
        matches!(e, Error::BatchCopy { api: "aclrtMemcpyBatchAsync", copy: c, source }
            if *c == copy && source.api() == Some("aclrtMemcpyBatchAsync")),
        "{e:?}"
    );
    assert_eq!(
        e.code().map(|c| c.0),
        Some(acl::ACL_ERROR_RT_PARAM_INVALID),
        "{e}"
    );
}
