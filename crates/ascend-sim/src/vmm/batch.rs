//! Batched copies: reading and checking the arguments of `aclrtMemcpyBatch*`, running a checked
//! batch, and the synchronous exports (the stream-ordered ones are in `stream/batch.rs`).
//!
//! Rules (the per-copy ones report the copy's index in `failIndex`, every other failure and
//! success report `SIZE_MAX`):
//! * NULL arrays, `numBatches` 0, `numAttrs` 0 or > `numBatches`, `attrsIndexes[0]` ≠ 0, indexes
//!   not strictly increasing or the last ≥ `numBatches`, `rsv` not all zero, a location type
//!   other than HOST, HOST_NUMA or DEVICE → `ACL_ERROR_INVALID_PARAM` 100000.
//! * A batch is host-to-device or device-to-host: each copy's direction comes from its
//!   attribute's locations; a copy that is neither, or whose direction differs from copy 0's →
//!   100000 at that copy.
//! * Per copy: NULL `dsts[i]`/`srcs[i]` or `sizes[i] > destMaxs[i]` → 100000; a range not
//!   entirely in known, accessible memory → the code a single copy gets (507053, …); memory that
//!   contradicts its location (a DEVICE location of id `d` needs device `d`'s memory, a HOST
//!   location host memory) → `ACL_ERROR_RT_PARAM_INVALID` 107000.
//!
//! Every check runs before any byte moves. The header's note that memory which is not
//! page-locked is copied synchronously is not modelled: a stream-ordered batch is one queued task
//! whatever its host memory.

use std::ffi::c_void;

use acl_sys::*;

use crate::rt::{self, AclErr, Res};

use super::copy::{exec_copy_hinted, CopyHints};
use super::state::{Class, Hint, MemState, MEM};

/// One copy of a batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    pub(crate) dst: usize,
    pub(crate) src: usize,
    pub(crate) n: usize,
}

/// A batch whose arguments were read and checked, without the memory checks.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) pieces: Vec<Piece>,
    /// The attribute of each copy: (dst location, src location).
    locs: Vec<(aclrtMemLocation, aclrtMemLocation)>,
    pub(crate) kind: aclrtMemcpyKind,
}

/// A failed batch call: the error and the index for `failIndex` (`usize::MAX`: not one copy).
pub(crate) struct BatchErr {
    pub(crate) err: AclErr,
    pub(crate) index: usize,
}

impl From<AclErr> for BatchErr {
    fn from(err: AclErr) -> Self {
        BatchErr {
            err,
            index: usize::MAX,
        }
    }
}

fn at(index: usize, e: AclErr) -> BatchErr {
    BatchErr {
        err: rt::err(e.code, format!("copy {index}: {}", e.msg)),
        index,
    }
}

/// The raw arguments of a batch call.
pub(crate) struct RawBatch {
    pub(crate) dsts: *mut *mut c_void,
    pub(crate) dest_maxs: *mut usize,
    pub(crate) srcs: *mut *mut c_void,
    pub(crate) sizes: *mut usize,
    pub(crate) num: usize,
    pub(crate) attrs: *mut aclrtMemcpyBatchAttr,
    pub(crate) attrs_indexes: *mut usize,
    pub(crate) num_attrs: usize,
}

fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Res<&'a [T]> {
    ensure!(!p.is_null(), ACL_ERROR_INVALID_PARAM, "{what} is NULL");
    // SAFETY: non-null, and per the C contract of the batch calls valid for reads of `n`
    // elements (the count the caller passed with it) for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

fn host_loc(l: &aclrtMemLocation, what: &str) -> Res<bool> {
    match l.type_ {
        ACL_MEM_LOCATION_TYPE_HOST | ACL_MEM_LOCATION_TYPE_HOST_NUMA => Ok(true),
        ACL_MEM_LOCATION_TYPE_DEVICE => Ok(false),
        t => bail!(
            ACL_ERROR_INVALID_PARAM,
            "{what} type {t} is not HOST (0), DEVICE (1) or HOST_NUMA (4)"
        ),
    }
}

/// The attribute of each copy, after the checks of `attrs` and `attrsIndexes`.
fn copy_attrs(r: &RawBatch) -> Res<Vec<(aclrtMemLocation, aclrtMemLocation)>> {
    ensure!(
        r.num_attrs >= 1 && r.num_attrs <= r.num,
        ACL_ERROR_INVALID_PARAM,
        "numAttrs {} must be 1..=numBatches ({})",
        r.num_attrs,
        r.num
    );
    let attrs = slice(r.attrs.cast_const(), r.num_attrs, "attrs")?;
    let idx = slice(r.attrs_indexes.cast_const(), r.num_attrs, "attrsIndexes")?;
    ensure!(
        idx[0] == 0,
        ACL_ERROR_INVALID_PARAM,
        "attrsIndexes[0] is {}, must be 0",
        idx[0]
    );
    for (k, w) in idx.windows(2).enumerate() {
        ensure!(
            w[1] > w[0],
            ACL_ERROR_INVALID_PARAM,
            "attrsIndexes[{}] {} is not greater than attrsIndexes[{k}] {}",
            k + 1,
            w[1],
            w[0]
        );
    }
    let last = idx[r.num_attrs - 1];
    ensure!(
        last < r.num,
        ACL_ERROR_INVALID_PARAM,
        "attrsIndexes[{}] {last} is not below numBatches {}",
        r.num_attrs - 1,
        r.num
    );
    let mut out = Vec::with_capacity(r.num);
    for (k, a) in attrs.iter().enumerate() {
        ensure!(
            a.rsv.iter().all(|&b| b == 0),
            ACL_ERROR_INVALID_PARAM,
            "attrs[{k}].rsv is not all zero"
        );
        host_loc(&a.dstLoc, &format!("attrs[{k}].dstLoc"))?;
        host_loc(&a.srcLoc, &format!("attrs[{k}].srcLoc"))?;
        let end = idx.get(k + 1).copied().unwrap_or(r.num);
        out.extend(std::iter::repeat((a.dstLoc, a.srcLoc)).take(end - idx[k]));
    }
    Ok(out)
}

/// Reads and checks the arguments (not the memory).
pub(crate) fn read(r: &RawBatch) -> Result<Batch, BatchErr> {
    if r.num == 0 {
        return Err(rt::err(ACL_ERROR_INVALID_PARAM, "numBatches is 0").into());
    }
    let dsts = slice(r.dsts.cast_const(), r.num, "dsts")?;
    let maxs = slice(r.dest_maxs.cast_const(), r.num, "destMaxs")?;
    let srcs = slice(r.srcs.cast_const(), r.num, "srcs")?;
    let sizes = slice(r.sizes.cast_const(), r.num, "sizes")?;
    let locs = copy_attrs(r)?;
    let mut pieces = Vec::with_capacity(r.num);
    let mut kind = ACL_MEMCPY_DEFAULT;
    for i in 0..r.num {
        let (dl, sl) = &locs[i];
        let (dh, sh) = (host_loc(dl, "dstLoc")?, host_loc(sl, "srcLoc")?);
        let k = match (sh, dh) {
            (true, false) => ACL_MEMCPY_HOST_TO_DEVICE,
            (false, true) => ACL_MEMCPY_DEVICE_TO_HOST,
            _ => {
                return Err(at(
                    i,
                    rt::err(
                        ACL_ERROR_INVALID_PARAM,
                        "its attribute is not host-to-device or device-to-host",
                    ),
                ))
            }
        };
        if i == 0 {
            kind = k;
        } else if k != kind {
            return Err(at(
                i,
                rt::err(
                    ACL_ERROR_INVALID_PARAM,
                    "its direction differs from copy 0's (a batch is one direction)",
                ),
            ));
        }
        let p = Piece {
            dst: dsts[i] as usize,
            src: srcs[i] as usize,
            n: sizes[i],
        };
        let e = |m: String| at(i, rt::err(ACL_ERROR_INVALID_PARAM, m));
        if p.dst == 0 {
            return Err(e("dst is NULL".to_string()));
        }
        if p.src == 0 {
            return Err(e("src is NULL".to_string()));
        }
        if p.n > maxs[i] {
            return Err(e(format!("size {} exceeds destMax {}", p.n, maxs[i])));
        }
        pieces.push(p);
    }
    Ok(Batch { pieces, locs, kind })
}

fn matches_loc(c: Class, l: &aclrtMemLocation) -> bool {
    match (l.type_, c) {
        (ACL_MEM_LOCATION_TYPE_DEVICE, Class::Dev(d)) => d == l.id,
        (ACL_MEM_LOCATION_TYPE_DEVICE, _) => false,
        (_, c) => c.host_side(),
    }
}

fn check_side(
    mem: &MemState,
    (addr, n, write): (usize, usize, bool),
    l: &aclrtMemLocation,
    hint: &mut Hint,
) -> Res {
    let what = if write { "dst" } else { "src" };
    let c = mem.classify_hinted(addr, n, write, what, hint)?;
    ensure!(
        matches_loc(c, l),
        ACL_ERROR_RT_PARAM_INVALID,
        "{what} {addr:#x} is {} but its location is {} {}",
        c.describe(),
        if l.type_ == ACL_MEM_LOCATION_TYPE_DEVICE {
            "DEVICE"
        } else {
            "HOST"
        },
        l.id
    );
    Ok(())
}

impl Batch {
    /// Checks every copy's memory against the address table and its locations.
    pub(crate) fn check_memory(&self, mem: &MemState) -> Result<(), BatchErr> {
        let mut hints = CopyHints::default();
        for (i, (p, (dl, sl))) in self.pieces.iter().zip(&self.locs).enumerate() {
            check_side(mem, (p.dst, p.n, true), dl, &mut hints.0).map_err(|e| at(i, e))?;
            check_side(mem, (p.src, p.n, false), sl, &mut hints.1).map_err(|e| at(i, e))?;
        }
        Ok(())
    }

    /// Runs the copies in order under `mem` (each re-checked as it runs).
    pub(crate) fn run_in(&self, mem: &MemState) -> Result<(), BatchErr> {
        let mut hints = CopyHints::default();
        for (i, p) in self.pieces.iter().enumerate() {
            exec_copy_hinted(mem, (p.dst, p.src, p.n), self.kind, &mut hints)
                .map_err(|e| at(i, e))?;
        }
        Ok(())
    }
}

/// Runs a batch call: `failIndex` (when given) is set to `SIZE_MAX` first, then to the failing
/// copy's index; `body` does the work.
pub(crate) fn with_fail_index(
    fail_index: Option<*mut usize>,
    body: impl FnOnce() -> Result<(), BatchErr>,
) -> Res {
    let out = match fail_index {
        Some(p) => {
            ensure!(!p.is_null(), ACL_ERROR_INVALID_PARAM, "failIndex is NULL");
            Some(p)
        }
        None => None,
    };
    let set = |v: usize| {
        if let Some(p) = out {
            // SAFETY: non-null, writable for one size_t per the C contract.
            unsafe { p.write_unaligned(v) };
        }
    };
    set(usize::MAX);
    body().map_err(|e| {
        set(e.index);
        e.err
    })
}

/// The synchronous batch: every check, then every copy, under one read lock.
fn copy_now(r: &RawBatch) -> Result<(), BatchErr> {
    let b = read(r)?;
    let mem = MEM.read();
    b.check_memory(&mem)?;
    b.run_in(&mem)
}

export! { Acl;
    /// Synchronous batched copy; `failIndex` names the failing copy (SIZE_MAX: none).
    fn aclrtMemcpyBatch(dsts: *mut *mut c_void, destMaxs: *mut usize, srcs: *mut *mut c_void, sizes: *mut usize, numBatches: usize, attrs: *mut aclrtMemcpyBatchAttr, attrsIndexes: *mut usize, numAttrs: usize, failIndex: *mut usize) {
        let r = RawBatch { dsts, dest_maxs: destMaxs, srcs, sizes, num: numBatches, attrs, attrs_indexes: attrsIndexes, num_attrs: numAttrs };
        with_fail_index(Some(failIndex), || copy_now(&r))
    }
}

export! { Acl;
    /// As aclrtMemcpyBatch without `failIndex`.
    fn aclrtMemcpyBatchV2(dsts: *mut *mut c_void, destMaxs: *mut usize, srcs: *mut *mut c_void, sizes: *mut usize, numBatches: usize, attrs: *mut aclrtMemcpyBatchAttr, attrsIndexes: *mut usize, numAttrs: usize) {
        let r = RawBatch { dsts, dest_maxs: destMaxs, srcs, sizes, num: numBatches, attrs, attrs_indexes: attrsIndexes, num_attrs: numAttrs };
        with_fail_index(None, || copy_now(&r))
    }
}
