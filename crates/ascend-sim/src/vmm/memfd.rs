//! The layout of a physical allocation's memfd: a metadata page ([`Header`], [`HDR`] bytes)
//! then the data. The header carries what sharing needs (magic, location, size, export flags,
//! share types, the pid allow-list, the exporter's emulated host and supernode), so an
//! importer reads it from the descriptor it obtained.

use std::ffi::c_void;

use acl_sys::*;

use crate::rt::Res;

/// Size of the metadata page at the start of every physical memfd.
pub(crate) const HDR: usize = 4096;

pub(crate) const MAGIC: [u8; 8] = *b"ASIMPHY2";
/// Size of the pid allow-list in the header.
pub(crate) const MAX_PIDS: usize = 64;

/// The metadata page at the start of every physical memfd.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Header {
    pub magic: [u8; 8],
    pub version: u32,
    pub owner_pid: i32,
    pub loc_type: u32,
    pub loc_id: u32,
    pub mem_attr: u32,
    pub device: i32,
    pub size: u64,
    pub ino: u64,
    pub export_flags: u64,
    pub share_types: u32,
    pub pid_count: u32,
    pub pids: [i32; MAX_PIDS],
    /// The emulated host and supernode of the exporter (set at export).
    pub host: u32,
    pub supernode: u32,
}

impl Header {
    pub(crate) fn zeroed() -> Self {
        Header {
            magic: [0; 8],
            version: 0,
            owner_pid: 0,
            loc_type: 0,
            loc_id: 0,
            mem_attr: 0,
            device: 0,
            size: 0,
            ino: 0,
            export_flags: 0,
            share_types: 0,
            pid_count: 0,
            pids: [0; MAX_PIDS],
            host: 0,
            supernode: 0,
        }
    }
}

pub(crate) fn fstat(fd: i32) -> Res<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-buffer; a bad fd only yields an error.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        bail!(
            ACL_ERROR_RT_DRV_INTERNAL_ERROR,
            "fstat failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(st)
}

pub(crate) fn write_header(fd: i32, h: &Header) -> Res {
    let n = std::mem::size_of::<Header>();
    // SAFETY: `h` is a plain repr(C) value readable for `n` bytes; the fd is our memfd.
    let w = unsafe { libc::pwrite(fd, (h as *const Header).cast::<c_void>(), n, 0) };
    ensure!(
        w == n as isize,
        ACL_ERROR_RT_DRV_INTERNAL_ERROR,
        "writing the share header failed: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

pub(crate) fn read_header(fd: i32) -> Option<Header> {
    let mut h = Header::zeroed();
    let n = std::mem::size_of::<Header>();
    // SAFETY: `h` is writable for `n` bytes and every bit pattern is a valid Header (integers
    // and byte arrays only). The caller checked that `fd` is a regular file, so pread cannot
    // block.
    let r = unsafe { libc::pread(fd, (&mut h as *mut Header).cast::<c_void>(), n, 0) };
    (r == n as isize).then_some(h)
}
