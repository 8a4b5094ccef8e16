//! Helpers of the HCCL tests: ranks as threads of this process, each with its own device,
//! stream and communicator, driven through the C-level tables.
#![allow(dead_code, unused_imports, unused_macros, clippy::missing_safety_doc)]

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

pub use hccl_sys::{
    comm_config_init, HcclComm, HcclCommConfig, HcclCommSymWindow, HcclLib, HcclResult,
    HcclRootInfo, HCCL_COMM_CONFIG_VERSION,
};
pub use hccl_sys::{
    HCCL_DATA_TYPE_BFP16, HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_FP64,
    HCCL_DATA_TYPE_FP8E4M3, HCCL_DATA_TYPE_HIF8, HCCL_DATA_TYPE_INT128, HCCL_DATA_TYPE_INT16,
    HCCL_DATA_TYPE_INT32, HCCL_DATA_TYPE_INT64, HCCL_DATA_TYPE_INT8, HCCL_DATA_TYPE_UINT16,
    HCCL_DATA_TYPE_UINT32, HCCL_DATA_TYPE_UINT64, HCCL_DATA_TYPE_UINT8, HCCL_E_INTERNAL,
    HCCL_E_NOT_FOUND, HCCL_E_NOT_SUPPORT, HCCL_E_PARA, HCCL_E_PTR, HCCL_E_REMOTE, HCCL_E_TIMEOUT,
    HCCL_REDUCE_MAX, HCCL_REDUCE_MIN, HCCL_REDUCE_PROD, HCCL_REDUCE_SUM, HCCL_SUCCESS,
};

use crate::common::*;

/// The in-process HCCL table.
pub fn h() -> &'static HcclLib {
    ascend_sim::hccl_table()
}

/// Calls an HCCL table method and unwraps the missing-symbol layer.
macro_rules! hc {
    ($f:ident($($a:expr),* $(,)?)) => {{
        #[allow(unused_unsafe)]
        // SAFETY: test calls follow the C contract; arguments are live locals.
        let r = unsafe { $crate::hccl_common::h().$f($($a),*) };
        r.expect(concat!(stringify!($f), " missing"))
    }};
}

/// Asserts an HCCL call returns `code`, printing the message otherwise.
macro_rules! hcode {
    ($code:expr, $f:ident($($a:expr),* $(,)?)) => {{
        let got = hc!($f($($a),*));
        let want: u32 = $code;
        assert_eq!(got, want, "{} returned {got}, expected {want}; message: {:?}", stringify!($f),
            ascend_sim::hccl_last_error_message());
    }};
}

macro_rules! hok {
    ($f:ident($($a:expr),* $(,)?)) => {
        hcode!(0, $f($($a),*))
    };
}

pub fn root_info() -> HcclRootInfo {
    let mut r = HcclRootInfo::default();
    hok!(HcclGetRootInfo(&mut r));
    r
}

/// A config as HcclCommConfigInit leaves it, then `f`.
pub fn config(f: impl FnOnce(&mut HcclCommConfig)) -> HcclCommConfig {
    let mut c = HcclCommConfig::default();
    comm_config_init(&mut c);
    f(&mut c);
    c
}

/// A per-rank context handed to the rank body.
pub struct Rank {
    pub rank: u32,
    pub n: u32,
    pub comm: HcclComm,
    pub stream: aclrtStream,
}

impl Rank {
    pub fn sync(&self) -> i32 {
        acl!(aclrtSynchronizeStream(self.stream))
    }
}

/// Runs `body` on `n` threads as ranks of one communicator (device = rank, own stream),
/// then destroys everything. Returns each rank's result in rank order.
pub fn ranks<R: Send>(
    n: u32,
    cfg: Option<HcclCommConfig>,
    body: impl Fn(&Rank) -> R + Sync,
) -> Vec<R> {
    let root = root_info();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                let body = &body;
                s.spawn(move || {
                    set_device(rank as i32);
                    let mut stream = null_mut();
                    ok!(aclrtCreateStream(&mut stream));
                    let mut comm = null_mut();
                    match &cfg {
                        Some(c) => hok!(HcclCommInitRootInfoConfig(n, &root, rank, c, &mut comm)),
                        None => hok!(HcclCommInitRootInfo(n, &root, rank, &mut comm)),
                    }
                    let r = body(&Rank {
                        rank,
                        n,
                        comm,
                        stream,
                    });
                    hok!(HcclCommDestroy(comm));
                    ok!(aclrtDestroyStream(stream));
                    reset_device(rank as i32);
                    r
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Device memory that is not in a window (aclrtMalloc).
pub struct DevBuf {
    pub ptr: *mut c_void,
    pub len: usize,
}

impl DevBuf {
    pub fn new(len: usize) -> DevBuf {
        let mut p = null_mut();
        ok!(aclrtMalloc(&mut p, len.max(1), 0));
        DevBuf { ptr: p, len }
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        ok!(aclrtFree(self.ptr));
    }
}

/// VMM memory on `dev`: reservation + physical + map of `len` rounded to 2 MiB.
pub struct VmmBuf {
    pub ptr: *mut c_void,
    pub handle: aclrtDrvMemHandle,
    pub len: usize,
}

impl VmmBuf {
    pub fn new(dev: u32, len: usize) -> VmmBuf {
        let len = len.max(1).next_multiple_of(MIB2);
        let (ptr, handle) = mapped(len, &dev_prop(dev));
        VmmBuf { ptr, handle, len }
    }

    pub fn at(&self, off: usize) -> *mut c_void {
        // SAFETY: inside the mapping (callers keep `off` in range).
        unsafe { self.ptr.cast::<u8>().add(off).cast() }
    }
}

impl Drop for VmmBuf {
    fn drop(&mut self) {
        teardown(self.ptr, self.handle);
    }
}

pub fn write_bytes(p: *mut c_void, b: &[u8]) {
    // SAFETY: test memory is mapped writable for `b.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), b.len()) }
}

pub fn read_bytes(p: *const c_void, len: usize) -> Vec<u8> {
    // SAFETY: test memory is mapped readable for `len` bytes.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
}

pub fn err_string(code: HcclResult) -> String {
    let p = hc!(HcclGetErrorString(code));
    // SAFETY: a static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Registers `[p, p + len)` as a window.
pub fn register(r: &Rank, p: *mut c_void, len: u64) -> HcclCommSymWindow {
    let mut w = null_mut();
    hok!(HcclCommSymWinRegister(r.comm, p, len, &mut w, 1));
    w
}
