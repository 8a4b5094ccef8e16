//! Reaching into a network namespace from this process: a TCP connection made by a thread
//! that joined the namespace for that alone (`setns`), so the test process, which stays in
//! its own, can talk to a server that listens only inside an emulated host.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// A connection to `addr` from inside the named namespace (`/run/netns/<netns>`, as `ip
/// netns add` makes it), within `timeout`. The socket stays in that namespace after the
/// thread that made it has ended; this process's other threads stay where they are.
///
/// # Errors
/// The namespace cannot be opened or joined (needs `CAP_SYS_ADMIN`), or the connect fails.
pub fn dial(netns: &str, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let ns = File::open(std::path::Path::new("/run/netns").join(netns))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: `ns` is an open descriptor of a namespace file, owned by this function
            // for the whole call; setns changes the network namespace of the calling thread
            // only, a thread made for this connect that ends right after it.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            TcpStream::connect_timeout(&addr, timeout)
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the connecting thread panicked")))
    })
}
