//! Initialisation, devices, contexts, peer access and the error-state calls.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use acl_sys::*;
use parking_lot::{Mutex, RwLock};

use crate::config::config;
use crate::counters::{dec, inc, Ctr};
use crate::handles::{self, Kind};
use crate::rt::{self, Out, Res};

/// A context's default stream as the stream module makes it: the context owns it and ends it
/// when the context goes, and knows nothing else of streams.
pub(crate) trait ContextStream: Send + Sync + std::fmt::Debug {
    /// Ends the stream (its context is gone).
    fn shutdown(&self);
    /// The stream itself, for the stream module to downcast.
    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

/// A context: explicit (`aclrtCreateContext`) or a device's default one (`aclrtSetDevice`).
#[derive(Debug)]
pub(crate) struct Context {
    pub id: u64,
    pub device: u32,
    pub explicit: bool,
    destroyed: AtomicBool,
    default_stream: Mutex<Option<Arc<dyn ContextStream>>>,
}

impl Context {
    fn new(device: u32, explicit: bool) -> Arc<Self> {
        Arc::new(Self {
            id: handles::new_id(Kind::Context),
            device,
            explicit,
            destroyed: AtomicBool::new(false),
            default_stream: Mutex::new(None),
        })
    }

    /// The context's default stream (the stream used for a NULL stream argument), made by
    /// `make` (given the device) the first time.
    pub(crate) fn default_stream(
        &self,
        make: impl FnOnce(u32) -> Res<Arc<dyn ContextStream>>,
    ) -> Res<Arc<dyn ContextStream>> {
        let mut g = self.default_stream.lock();
        if let Some(s) = &*g {
            return Ok(s.clone());
        }
        let s = make(self.device)?;
        *g = Some(s.clone());
        Ok(s)
    }

    fn retire(&self) {
        self.destroyed.store(true, Relaxed);
        let s = self.default_stream.lock().take();
        if let Some(s) = s {
            s.shutdown();
        }
    }
}

static CONTEXTS: RwLock<BTreeMap<u64, Arc<Context>>> = RwLock::new(BTreeMap::new());

/// Per device: the default context and its `aclrtSetDevice` count.
static DEFAULTS: Mutex<BTreeMap<u32, (Arc<Context>, u64)>> = Mutex::new(BTreeMap::new());

static PEERS: Mutex<BTreeSet<(u32, u32)>> = Mutex::new(BTreeSet::new());

static INIT_COUNT: Mutex<u64> = Mutex::new(0);

thread_local! {
    static CURRENT: RefCell<Option<Arc<Context>>> = const { RefCell::new(None) };
}

/// The calling thread's current context, if any (and still alive).
pub(crate) fn current() -> Option<Arc<Context>> {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|x| !x.destroyed.load(Relaxed))
            .cloned()
    })
}

/// The current context or ACL_ERROR_RT_CONTEXT_NULL.
pub(crate) fn require_current() -> Res<Arc<Context>> {
    current().ok_or_else(|| {
        rt::err(
            ACL_ERROR_RT_CONTEXT_NULL,
            "no current context on this thread (call aclrtSetDevice or aclrtSetCurrentContext first)",
        )
    })
}

fn set_current(c: Option<Arc<Context>>) {
    CURRENT.with(|x| *x.borrow_mut() = c);
}

/// Checks a device id argument.
pub(crate) fn check_device(id: i32, what: &str) -> Res<u32> {
    let n = config().devices;
    if id < 0 || id as u32 >= n {
        bail!(
            ACL_ERROR_RT_INVALID_DEVICEID,
            "{what} {id} is not a device id (this emulator has {n} devices, 0..{})",
            n - 1
        );
    }
    Ok(id as u32)
}

pub(crate) fn lookup_context(p: aclrtContext, what: &str) -> Res<Arc<Context>> {
    let id = handles::decode(p, Kind::Context, what)?;
    CONTEXTS
        .read()
        .get(&id)
        .cloned()
        .ok_or_else(|| handles::stale(p, Kind::Context, what))
}

export! { Acl;
    /// Initialises ACL once per process; later calls count references and return 100002.
    fn aclInit(_configPath: *const c_char) {
        let mut n = INIT_COUNT.lock();
        *n += 1;
        ensure!(*n == 1, ACL_ERROR_REPEAT_INITIALIZE, "already initialised (init count now {})", *n);
        Ok(())
    }
}

export! { Acl;
    /// Finalises whatever the init count.
    fn aclFinalize() {
        let mut n = INIT_COUNT.lock();
        ensure!(*n > 0, ACL_ERROR_REPEAT_FINALIZE, "not initialised (init count 0)");
        *n = 0;
        Ok(())
    }
}

export! { Acl;
    /// Decrements the init count; finalises at 1 -> 0.
    fn aclFinalizeReference(refCount: *mut u64) {
        let mut n = INIT_COUNT.lock();
        ensure!(*n > 0, ACL_ERROR_REPEAT_FINALIZE, "not initialised (init count 0)");
        *n -= 1;
        if !refCount.is_null() {
            // SAFETY: non-null out-pointer, writable per the C contract.
            unsafe { Out::new(refCount, "refCount") }?.set(*n);
        }
        Ok(())
    }
}

export! { Acl;
    /// Binds `deviceId` (its default context) to the calling thread.
    fn aclrtSetDevice(deviceId: i32) {
        let d = check_device(deviceId, "deviceId")?;
        let ctx = {
            let mut defaults = DEFAULTS.lock();
            let entry = defaults.entry(d).or_insert_with(|| {
                let c = Context::new(d, false);
                CONTEXTS.write().insert(c.id, c.clone());
                (c, 0)
            });
            entry.1 += 1;
            entry.0.clone()
        };
        set_current(Some(ctx));
        Ok(())
    }
}

export! { Acl;
    /// Drops one `aclrtSetDevice` reference; the default context goes away at zero.
    fn aclrtResetDevice(deviceId: i32) {
        let d = check_device(deviceId, "deviceId")?;
        let gone = {
            let mut defaults = DEFAULTS.lock();
            match defaults.get_mut(&d) {
                Some(e) if e.1 > 1 => {
                    e.1 -= 1;
                    None
                }
                Some(_) => defaults.remove(&d).map(|e| e.0),
                None => None,
            }
        };
        if let Some(c) = gone {
            CONTEXTS.write().remove(&c.id);
            c.retire();
        }
        if current().is_some_and(|c| c.device == d && !c.explicit) {
            set_current(None);
        }
        Ok(())
    }
}

export! { Acl;
    /// The calling thread's current device.
    fn aclrtGetDevice(deviceId: *mut i32) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(deviceId, "deviceId") }?;
        let c = require_current()?;
        out.set(c.device as i32);
        Ok(())
    }
}

export! { Acl;
    /// Number of emulated devices (`ASCEND_SIM_DEVICES`).
    fn aclrtGetDeviceCount(count: *mut u32) {
        // SAFETY: out-pointer per the C contract.
        unsafe { Out::new(count, "count") }?.set(config().devices);
        Ok(())
    }
}

export! { Acl;
    /// Creates an explicit context on `deviceId` and makes it current.
    fn aclrtCreateContext(context: *mut aclrtContext, deviceId: i32) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(context, "context") }?;
        let d = check_device(deviceId, "deviceId")?;
        let c = Context::new(d, true);
        CONTEXTS.write().insert(c.id, c.clone());
        inc(Ctr::Contexts);
        out.set(handles::to_ptr(c.id));
        set_current(Some(c));
        Ok(())
    }
}

export! { Acl;
    /// Destroys an explicit context (a default context cannot be destroyed: 107000).
    fn aclrtDestroyContext(context: aclrtContext) {
        ensure!(!context.is_null(), ACL_ERROR_INVALID_PARAM, "context is NULL");
        let c = lookup_context(context, "context")?;
        ensure!(
            c.explicit,
            ACL_ERROR_RT_PARAM_INVALID,
            "context {context:p} is the default context of device {}; use aclrtResetDevice",
            c.device
        );
        CONTEXTS.write().remove(&c.id);
        c.retire();
        dec(Ctr::Contexts);
        if current().is_none() {
            set_current(None);
        }
        Ok(())
    }
}

export! { Acl;
    /// Makes `context` current on the calling thread.
    fn aclrtSetCurrentContext(context: aclrtContext) {
        ensure!(!context.is_null(), ACL_ERROR_INVALID_PARAM, "context is NULL");
        let c = lookup_context(context, "context")?;
        set_current(Some(c));
        Ok(())
    }
}

export! { Acl;
    /// The calling thread's current context (107002 without one).
    fn aclrtGetCurrentContext(context: *mut aclrtContext) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(context, "context") }?;
        let c = require_current()?;
        out.set(handles::to_ptr(c.id));
        Ok(())
    }
}

export! { Acl;
    /// Identity mapping.
    fn aclrtGetPhyDevIdByLogicDevId(logicDevId: i32, phyDevId: *mut i32) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(phyDevId, "phyDevId") }?;
        let d = check_device(logicDevId, "logicDevId")?;
        out.set(d as i32);
        Ok(())
    }
}

export! { Acl;
    /// Identity mapping.
    fn aclrtGetLogicDevIdByUserDevId(userDevid: i32, logicDevId: *mut i32) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(logicDevId, "logicDevId") }?;
        let d = check_device(userDevid, "userDevid")?;
        out.set(d as i32);
        Ok(())
    }
}

export! { Acl;
    /// The process id (no container translation in the emulator).
    fn aclrtDeviceGetBareTgid(pid: *mut i32) {
        // SAFETY: out-pointer per the C contract.
        unsafe { Out::new(pid, "pid") }?.set(rt::getpid());
        Ok(())
    }
}

export! { Acl;
    /// Every pair of distinct devices can access each other.
    fn aclrtDeviceCanAccessPeer(canAccessPeer: *mut i32, deviceId: i32, peerDeviceId: i32) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(canAccessPeer, "canAccessPeer") }?;
        let a = check_device(deviceId, "deviceId")?;
        let b = check_device(peerDeviceId, "peerDeviceId")?;
        out.set(i32::from(a != b));
        Ok(())
    }
}

export! { Acl;
    /// Enables access from the current device to `peerDeviceId`; `flags` must be 0.
    fn aclrtDeviceEnablePeerAccess(peerDeviceId: i32, flags: u32) {
        ensure!(flags == 0, ACL_ERROR_FEATURE_UNSUPPORTED, "flags {flags:#x} must be 0");
        let peer = check_device(peerDeviceId, "peerDeviceId")?;
        let cur = require_current()?.device;
        ensure!(
            cur != peer,
            ACL_ERROR_RT_PARAM_INVALID,
            "peerDeviceId {peer} is the current device"
        );
        PEERS.lock().insert((cur, peer));
        Ok(())
    }
}

export! { Acl;
    /// Disables access enabled by `aclrtDeviceEnablePeerAccess` (107000 when not enabled).
    fn aclrtDeviceDisablePeerAccess(peerDeviceId: i32) {
        let peer = check_device(peerDeviceId, "peerDeviceId")?;
        let cur = require_current()?.device;
        ensure!(
            PEERS.lock().remove(&(cur, peer)),
            ACL_ERROR_RT_PARAM_INVALID,
            "peer access from device {cur} to peerDeviceId {peer} is not enabled"
        );
        Ok(())
    }
}

export! { Acl;
    /// Returns and clears the calling thread's most recent error message (NULL when none). The
    /// pointer stays valid until the next `aclGetRecentErrMsg` call on this thread.
    fn aclGetRecentErrMsg() -> *const c_char, fallback std::ptr::null(); {
        rt::take_message()
    }
}

export! { Acl;
    /// The SoC name of the emulated product (`ASCEND_SIM_SOC`: `Ascend910_9391` for the A3
    /// default). The string is static: the pointer stays valid for the life of the process.
    /// NULL only when the call is failed by fault injection.
    fn aclrtGetSocName() -> *const c_char, fallback std::ptr::null(); {
        config().soc_name.as_ptr()
    }
}

/// The version the emulator reports for the CANN packages it stands in for: the CANN release
/// whose headers the bindings follow.
pub(crate) const EMULATED_CANN_VERSION: &str = "9.1.0";

/// The packages `aclsysGetVersionStr` answers for (the emulator has no driver or firmware).
const EMULATED_PACKAGES: &[&str] = &["cann", "runtime", "toolkit", "compiler", "hccl", "opp"];

export! { Acl;
    /// The version of an emulated CANN package (`runtime`, `toolkit`, `cann`, ...): `9.1.0`
    /// (the CANN level of the bindings), written NUL-terminated into `versionStr`, which must
    /// hold `ACL_PKG_VERSION_MAX_SIZE` (128) bytes. Another name (`driver`, `firmware`, anything
    /// else) is `ACL_ERROR_INVALID_FILE`, as for a package that is not installed.
    fn aclsysGetVersionStr(pkgName: *mut c_char, versionStr: *mut c_char) {
        ensure!(!pkgName.is_null(), ACL_ERROR_INVALID_PARAM, "pkgName is NULL");
        ensure!(!versionStr.is_null(), ACL_ERROR_INVALID_PARAM, "versionStr is NULL");
        // SAFETY: non-null, and a NUL-terminated string per the C contract.
        let name = unsafe { std::ffi::CStr::from_ptr(pkgName) }.to_string_lossy();
        ensure!(
            EMULATED_PACKAGES.contains(&name.as_ref()),
            ACL_ERROR_INVALID_FILE,
            "package {name:?} is not installed (the emulator reports {EMULATED_PACKAGES:?})"
        );
        let text = EMULATED_CANN_VERSION.as_bytes();
        // SAFETY: the caller's buffer holds ACL_PKG_VERSION_MAX_SIZE bytes (the C contract);
        // the version and its NUL are far shorter.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), versionStr, text.len());
            versionStr.add(text.len()).write(0);
        }
        Ok(())
    }
}

fn check_level(level: aclrtLastErrLevel) -> Res {
    ensure!(
        level == ACL_RT_THREAD_LEVEL,
        ACL_ERROR_INVALID_PARAM,
        "level {level} is not ACL_RT_THREAD_LEVEL (0)"
    );
    Ok(())
}

export! { Acl;
    /// Returns the last error code of the calling thread without clearing it.
    fn aclrtPeekAtLastError(level: aclrtLastErrLevel) -> aclError, fallback ACL_ERROR_RT_INTERNAL_ERROR; {
        match check_level(level) {
            Ok(()) => rt::last_error(false),
            Err(e) => e.code,
        }
    }
}

export! { Acl;
    /// Returns the last error code of the calling thread and clears it.
    fn aclrtGetLastError(level: aclrtLastErrLevel) -> aclError, fallback ACL_ERROR_RT_INTERNAL_ERROR; {
        match check_level(level) {
            Ok(()) => rt::last_error(true),
            Err(e) => e.code,
        }
    }
}
