//! One connection of the control server: its phase, input and output buffers, and the parts
//! of the protocol that concern it alone (the handshake and heartbeat framing). Requests are
//! handed up to the event loop, which owns the state they act on.

use super::auth::{self, Nonces, Role};
use super::shared::RevokeWait;
use super::source::Registered;
use super::{ServerConfig, MAX_REQUEST_LEN};
use crate::wire::{
    self, AuthChallenge, AuthHello, AuthProof, Frame, MsgType, WireError, HEARTBEAT_MSG_TYPE,
    MAX_AUTH_FRAME_LEN,
};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Instant;

/// Bytes read from one connection per readiness event, so one fast sender cannot starve the
/// others (the level-triggered poller reports it again).
const READ_BUDGET: usize = 64 << 10;

/// A keepalive session: the connection after a successful connect.
pub(super) struct SessionState {
    pub(super) channel_id: String,
    /// The `va_addr`s of the entries offered to this client, sorted.
    pub(super) offered: Vec<u64>,
    pub(super) last_heartbeat: Instant,
    /// The client takes revocations of single segments on its keepalive socket (it sent
    /// [`KEEPALIVE_SUBSCRIBE`](crate::wire::KEEPALIVE_SUBSCRIBE)): a revocation sends it one
    /// and waits for its answer instead of closing the session.
    pub(super) updates: bool,
}

/// Where a connection is in its life.
pub(super) enum Phase {
    /// Secret set: waiting for [`AuthHello`].
    AwaitHello,
    /// Challenge sent: waiting for [`AuthProof`].
    AwaitProof(Nonces),
    /// Waiting for the one request frame.
    AwaitRequest,
    /// Connected: heartbeats until the socket closes.
    Session(SessionState),
    /// Request handled: the reply goes out, then the write side is shut and input discarded
    /// until the peer closes.
    Draining { since: Instant },
}

/// Why a connection is closed; decides what is counted and logged.
#[derive(Debug)]
pub(super) enum Close {
    /// The peer closed (or, draining, took too long to).
    Done,
    /// A read or write failed.
    Io(io::Error),
    /// A malformed frame or request.
    Malformed(WireError),
    /// No valid proof of the shared secret.
    Auth(&'static str),
    /// The request phase outlived `request_timeout`.
    Deadline,
    /// No heartbeat within `session_heartbeat_timeout`.
    Reaped,
    /// A disconnect request named this session.
    Disconnected,
    /// The server is stopping.
    Stopping,
}

/// What a connection's input asks of the event loop.
pub(super) enum Input {
    /// A complete (and, with a secret, authenticated) request frame.
    Request(Frame),
    /// A heartbeat arrived on a session.
    Heartbeat,
    /// The session's client takes revocations on its keepalive socket.
    Subscribe,
    /// The session's client has carried out its oldest revocation not yet answered.
    RevokeAck,
}

pub(super) struct Conn {
    pub(super) sock: Registered<TcpStream>,
    pub(super) peer: SocketAddr,
    pub(super) accepted: Instant,
    pub(super) phase: Phase,
    inbuf: Vec<u8>,
    /// Heartbeat body bytes still to discard.
    skip: u64,
    out: Vec<u8>,
    out_pos: usize,
    /// Current interest registered with the poller.
    interest: (bool, bool),
    shut_after_flush: bool,
    write_shut: bool,
    /// The peer closed its side while output was still pending.
    pub(super) peer_eof: bool,
    /// The deadline entered in the loop's index for this connection.
    pub(super) indexed_deadline: Option<Instant>,
    /// Revocations waiting for this session to close.
    pub(super) waiters: Vec<Arc<RevokeWait>>,
}

impl Conn {
    pub(super) fn new(
        sock: Registered<TcpStream>,
        peer: SocketAddr,
        now: Instant,
        secret: bool,
    ) -> Conn {
        Conn {
            sock,
            peer,
            accepted: now,
            phase: if secret {
                Phase::AwaitHello
            } else {
                Phase::AwaitRequest
            },
            inbuf: Vec::new(),
            skip: 0,
            out: Vec::new(),
            out_pos: 0,
            interest: (true, false),
            shut_after_flush: false,
            write_shut: false,
            peer_eof: false,
            indexed_deadline: None,
            waiters: Vec::new(),
        }
    }

    /// Reads what is available (up to the budget). Returns whether the peer closed its side.
    pub(super) fn read_ready(&mut self, scratch: &mut [u8]) -> Result<bool, Close> {
        let mut total = 0;
        while total < READ_BUDGET {
            match self.sock.get().read(scratch) {
                Ok(0) => return Ok(true),
                Ok(n) => {
                    total += n;
                    if !matches!(self.phase, Phase::Draining { .. }) {
                        self.inbuf.extend_from_slice(&scratch[..n]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Close::Io(e)),
            }
        }
        Ok(false)
    }

    /// Why the connection ends when the peer closes in the current phase.
    pub(super) fn eof_reason(&self) -> Close {
        match &self.phase {
            Phase::AwaitHello | Phase::AwaitRequest if !self.inbuf.is_empty() => {
                // What the frame needed: its header, and its length once the header is in.
                let header = wire::FRAME_HEADER_LEN as u64;
                let needed = self.inbuf.get(4..12).map_or(header, |l| {
                    header.saturating_add(u64::from_ne_bytes(l.try_into().expect("8 bytes")))
                });
                Close::Malformed(WireError::Truncated {
                    needed,
                    got: self.inbuf.len() as u64,
                })
            }
            Phase::AwaitProof(_) => Close::Auth("closed during the handshake"),
            _ => Close::Done,
        }
    }

    /// The next thing the buffered input asks for, handling the handshake on the way.
    pub(super) fn next_input(&mut self, cfg: &ServerConfig) -> Result<Option<Input>, Close> {
        match &self.phase {
            Phase::AwaitHello => {
                let Some(f) = self.take_frame(MAX_AUTH_FRAME_LEN, true)? else {
                    return Ok(None);
                };
                self.on_hello(&f, cfg)?;
                self.next_input(cfg)
            }
            Phase::AwaitProof(nonces) => {
                let nonces = *nonces;
                let Some(f) = self.take_frame(MAX_AUTH_FRAME_LEN, true)? else {
                    return Ok(None);
                };
                on_proof(&f, &nonces, cfg)?;
                self.phase = Phase::AwaitRequest;
                self.next_input(cfg)
            }
            Phase::AwaitRequest => Ok(self.take_frame(MAX_REQUEST_LEN, false)?.map(Input::Request)),
            Phase::Session(_) => self.take_heartbeat(),
            Phase::Draining { .. } => {
                self.inbuf.clear();
                Ok(None)
            }
        }
    }

    fn take_frame(&mut self, max: u64, handshake: bool) -> Result<Option<Frame>, Close> {
        match wire::decode_frame(&self.inbuf, max) {
            Ok(None) => Ok(None),
            Ok(Some((f, used))) => {
                self.inbuf.drain(..used);
                Ok(Some(f))
            }
            Err(WireError::BadLength { .. }) if handshake => {
                Err(Close::Auth("a frame too long for the handshake"))
            }
            Err(e) => Err(Close::Malformed(e)),
        }
    }

    fn on_hello(&mut self, f: &Frame, cfg: &ServerConfig) -> Result<(), Close> {
        let secret = cfg.shared_secret.as_deref().unwrap_or_default();
        if f.msg_type != MsgType::AuthHello.to_raw() {
            return Err(Close::Auth("a request without the handshake"));
        }
        let hello: AuthHello = f
            .parse(MsgType::AuthHello, "auth hello")
            .map_err(Close::Malformed)?;
        let nonces = Nonces {
            client: hello.client_nonce,
            server: auth::nonce().map_err(Close::Io)?,
        };
        let challenge = AuthChallenge {
            server_mac: nonces.prove(secret, Role::Server),
            server_nonce: nonces.server,
        };
        let frame = Frame::new(MsgType::AuthChallenge, &challenge).map_err(Close::Malformed)?;
        self.queue(&frame.encode());
        self.phase = Phase::AwaitProof(nonces);
        self.flush()
    }

    fn take_heartbeat(&mut self) -> Result<Option<Input>, Close> {
        loop {
            if self.skip > 0 {
                let n = self.skip.min(self.inbuf.len() as u64) as usize;
                self.inbuf.drain(..n);
                self.skip -= n as u64;
                if self.skip > 0 {
                    return Ok(None);
                }
            }
            let Some((msg_type, rest)) =
                wire::decode_heartbeat_head(&self.inbuf).map_err(Close::Malformed)?
            else {
                return Ok(None);
            };
            self.inbuf.drain(..wire::HEARTBEAT_HEADER_LEN + 4);
            self.skip = rest;
            match msg_type {
                HEARTBEAT_MSG_TYPE => return Ok(Some(Input::Heartbeat)),
                wire::KEEPALIVE_SUBSCRIBE => return Ok(Some(Input::Subscribe)),
                wire::KEEPALIVE_REVOKE_ACK => return Ok(Some(Input::RevokeAck)),
                _ => {}
            }
            tracing::warn!(peer = %self.peer, msg_type, "keepalive frame of unknown type skipped");
        }
    }

    /// The request is handled: send what is queued, then shut the write side and discard input
    /// until the peer closes.
    pub(super) fn finish(&mut self, now: Instant) -> Result<(), Close> {
        self.phase = Phase::Draining { since: now };
        self.inbuf.clear();
        self.shut_after_flush = true;
        self.flush()
    }

    /// Shut the write side once everything queued has gone (revocation).
    /// Whether this connection's write side is shut or due to be (a revoked session).
    pub(super) fn revoked(&self) -> bool {
        self.shut_after_flush || self.write_shut
    }

    pub(super) fn shut_write_when_flushed(&mut self) -> Result<(), Close> {
        self.shut_after_flush = true;
        self.flush()
    }

    pub(super) fn queue(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    pub(super) fn has_pending_output(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// Writes what the socket takes now and sets write interest for the rest.
    pub(super) fn flush(&mut self) -> Result<(), Close> {
        while self.has_pending_output() {
            match self.sock.get().write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(Close::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Close::Io(e)),
            }
        }
        let pending = self.has_pending_output();
        if !pending {
            self.out = Vec::new();
            self.out_pos = 0;
            if self.shut_after_flush && !self.write_shut {
                self.write_shut = true;
                // The peer may have gone already; its EOF or error ends the connection anyway.
                let _ = self.sock.get().shutdown(Shutdown::Write);
            }
        }
        self.set_interest(!self.peer_eof, pending)
    }

    /// The peer closed its side while output is pending: stop reading (EOF would be reported
    /// forever), keep writing.
    pub(super) fn set_peer_eof(&mut self) -> Result<(), Close> {
        self.peer_eof = true;
        self.set_interest(false, self.has_pending_output())
    }

    fn set_interest(&mut self, readable: bool, writable: bool) -> Result<(), Close> {
        if self.interest != (readable, writable) {
            self.sock
                .set_interest(readable, writable)
                .map_err(Close::Io)?;
            self.interest = (readable, writable);
        }
        Ok(())
    }

    /// When this connection must next be looked at, and why it closes then.
    pub(super) fn deadline(&self, cfg: &ServerConfig) -> Option<(Instant, Close)> {
        let request_end = self.accepted + cfg.request_timeout;
        match &self.phase {
            Phase::AwaitHello | Phase::AwaitProof(_) | Phase::AwaitRequest => {
                Some((request_end, Close::Deadline))
            }
            Phase::Session(_) if self.has_pending_output() => Some((request_end, Close::Deadline)),
            Phase::Session(s) => cfg
                .session_heartbeat_timeout
                .map(|t| (s.last_heartbeat + t, Close::Reaped)),
            Phase::Draining { since } => Some((*since + cfg.request_timeout, Close::Done)),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        for w in self.waiters.drain(..) {
            w.closed();
        }
    }
}

fn on_proof(f: &Frame, nonces: &Nonces, cfg: &ServerConfig) -> Result<(), Close> {
    let secret = cfg.shared_secret.as_deref().unwrap_or_default();
    if f.msg_type != MsgType::AuthProof.to_raw() {
        return Err(Close::Auth("no proof after the challenge"));
    }
    let proof: AuthProof = f
        .parse(MsgType::AuthProof, "auth proof")
        .map_err(|_| Close::Auth("a malformed proof"))?;
    if !nonces.check(secret, Role::Client, &proof.client_mac) {
        return Err(Close::Auth("a wrong proof"));
    }
    Ok(())
}
