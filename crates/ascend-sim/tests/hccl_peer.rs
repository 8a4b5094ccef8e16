//! Peer pointers into the symmetric heap at the C level: `HcclSymWinGetPeerPointer` gives the
//! peer's own memory (stores land in its window, copies through it are checked device
//! copies), every argument rule with its code, and `HcclCommSymWinGet` lookups. One test
//! function: it reads the process-wide counters.

#[macro_use]
mod common;
#[macro_use]
mod hccl_common;

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Barrier;

use acl_sys::{ACL_MEMCPY_DEVICE_TO_DEVICE, ACL_MEMCPY_HOST_TO_DEVICE};
use common::*;
use hccl_common::*;

fn peer_ptr(w: HcclCommSymWindow, off: usize, peer: u32) -> (u32, *mut c_void) {
    let mut p = null_mut();
    let code = hc!(HcclSymWinGetPeerPointer(w, off, peer, &mut p));
    (code, p)
}

/// Every rank writes its rank number into byte `rank` of every peer's window, through the
/// peer pointer (a plain store on one rank, an ACL copy on the others); each then finds every
/// peer's byte in its own memory.
fn puts_land_in_the_peers_memory(r: &Rank, buf: &VmmBuf, w: HcclCommSymWindow, bar: &Barrier) {
    for p in 0..r.n {
        let (code, dst) = peer_ptr(w, 64 + r.rank as usize, p);
        assert_eq!(code, 0, "{:?}", ascend_sim::hccl_last_error_message());
        let byte = [r.rank as u8 + 1];
        if r.rank == 0 {
            write_bytes(dst, &byte);
        } else {
            ok!(aclrtMemcpy(
                dst,
                1,
                byte.as_ptr().cast(),
                1,
                ACL_MEMCPY_HOST_TO_DEVICE
            ));
        }
    }
    bar.wait();
    let want: Vec<u8> = (1..=r.n as u8).collect();
    assert_eq!(read_bytes(buf.at(64), r.n as usize), want);
    // A device-to-device copy from our window into the next rank's, at a second offset.
    let next = (r.rank + 1) % r.n;
    let (_, dst) = peer_ptr(w, 128 + r.rank as usize, next);
    ok!(aclrtMemcpy(
        dst,
        1,
        buf.at(64),
        1,
        ACL_MEMCPY_DEVICE_TO_DEVICE
    ));
    bar.wait();
    let prev = (r.rank + r.n - 1) % r.n;
    assert_eq!(read_bytes(buf.at(128 + prev as usize), 1), [1]);
}

/// The argument rules of `HcclSymWinGetPeerPointer` and the lookups of `HcclCommSymWinGet`.
fn argument_rules(r: &Rank, buf: &VmmBuf, w: HcclCommSymWindow) {
    let mut p = null_mut();
    hcode!(
        HCCL_E_PTR,
        HcclSymWinGetPeerPointer(null_mut(), 0, 0, &mut p)
    );
    hcode!(HCCL_E_PTR, HcclSymWinGetPeerPointer(w, 0, 0, null_mut()));
    assert_eq!(peer_ptr(w, 0, r.n).0, HCCL_E_PARA, "peer rank = rank size");
    assert_eq!(peer_ptr(w, 0, u32::MAX).0, HCCL_E_PARA);
    assert_eq!(
        peer_ptr(w, buf.len, 0).0,
        HCCL_E_PARA,
        "offset = window size"
    );
    assert_eq!(peer_ptr(w, usize::MAX, 0).0, HCCL_E_PARA);
    let bogus = 0xdead_0000usize as HcclCommSymWindow;
    assert_eq!(peer_ptr(bogus, 0, 0).0, HCCL_E_PARA);
    let (code, last) = peer_ptr(w, buf.len - 1, r.n - 1);
    assert_eq!(code, 0);
    assert!(!last.is_null());
    // A peer pointer is no aclrtMalloc block: freeing it is refused, and the window lives on.
    let (_, first) = peer_ptr(w, 0, (r.rank + 1) % r.n);
    assert_eq!(acl!(aclrtFree(first)), ACL_ERROR_RT_PARAM_INVALID);
    assert_eq!(acl!(aclrtFreeHost(first)), ACL_ERROR_RT_PARAM_INVALID);
    assert_eq!(peer_ptr(w, 0, (r.rank + 1) % r.n), (0, first));
    // Lookups: inside, at the end, past the end, outside.
    let (mut got, mut off) = (null_mut(), 0usize);
    hok!(HcclCommSymWinGet(
        r.comm,
        buf.at(100),
        16,
        &mut got,
        &mut off
    ));
    assert_eq!((got, off), (w, 100));
    hok!(HcclCommSymWinGet(
        r.comm,
        buf.at(buf.len - 8),
        8,
        &mut got,
        &mut off
    ));
    assert_eq!((got, off), (w, buf.len - 8));
    hcode!(
        HCCL_E_NOT_FOUND,
        HcclCommSymWinGet(r.comm, buf.at(buf.len - 8), 9, &mut got, &mut off)
    );
    assert!(got.is_null());
    let other = DevBuf::new(64);
    hcode!(
        HCCL_E_NOT_FOUND,
        HcclCommSymWinGet(r.comm, other.ptr, 8, &mut got, &mut off)
    );
    hcode!(
        HCCL_E_PARA,
        HcclCommSymWinGet(r.comm, buf.at(0), 0, &mut got, &mut off)
    );
}

#[test]
fn peer_pointers() {
    let _g = LOCK.lock();
    for n in [2u32, 4] {
        let bar = Barrier::new(n as usize);
        ranks(n, None, |r| {
            let buf = VmmBuf::new(r.rank, MIB2);
            let w = register(r, buf.ptr, buf.len as u64);
            puts_land_in_the_peers_memory(r, &buf, w, &bar);
            argument_rules(r, &buf, w);
            let (_, stale) = peer_ptr(w, 0, (r.rank + 1) % r.n);
            bar.wait();
            hok!(HcclCommSymWinDeregister(w));
            // Deregistered: the handle is refused, and the old address is no device memory.
            assert_eq!(peer_ptr(w, 0, 0).0, HCCL_E_PARA);
            let b = [7u8];
            let code = acl!(aclrtMemcpy(
                stale,
                1,
                b.as_ptr().cast(),
                1,
                ACL_MEMCPY_HOST_TO_DEVICE
            ));
            assert_ne!(code, 0, "a copy through a stale peer pointer must fail");
        });
    }
    assert_clean();
}
