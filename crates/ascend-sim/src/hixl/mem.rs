//! Memory: checking that a `CommMem` names real emulated memory of its type, describing a
//! server block so a client (in this or another process) can reach it, importing and mapping
//! such a block, and the copies of put and get.
//!
//! * A block in VMM mappings (`aclrtReserveMemAddress` + `aclrtMallocPhysical` +
//!   `aclrtMapMem`) is described by the server's pid and, for each physical allocation under it,
//!   the memfd's descriptor number and inode. The client takes each descriptor with
//!   `pidfd_getfd` (`dup` in the same process), checks the inode and maps the memfds
//!   contiguously in a private reservation: one-sided access, as the fabric does. The server's
//!   registration holds the allocations, so the descriptors stay valid while it is registered;
//!   the client's mapping keeps the memory alive after that.
//! * A block of `aclrtMalloc`/`aclrtMallocHost` memory has no memfd (it is anonymous memory);
//!   the client reaches it with `process_vm_readv`/`process_vm_writev` on the server's pid.
//!   Unregister before freeing it: a stale registration would reach whatever is mapped there.

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use hixl_sys::*;

use super::counters::{xdec, xinc, XCtr};
use super::error::{xerr, XRes};
use super::wire::{Buf, Cur};
use crate::vmm::memfd::HDR;
use crate::vmm::state::{vmm_pieces, Class, PhysObj, MEM};

/// The C name of a memory type.
pub(crate) fn type_name(t: CommMemType) -> &'static str {
    match t {
        COMM_MEM_TYPE_DEVICE => "COMM_MEM_TYPE_DEVICE",
        COMM_MEM_TYPE_HOST => "COMM_MEM_TYPE_HOST",
        COMM_MEM_TYPE_INVALID => "COMM_MEM_TYPE_INVALID",
        _ => "an unknown CommMemType",
    }
}

fn class_text(c: Class) -> String {
    match c {
        Class::Dev(d) => format!("device memory of device {d}"),
        Class::HostDev => "device-accessible host memory".to_string(),
        Class::Host => "plain host memory unknown to the runtime".to_string(),
    }
}

/// A checked `CommMem`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checked {
    pub kind: CommMemType,
    pub addr: usize,
    pub size: usize,
}

/// Reads and checks `mem`: a known type, a non-null address, a non-zero size, and a range that
/// lies entirely in emulated memory of that type (DEVICE: a VMM mapping of device memory or an
/// `aclrtMalloc` block; HOST: a VMM mapping of host memory or an `aclrtMallocHost` block).
///
/// # Safety
/// `mem` is null or readable for one `CommMem`.
pub(crate) unsafe fn check_comm_mem(mem: *const CommMem) -> XRes<Checked> {
    xensure!(!mem.is_null(), HIXL_PARAM_INVALID, "mem is NULL");
    // SAFETY: non-null and readable per the caller's contract.
    let m = unsafe { mem.read_unaligned() };
    xensure!(
        m.type_ == COMM_MEM_TYPE_DEVICE || m.type_ == COMM_MEM_TYPE_HOST,
        HIXL_PARAM_INVALID,
        "mem->type {} is {}",
        m.type_,
        type_name(m.type_)
    );
    xensure!(!m.addr.is_null(), HIXL_PARAM_INVALID, "mem->addr is NULL");
    xensure!(m.size > 0, HIXL_PARAM_INVALID, "mem->size is 0");
    let addr = m.addr as usize;
    let size = usize::try_from(m.size)
        .ok()
        .filter(|s| addr.checked_add(*s).is_some());
    let Some(size) = size else {
        xbail!(
            HIXL_PARAM_INVALID,
            "mem->addr {addr:#x} + mem->size {} overflows",
            m.size
        );
    };
    let class = MEM
        .read()
        .classify(addr, size, false, "mem")
        .map_err(|e| xerr(HIXL_PARAM_INVALID, e.msg))?;
    let ok = matches!(
        (m.type_, class),
        (COMM_MEM_TYPE_DEVICE, Class::Dev(_)) | (COMM_MEM_TYPE_HOST, Class::HostDev)
    );
    xensure!(
        ok,
        HIXL_PARAM_INVALID,
        "mem [{addr:#x}, +{size}) is {}, not what mem->type {} says",
        class_text(class),
        type_name(m.type_)
    );
    Ok(Checked {
        kind: m.type_,
        addr,
        size,
    })
}

/// What backs a registered server block.
pub(crate) enum Backing {
    /// VMM mappings: the start of the first mapping and the physical allocations, in order.
    Vmm {
        base: usize,
        objs: Vec<Arc<PhysObj>>,
    },
    /// An `aclrtMalloc`/`aclrtMallocHost` block.
    Malloc,
}

impl Backing {
    /// The backing of a checked range.
    pub(crate) fn of(c: &Checked) -> Backing {
        match vmm_pieces(c.addr, c.size) {
            Ok(p) if !p.is_empty() => Backing::Vmm {
                base: p[0].0,
                objs: p.into_iter().map(|(_, o)| o).collect(),
            },
            _ => Backing::Malloc,
        }
    }

    /// Appends the wire description (see [`Remote::import`]).
    pub(crate) fn encode(&self, b: &mut Buf) {
        match self {
            Backing::Malloc => {
                b.u8(0);
            }
            Backing::Vmm { base, objs } => {
                b.u8(1).u64(*base as u64).u32(objs.len() as u32);
                for o in objs {
                    b.i32(o.fd.as_raw_fd()).u64(o.ino).u64(o.size as u64);
                }
            }
        }
    }
}

/// How a client reaches a server block.
enum Access {
    /// Imported and mapped here: `view` is the local address of the block's first byte.
    Mapped {
        base: usize,
        len: usize,
        view: usize,
    },
    /// Through the server process's memory (`process_vm_*`).
    Pid(i32),
}

/// One block of a server's memory list, as a client holds it.
pub(crate) struct Remote {
    /// The server's memory handle id (stable for the registration).
    pub id: u64,
    pub tag: String,
    pub kind: CommMemType,
    /// Address in the server process.
    pub addr: u64,
    pub size: u64,
    access: Access,
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Access::Mapped { base, len, .. } = self.access {
            // SAFETY: `base..base+len` is our own private reservation; jobs that copy through
            // it hold this `Remote` in an `Arc`, so none is running.
            unsafe { libc::munmap(base as *mut c_void, len) };
        }
        xdec(XCtr::RemoteMaps);
    }
}

/// One physical allocation of a VMM block: the server's descriptor number, inode, size.
type Piece = (i32, u64, u64);

/// One decoded list entry, before import.
pub(crate) struct Entry {
    pub id: u64,
    pub tag: String,
    pub kind: CommMemType,
    pub addr: u64,
    pub size: u64,
    /// VMM blocks: the first mapping's start and the pieces.
    vmm: Option<(u64, Vec<Piece>)>,
}

impl Entry {
    pub(crate) fn decode(c: &mut Cur<'_>) -> XRes<Entry> {
        let id = c.u64()?;
        let tag = String::from_utf8_lossy(c.bytes()?).into_owned();
        let kind = c.i32()?;
        let addr = c.u64()?;
        let size = c.u64()?;
        let vmm = match c.u8()? {
            0 => None,
            _ => {
                let base = c.u64()?;
                let n = c.u32()?;
                let mut v = Vec::with_capacity(n.min(1024) as usize);
                for _ in 0..n {
                    v.push((c.i32()?, c.u64()?, c.u64()?));
                }
                Some((base, v))
            }
        };
        Ok(Entry {
            id,
            tag,
            kind,
            addr,
            size,
            vmm,
        })
    }
}

fn os_err(what: &str) -> super::error::XErr {
    xerr(
        HIXL_FAILED,
        format!("{what}: {}", std::io::Error::last_os_error()),
    )
}

impl Remote {
    /// Makes `e` reachable from this process (`pid`: the server's).
    pub(crate) fn import(e: Entry, pid: i32) -> XRes<Remote> {
        let access = match &e.vmm {
            None => Access::Pid(pid),
            Some((base, pieces)) => {
                let len: u64 = pieces.iter().map(|p| p.2).sum();
                let len = usize::try_from(len).map_err(|_| xerr(HIXL_FAILED, "huge block"))?;
                xensure!(
                    len > 0 && e.addr >= *base && e.addr - base + e.size <= len as u64,
                    HIXL_FAILED,
                    "the server described block {:#x} inconsistently",
                    e.addr
                );
                let mut fds = Vec::with_capacity(pieces.len());
                for &(fd, ino, size) in pieces {
                    let f = crate::share::obtain_fd_raw(pid, fd).map_err(|x| {
                        xerr(
                            HIXL_FAILED,
                            format!("importing block {:#x} of process {pid}: {}", e.addr, x.msg),
                        )
                    })?;
                    let st = crate::vmm::memfd::fstat(f.as_raw_fd())
                        .map_err(|x| xerr(HIXL_FAILED, x.msg))?;
                    xensure!(
                        st.st_ino == ino && st.st_size as u64 == HDR as u64 + size,
                        HIXL_FAILED,
                        "block {:#x} of process {pid} was unregistered or freed meanwhile",
                        e.addr
                    );
                    fds.push((f, size as usize));
                }
                // SAFETY: a fresh private PROT_NONE reservation; no memory of ours is touched.
                let r = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_NONE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                if r == libc::MAP_FAILED {
                    return Err(os_err("reserving address space for a remote block"));
                }
                let rbase = r as usize;
                let mut off = 0usize;
                for (f, size) in &fds {
                    // SAFETY: `[rbase + off, +size)` lies inside the reservation just made and
                    // owned by us; the memfd is at least HDR + size bytes (checked above).
                    let p = unsafe {
                        libc::mmap(
                            (rbase + off) as *mut c_void,
                            *size,
                            libc::PROT_READ | libc::PROT_WRITE,
                            libc::MAP_SHARED | libc::MAP_FIXED,
                            f.as_raw_fd(),
                            HDR as libc::off_t,
                        )
                    };
                    if p == libc::MAP_FAILED {
                        let err = os_err("mapping a remote block");
                        // SAFETY: our own reservation.
                        unsafe { libc::munmap(r, len) };
                        return Err(err);
                    }
                    off += size;
                }
                Access::Mapped {
                    base: rbase,
                    len,
                    view: rbase + (e.addr - base) as usize,
                }
            }
        };
        xinc(XCtr::RemoteMaps);
        Ok(Remote {
            id: e.id,
            tag: e.tag,
            kind: e.kind,
            addr: e.addr,
            size: e.size,
            access,
        })
    }

    /// Whether `[addr, addr + len)` (server addresses) lies in this block.
    pub(crate) fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr + self.size)
    }

    /// Copies `n` bytes between `local` (an address in this process, checked by the caller and
    /// kept valid for the call) and the server address `remote` of this block. `put`: local →
    /// remote.
    pub(crate) fn copy(
        &self,
        put: bool,
        remote: u64,
        local: usize,
        n: usize,
    ) -> Result<(), String> {
        match self.access {
            Access::Mapped { view, .. } => {
                let r = view + (remote - self.addr) as usize;
                let (src, dst) = if put { (local, r) } else { (r, local) };
                // SAFETY: `r..r+n` lies in our live private mapping of the block (the caller
                // checked `contains`), `local..local+n` is valid per the caller; the two never
                // overlap (the mapping is private to this Remote); `copy` tolerates it anyway.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
                Ok(())
            }
            Access::Pid(pid) => {
                let mut done = 0usize;
                while done < n {
                    let l = libc::iovec {
                        iov_base: (local + done) as *mut c_void,
                        iov_len: n - done,
                    };
                    let r = libc::iovec {
                        iov_base: (remote as usize + done) as *mut c_void,
                        iov_len: n - done,
                    };
                    // SAFETY: the local iovec is valid per the caller; the remote one is only
                    // touched by the kernel in the other process, which fails with EFAULT
                    // rather than faulting us.
                    let got = unsafe {
                        if put {
                            libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
                        } else {
                            libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
                        }
                    };
                    if got <= 0 {
                        return Err(format!(
                            "{} of process {pid} at {:#x} failed: {}",
                            if put {
                                "writing memory"
                            } else {
                                "reading memory"
                            },
                            remote as usize + done,
                            std::io::Error::last_os_error()
                        ));
                    }
                    done += got as usize;
                }
                Ok(())
            }
        }
    }
}

/// The comm-mem value the library hands out for a block.
pub(crate) fn comm_mem(r: &Remote) -> CommMem {
    CommMem {
        type_: r.kind,
        addr: r.addr as usize as *mut c_void,
        size: r.size,
    }
}
