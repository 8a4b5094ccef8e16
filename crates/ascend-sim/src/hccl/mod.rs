//! The HCCL emulation: every symbol of [`hccl_sys::SYMBOLS`], communicators over loopback
//! rendezvous and shared memfds, stream-ordered collectives on two paths (staged and
//! symmetric), and symmetric windows. See the crate documentation, section "HCCL emulation".

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use acl_sys::aclrtStream;
use hccl_sys::*;

mod coll;
mod comm;
mod config;
mod error;
mod heap;
mod rendezvous;
mod stats;
mod types;
mod window;

use coll::{Coll, Kind};
use error::{error_text, herr, HRes};
use types::{DType, ROp};

pub use error::{hccl_last_error_message, hccl_recent_error_message};
pub use stats::{hccl_stats, reset_hccl_stats, HcclStats};

/// Defines an export that answers `HCCL_E_NOT_SUPPORT`.
macro_rules! unsupported {
    ($($name:ident($($arg:ident : $ty:ty),* $(,)?);)*) => {
        $(
            export! { Hccl;
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

export! { Hccl;
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

export! { Hccl;
    /// Joins the communicator of `rootInfo` as `rank` of `nRanks` (environment defaults).
    fn HcclCommInitRootInfo(nRanks: u32, rootInfo: *const HcclRootInfo, rank: u32, comm: *mut HcclComm) {
        // SAFETY: forwarded C contract.
        unsafe { init_root(nRanks, rootInfo, rank, std::ptr::null(), comm) }
    }
}

export! { Hccl;
    /// As HcclCommInitRootInfo with a config, read as the library reads it.
    fn HcclCommInitRootInfoConfig(nRanks: u32, rootInfo: *const HcclRootInfo, rank: u32, config: *const HcclCommConfig, comm: *mut HcclComm) {
        need(config, "config")?;
        // SAFETY: forwarded C contract.
        unsafe { init_root(nRanks, rootInfo, rank, config, comm) }
    }
}

export! { Hccl;
    /// Destroys a communicator (see the crate docs: waits for its queued collectives,
    /// deregisters its windows locally).
    fn HcclCommDestroy(comm: HcclComm) {
        let c = comm::destroy(comm)?;
        window::forget_all(&c);
        Ok(())
    }
}

export! { Hccl;
    /// The number of ranks.
    fn HcclGetRankSize(comm: HcclComm, rankSize: *mut u32) {
        let c = comm::lookup(comm, "comm")?;
        // SAFETY: out-pointer per the C contract.
        unsafe { put(rankSize, c.n, "rankSize") }
    }
}

export! { Hccl;
    /// This rank's id.
    fn HcclGetRankId(comm: HcclComm, rank: *mut u32) {
        let c = comm::lookup(comm, "comm")?;
        // SAFETY: out-pointer per the C contract.
        unsafe { put(rank, c.rank, "rank") }
    }
}

export! { Hccl;
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

export! { Hccl;
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

export! { Hccl;
    /// The first asynchronous (stream-side) error of the communicator, HCCL_SUCCESS if none.
    fn HcclGetCommAsyncError(comm: HcclComm, asyncError: *mut HcclResult) {
        let c = comm::lookup(comm, "comm")?;
        // SAFETY: out-pointer per the C contract.
        unsafe { put(asyncError, c.async_error(), "asyncError") }
    }
}

export! { Hccl;
    /// A stream-ordered barrier.
    fn HcclBarrier(comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let coll = Coll { kind: Kind::Barrier, send: 0, recv: 0, count: 0, dt: DType::I8, dt_raw: 0, op: ROp::Sum, op_raw: 0, root: 0 };
        coll::enqueue(c, coll, stream)
    }
}

export! { Hccl;
    /// The text of `code` (the real library's table; "unknow error" out of range).
    fn HcclGetErrorString(code: HcclResult) -> *const c_char, fallback c"unknow error".as_ptr(); {
        error_text(code).as_ptr()
    }
}

export! { Hccl;
    /// The config capability: every `HcclCommConfigCapability` below
    /// `HCCL_COMM_CONFIG_RESERVED` (12) is understood.
    fn HcclGetCommConfigCapability() -> u32, fallback 0; {
        HCCL_COMM_CONFIG_RESERVED
    }
}

static DETERMINISTIC: AtomicI32 = AtomicI32::new(0);

export! { Hccl;
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

export! { Hccl;
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

export! { Hccl;
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

export! { Hccl;
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

export! { Hccl;
    /// Deregisters a window (collective); user memory is not freed.
    fn HcclCommSymWinDeregister(winHandle: HcclCommSymWindow) {
        window::deregister(winHandle)
    }
}

export! { Hccl;
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

export! { Hccl;
    /// The address in this process of byte `offset` of `peerRank`'s part of a window (its slot
    /// in the symmetric heap: the peer's own memory, shared; stores through it are one-sided
    /// puts). Rules: NULL handle or out-pointer HCCL_E_PTR; a window not registered (or
    /// deregistered), `peerRank` not below the rank size, or `offset` not inside the window
    /// (rounded to whole physical allocations) HCCL_E_PARA.
    fn HcclSymWinGetPeerPointer(winHandle: HcclCommSymWindow, offset: usize, peerRank: u32, ptr: *mut *mut c_void) {
        need(ptr, "ptr")?;
        let a = window::peer_pointer(winHandle, offset, peerRank)?;
        // SAFETY: out-pointer checked above, writable per the C contract.
        unsafe { put(ptr, a as *mut c_void, "ptr") }
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

export! { Hccl;
    /// Stream-ordered AllReduce.
    fn HcclAllReduce(sendBuf: *mut c_void, recvBuf: *mut c_void, count: u64, dataType: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let a = coll_args(Kind::AllReduce, sendBuf, recvBuf, count, dataType, Some(op), 0)?;
        coll::enqueue(c, a, stream)
    }
}

export! { Hccl;
    /// Stream-ordered Broadcast from `root`.
    fn HcclBroadcast(buf: *mut c_void, count: u64, dataType: HcclDataType, root: u32, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let a = coll_args(Kind::Broadcast, buf, buf, count, dataType, None, root)?;
        coll::enqueue(c, a, stream)
    }
}

export! { Hccl;
    /// Stream-ordered ReduceScatter (`recvCount` elements per rank).
    fn HcclReduceScatter(sendBuf: *mut c_void, recvBuf: *mut c_void, recvCount: u64, dataType: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let a = coll_args(Kind::ReduceScatter, sendBuf, recvBuf, recvCount, dataType, Some(op), 0)?;
        coll::enqueue(c, a, stream)
    }
}

export! { Hccl;
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

export! { Hccl;
    /// Stream-ordered AllGather (`sendCount` elements per rank).
    fn HcclAllGather(sendBuf: *mut c_void, recvBuf: *mut c_void, sendCount: u64, dataType: HcclDataType, comm: HcclComm, stream: aclrtStream) {
        let c = comm::lookup(comm, "comm")?;
        let a = coll_args(Kind::AllGather, sendBuf, recvBuf, sendCount, dataType, None, 0)?;
        coll::enqueue(c, a, stream)
    }
}

// ---------------------------------------------------------------------------------------------
// Lookup table

symbol_table!(
    hccl_sys, raw_lookup, TABLE_LEN;
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
    HcclSymWinGetPeerPointer,
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
