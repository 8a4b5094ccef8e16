//! The emulator's private client/server protocol on loopback TCP: frames of a little-endian
//! `u32` length and a payload, read with plain cursors. Not HIXL's wire format (HixlCS's is not
//! published); both ends are this emulator.

use std::io::{Read, Write};
use std::net::TcpStream;

use hixl_sys::{HixlStatus, HIXL_FAILED};

use super::error::{xerr, XErr, XRes};

pub(crate) const MAGIC: [u8; 8] = *b"ASIMHIXL";
pub(crate) const VERSION: u32 = 1;
/// Request: hello (client → server, first frame).
pub(crate) const REQ_HELLO: u8 = 1;
/// Request: the server's memory list.
pub(crate) const REQ_LIST: u8 = 2;
const MAX_FRAME: usize = 16 << 20;

/// A payload being built.
#[derive(Default)]
pub(crate) struct Buf(pub Vec<u8>);

impl Buf {
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
}

/// A payload being read.
pub(crate) struct Cur<'a> {
    b: &'a [u8],
}

fn short() -> XErr {
    xerr(HIXL_FAILED, "malformed frame from the peer (short)")
}

impl<'a> Cur<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Cur { b }
    }
    fn take(&mut self, n: usize) -> XRes<&'a [u8]> {
        if self.b.len() < n {
            return Err(short());
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub(crate) fn u8(&mut self) -> XRes<u8> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> XRes<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| short())?,
        ))
    }
    pub(crate) fn i32(&mut self) -> XRes<i32> {
        Ok(i32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| short())?,
        ))
    }
    pub(crate) fn u64(&mut self) -> XRes<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| short())?,
        ))
    }
    pub(crate) fn bytes(&mut self) -> XRes<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// How an I/O failure maps to a status: timeouts to `HIXL_TIMEOUT`, a closed peer to
/// `HIXL_NOT_CONNECTED`, the rest to `HIXL_FAILED`.
pub(crate) fn io_status(e: &std::io::Error) -> HixlStatus {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::WouldBlock | K::TimedOut => hixl_sys::HIXL_TIMEOUT,
        K::UnexpectedEof
        | K::ConnectionReset
        | K::ConnectionAborted
        | K::BrokenPipe
        | K::NotConnected => hixl_sys::HIXL_NOT_CONNECTED,
        _ => HIXL_FAILED,
    }
}

fn io_err(what: &str, e: std::io::Error) -> XErr {
    xerr(io_status(&e), format!("{what}: {e}"))
}

pub(crate) fn send(s: &mut TcpStream, payload: &[u8]) -> XRes {
    let mut f = Vec::with_capacity(4 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    f.extend_from_slice(payload);
    s.write_all(&f)
        .map_err(|e| io_err("sending to the peer", e))
}

pub(crate) fn recv(s: &mut TcpStream) -> XRes<Vec<u8>> {
    let mut n = [0u8; 4];
    s.read_exact(&mut n)
        .map_err(|e| io_err("receiving from the peer", e))?;
    let n = u32::from_le_bytes(n) as usize;
    xensure!(
        n <= MAX_FRAME,
        HIXL_FAILED,
        "frame of {n} bytes from the peer is over the limit"
    );
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)
        .map_err(|e| io_err("receiving from the peer", e))?;
    Ok(b)
}
