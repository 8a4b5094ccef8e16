//! The symmetric heap of a communicator and the windows placed in it.
//!
//! The heap is one `PROT_NONE|MAP_NORESERVE` reservation of
//! `rank_size × hcclSymWinMaxMemSizePerRank` GB, made at the first registration. Rank `r`'s
//! slot starts at `base + r·stride`. A window gets the same offset `woff` in every slot (first
//! fit; registrations are collective and equal-sized, so every rank computes the same layout),
//! so a peer's byte `off` of the window is a plain load from `base + peer·stride + woff + off`.
//!
//! Every rank's slot range of a window is mapped read-write (one-sided puts write into a
//! peer's part) and entered in the address table as device memory of this rank's device for as
//! long as the window is registered, so copies, value writes and waits through a peer pointer
//! are checked like any device address: once the window is deregistered they fail with an ACL
//! error at submission or execution instead of touching the unmapped slot.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Arc;

use hccl_sys::*;

use super::error::{herr, HRes};
use crate::vmm::state::{Class, MallocBlock, PhysObj, Region, MEM};

pub(crate) const GB: usize = 1 << 30;

/// The symmetric heap and its allocation state (per communicator).
#[derive(Debug, Default)]
pub(crate) struct HeapState {
    pub(crate) base: usize,
    len: usize,
    pub(crate) stride: usize,
    /// Allocated window ranges inside a slot: offset → length.
    pub(crate) used: BTreeMap<usize, usize>,
    pub(crate) next_seq: u64,
}

impl Drop for HeapState {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the reservation this value made; window slots inside it go with it.
            unsafe { libc::munmap(self.base as *mut c_void, self.len) };
        }
    }
}

impl HeapState {
    pub(crate) fn ensure(&mut self, n: u32, gb: u64) -> HRes {
        if self.len > 0 {
            return Ok(());
        }
        let stride = gb as usize * GB;
        let len = stride * n as usize;
        // SAFETY: a fresh anonymous PROT_NONE reservation at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(herr(
                HCCL_E_MEMORY,
                format!(
                    "reserving the symmetric heap ({n} ranks x {gb} GB) failed: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        self.base = p as usize;
        self.len = len;
        self.stride = stride;
        Ok(())
    }

    /// First fit of `len` bytes in a slot.
    pub(crate) fn alloc(&mut self, len: usize) -> HRes<usize> {
        let mut cur = 0usize;
        for (o, l) in &self.used {
            if o - cur >= len {
                break;
            }
            cur = o + l;
        }
        if cur + len > self.stride {
            return Err(herr(
                HCCL_E_MEMORY,
                format!(
                    "the symmetric heap slot ({} bytes) has no room for a window of {len} bytes",
                    self.stride
                ),
            ));
        }
        self.used.insert(cur, len);
        Ok(cur)
    }
}

/// A registered window.
#[derive(Debug)]
pub(crate) struct Window {
    pub handle: u64,
    /// Per-communicator number, equal on every rank.
    pub seq: u64,
    /// Window start in the user's VA (start of the first physical allocation).
    pub start: usize,
    /// Rounded size (whole physical allocations).
    pub size: usize,
    pub heap_base: usize,
    pub stride: usize,
    pub woff: usize,
    pub n: u32,
    /// The device of the communicator (the class the slots are entered with).
    pub dev: u32,
    pub _objs: Vec<Arc<PhysObj>>,
}

impl Window {
    /// Where rank `p`'s byte `off` of this window is in our address space.
    pub(crate) fn peer_addr(&self, p: u32, off: usize) -> usize {
        self.heap_base + p as usize * self.stride + self.woff + off
    }

    /// The offset of `[ptr, ptr + len)` when it lies inside the window.
    pub(crate) fn offset_of(&self, ptr: usize, len: usize) -> Option<usize> {
        let end = ptr.checked_add(len)?;
        (ptr >= self.start && end <= self.start + self.size).then(|| ptr - self.start)
    }

    /// Enters every rank's slot range in the address table as device memory.
    pub(crate) fn publish_slots(&self) {
        let mut mem = MEM.write();
        for r in 0..self.n {
            let block = MallocBlock {
                size: self.size,
                map_len: self.size,
                class: Class::Dev(self.dev),
                charge: None,
                freeable: false,
            };
            mem.regions
                .insert(self.peer_addr(r, 0), Region::Malloc(block));
        }
    }

    /// Removes the slots from the address table (waiting, through its write lock, for copies
    /// running on them) and unmaps them.
    pub(crate) fn unmap_slots(&self) {
        {
            let mut mem = MEM.write();
            for r in 0..self.n {
                mem.regions.remove(&self.peer_addr(r, 0));
            }
        }
        for r in 0..self.n {
            let a = self.peer_addr(r, 0);
            // SAFETY: `a..a+size` lies inside the communicator's heap reservation (still
            // mapped: the heap outlives its windows); overlaying PROT_NONE drops the slot.
            unsafe {
                libc::mmap(
                    a as *mut c_void,
                    self.size,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
        }
    }
}
