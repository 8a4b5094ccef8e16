//! Raw bytes to a server.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `bytes` on a new connection to `addr`, half-closes it and returns whatever the server
/// sent back before closing (or before `timeout` passed without a byte). Write errors are
/// ignored: a server may close on the first bad byte, and what it answered is the result.
pub fn send_raw(addr: SocketAddr, bytes: &[u8], timeout: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_read_timeout(Some(timeout)).expect("read timeout");
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn the_answer_is_everything_the_server_sent() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            c.write_all(&got.iter().rev().copied().collect::<Vec<_>>())
                .unwrap();
        });
        let back = send_raw(addr, b"abc", Duration::from_secs(10));
        server.join().unwrap();
        assert_eq!(back, b"cba");
    }
}
