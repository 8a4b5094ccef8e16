//! Sharing physical memory between processes of this machine, which may be emulated hosts
//! of one or more supernodes (`ASCEND_SIM_HOST`, `ASCEND_SIM_SUPERNODE`).
//!
//! A shareable handle names the exporter's pid, the memfd's fd number in that process and its
//! inode. Everything else (magic, location, size, export flags, share types, the pid
//! allow-list, the exporter's host and supernode) lives in the header page at offset 0 of the
//! memfd, so the importer reads it from the descriptor it obtained with `pidfd_getfd` (or `dup`
//! in the same process). Emulated hosts are processes of one machine, in network namespaces of
//! their own or not: they share its pid namespace, so `pidfd_getfd` reaches across them (the
//! descriptor broker's abstract socket does not leave its network namespace).
//!
//! * DEFAULT (`uint64_t`): `pid` in bits 0..22, fd in bits 22..42, the inode's low 22 bits in
//!   bits 42..64.
//! * FABRIC (128 bytes): magic `ASIMFAB\0`, version 2, pid, fd, exporter device, full inode,
//!   st_dev, size, the exporter's host and supernode, and an FNV-1a checksum of the first 56
//!   bytes.
//!
//! # Across hosts
//! What the emulator enforces when exporter and importer are on different emulated hosts,
//! and where each rule comes from:
//! * A FABRIC handle imports on any host of its exporter's supernode: CANN documents FABRIC
//!   sharing as cross-server within an Atlas A3 supernode (HCCS).
//! * A FABRIC handle from another supernode is refused, `ACL_ERROR_RT_FEATURE_NOT_SUPPORT`
//!   207000: the supernode is the fabric's reach (CANN: FABRIC sharing across servers of a
//!   supernode only); the code is ours, the driver's is not public.
//! * A DEFAULT handle imports on its exporter's host only, else `ACL_ERROR_RT_INVALID_HANDLE`
//!   107017, as a handle this host's driver does not know: CANN documents DEFAULT sharing as
//!   intra-server; the code is ours.
//! * A product without FABRIC (A2, 950) refuses FABRIC handles, exported or imported, with
//!   207000 (CANN: cross-server FABRIC only on Atlas A3; the runtime checks the device's
//!   server id at export).

use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use acl_sys::*;

use crate::config::{config, Soc};
use crate::counters::{inc, Ctr};
use crate::device;
use crate::rt::{self, read_in, AclErr, Out, Res};
use crate::vmm::memfd::{fstat, read_header, write_header, Header, HDR, MAGIC, MAX_PIDS};
use crate::vmm::phys::{check_prop, GRAN, GRAN_1G};
use crate::vmm::state::{Class, PhysObj, MEM};

const FABRIC_MAGIC: [u8; 8] = *b"ASIMFAB\0";

// ---------------------------------------------------------------------------------------------
// Handle encoding

/// What a shareable handle names.
#[derive(Debug, Clone, Copy)]
struct Ref {
    pid: i32,
    fd: i32,
    /// Full inode (FABRIC) or only its low 22 bits (DEFAULT).
    ino: u64,
    ino_mask: u64,
    /// The exporter's (host, supernode), which a FABRIC handle carries.
    origin: Option<(u32, u32)>,
}

const INO_MASK_22: u64 = (1 << 22) - 1;

fn encode_default(pid: i32, fd: i32, ino: u64) -> Res<u64> {
    ensure!(
        (1..1 << 22).contains(&pid) && (0..1 << 20).contains(&fd),
        ACL_ERROR_RT_DRV_INTERNAL_ERROR,
        "pid {pid} or fd {fd} does not fit the emulator's DEFAULT handle encoding"
    );
    Ok(pid as u64 | ((fd as u64) << 22) | ((ino & INO_MASK_22) << 42))
}

fn decode_default(v: u64) -> Res<Ref> {
    let pid = (v & ((1 << 22) - 1)) as i32;
    let fd = ((v >> 22) & ((1 << 20) - 1)) as i32;
    ensure!(
        pid > 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "shareableHandle {v:#x} is not a handle exported by this runtime"
    );
    Ok(Ref {
        pid,
        fd,
        ino: v >> 42,
        ino_mask: INO_MASK_22,
        origin: None,
    })
}

fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in b {
        h ^= u64::from(*x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The FABRIC handle layout's version.
const FABRIC_VERSION: u32 = 2;

/// What a FABRIC handle records of its memory: where it lives (fd of `pid`, inode and
/// `st_dev` of the memfd, the exporter's device, host and supernode) and its size.
struct FabricRef {
    pid: i32,
    fd: i32,
    device: i32,
    ino: u64,
    st_dev: u64,
    size: u64,
    host: u32,
    supernode: u32,
}

fn encode_fabric(f: &FabricRef) -> aclrtMemFabricHandle {
    let FabricRef {
        pid,
        fd,
        device,
        ino,
        st_dev,
        size,
        host,
        supernode,
    } = *f;
    let mut d = [0u8; 128];
    d[0..8].copy_from_slice(&FABRIC_MAGIC);
    d[8..12].copy_from_slice(&FABRIC_VERSION.to_le_bytes());
    d[12..16].copy_from_slice(&pid.to_le_bytes());
    d[16..20].copy_from_slice(&fd.to_le_bytes());
    d[20..24].copy_from_slice(&device.to_le_bytes());
    d[24..32].copy_from_slice(&ino.to_le_bytes());
    d[32..40].copy_from_slice(&st_dev.to_le_bytes());
    d[40..48].copy_from_slice(&size.to_le_bytes());
    d[48..52].copy_from_slice(&host.to_le_bytes());
    d[52..56].copy_from_slice(&supernode.to_le_bytes());
    let c = fnv(&d[0..56]);
    d[56..64].copy_from_slice(&c.to_le_bytes());
    aclrtMemFabricHandle { data: d }
}

fn decode_fabric(h: &aclrtMemFabricHandle) -> Res<Ref> {
    let d = &h.data;
    let u32_at = |o: usize| u32::from_le_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]);
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let ok = d[0..8] == FABRIC_MAGIC && u32_at(8) == FABRIC_VERSION && u64_at(56) == fnv(&d[0..56]);
    ensure!(
        ok,
        ACL_ERROR_RT_PARAM_INVALID,
        "shareableHandle is not a FABRIC handle exported by this runtime (bad magic or checksum)"
    );
    Ok(Ref {
        pid: u32_at(12) as i32,
        fd: u32_at(16) as i32,
        ino: u64_at(24),
        ino_mask: u64::MAX,
        origin: Some((u32_at(48), u32_at(52))),
    })
}

// ---------------------------------------------------------------------------------------------
// Export

fn share_name(t: aclrtMemSharedHandleType) -> &'static str {
    if t == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC {
        "FABRIC"
    } else {
        "DEFAULT"
    }
}

enum Exported {
    Default(u64),
    Fabric(aclrtMemFabricHandle),
}

/// Lets importers take our descriptors with `pidfd_getfd` under Yama `ptrace_scope` 1 (the
/// default on Ubuntu, where only ancestors may otherwise ptrace us). Best effort: without Yama
/// the call fails harmlessly.
pub(crate) fn allow_importers() {
    crate::broker::start();
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with plain integer arguments; it only changes this process's ptracer
        // exception.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    });
}

fn do_export(
    handle: aclrtDrvMemHandle,
    flags: u64,
    share: aclrtMemSharedHandleType,
) -> Res<Exported> {
    allow_importers();
    let mut mem = MEM.write();
    let obj = mem.phys_obj(handle, "handle")?;
    ensure!(
        !obj.imported,
        ACL_ERROR_RT_PARAM_INVALID,
        "handle {handle:p} is imported memory; the emulator does not re-export imports"
    );
    ensure!(
        !obj.exported.load(Relaxed),
        ACL_ERROR_RT_PARAM_INVALID,
        "handle {handle:p}: this physical memory was already exported by this process \
         (one shareable handle per allocation per process)"
    );
    let fd = obj.fd.as_raw_fd();
    let st = fstat(fd)?;
    let mut h = read_header(fd).ok_or_else(|| {
        rt::err(
            ACL_ERROR_RT_DRV_INTERNAL_ERROR,
            "reading the share header failed",
        )
    })?;
    let pid = rt::getpid();
    let cfg = config();
    h.owner_pid = pid;
    h.host = cfg.host;
    h.supernode = cfg.supernode;
    h.export_flags = flags;
    h.share_types |= 1 << share;
    h.pid_count = 0;
    let out = if share == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC {
        Exported::Fabric(encode_fabric(&FabricRef {
            pid,
            fd,
            device: h.device,
            ino: st.st_ino,
            st_dev: st.st_dev,
            size: obj.size as u64,
            host: cfg.host,
            supernode: cfg.supernode,
        }))
    } else {
        Exported::Default(encode_default(pid, fd, st.st_ino)?)
    };
    write_header(fd, &h)?;
    obj.exported.store(true, Relaxed);
    inc(Ctr::Exports);
    if mem.exports.len() >= mem.exports_prune_at {
        mem.exports.retain(|_, w| w.strong_count() > 0);
        mem.exports_prune_at = (2 * mem.exports.len()).max(64);
    }
    mem.exports.insert(fd, Arc::downgrade(&obj));
    Ok(out)
}

fn check_export_flags(flags: u64) -> Res {
    ensure!(
        flags <= u64::from(ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION),
        ACL_ERROR_RT_PARAM_INVALID,
        "flags {flags:#x} is neither DEFAULT (0) nor DISABLE_PID_VALIDATION (1)"
    );
    Ok(())
}

fn check_share_type(t: aclrtMemSharedHandleType, what: &str) -> Res {
    ensure!(
        t == ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT || t == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC,
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} {t} is neither DEFAULT (1) nor FABRIC (2)"
    );
    Ok(())
}

fn check_fabric_supported() -> Res {
    ensure!(
        config().soc == Soc::A3,
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "FABRIC share handles need an Atlas A3 super-node (ASCEND_SIM_SOC is not A3)"
    );
    Ok(())
}

export! { Acl;
    /// V1 export to a DEFAULT `uint64_t` handle.
    fn aclrtMemExportToShareableHandle(handle: aclrtDrvMemHandle, handleType: aclrtMemHandleType, flags: u64, shareableHandle: *mut u64) {
        ensure!(!handle.is_null(), ACL_ERROR_INVALID_PARAM, "handle is NULL");
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(shareableHandle, "shareableHandle") }?;
        ensure!(
            handleType == ACL_MEM_HANDLE_TYPE_NONE,
            ACL_ERROR_INVALID_PARAM,
            "handleType {handleType} is not ACL_MEM_HANDLE_TYPE_NONE (0)"
        );
        check_export_flags(flags)?;
        if let Exported::Default(v) = do_export(handle, flags, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT)? {
            out.set(v);
        }
        Ok(())
    }
}

export! { Acl;
    /// V2 export: a `uint64_t` (DEFAULT) or a 128-byte `aclrtMemFabricHandle` (FABRIC, A3 only,
    /// needs a current context).
    fn aclrtMemExportToShareableHandleV2(handle: aclrtDrvMemHandle, flags: u64, shareType: aclrtMemSharedHandleType, shareableHandle: *mut c_void) {
        ensure!(!handle.is_null(), ACL_ERROR_INVALID_PARAM, "handle is NULL");
        ensure!(!shareableHandle.is_null(), ACL_ERROR_INVALID_PARAM, "shareableHandle is NULL");
        check_export_flags(flags)?;
        check_share_type(shareType, "shareType")?;
        if shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC {
            device::require_current()?;
            check_fabric_supported()?;
        }
        match do_export(handle, flags, shareType)? {
            Exported::Default(v) => {
                // SAFETY: for DEFAULT the out buffer is a uint64_t per the C contract.
                unsafe { Out::new(shareableHandle.cast::<u64>(), "shareableHandle") }?.set(v);
            }
            Exported::Fabric(f) => {
                // SAFETY: for FABRIC the out buffer is an aclrtMemFabricHandle per the C contract.
                unsafe { Out::new(shareableHandle.cast::<aclrtMemFabricHandle>(), "shareableHandle") }?.set(f);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Allow-list

fn set_pids(r: Ref, pid: *mut i32, num: usize) -> Res {
    ensure!(!pid.is_null(), ACL_ERROR_INVALID_PARAM, "pid is NULL");
    ensure!(num > 0, ACL_ERROR_INVALID_PARAM, "pidNum is 0");
    ensure!(
        num <= MAX_PIDS,
        ACL_ERROR_RT_PARAM_INVALID,
        "pidNum {num} exceeds the emulator's allow-list size {MAX_PIDS}"
    );
    // SAFETY: `pid` points to `num` int32 values per the C contract.
    let pids = unsafe { std::slice::from_raw_parts(pid, num) }.to_vec();
    ensure!(
        r.pid == rt::getpid(),
        ACL_ERROR_RT_PARAM_INVALID,
        "shareableHandle was exported by process {}, not by this process",
        r.pid
    );
    let mem = MEM.read();
    let obj = mem
        .exports
        .get(&r.fd)
        .and_then(std::sync::Weak::upgrade)
        .filter(|o| o.ino & r.ino_mask == r.ino);
    let Some(obj) = obj else {
        bail!(
            ACL_ERROR_RT_INVALID_HANDLE,
            "shareableHandle does not name live memory exported by this process"
        );
    };
    let fd = obj.fd.as_raw_fd();
    let mut h = read_header(fd).ok_or_else(|| {
        rt::err(
            ACL_ERROR_RT_DRV_INTERNAL_ERROR,
            "reading the share header failed",
        )
    })?;
    for p in pids {
        let n = h.pid_count as usize;
        if !h.pids[..n].contains(&p) {
            ensure!(
                n < MAX_PIDS,
                ACL_ERROR_RT_PARAM_INVALID,
                "the allow-list is full ({MAX_PIDS} pids)"
            );
            h.pids[n] = p;
            h.pid_count += 1;
        }
    }
    write_header(fd, &h)
}

export! { Acl;
    /// Allows `pid[0..pidNum]` to import a DEFAULT handle.
    fn aclrtMemSetPidToShareableHandle(shareableHandle: u64, pid: *mut i32, pidNum: usize) {
        ensure!(!pid.is_null(), ACL_ERROR_INVALID_PARAM, "pid is NULL");
        ensure!(pidNum > 0, ACL_ERROR_INVALID_PARAM, "pidNum is 0");
        let r = decode_default(shareableHandle)?;
        set_pids(r, pid, pidNum)
    }
}

export! { Acl;
    /// Allows `pid[0..pidNum]` to import a DEFAULT or FABRIC handle.
    fn aclrtMemSetPidToShareableHandleV2(shareableHandle: *mut c_void, shareType: aclrtMemSharedHandleType, pid: *mut i32, pidNum: usize) {
        ensure!(!shareableHandle.is_null(), ACL_ERROR_INVALID_PARAM, "shareableHandle is NULL");
        ensure!(!pid.is_null(), ACL_ERROR_INVALID_PARAM, "pid is NULL");
        ensure!(pidNum > 0, ACL_ERROR_INVALID_PARAM, "pidNum is 0");
        check_share_type(shareType, "shareType")?;
        let r = read_ref(shareableHandle, shareType)?;
        set_pids(r, pid, pidNum)
    }
}

fn read_ref(p: *mut c_void, share: aclrtMemSharedHandleType) -> Res<Ref> {
    if share == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC {
        // SAFETY: for FABRIC the buffer is an aclrtMemFabricHandle per the C contract.
        let h = unsafe {
            read_in(
                p.cast_const().cast::<aclrtMemFabricHandle>(),
                "shareableHandle",
            )
        }?;
        decode_fabric(&h)
    } else {
        // SAFETY: for DEFAULT the buffer is a uint64_t per the C contract.
        let v = unsafe { read_in(p.cast_const().cast::<u64>(), "shareableHandle") }?;
        decode_default(v)
    }
}

// ---------------------------------------------------------------------------------------------
// Import

fn gone(msg: String) -> AclErr {
    rt::err(ACL_ERROR_RT_INVALID_HANDLE, msg)
}

/// Obtains a descriptor for the exporter's memfd.
pub(crate) fn obtain_fd_raw(pid: i32, fd: i32) -> Res<OwnedFd> {
    obtain_fd(Ref {
        pid,
        fd,
        ino: 0,
        ino_mask: 0,
        origin: None,
    })
}

fn obtain_fd(r: Ref) -> Res<OwnedFd> {
    if r.pid == rt::getpid() {
        // SAFETY: F_DUPFD_CLOEXEC on any fd number is harmless; a closed one yields EBADF.
        let fd = unsafe { libc::fcntl(r.fd, libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(gone(format!(
                "the exported memory (fd {} of this process) no longer exists",
                r.fd
            )));
        }
        // SAFETY: `fd` is a new descriptor owned by us.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    if crate::broker::preferred() {
        return via_broker(r, None);
    }
    match via_pidfd(r) {
        // Not permitted (seccomp, Yama, another user) or not there (old kernel): ask the
        // exporter's descriptor broker.
        Err(e) if e.code == ACL_ERROR_RT_NO_PERMISSION => via_broker(r, Some(e)),
        other => other,
    }
}

/// `pidfd_open` + `pidfd_getfd`.
fn via_pidfd(r: Ref) -> Res<OwnedFd> {
    let denied = |call: &str, e: i32| {
        rt::err(
            ACL_ERROR_RT_NO_PERMISSION,
            format!(
                "not permitted to take memory from process {} ({call}: {})",
                r.pid,
                std::io::Error::from_raw_os_error(e)
            ),
        )
    };
    // SAFETY: raw syscall with plain integer arguments.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, r.pid, 0) } as i32;
    if pidfd < 0 {
        let e = rt::errno();
        return Err(match e {
            libc::ESRCH => gone(format!("the exporting process {} is gone", r.pid)),
            libc::EPERM | libc::EACCES | libc::ENOSYS => denied("pidfd_open", e),
            _ => rt::err(
                ACL_ERROR_RT_DRV_INTERNAL_ERROR,
                format!(
                    "pidfd_open({}) failed: {}",
                    r.pid,
                    std::io::Error::from_raw_os_error(e)
                ),
            ),
        });
    }
    // SAFETY: `pidfd` is a descriptor we just opened.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: raw syscall with plain integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), r.fd, 0) } as i32;
    if fd < 0 {
        let e = rt::errno();
        return Err(match e {
            libc::EBADF => gone(format!(
                "the exported memory (fd {} of process {}) no longer exists",
                r.fd, r.pid
            )),
            libc::ESRCH => gone(format!("the exporting process {} is gone", r.pid)),
            libc::EPERM | libc::EACCES | libc::ENOSYS => denied("pidfd_getfd", e),
            _ => rt::err(
                ACL_ERROR_RT_DRV_INTERNAL_ERROR,
                format!(
                    "pidfd_getfd failed: {}",
                    std::io::Error::from_raw_os_error(e)
                ),
            ),
        });
    }
    // SAFETY: `fd` is a new descriptor owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The exporter's descriptor broker; `first` is the `pidfd_getfd` path's refusal, if tried.
fn via_broker(r: Ref, first: Option<AclErr>) -> Res<OwnedFd> {
    use crate::broker::Refusal;
    crate::broker::take(r.pid, r.fd).map_err(|refusal| match refusal {
        Refusal::Unreachable(e) => match first {
            Some(mut f) => {
                f.msg = format!("{}; no descriptor broker answered either ({e})", f.msg);
                f
            }
            None => rt::err(
                ACL_ERROR_RT_NO_PERMISSION,
                format!("no descriptor broker of process {} answered ({e})", r.pid),
            ),
        },
        Refusal::Gone => gone(format!("the exporting process {} is gone", r.pid)),
        Refusal::Refused(libc::EBADF) => gone(format!(
            "the exported memory (fd {} of process {}) no longer exists",
            r.fd, r.pid
        )),
        Refusal::Refused(e) => rt::err(
            ACL_ERROR_RT_NO_PERMISSION,
            format!(
                "process {}'s descriptor broker refused: {}",
                r.pid,
                std::io::Error::from_raw_os_error(e)
            ),
        ),
        Refusal::Failed(e) => rt::err(
            ACL_ERROR_RT_DRV_INTERNAL_ERROR,
            format!("taking memory from process {} failed: {e}", r.pid),
        ),
    })
}

/// A FABRIC handle reaches the hosts of its exporter's supernode only (see the module docs).
fn check_fabric_reach(r: &Ref) -> Res {
    let cfg = config();
    if let Some((host, supernode)) = r.origin {
        ensure!(
            supernode == cfg.supernode,
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "shareableHandle is FABRIC memory of host {host} in supernode {supernode}; this is \
             host {} in supernode {}: FABRIC memory is shared within one supernode",
            cfg.host,
            cfg.supernode
        );
    }
    Ok(())
}

/// A DEFAULT handle names memory of its exporter's host only (see the module docs).
fn check_default_reach(h: &Header) -> Res {
    let cfg = config();
    ensure!(
        (h.host, h.supernode) == (cfg.host, cfg.supernode),
        ACL_ERROR_RT_INVALID_HANDLE,
        "shareableHandle is a DEFAULT handle of host {} in supernode {}, unknown on this host \
         ({} in supernode {}): DEFAULT handles are shared within one host (use FABRIC)",
        h.host,
        h.supernode,
        cfg.host,
        cfg.supernode
    );
    Ok(())
}

fn do_import(r: Ref, share: aclrtMemSharedHandleType, device: u32) -> Res<aclrtDrvMemHandle> {
    check_fabric_reach(&r)?;
    let fd = obtain_fd(r)?;
    let st = fstat(fd.as_raw_fd())?;
    let stale = || {
        gone(format!(
            "fd {} of process {} is not the exported memory any more (freed?)",
            r.fd, r.pid
        ))
    };
    if (st.st_mode & libc::S_IFMT) != libc::S_IFREG
        || st.st_ino & r.ino_mask != r.ino
        || (st.st_size as u64) < HDR as u64
    {
        return Err(stale());
    }
    let h = read_header(fd.as_raw_fd()).ok_or_else(stale)?;
    if h.magic != MAGIC || h.ino != st.st_ino || st.st_size as u64 != HDR as u64 + h.size {
        return Err(stale());
    }
    ensure!(
        h.share_types & (1 << share) != 0,
        ACL_ERROR_RT_PARAM_INVALID,
        "shareableHandle was not exported as {}",
        share_name(share)
    );
    if share == ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT {
        check_default_reach(&h)?;
    }
    let me = rt::getpid();
    ensure!(
        !(config().cross_process_import
            && h.owner_pid == me
            && h.loc_type == ACL_MEM_LOCATION_TYPE_DEVICE),
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "the device memory was exported by this process (pid {me}): it is imported by \
         another process (ASCEND_SIM_IMPORT=cross-process)"
    );
    let n = (h.pid_count as usize).min(MAX_PIDS);
    let allowed = h.export_flags & u64::from(ACL_RT_VMM_EXPORT_FLAG_DISABLE_PID_VALIDATION) != 0
        || me == h.owner_pid
        || h.pids[..n].contains(&me);
    ensure!(
        allowed,
        ACL_ERROR_RT_NO_PERMISSION,
        "process {me} is not in the allow-list of the memory exported by process {} \
         (aclrtMemSetPidToShareableHandle, or export with DISABLE_PID_VALIDATION)",
        h.owner_pid
    );
    let mut prop = aclrtPhysicalMemProp {
        handleType: ACL_MEM_HANDLE_TYPE_NONE,
        allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
        memAttr: h.mem_attr,
        location: aclrtMemLocation {
            id: h.loc_id,
            type_: h.loc_type,
        },
        reserve: 0,
    };
    if prop.location.type_ == ACL_MEM_LOCATION_TYPE_DEVICE {
        prop.location.id = device;
    }
    let (class, page) = match check_prop(&prop) {
        Ok((c, _, p)) => (c, p),
        Err(_) => return Err(stale()),
    };
    let class = match class {
        Class::Dev(_) => Class::Dev(device),
        c => c,
    };
    let size = h.size as usize;
    ensure!(
        size > 0 && size % GRAN == 0 && (page != GRAN_1G || size % GRAN_1G == 0),
        ACL_ERROR_RT_INVALID_HANDLE,
        "the exported memory header is corrupt (size {size})"
    );
    let obj = Arc::new(PhysObj {
        fd,
        size,
        prop,
        class,
        page,
        ino: st.st_ino,
        charge: None,
        imported: true,
        exported: AtomicBool::new(false),
    });
    Ok(MEM.write().add_handle(obj, true))
}

export! { Acl;
    /// V1 import of a DEFAULT handle onto `deviceId`.
    fn aclrtMemImportFromShareableHandle(shareableHandle: u64, deviceId: i32, handle: *mut aclrtDrvMemHandle) {
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(handle, "handle") }?;
        let d = device::check_device(deviceId, "deviceId")?;
        let r = decode_default(shareableHandle)?;
        out.set(do_import(r, ACL_MEM_SHARE_HANDLE_TYPE_DEFAULT, d)?);
        Ok(())
    }
}

export! { Acl;
    /// V2 import onto the calling thread's current device (rules R16-R18).
    fn aclrtMemImportFromShareableHandleV2(shareableHandle: *mut c_void, shareType: aclrtMemSharedHandleType, flags: u64, handle: *mut aclrtDrvMemHandle) {
        ensure!(!shareableHandle.is_null(), ACL_ERROR_INVALID_PARAM, "shareableHandle is NULL");
        // SAFETY: out-pointer per the C contract.
        let out = unsafe { Out::new(handle, "handle") }?;
        ensure!(flags == 0, ACL_ERROR_INVALID_PARAM, "flags {flags:#x} must be 0");
        check_share_type(shareType, "shareType")?;
        let d = device::require_current()?.device;
        if shareType == ACL_MEM_SHARE_HANDLE_TYPE_FABRIC {
            check_fabric_supported()?;
        }
        let r = read_ref(shareableHandle, shareType)?;
        out.set(do_import(r, shareType, d)?);
        Ok(())
    }
}
