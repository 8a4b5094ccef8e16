//! The ACL surface's plumbing: the error type and its macros, the thread-local error state
//! (how a failed ACL export is recorded), memory capacity accounting and pointer helpers.

use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use acl_sys::aclError;

use crate::config::{config, MAX_DEVICES};
use crate::export::{Acl, Surface};

/// A failed call: the code and a message naming the argument and its value. The wrapper
/// prefixes the symbol name.
#[derive(Debug, Clone)]
pub(crate) struct AclErr {
    pub code: aclError,
    pub msg: String,
}

pub(crate) type Res<T = ()> = Result<T, AclErr>;

pub(crate) fn err(code: aclError, msg: impl Into<String>) -> AclErr {
    AclErr {
        code,
        msg: msg.into(),
    }
}

/// `bail!(code, "fmt", args)` returns an [`AclErr`].
macro_rules! bail {
    ($code:expr, $($fmt:tt)*) => {
        return Err($crate::rt::err($code, format!($($fmt)*)))
    };
}

/// `ensure!(cond, code, "fmt", args)`.
macro_rules! ensure {
    ($cond:expr, $code:expr, $($fmt:tt)*) => {
        if !$cond {
            bail!($code, $($fmt)*);
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Memory capacity accounting

static HBM_USED: [AtomicU64; MAX_DEVICES as usize] =
    [const { AtomicU64::new(0) }; MAX_DEVICES as usize];
static HOST_USED: AtomicU64 = AtomicU64::new(0);

/// What an allocation was charged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pool {
    Hbm(u32),
    Host,
}

fn pool_counter(p: Pool) -> (&'static AtomicU64, u64) {
    match p {
        Pool::Hbm(d) => (&HBM_USED[d as usize], config().hbm_bytes),
        Pool::Host => (&HOST_USED, config().host_bytes),
    }
}

/// Charges `bytes` against `pool`; fails with ACL_ERROR_RT_MEMORY_ALLOCATION when it would
/// exceed the capacity.
pub(crate) fn charge(pool: Pool, bytes: u64) -> Res {
    let (ctr, cap) = pool_counter(pool);
    let mut cur = ctr.load(Relaxed);
    loop {
        let new = cur.checked_add(bytes).filter(|n| *n <= cap);
        let Some(new) = new else {
            bail!(
                acl_sys::ACL_ERROR_RT_MEMORY_ALLOCATION,
                "size {bytes} exceeds the free capacity of {pool:?} ({} of {cap} bytes in use)",
                cur
            );
        };
        match ctr.compare_exchange_weak(cur, new, Relaxed, Relaxed) {
            Ok(_) => return Ok(()),
            Err(c) => cur = c,
        }
    }
}

pub(crate) fn refund(pool: Pool, bytes: u64) {
    pool_counter(pool).0.fetch_sub(bytes, Relaxed);
}

pub(crate) fn pool_used(pool: Pool) -> (u64, u64) {
    let (ctr, cap) = pool_counter(pool);
    (ctr.load(Relaxed), cap)
}

pub(crate) fn hbm_in_use(device: u32) -> u64 {
    HBM_USED.get(device as usize).map_or(0, |c| c.load(Relaxed))
}

// ---------------------------------------------------------------------------------------------
// Thread-local error state

thread_local! {
    static LAST_ERR: Cell<aclError> = const { Cell::new(0) };
    static MSG: RefCell<Option<CString>> = const { RefCell::new(None) };
    static RETURNED: RefCell<Option<CString>> = const { RefCell::new(None) };
}

pub(crate) fn set_error(code: aclError, msg: String) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERR.with(|e| e.set(code));
    MSG.with(|m| *m.borrow_mut() = Some(c));
}

pub(crate) fn take_message() -> *const std::ffi::c_char {
    let msg = MSG.with(|m| m.borrow_mut().take());
    RETURNED.with(|r| {
        let mut r = r.borrow_mut();
        *r = msg;
        r.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
    })
}

pub(crate) fn last_error(clear: bool) -> aclError {
    LAST_ERR.with(|e| if clear { e.replace(0) } else { e.get() })
}

impl Surface for Acl {
    const ID: usize = 0;
    type Code = aclError;
    type Err = AclErr;
    const SUCCESS: aclError = acl_sys::ACL_SUCCESS;
    const INTERNAL: aclError = acl_sys::ACL_ERROR_RT_INTERNAL_ERROR;
    const FAULT_DEFAULT: aclError = acl_sys::ACL_ERROR_RT_DRV_INTERNAL_ERROR;

    fn code(raw: i64) -> aclError {
        raw as aclError
    }

    fn error(code: aclError, msg: String) -> AclErr {
        AclErr { code, msg }
    }

    fn fail(name: &str, e: AclErr) -> aclError {
        set_error(e.code, format!("{name}: {}", e.msg));
        e.code
    }
}

// ---------------------------------------------------------------------------------------------
// Pointer helpers

/// A checked, non-null out-pointer.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// Checks `p` for null (ACL_ERROR_INVALID_PARAM naming `what`).
    ///
    /// # Safety
    /// `p` is null or valid for a write of `T` until [`Out::set`] is called.
    pub(crate) unsafe fn new(p: *mut T, what: &str) -> Res<Self> {
        if p.is_null() {
            bail!(acl_sys::ACL_ERROR_INVALID_PARAM, "{what} is NULL");
        }
        Ok(Self(p))
    }

    pub(crate) fn set(self, v: T) {
        // SAFETY: non-null and writable per the contract of `Out::new`; unaligned writes are
        // tolerated because C callers may pass packed storage.
        unsafe { self.0.write_unaligned(v) }
    }
}

/// Reads a checked in-pointer.
///
/// # Safety
/// `p` is null or valid for a read of `T`.
pub(crate) unsafe fn read_in<T: Copy>(p: *const T, what: &str) -> Res<T> {
    if p.is_null() {
        bail!(acl_sys::ACL_ERROR_INVALID_PARAM, "{what} is NULL");
    }
    // SAFETY: non-null, readable per the caller's contract.
    Ok(unsafe { p.read_unaligned() })
}

/// Calling process id.
pub(crate) fn getpid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
