//! A descriptor broker: how an importer takes an exporter's memfd where `pidfd_getfd` is not
//! permitted (a container whose seccomp profile allows it only with `CAP_SYS_PTRACE`, as
//! Docker's default does; Yama `ptrace_scope` 2; processes of another user).
//!
//! Every process that shares memory (an export, an HCCL communicator, a HixlCS server) listens
//! on the abstract Unix socket `ascend-sim-broker.<pid>` (no file; gone with the process).
//! An importer connects and sends the descriptor number it wants (4 bytes, native order); the
//! broker answers with a 4-byte status (0 or an errno value) and, on 0, the descriptor itself
//! as `SCM_RIGHTS` ancillary data, then closes the connection. It serves only the emulator's
//! own memfds (`/memfd:ascend-sim-*`), and only to a peer of the same user or root (checked
//! with `SO_PEERCRED`): the access `pidfd_getfd` would give under Yama scope 1. The importer
//! checks the inode and the header of what it receives, as on the `pidfd_getfd` path.
//!
//! `ASCEND_SIM_SHARE_VIA=broker` makes importers use the broker first (to test this path
//! where `pidfd_getfd` works).
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

/// How long an importer waits for a broker's answer.
const TIMEOUT: Duration = Duration::from_secs(5);

fn name(pid: i32) -> String {
    format!("ascend-sim-broker.{pid}")
}

/// Whether importers should ask the broker before trying `pidfd_getfd`.
pub(crate) fn preferred() -> bool {
    static PREF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PREF.get_or_init(|| std::env::var("ASCEND_SIM_SHARE_VIA").is_ok_and(|v| v == "broker"))
}

/// Starts this process's broker (once per process; best effort: a failure is reported on
/// stderr and importers then depend on `pidfd_getfd`).
pub(crate) fn start() {
    // Per process: a child forked without exec inherits this state but not the thread.
    static STARTED: std::sync::Mutex<i32> = std::sync::Mutex::new(0);
    let me = crate::rt::getpid();
    let mut started = STARTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *started == me {
        return;
    }
    *started = me;
    {
        let listener = match SocketAddr::from_abstract_name(name(me).as_bytes())
            .and_then(|a| UnixListener::bind_addr(&a))
        {
            Ok(l) => l,
            Err(e) => {
                eprintln!("ascend-sim: descriptor broker not started: {e}");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("ascend-sim-broker".into())
            .spawn(move || {
                for conn in listener.incoming().flatten() {
                    // Only this connection fails on a misbehaving peer.
                    let _ = serve(conn);
                }
            });
        if let Err(e) = spawned {
            eprintln!("ascend-sim: descriptor broker not started: {e}");
        }
    }
}

/// Answers one request.
fn serve(mut conn: UnixStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.set_write_timeout(Some(TIMEOUT))?;
    let mut req = [0u8; 4];
    conn.read_exact(&mut req)?;
    let fd = i32::from_ne_bytes(req);
    let status = if !peer_may_take(&conn) {
        libc::EPERM
    } else if !is_our_memfd(fd) {
        libc::EBADF
    } else {
        0
    };
    if status != 0 {
        return conn.write_all(&status.to_ne_bytes());
    }
    send_fd(&conn, fd)
}

/// Same user as this process, or root.
fn peer_may_take(conn: &UnixStream) -> bool {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    r == 0 && (cred.uid == me || cred.uid == 0)
}

/// Whether `fd` is open in this process and one of the emulator's memfds.
fn is_our_memfd(fd: RawFd) -> bool {
    fd >= 0
        && std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .is_ok_and(|p| p.to_string_lossy().starts_with("/memfd:ascend-sim-"))
}

/// Sends status 0 with `fd` attached.
fn send_fd(conn: &UnixStream, fd: RawFd) -> std::io::Result<()> {
    let status = 0i32.to_ne_bytes();
    let mut iov = libc::iovec {
        iov_base: status.as_ptr() as *mut libc::c_void,
        iov_len: status.len(),
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: all-zero is a valid msghdr; the pointers set below outlive the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` describes `cbuf`, which has room for one header carrying one descriptor
    // (CMSG_SPACE above), so CMSG_FIRSTHDR is non-null and CMSG_DATA points inside `cbuf`.
    let sent = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        libc::sendmsg(conn.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Why the broker could not give a descriptor.
pub(crate) enum Refusal {
    /// No broker listens for that process (gone, or it never shared anything).
    Unreachable(std::io::Error),
    /// The broker answered with this errno value (`EBADF`: not one of its memfds; `EPERM`:
    /// another user).
    Refused(i32),
    /// The exchange failed part way.
    Failed(std::io::Error),
}

/// Asks process `pid`'s broker for its descriptor `fd`.
pub(crate) fn take(pid: i32, fd: i32) -> Result<OwnedFd, Refusal> {
    let conn = SocketAddr::from_abstract_name(name(pid).as_bytes())
        .and_then(|a| UnixStream::connect_addr(&a))
        .map_err(Refusal::Unreachable)?;
    let io = |r: std::io::Result<()>| r.map_err(Refusal::Failed);
    io(conn.set_read_timeout(Some(TIMEOUT)))?;
    io(conn.set_write_timeout(Some(TIMEOUT)))?;
    io((&conn).write_all(&fd.to_ne_bytes()))?;
    let mut status = [0u8; 4];
    let mut iov = libc::iovec {
        iov_base: status.as_mut_ptr().cast(),
        iov_len: status.len(),
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: all-zero is a valid msghdr; the pointers set below outlive the recvmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` describes writable buffers of the sizes given; received descriptors are
    // close-on-exec.
    let n = unsafe { libc::recvmsg(conn.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(Refusal::Failed(std::io::Error::last_os_error()));
    }
    // Take any descriptor first, so it is closed on every path below.
    let mut got: Option<OwnedFd> = None;
    // SAFETY: the kernel filled `msg`; CMSG_FIRSTHDR/NXTHDR walk only inside `cbuf`, and a
    // SCM_RIGHTS header of CMSG_LEN(4) bytes carries one descriptor, now owned by us.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == libc::SCM_RIGHTS
                && (*c).cmsg_len as usize >= libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize
            {
                let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                got = Some(OwnedFd::from_raw_fd(fd));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n as usize != status.len() {
        return Err(Refusal::Failed(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "short answer from the descriptor broker",
        )));
    }
    match (i32::from_ne_bytes(status), got) {
        (0, Some(fd)) => Ok(fd),
        (0, None) => Err(Refusal::Failed(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the descriptor broker sent no descriptor",
        ))),
        (e, _) => Err(Refusal::Refused(e)),
    }
}
