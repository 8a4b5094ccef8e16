//! Synchronous copies and memsets, and the checks and execution stream-ordered ones share.

use std::ffi::c_void;

use acl_sys::*;

use crate::rt::Res;

use super::state::{Class, Hint, MemState, MEM};
pub(crate) fn kind_name(kind: aclrtMemcpyKind) -> &'static str {
    match kind {
        ACL_MEMCPY_HOST_TO_HOST => "ACL_MEMCPY_HOST_TO_HOST",
        ACL_MEMCPY_HOST_TO_DEVICE => "ACL_MEMCPY_HOST_TO_DEVICE",
        ACL_MEMCPY_DEVICE_TO_HOST => "ACL_MEMCPY_DEVICE_TO_HOST",
        ACL_MEMCPY_DEVICE_TO_DEVICE => "ACL_MEMCPY_DEVICE_TO_DEVICE",
        ACL_MEMCPY_DEFAULT => "ACL_MEMCPY_DEFAULT",
        ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE => "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE",
        ACL_MEMCPY_INNER_DEVICE_TO_DEVICE => "ACL_MEMCPY_INNER_DEVICE_TO_DEVICE",
        ACL_MEMCPY_INTER_DEVICE_TO_DEVICE => "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
        _ => "an unknown kind",
    }
}

pub(crate) fn check_kind(
    kind: aclrtMemcpyKind,
    dst: usize,
    dc: Class,
    src: usize,
    sc: Class,
) -> Res {
    let (src_ok, dst_ok) = match kind {
        ACL_MEMCPY_HOST_TO_HOST => (sc.host_side(), dc.host_side()),
        ACL_MEMCPY_HOST_TO_DEVICE | ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE => {
            (sc.host_side(), dc.device_accessible())
        }
        ACL_MEMCPY_DEVICE_TO_HOST => (sc.device_accessible(), dc.host_side()),
        ACL_MEMCPY_DEVICE_TO_DEVICE
        | ACL_MEMCPY_INNER_DEVICE_TO_DEVICE
        | ACL_MEMCPY_INTER_DEVICE_TO_DEVICE => (sc.device_accessible(), dc.device_accessible()),
        ACL_MEMCPY_DEFAULT => (true, true),
        _ => bail!(
            ACL_ERROR_INVALID_PARAM,
            "kind {kind} is not an aclrtMemcpyKind (0..=7)"
        ),
    };
    ensure!(
        src_ok,
        ACL_ERROR_RT_PARAM_INVALID,
        "kind {} ({kind}) but src {src:#x} is {}",
        kind_name(kind),
        sc.describe()
    );
    ensure!(
        dst_ok,
        ACL_ERROR_RT_PARAM_INVALID,
        "kind {} ({kind}) but dst {dst:#x} is {}",
        kind_name(kind),
        dc.describe()
    );
    Ok(())
}

/// Validates a copy under the read lock and performs it.
pub(crate) fn exec_copy(dst: usize, src: usize, n: usize, kind: aclrtMemcpyKind) -> Res {
    exec_copy_in(&MEM.read(), dst, src, n, kind)
}

/// As [`exec_copy`], under a read guard of [`MEM`] the caller holds (a stream worker runs a
/// run of queued copies under one guard).
pub(crate) fn exec_copy_in(
    mem: &MemState,
    dst: usize,
    src: usize,
    n: usize,
    kind: aclrtMemcpyKind,
) -> Res {
    exec_copy_hinted(mem, (dst, src, n), kind, &mut CopyHints::default())
}

/// The (dst, src) hints of a run of copies under one read guard.
pub(crate) type CopyHints = (Hint, Hint);

/// [`exec_copy_in`] of `(dst, src, n)` with the run's hints (fresh for each read guard).
pub(crate) fn exec_copy_hinted(
    mem: &MemState,
    (dst, src, n): (usize, usize, usize),
    kind: aclrtMemcpyKind,
    hints: &mut CopyHints,
) -> Res {
    let dc = mem.classify_hinted(dst, n, true, "dst", &mut hints.0)?;
    let sc = mem.classify_hinted(src, n, false, "src", &mut hints.1)?;
    check_kind(kind, dst, dc, src, sc)?;
    if n > 0 {
        // SAFETY: both ranges were just checked to lie inside live, accessible mappings or
        // allocations (which cannot go away while the caller holds the read lock), or entirely outside
        // emulated memory, i.e. host memory the caller vouches for per the C contract.
        // `copy` tolerates overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
    }
    Ok(())
}

/// Validates a memset under the read lock and performs it.
pub(crate) fn exec_set(dst: usize, value: u8, n: usize) -> Res {
    let mem = MEM.read();
    let dc = mem.classify(dst, n, true, "devPtr")?;
    ensure!(
        dc.device_accessible(),
        ACL_ERROR_RT_PARAM_INVALID,
        "devPtr {dst:#x} is {}",
        dc.describe()
    );
    if n > 0 {
        // SAFETY: the range lies inside a live, writable mapping or allocation, kept alive by
        // the read lock.
        unsafe { std::ptr::write_bytes(dst as *mut u8, value, n) };
    }
    Ok(())
}

pub(crate) fn check_copy_args(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
) -> Res {
    ensure!(!dst.is_null(), ACL_ERROR_INVALID_PARAM, "dst is NULL");
    ensure!(!src.is_null(), ACL_ERROR_INVALID_PARAM, "src is NULL");
    ensure!(
        count <= dest_max,
        ACL_ERROR_INVALID_PARAM,
        "count {count} exceeds destMax {dest_max}"
    );
    Ok(())
}

pub(crate) fn validate_copy(dst: usize, src: usize, n: usize, kind: aclrtMemcpyKind) -> Res {
    let mem = MEM.read();
    let dc = mem.classify(dst, n, true, "dst")?;
    let sc = mem.classify(src, n, false, "src")?;
    check_kind(kind, dst, dc, src, sc)
}

export! { Acl;
    /// Synchronous copy.
    fn aclrtMemcpy(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind) {
        check_copy_args(dst, destMax, src, count)?;
        exec_copy(dst as usize, src as usize, count, kind)
    }
}

pub(crate) fn check_set_args(p: *mut c_void, max: usize, count: usize) -> Res {
    ensure!(!p.is_null(), ACL_ERROR_INVALID_PARAM, "devPtr is NULL");
    ensure!(
        count <= max,
        ACL_ERROR_INVALID_PARAM,
        "count {count} exceeds maxCount {max}"
    );
    Ok(())
}

export! { Acl;
    /// Synchronous memset of device-accessible memory.
    fn aclrtMemset(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize) {
        check_set_args(devPtr, maxCount, count)?;
        exec_set(devPtr as usize, value as u8, count)
    }
}
