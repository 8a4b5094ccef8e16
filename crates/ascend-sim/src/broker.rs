//! A descriptor broker: how an importer takes an exporter's memfd where `pidfd_getfd` is not
//! permitted (a container whose seccomp profile allows it only with `CAP_SYS_PTRACE`, as
//! Docker's default does; Yama `ptrace_scope` 2; processes of another user).
//!
//! Every process that shares memory (an export, an HCCL communicator, a HixlCS server) listens
//! on the abstract Unix socket `ascend-sim-broker.<pid>` (no file; gone with the process).
//! An importer connects and sends the descriptor number it wants (4 bytes, native order); the
//! broker answers with a 4-byte status (0 or an errno value) and, on 0, the descriptor itself
//! as `SCM_RIGHTS` ancillary data, then closes the connection.
//!
//! Both ends check each other with `SO_PEERCRED`: the broker serves only a peer of its own
//! user or root (the access `pidfd_getfd` would give under Yama scope 1), and only the
//! emulator's own memfds (`/memfd:ascend-sim-*`, checked on a duplicate, so a descriptor
//! number closed and reused meanwhile is not what gets sent); the importer accepts an answer
//! only from the process it asked, of its own user or root, and then checks the inode and the
//! header of what it receives, as on the `pidfd_getfd` path. Every wait is bounded (connect,
//! request, answer); each request is served on its own thread, at most [`MAX_SERVING`] at once.
//!
//! `ASCEND_SIM_SHARE_VIA=broker` makes importers use the broker first (to test this path
//! where `pidfd_getfd` works).
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long each side waits for the other.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Requests served at once; further connections are closed unanswered.
const MAX_SERVING: usize = 16;

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
        .spawn(move || accept_loop(listener));
    if let Err(e) = spawned {
        eprintln!("ascend-sim: descriptor broker not started: {e}");
    }
}

fn accept_loop(listener: UnixListener) {
    static SERVING: AtomicUsize = AtomicUsize::new(0);
    loop {
        let conn = match listener.accept() {
            Ok((c, _)) => c,
            Err(_) => {
                // Out of descriptors, say: try again later rather than spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if SERVING.fetch_add(1, Ordering::AcqRel) >= MAX_SERVING {
            SERVING.fetch_sub(1, Ordering::AcqRel);
            continue; // dropped: the importer reads EOF
        }
        let spawned = std::thread::Builder::new()
            .name("ascend-sim-broker-req".into())
            .spawn(move || {
                // Only this connection fails on a misbehaving peer.
                let _ = serve(conn);
                SERVING.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            SERVING.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Answers one request.
fn serve(mut conn: UnixStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.set_write_timeout(Some(TIMEOUT))?;
    if !peer_cred(&conn).is_some_and(|c| same_user(c.uid)) {
        return conn.write_all(&libc::EPERM.to_ne_bytes());
    }
    let mut req = [0u8; 4];
    conn.read_exact(&mut req)?;
    match our_memfd(i32::from_ne_bytes(req)) {
        Some(fd) => send_fd(&conn, fd.as_raw_fd()),
        None => conn.write_all(&libc::EBADF.to_ne_bytes()),
    }
}

/// The other end's credentials.
fn peer_cred(conn: &UnixStream) -> Option<libc::ucred> {
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
    (r == 0).then_some(cred)
}

/// `uid` is this process's effective user or root.
fn same_user(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid == unsafe { libc::geteuid() } || uid == 0
}

/// A duplicate of `fd` if it is open in this process and one of the emulator's memfds.
fn our_memfd(fd: RawFd) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    // SAFETY: F_DUPFD_CLOEXEC on any descriptor number is harmless (EBADF when closed).
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        return None;
    }
    // SAFETY: `d` is a new descriptor owned here.
    let d = unsafe { OwnedFd::from_raw_fd(d) };
    std::fs::read_link(format!("/proc/self/fd/{}", d.as_raw_fd()))
        .is_ok_and(|p| p.to_string_lossy().starts_with("/memfd:ascend-sim-"))
        .then_some(d)
}

/// A control-message buffer for one descriptor, aligned for `cmsghdr`, and the bytes used.
fn control_buf() -> ([u64; 4], usize) {
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    assert!(space <= size_of::<[u64; 4]>(), "CMSG_SPACE(4) = {space}");
    ([0u64; 4], space)
}

/// Sends status 0 with `fd` attached.
fn send_fd(conn: &UnixStream, fd: RawFd) -> std::io::Result<()> {
    let status = 0i32.to_ne_bytes();
    let mut iov = libc::iovec {
        iov_base: status.as_ptr() as *mut libc::c_void,
        iov_len: status.len(),
    };
    let (mut cbuf, space) = control_buf();
    // SAFETY: all-zero is a valid msghdr; the pointers set below outlive the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` describes `cbuf` (8-aligned), which has room for one header carrying one
    // descriptor (CMSG_SPACE above), so CMSG_FIRSTHDR is non-null and CMSG_DATA points
    // inside `cbuf`.
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
    /// The process is gone.
    Gone,
    /// The broker answered with this errno value (`EBADF`: not one of its memfds; `EPERM`:
    /// another user), or the answer came from another process or user (`EPERM`).
    Refused(i32),
    /// The exchange failed part way (or timed out).
    Failed(std::io::Error),
}

fn process_gone(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) != 0 && crate::rt::errno() == libc::ESRCH }
}

/// Connects to process `pid`'s broker within [`TIMEOUT`] (a full backlog makes a blocking
/// connect wait without limit, so the socket connects non-blocking and retries).
fn connect(pid: i32) -> Result<UnixStream, Refusal> {
    let name = name(pid);
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // Abstract: a leading NUL, then the name (no terminator).
    for (d, s) in addr.sun_path[1..].iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    let len = (size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    // SAFETY: plain values.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(Refusal::Failed(std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new socket owned here.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let until = Instant::now() + TIMEOUT;
    loop {
        // SAFETY: `addr` is a sockaddr_un of which the first `len` bytes are set.
        let r = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if r == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Some(libc::EAGAIN) => {
                return Err(Refusal::Failed(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the descriptor broker accepts no connection",
                )))
            }
            Some(libc::EINTR) => {}
            _ => return Err(Refusal::Unreachable(e)),
        }
    }
    // Back to blocking, with timeouts for the exchange.
    // SAFETY: plain fcntl calls on our socket.
    unsafe {
        let fl = libc::fcntl(sock.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(sock.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    let conn = UnixStream::from(sock);
    let io = |r: std::io::Result<()>| r.map_err(Refusal::Failed);
    io(conn.set_read_timeout(Some(TIMEOUT)))?;
    io(conn.set_write_timeout(Some(TIMEOUT)))?;
    Ok(conn)
}

/// Asks process `pid`'s broker for its descriptor `fd`.
pub(crate) fn take(pid: i32, fd: i32) -> Result<OwnedFd, Refusal> {
    if process_gone(pid) {
        return Err(Refusal::Gone);
    }
    let conn = connect(pid)?;
    // The answer must come from that process (the name is not protected), of our user.
    if !peer_cred(&conn).is_some_and(|c| c.pid == pid && same_user(c.uid)) {
        return Err(Refusal::Refused(libc::EPERM));
    }
    (&conn)
        .write_all(&fd.to_ne_bytes())
        .map_err(Refusal::Failed)?;
    let mut status = [0u8; 4];
    let mut iov = libc::iovec {
        iov_base: status.as_mut_ptr().cast(),
        iov_len: status.len(),
    };
    let (mut cbuf, space) = control_buf();
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
    // Take every descriptor that arrived, so all are closed on every path below; keep the
    // first.
    let mut got: Vec<OwnedFd> = Vec::new();
    // SAFETY: the kernel filled `msg`; CMSG_FIRSTHDR/NXTHDR walk only inside `cbuf`, and a
    // SCM_RIGHTS header carries (cmsg_len - CMSG_LEN(0)) / 4 descriptors, now owned by us.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..data / size_of::<RawFd>() {
                    got.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(p.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let fail = |what: &str| {
        Err(Refusal::Failed(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("descriptor broker: {what}"),
        )))
    };
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return fail("ancillary data truncated");
    }
    if n as usize != status.len() {
        return fail("short answer");
    }
    match (i32::from_ne_bytes(status), got.into_iter().next()) {
        (0, Some(fd)) => Ok(fd),
        (0, None) => fail("no descriptor sent"),
        (e, _) => Err(Refusal::Refused(e)),
    }
}
