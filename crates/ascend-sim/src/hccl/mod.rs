//! The HCCL emulation: every symbol of [`hccl_sys::SYMBOLS`], communicators over loopback
//! rendezvous and shared memfds, stream-ordered collectives on two paths (staged and
//! symmetric), and symmetric windows. See the crate documentation, section "HCCL emulation".

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use acl_sys::aclrtStream;
use hccl_sys::*;
use parking_lot::Mutex;

mod coll;
mod comm;
mod config;
mod rendezvous;
mod types;
mod window;

use coll::{Coll, Kind};
use types::{DType, ROp};

/// A failed HCCL call: the code and a message.
#[derive(Debug, Clone)]
pub(crate) struct HErr {
    pub code: HcclResult,
    pub msg: String,
}

pub(crate) type HRes<T = ()> = Result<T, HErr>;

pub(crate) fn herr(code: HcclResult, msg: impl Into<String>) -> HErr {
    HErr {
        code,
        msg: msg.into(),
    }
}

/// The `HCCL_E_*` name of a code.
pub(crate) fn code_name(code: HcclResult) -> &'static str {
    match code {
        HCCL_SUCCESS => "HCCL_SUCCESS",
        HCCL_E_PARA => "HCCL_E_PARA",
        HCCL_E_PTR => "HCCL_E_PTR",
        HCCL_E_MEMORY => "HCCL_E_MEMORY",
        HCCL_E_INTERNAL => "HCCL_E_INTERNAL",
        HCCL_E_NOT_SUPPORT => "HCCL_E_NOT_SUPPORT",
        HCCL_E_NOT_FOUND => "HCCL_E_NOT_FOUND",
        HCCL_E_UNAVAIL => "HCCL_E_UNAVAIL",
        HCCL_E_SYSCALL => "HCCL_E_SYSCALL",
        HCCL_E_TIMEOUT => "HCCL_E_TIMEOUT",
        HCCL_E_OPEN_FILE_FAILURE => "HCCL_E_OPEN_FILE_FAILURE",
        HCCL_E_TCP_CONNECT => "HCCL_E_TCP_CONNECT",
        HCCL_E_ROCE_CONNECT => "HCCL_E_ROCE_CONNECT",
        HCCL_E_TCP_TRANSFER => "HCCL_E_TCP_TRANSFER",
        HCCL_E_ROCE_TRANSFER => "HCCL_E_ROCE_TRANSFER",
        HCCL_E_RUNTIME => "HCCL_E_RUNTIME",
        HCCL_E_DRV => "HCCL_E_DRV",
        HCCL_E_PROFILING => "HCCL_E_PROFILING",
        HCCL_E_CCE => "HCCL_E_CCE",
        HCCL_E_NETWORK => "HCCL_E_NETWORK",
        HCCL_E_AGAIN => "HCCL_E_AGAIN",
        HCCL_E_REMOTE => "HCCL_E_REMOTE",
        HCCL_E_SUSPENDING => "HCCL_E_SUSPENDING",
        HCCL_E_OPRETRY_FAIL => "HCCL_E_OPRETRY_FAIL",
        HCCL_E_OOM => "HCCL_E_OOM",
        _ => "unknown HcclResult",
    }
}

/// The text `HcclGetErrorString` returns (the real library's table).
fn error_text(code: HcclResult) -> &'static CStr {
    match code {
        HCCL_SUCCESS => c"no error",
        HCCL_E_PARA => c"parameter error",
        HCCL_E_PTR => c"empty pointer",
        HCCL_E_MEMORY => c"memory error",
        HCCL_E_INTERNAL => c"internal error",
        HCCL_E_NOT_SUPPORT => c"not support feature",
        HCCL_E_NOT_FOUND => c"not found specific resource",
        HCCL_E_UNAVAIL => c"resource unavailable",
        HCCL_E_SYSCALL => c"call system interface error",
        HCCL_E_TIMEOUT => c"timeout",
        HCCL_E_OPEN_FILE_FAILURE => c"open file fail",
        HCCL_E_TCP_CONNECT => c"tcp connect fail",
        HCCL_E_ROCE_CONNECT => c"roce connect fail",
        HCCL_E_TCP_TRANSFER => c"tcp transfer fail",
        HCCL_E_ROCE_TRANSFER => c"roce transfer fail",
        HCCL_E_RUNTIME => c"call runtime api fail",
        HCCL_E_DRV => c"call driver api fail",
        HCCL_E_PROFILING => c"call profiling api fail",
        HCCL_E_CCE => c"call cce api fail",
        HCCL_E_NETWORK => c"call network api fail",
        HCCL_E_AGAIN => c"try again",
        HCCL_E_REMOTE => c"error cqe",
        HCCL_E_SUSPENDING => c"error communicator suspending",
        HCCL_E_OPRETRY_FAIL => c"retry constraint",
        HCCL_E_OOM => c"out of memory",
        _ => c"unknow error",
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics

pub(crate) mod stats {
    use std::sync::atomic::AtomicU64;
    pub(crate) static STAGED_BYTES: AtomicU64 = AtomicU64::new(0);
    pub(crate) static SYM_BYTES: AtomicU64 = AtomicU64::new(0);
    pub(crate) static STAGED_OPS: AtomicU64 = AtomicU64::new(0);
    pub(crate) static SYM_OPS: AtomicU64 = AtomicU64::new(0);
}

/// Per-process data-movement statistics of the HCCL emulation (see [`hccl_stats`]).
///
/// Bytes count every copy from one buffer into another: the staged path's copy-in, transfer
/// and copy-out, the symmetric path's reads of windows; a reduction counts every input it
/// reads. An AllGather of `b` bytes per rank on `n` ranks costs `(2n + 1)·b` bytes staged and
/// `n·b` symmetric (`(n − 1)·b` in place) per rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HcclStats {
    /// Bytes copied by collectives that took the staged path.
    pub staged_bytes_copied: u64,
    /// Bytes copied by collectives that took the symmetric path.
    pub symmetric_bytes_copied: u64,
    /// Collectives that took the staged path (Barrier not counted).
    pub staged_ops: u64,
    /// Collectives that took the symmetric path.
    pub symmetric_ops: u64,
}

/// The HCCL statistics of this process (all ranks it hosts).
pub fn hccl_stats() -> HcclStats {
    HcclStats {
        staged_bytes_copied: stats::STAGED_BYTES.load(Ordering::Relaxed),
        symmetric_bytes_copied: stats::SYM_BYTES.load(Ordering::Relaxed),
        staged_ops: stats::STAGED_OPS.load(Ordering::Relaxed),
        symmetric_ops: stats::SYM_OPS.load(Ordering::Relaxed),
    }
}

/// Zeroes the HCCL statistics.
pub fn reset_hccl_stats() {
    stats::STAGED_BYTES.store(0, Ordering::Relaxed);
    stats::SYM_BYTES.store(0, Ordering::Relaxed);
    stats::STAGED_OPS.store(0, Ordering::Relaxed);
    stats::SYM_OPS.store(0, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// Error messages

thread_local! {
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}
static RECENT: Mutex<Option<String>> = Mutex::new(None);

pub(crate) fn set_recent(msg: &str) {
    *RECENT.lock() = Some(msg.to_string());
}

/// The message of the last failed HCCL call on this thread (`"HcclX: text (HCCL_E_Y)"`), kept
/// until the next failure on the thread.
pub fn hccl_last_error_message() -> Option<String> {
    LAST.with(|l| l.borrow().clone())
}

/// The most recent HCCL failure message of the process, from any thread, including
/// collectives that failed on a stream.
pub fn hccl_recent_error_message() -> Option<String> {
    RECENT.lock().clone()
}

fn fail(name: &str, e: &HErr) -> HcclResult {
    let m = format!("{name}: {} ({})", e.msg, code_name(e.code));
    set_recent(&m);
    LAST.with(|l| *l.borrow_mut() = Some(m));
    e.code
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs the body of an HCCL export: initialisation, panic catching, error recording.
fn enter(name: &'static str, f: impl FnOnce() -> HRes) -> HcclResult {
    crate::rt::init();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => HCCL_SUCCESS,
        Ok(Err(e)) => fail(name, &e),
        Err(p) => fail(
            name,
            &herr(
                HCCL_E_INTERNAL,
                format!("internal error (panic: {})", panic_text(&*p)),
            ),
        ),
    }
}

/// Defines one exported HCCL function returning `HcclResult`.
macro_rules! hexport {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) { $($body:tt)* }) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The C contract of the HCCL call: pointer arguments are null or valid for the
        /// documented use; handles are values this library returned (stale or foreign ones
        /// are rejected).
        #[no_mangle]
        #[allow(non_snake_case, unused_variables, clippy::not_unsafe_ptr_arg_deref)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> HcclResult {
            enter(stringify!($name), move || -> HRes { $($body)* })
        }
    };
}

/// Defines an export that answers `HCCL_E_NOT_SUPPORT`.
macro_rules! unsupported {
    ($($name:ident($($arg:ident : $ty:ty),* $(,)?);)*) => {
        $(
            hexport! {
                /// Not emulated: `HCCL_E_NOT_SUPPORT`.
                fn $name($($arg: $ty),*) {
                    Err(herr(HCCL_E_NOT_SUPPORT, "not supported by the ascend-sim HCCL emulation"))
                }
            }
        )*
    };
}

/// Writes an out-parameter after a null check (`HCCL_E_PTR`).
///
/// # Safety
/// `p` is null or writable for one `T`.
unsafe fn put<T>(p: *mut T, v: T, what: &str) -> HRes {
    if p.is_null() {
        return Err(herr(HCCL_E_PTR, format!("{what} is NULL")));
    }
    // SAFETY: non-null and writable per the contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

fn need<T>(p: *const T, what: &str) -> HRes {
    if p.is_null() {
        return Err(herr(HCCL_E_PTR, format!("{what} is NULL")));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Communicator management

hexport! {
    /// Makes a root info naming this process's loopback rendezvous and a fresh unique id.
    fn HcclGetRootInfo(rootInfo: *mut HcclRootInfo) {
        need(rootInfo, "rootInfo")?;
        let addr = rendezvous::listener()?;
        let r = rendezvous::encode(addr);
        // SAFETY: non-null, writable per the C contract.
        unsafe { put(rootInfo, r, "rootInfo") }
    }
}

/// Shared body of the two root-info inits.
///
/// # Safety
/// Pointers per the C contract.
unsafe fn init_root(
    n: u32,
    root: *const HcclRootInfo,
    rank: u32,
    config: *const HcclCommConfig,
    comm: *mut HcclComm,
) -> HRes {
    need(root, "rootInfo")?;
    need(comm, "comm")?;
    if n == 0 {
        return Err(herr(HCCL_E_PARA, "nRanks is 0"));
    }
    if rank >= n {
        return Err(herr(HCCL_E_PARA, format!("rank {rank} >= nRanks {n}")));
    }
    let cfg = if config.is_null() {
        config::CommCfg::defaults()
    } else {
        // SAFETY: a caller's config struct per the C contract.
        unsafe { config::CommCfg::read(config) }?
    };
    // SAFETY: readable per the C contract.
    let ri = unsafe { root.read_unaligned() };
    let r = rendezvous::decode(&ri)?;
    let c = comm::init(n, &r, rank, cfg)?;
    // SAFETY: non-null per the check above, writable per the contract.
    unsafe { put(comm, crate::handles::to_ptr(c.handle), "comm") }
}

hexport! {
    /// Joins the communicator of `rootInfo` as `rank` of `nRanks` (environment defaults).
    fn HcclCommInitRootInfo(nRanks: u32, rootInfo: *const HcclRootInfo, rank: u32, comm: *mut HcclComm) {
        // SAFETY: forwarded C contract.
        unsafe { init_root(nRanks, rootInfo, rank, std::ptr::null(), comm) }
    }
}

hexport! {
    /// As HcclCommInitRootInfo with a config, read as the library reads it.
    fn HcclCommInitRootInfoConfig(nRanks: u32, rootInfo: *const HcclRootInfo, rank: u32, config: *const HcclCommConfig, comm: *mut HcclComm) {
        need(config, "config")?;
        // SAFETY: forwarded C contract.
        unsafe { init_root(nRanks, rootInfo, rank, config, comm) }
    }
}

hexport! {
    /// Destroys a communicator (see the crate docs: waits for its queued collectives,
    /// deregisters its windows locally).
    fn HcclCommDestroy(comm: HcclComm) {
        comm::destroy(comm)
    }
}

hexport! {
    /// The number of ranks.
    fn HcclGetRankSize(comm: HcclComm, rankSize: *mut u32) {
        let c = comm::lookup(comm, "comm")?;
        // SAFETY: out-pointer per the C contract.
        unsafe { put(rankSize, c.n, "rankSize") }
    }
}

hexport! {
    /// This rank's id.
    fn HcclGetRankId(comm: HcclComm, rank: *mut u32) {
        let c = comm::lookup(comm, "comm")?;
        // SAFETY: out-pointer per the C contract.
        unsafe { put(rank, c.rank, "rank") }
    }
}

hexport! {
    /// The communicator's name (at most 127 bytes and a NUL into a 128-byte buffer).
    fn HcclGetCommName(comm: HcclComm, commName: *mut c_char) {
        let c = comm::lookup(comm, "comm")?;
        need(commName, "commName")?;
        let b = c.name.as_bytes();
        let n = b.len().min(COMM_NAME_MAX_LENGTH as usize - 1);
        // SAFETY: the caller's buffer holds COMM_NAME_MAX_LENGTH bytes per the C contract.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), commName.cast::<u8>(), n);
            *commName.add(n) = 0;
        }
        Ok(())
    }
}

hexport! {
    /// A communicator of this process by name (the first one when threads of this process
    /// hold several ranks of one communicator).
    fn HcclCommGetHandleWithName(commName: *const c_char, comm: *mut HcclComm) {
        need(commName, "commName")?;
        // SAFETY: NUL-terminated per the C contract.
        let name = unsafe { CStr::from_ptr(commName) }.to_string_lossy().into_owned();
        let c = comm::by_name(&name).ok_or_else(|| herr(HCCL_E_NOT_FOUND, format!("no communicator named `{name}`")))?;
        // SAFETY: out-pointer per the C contract.
        unsafe { put(comm, crate::handles::to_ptr(c.handle), "comm") }
    }
}

hexport! {
    /// The first asynchronous (stream-side) error of the communicator, HCCL_SUCCESS if none.
    fn HcclGetCommAsyncError(comm: HcclComm, asyncError: *mut HcclResult) {
        let c = comm::lookup(comm, "comm")?;
        // SAFETY: out-pointer per the C contract.
        unsafe { put(asyncError, c.async_error(), "asyncError") }
    }
}

hexport! {
    /// A stream-ordered barrier.
    fn HcclBarrier(comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let coll = Coll { kind: Kind::Barrier, send: 0, recv: 0, count: 0, dt: DType::I8, dt_raw: 0, op: ROp::Sum, op_raw: 0, root: 0 };
        coll::enqueue(c, coll, stream)
    }
}

/// The text of `code` (the real library's table; "unknow error" out of range).
///
/// # Safety
/// None: any value is accepted; the pointer is to a static string.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn HcclGetErrorString(code: HcclResult) -> *const c_char {
    error_text(code).as_ptr()
}

/// The config capability: every `HcclCommConfigCapability` below `HCCL_COMM_CONFIG_RESERVED`
/// (12) is understood.
///
/// # Safety
/// None.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn HcclGetCommConfigCapability() -> u32 {
    HCCL_COMM_CONFIG_RESERVED
}

static DETERMINISTIC: AtomicI32 = AtomicI32::new(0);

hexport! {
    /// HCCL_DETERMINISTIC (0, 1 or 2), process-wide; other configs E_NOT_SUPPORT.
    fn HcclSetConfig(config: HcclConfig, configValue: HcclConfigValue) {
        if config != HCCL_DETERMINISTIC {
            return Err(herr(HCCL_E_NOT_SUPPORT, format!("config {config} is not HCCL_DETERMINISTIC (0)")));
        }
        // SAFETY: the union's only field.
        let v = unsafe { configValue.value };
        if !(0..=2).contains(&v) {
            return Err(herr(HCCL_E_PARA, format!("HCCL_DETERMINISTIC value {v} is outside 0..=2")));
        }
        DETERMINISTIC.store(v, Ordering::Relaxed);
        Ok(())
    }
}

hexport! {
    /// Reads HCCL_DETERMINISTIC.
    fn HcclGetConfig(config: HcclConfig, configValue: *mut HcclConfigValue) {
        if config != HCCL_DETERMINISTIC {
            return Err(herr(HCCL_E_NOT_SUPPORT, format!("config {config} is not HCCL_DETERMINISTIC (0)")));
        }
        let v = HcclConfigValue { value: DETERMINISTIC.load(Ordering::Relaxed) };
        // SAFETY: out-pointer per the C contract.
        unsafe { put(configValue, v, "configValue") }
    }
}

hexport! {
    /// HCCL_CONFIG_TYPE_OP_EXPANSION_MODE (an `HcclOpExpansionMode` int32); others
    /// E_NOT_SUPPORT.
    fn HcclConfigGetInfo(comm: HcclComm, cfgType: HcclConfigType, infoLen: u32, info: *mut c_void) {
        let c = comm::lookup(comm, "comm")?;
        need(info, "info")?;
        if cfgType != HCCL_CONFIG_TYPE_OP_EXPANSION_MODE {
            return Err(herr(HCCL_E_NOT_SUPPORT, format!("cfgType {cfgType} is not OP_EXPANSION_MODE (0)")));
        }
        if infoLen < 4 {
            return Err(herr(HCCL_E_PARA, format!("infoLen {infoLen} < 4")));
        }
        // Config numbering → HcclOpExpansionMode (AI_CPU 0, AIV 1, HOST 2, HOST_TS 3,
        // CCU_MS 4, CCU_SCHED 5, AIV_ONLY 6); the default is AI CPU.
        let v: i32 = match c.cfg.op_expansion { 0 | 2 => 0, 1 => 2, 3 => 1, 4 => 6, 5 => 4, _ => 5 };
        // SAFETY: `info` holds infoLen >= 4 bytes per the C contract.
        unsafe { put(info.cast::<i32>(), v, "info") }
    }
}

unsupported! {
    HcclCommInitClusterInfo(clusterInfo: *const c_char, rank: u32, comm: *mut HcclComm);
    HcclCommInitClusterInfoConfig(clusterInfo: *const c_char, rank: u32, config: *mut HcclCommConfig, comm: *mut HcclComm);
    HcclCreateSubCommConfig(comm: *mut HcclComm, rankNum: u32, rankIds: *mut u32, subCommId: u64, subCommRankId: u32, config: *mut HcclCommConfig, subComm: *mut HcclComm);
    HcclCommInitAll(ndev: u32, devices: *mut i32, comms: *mut HcclComm);
    HcclCommSetMemoryRange(comm: HcclComm, baseVirPtr: *mut c_void, size: usize, alignment: usize, flags: u64);
    HcclCommUnsetMemoryRange(comm: HcclComm, baseVirPtr: *mut c_void);
    HcclCommActivateCommMemory(comm: HcclComm, virPtr: *mut c_void, size: usize, offset: usize, handle: acl_sys::aclrtDrvMemHandle, flags: u64);
    HcclCommDeactivateCommMemory(comm: HcclComm, virPtr: *mut c_void);
    HcclGroupStart();
    HcclGroupEnd();
    HcclGroupStatusGet(isGroupEnabled: *mut bool);
    HcclCommSuspend(comm: HcclComm);
    HcclCommResume(comm: HcclComm);
    HcclCommRegCommStateCallback(regName: *const c_char, cb: HcclCommStateCallback, args: *mut c_void);
    HcclCommGetStatus(commId: *const c_char, status: *mut HcclCommStatus);
    HcclCommWorkingDevNicSet(comm: HcclComm, ranks: *mut u32, useBackup: *mut bool, nRanks: u32);
    HcclSend(sendBuf: *mut c_void, count: u64, dataType: HcclDataType, destRank: u32, comm: HcclComm, stream: aclrtStream);
    HcclRecv(recvBuf: *mut c_void, count: u64, dataType: HcclDataType, srcRank: u32, comm: HcclComm, stream: aclrtStream);
    HcclReduce(sendBuf: *mut c_void, recvBuf: *mut c_void, count: u64, dataType: HcclDataType, op: HcclReduceOp, root: u32, comm: HcclComm, stream: aclrtStream);
    HcclScatter(sendBuf: *mut c_void, recvBuf: *mut c_void, recvCount: u64, dataType: HcclDataType, root: u32, comm: HcclComm, stream: aclrtStream);
    HcclAllGatherV(sendBuf: *mut c_void, sendCount: u64, recvBuf: *mut c_void, recvCounts: *const c_void, recvDispls: *const c_void, dataType: HcclDataType, comm: HcclComm, stream: aclrtStream);
    HcclReduceScatterV(sendBuf: *mut c_void, sendCounts: *const c_void, sendDispls: *const c_void, recvBuf: *mut c_void, recvCount: u64, dataType: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream);
    HcclAlltoAllV(sendBuf: *const c_void, sendCounts: *const c_void, sdispls: *const c_void, sendType: HcclDataType, recvBuf: *const c_void, recvCounts: *const c_void, rdispls: *const c_void, recvType: HcclDataType, comm: HcclComm, stream: aclrtStream);
    HcclAlltoAllVC(sendBuf: *const c_void, sendCountMatrix: *const c_void, sendType: HcclDataType, recvBuf: *const c_void, recvType: HcclDataType, comm: HcclComm, stream: aclrtStream);
    HcclBatchSendRecv(sendRecvInfo: *mut HcclSendRecvItem, itemNum: u32, comm: HcclComm, stream: aclrtStream);
}

// ---------------------------------------------------------------------------------------------
// Symmetric windows

hexport! {
    /// Registers `[addr, addr + size)` as a symmetric window (collective; rules in the crate
    /// docs).
    fn HcclCommSymWinRegister(comm: HcclComm, addr: *mut c_void, size: u64, winHandle: *mut HcclCommSymWindow, flag: u32) {
        let c = comm::lookup(comm, "comm")?;
        need(addr, "addr")?;
        need(winHandle, "winHandle")?;
        let w = window::register(&c, addr as usize, size, flag)?;
        // SAFETY: out-pointer per the C contract.
        unsafe { put(winHandle, window::handle_ptr(&w), "winHandle") }
    }
}

hexport! {
    /// Deregisters a window (collective); user memory is not freed.
    fn HcclCommSymWinDeregister(winHandle: HcclCommSymWindow) {
        window::deregister(winHandle)
    }
}

hexport! {
    /// The window holding `[ptr, ptr + size)` and the offset of `ptr` in it; a miss writes a
    /// NULL window and returns HCCL_E_NOT_FOUND.
    fn HcclCommSymWinGet(comm: HcclComm, ptr: *mut c_void, size: usize, winHandle: *mut HcclCommSymWindow, offset: *mut usize) {
        let c = comm::lookup(comm, "comm")?;
        need(ptr, "ptr")?;
        need(winHandle, "winHandle")?;
        need(offset, "offset")?;
        if size == 0 {
            return Err(herr(HCCL_E_PARA, "size is 0"));
        }
        match window::find(&c, ptr as usize, size) {
            Some((w, off)) => {
                // SAFETY: out-pointers checked above, writable per the C contract.
                unsafe {
                    put(winHandle, window::handle_ptr(&w), "winHandle")?;
                    put(offset, off, "offset")
                }
            }
            None => {
                // SAFETY: as above.
                unsafe { put(winHandle, std::ptr::null_mut(), "winHandle")? };
                Err(herr(HCCL_E_NOT_FOUND, format!("no registered window of this communicator holds [{ptr:p}, +{size})")))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Collectives

fn coll_args(
    kind: Kind,
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    dt: HcclDataType,
    op: Option<HcclReduceOp>,
    root: u32,
) -> HRes<Coll> {
    let names = if kind == Kind::Broadcast {
        ("buf", "buf")
    } else {
        ("sendBuf", "recvBuf")
    };
    need(send, names.0)?;
    need(recv, names.1)?;
    let d = DType::from_raw(dt)?;
    let o = match op {
        Some(o) => ROp::from_raw(o)?,
        None => ROp::Sum,
    };
    let count = usize::try_from(count).map_err(|_| herr(HCCL_E_PARA, "count too large"))?;
    Ok(Coll {
        kind,
        send: send as usize,
        recv: recv as usize,
        count,
        dt: d,
        dt_raw: dt,
        op: o,
        op_raw: op.unwrap_or(0),
        root,
    })
}

hexport! {
    /// Stream-ordered AllReduce.
    fn HcclAllReduce(sendBuf: *mut c_void, recvBuf: *mut c_void, count: u64, dataType: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let a = coll_args(Kind::AllReduce, sendBuf, recvBuf, count, dataType, Some(op), 0)?;
        coll::enqueue(c, a, stream)
    }
}

hexport! {
    /// Stream-ordered Broadcast from `root`.
    fn HcclBroadcast(buf: *mut c_void, count: u64, dataType: HcclDataType, root: u32, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let a = coll_args(Kind::Broadcast, buf, buf, count, dataType, None, root)?;
        coll::enqueue(c, a, stream)
    }
}

hexport! {
    /// Stream-ordered ReduceScatter (`recvCount` elements per rank).
    fn HcclReduceScatter(sendBuf: *mut c_void, recvBuf: *mut c_void, recvCount: u64, dataType: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let a = coll_args(Kind::ReduceScatter, sendBuf, recvBuf, recvCount, dataType, Some(op), 0)?;
        coll::enqueue(c, a, stream)
    }
}

hexport! {
    /// Stream-ordered AllToAll: block `p` (`sendCount` elements) of the send buffer goes to
    /// rank `p`, which receives it as its block `rank`. The emulator requires
    /// `sendCount == recvCount` and `sendType == recvType` (`HCCL_E_PARA` otherwise).
    fn HcclAlltoAll(sendBuf: *const c_void, sendCount: u64, sendType: HcclDataType, recvBuf: *const c_void, recvCount: u64, recvType: HcclDataType, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        if sendCount != recvCount || sendType != recvType {
            return Err(herr(
                HCCL_E_PARA,
                format!(
                    "sendCount {sendCount} / sendType {sendType} differ from recvCount {recvCount} / \
                     recvType {recvType} (the emulator's AllToAll moves equal blocks of one type)"
                ),
            ));
        }
        let a = coll_args(Kind::AllToAll, sendBuf.cast_mut(), recvBuf.cast_mut(), sendCount, sendType, None, 0)?;
        coll::enqueue(c, a, stream)
    }
}

hexport! {
    /// Stream-ordered AllGather (`sendCount` elements per rank).
    fn HcclAllGather(sendBuf: *mut c_void, recvBuf: *mut c_void, sendCount: u64, dataType: HcclDataType, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let a = coll_args(Kind::AllGather, sendBuf, recvBuf, sendCount, dataType, None, 0)?;
        coll::enqueue(c, a, stream)
    }
}

// ---------------------------------------------------------------------------------------------
// Lookup table

macro_rules! hccl_symbol_table {
    ($($name:ident),* $(,)?) => {
        fn raw_lookup(name: &str) -> *const c_void {
            match name {
                $(stringify!($name) => {
                    let f: hccl_sys::fn_types::$name = $name;
                    f as *const c_void
                })*
                _ => std::ptr::null(),
            }
        }
        #[cfg(test)]
        const TABLE_LEN: usize = [$(stringify!($name)),*].len();
    };
}

hccl_symbol_table!(
    HcclGetRootInfo,
    HcclCommInitRootInfo,
    HcclCommInitRootInfoConfig,
    HcclCommInitClusterInfo,
    HcclCommInitClusterInfoConfig,
    HcclCreateSubCommConfig,
    HcclCommInitAll,
    HcclCommDestroy,
    HcclGetRankSize,
    HcclGetRankId,
    HcclBarrier,
    HcclGetCommName,
    HcclCommGetHandleWithName,
    HcclGetCommAsyncError,
    HcclGetErrorString,
    HcclGetCommConfigCapability,
    HcclSetConfig,
    HcclGetConfig,
    HcclCommSetMemoryRange,
    HcclCommUnsetMemoryRange,
    HcclCommActivateCommMemory,
    HcclCommDeactivateCommMemory,
    HcclGroupStart,
    HcclGroupEnd,
    HcclGroupStatusGet,
    HcclCommSuspend,
    HcclCommResume,
    HcclCommRegCommStateCallback,
    HcclCommGetStatus,
    HcclCommWorkingDevNicSet,
    HcclConfigGetInfo,
    HcclCommSymWinRegister,
    HcclCommSymWinDeregister,
    HcclCommSymWinGet,
    HcclAllReduce,
    HcclBroadcast,
    HcclReduceScatter,
    HcclAllGather,
    HcclSend,
    HcclRecv,
    HcclAlltoAll,
    HcclReduce,
    HcclScatter,
    HcclAllGatherV,
    HcclReduceScatterV,
    HcclAlltoAllV,
    HcclAlltoAllVC,
    HcclBatchSendRecv,
);

/// The emulator's export for `name` (any name of [`hccl_sys::SYMBOLS`]); null otherwise.
pub fn hccl_lookup(name: &str) -> *const c_void {
    crate::rt::init();
    raw_lookup(name)
}

/// The process-wide HCCL loader table served by this emulator in-process.
pub fn hccl_table() -> &'static HcclLib {
    static T: OnceLock<HcclLib> = OnceLock::new();
    T.get_or_init(|| {
        // SAFETY: `hccl_lookup` returns this crate's exports, each checked at compile time
        // against `hccl_sys::fn_types` (the table macro assigns every export to its declared
        // function-pointer type), and they live as long as the process.
        unsafe {
            HcclLib::from_source(hccl_sys::Source::InProcess {
                name: "ascend-sim",
                lookup: hccl_lookup,
            })
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_hccl_symbol_is_exported() {
        assert_eq!(super::TABLE_LEN, hccl_sys::SYMBOLS.len());
        for s in hccl_sys::SYMBOLS {
            assert!(!super::hccl_lookup(s).is_null(), "{s} missing");
        }
        assert!(super::hccl_lookup("HcclNoSuchThing").is_null());
    }
}
