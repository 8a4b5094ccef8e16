//! The client calls: connect, disconnect, notify (each on a new connection), heartbeats.

use super::auth::{self, Nonces, Role};
use super::{status, SERVER_IO_TIMEOUT};
use crate::wire::{
    self, AuthChallenge, AuthHello, AuthProof, ConnectMsg, DisconnectMsg, Frame, MsgType,
    NotifyMsg, SegmentName, ShareHandleEntry, StatusMsg, WireError,
};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A control-plane exchange with a peer failed: connect, disconnect, notify or a segments
/// request ([`Error::Control`](crate::Error::Control)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The TCP connection could not be made within the timeout.
    #[error("cannot reach {addr}: {source}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A frame was malformed or unexpected, or I/O failed mid-exchange.
    #[error("control exchange with {addr}: {source}")]
    Wire {
        /// The server.
        addr: SocketAddr,
        /// What went wrong.
        #[source]
        source: WireError,
    },
    /// The server answered with a non-zero status (and, from our servers, why: for example
    /// that it is over its connection cap).
    #[error("{addr} refused the request with status {code}{}", refusal_text(*.code, .message))]
    Status {
        /// The server.
        addr: SocketAddr,
        /// The HIXL status code.
        code: u32,
        /// The server's `error_message` (empty from HIXL).
        message: String,
    },
    /// We hold a shared secret and the server did not prove it knows it: it closed the
    /// connection or answered without a challenge (it has no secret, or is not ours), or its
    /// proof did not verify (an impostor, or the two sides' secrets differ). Nothing past
    /// the handshake was sent to it. (The one answer believed before the proof is a
    /// `RESOURCE_EXHAUSTED` status, our server's "over its connection cap", reported as
    /// [`ClientError::Status`].)
    #[error("{addr} did not prove it knows the shared secret: {reason}")]
    ServerAuth {
        /// The server.
        addr: SocketAddr,
        /// What the server did instead.
        reason: &'static str,
    },
}

impl ClientError {
    /// Whether the exchange ran out of its time (reaching the server, or waiting for its
    /// answer), as opposed to failing.
    pub fn is_timeout(&self) -> bool {
        self.status().0 == status::TIMEOUT && !matches!(self, ClientError::Status { .. })
    }

    /// The HIXL status this error corresponds to.
    pub fn status(&self) -> crate::HixlCode {
        crate::HixlCode(match self {
            ClientError::Connect { source, .. } if source.kind() == io::ErrorKind::TimedOut => {
                status::TIMEOUT
            }
            ClientError::Connect { .. } => status::FAILED,
            ClientError::Wire {
                source: WireError::Io(e),
                ..
            } if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
            {
                status::TIMEOUT
            }
            ClientError::Wire { .. } => status::PARAM_INVALID,
            ClientError::Status { code, .. } => *code,
            ClientError::ServerAuth { .. } => status::FAILED,
        })
    }
}

/// The name of a refusal's code and the server's message, for its error text.
fn refusal_text(code: u32, message: &str) -> String {
    let name = crate::HixlCode(code)
        .name()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    if message.is_empty() {
        name
    } else {
        format!("{name}: {message}")
    }
}

/// A status frame read where another answer was expected, as its refusal (our server answers
/// a connection it refuses at once, over its cap, with a status instead of the exchange).
fn refusal(addr: SocketAddr, frame: &Frame) -> Option<ClientError> {
    let st: StatusMsg = frame.parse(MsgType::Status, "status").ok()?;
    (st.error_code != status::SUCCESS).then_some(ClientError::Status {
        addr,
        code: st.error_code,
        message: st.error_message,
    })
}

/// A client connection whose exchange as a whole ends by one deadline: every read and write
/// waits at most for what is left of it (per-call socket timeouts alone would let a server
/// that sends a byte now and then stretch an exchange without end).
struct Bounded {
    s: TcpStream,
    until: Instant,
}

impl Bounded {
    fn left(&self) -> io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the exchange ran out of time",
            ));
        }
        Ok(left)
    }

    /// The socket, with no read timeout (a keepalive socket blocks until the peer closes).
    fn into_keepalive(self) -> TcpStream {
        let _ = self.s.set_read_timeout(None);
        self.s
    }
}

impl io::Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.s.set_read_timeout(Some(self.left()?))?;
        self.s.read(buf)
    }
}

impl io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.s.set_write_timeout(Some(self.left()?))?;
        self.s.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.s.flush()
    }
}

/// Opens a connection and, with a secret, runs the handshake; the request frame goes next.
/// The whole exchange, connecting included, ends by `timeout` from now (3 s if zero).
fn open(addr: SocketAddr, timeout: Duration, secret: Option<&str>) -> Result<Bounded, ClientError> {
    let t = if timeout.is_zero() {
        SERVER_IO_TIMEOUT
    } else {
        timeout
    };
    let until = super::deadline_after(t);
    let s = TcpStream::connect_timeout(&addr, t)
        .map_err(|source| ClientError::Connect { addr, source })?;
    let _ = s.set_nodelay(true);
    let mut s = Bounded { s, until };
    if let Some(secret) = secret {
        authenticate(&mut s, addr, secret)?;
    }
    Ok(s)
}

fn authenticate(s: &mut Bounded, addr: SocketAddr, secret: &str) -> Result<(), ClientError> {
    let wire_err = |source| ClientError::Wire { addr, source };
    let client = auth::nonce().map_err(|e| wire_err(e.into()))?;
    let hello = Frame::new(
        MsgType::AuthHello,
        &AuthHello {
            client_nonce: client,
        },
    )
    .map_err(wire_err)?;
    wire::write_frame(s, &hello).map_err(wire_err)?;
    let answer = match wire::read_frame(s) {
        Ok(f) => f,
        Err(WireError::Io(e))
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return Err(wire_err(WireError::Io(e)))
        }
        Err(_) => {
            return Err(ClientError::ServerAuth {
                addr,
                reason: "it closed the connection instead of answering the handshake",
            })
        }
    };
    // Before it proves the secret, a server is believed about one thing only: that it is
    // over its connection cap (the one status our server sends before the handshake).
    match refusal(addr, &answer) {
        Some(refused @ ClientError::Status { code, .. }) if code == status::RESOURCE_EXHAUSTED => {
            return Err(refused)
        }
        Some(_) => {
            return Err(ClientError::ServerAuth {
                addr,
                reason: "it answered the handshake with a status instead of a challenge",
            })
        }
        None => {}
    }
    let challenge: AuthChallenge = answer
        .parse(MsgType::AuthChallenge, "auth challenge")
        .map_err(|_| ClientError::ServerAuth {
            addr,
            reason: "it answered the handshake without a valid challenge",
        })?;
    let nonces = Nonces {
        client,
        server: challenge.server_nonce,
    };
    if !nonces.check(secret, Role::Server, &challenge.server_mac) {
        return Err(ClientError::ServerAuth {
            addr,
            reason: "its proof did not verify (an impostor, or the secrets differ)",
        });
    }
    let proof = AuthProof {
        client_mac: nonces.prove(secret, Role::Client),
    };
    wire::write_frame(
        s,
        &Frame::new(MsgType::AuthProof, &proof).map_err(wire_err)?,
    )
    .map_err(wire_err)
}

fn read_status(s: &mut Bounded, addr: SocketAddr) -> Result<(), ClientError> {
    let st: StatusMsg = wire::read_frame(s)
        .and_then(|f| f.parse(MsgType::Status, "status"))
        .map_err(|source| ClientError::Wire { addr, source })?;
    if st.error_code != status::SUCCESS {
        return Err(ClientError::Status {
            addr,
            code: st.error_code,
            message: st.error_message,
        });
    }
    Ok(())
}

/// A successful connect: what the server offered, and the keepalive socket.
#[derive(Debug)]
pub struct Connected {
    /// The server's share-handle list.
    pub entries: Vec<ShareHandleEntry>,
    /// Names the server gave its registrations (empty from HIXL).
    pub names: Vec<SegmentName>,
    /// The socket that now carries heartbeats; closing it ends the session.
    pub keepalive: TcpStream,
}

/// Connects as `channel_id` (the engine's id, [`Engine::channel_id`](crate::Engine::channel_id),
/// which says what a server does with an id that already has a session) to the server at
/// `addr`, proving knowledge of `secret` first if one is given.
///
/// # Errors
/// [`ClientError`] for an unreachable server, a malformed or unexpected frame, a refusal
/// (`ALREADY_CONNECTED` when `channel_id` has a session there), or a server that cannot prove
/// it knows `secret` ([`ClientError::ServerAuth`]).
pub fn connect(
    addr: SocketAddr,
    channel_id: &str,
    timeout: Duration,
    secret: Option<&str>,
) -> Result<Connected, ClientError> {
    let mut s = open(addr, timeout, secret)?;
    let resp = ask_offer(&mut s, addr, MsgType::Connect, channel_id, timeout)?;
    Ok(Connected {
        entries: resp.share_handles,
        names: resp.segment_names,
        keepalive: s.into_keepalive(),
    })
}

/// Asks the server at `addr` for its export list now, for the connected client
/// `channel_id` (a [`MsgType::Segments`] exchange on a new connection): the entries and the
/// names, as a connect would have been offered them.
///
/// # Errors
/// As [`connect`]; `NOT_CONNECTED` when the server has no session of `channel_id`; a C++ HIXL
/// server closes the connection (it knows no such request), which reads as an I/O or wire
/// error.
pub fn segments(
    addr: SocketAddr,
    channel_id: &str,
    timeout: Duration,
    secret: Option<&str>,
) -> Result<(Vec<ShareHandleEntry>, Vec<SegmentName>), ClientError> {
    let mut s = open(addr, timeout, secret)?;
    let resp = ask_offer(&mut s, addr, MsgType::Segments, channel_id, timeout)?;
    Ok((resp.share_handles, resp.segment_names))
}

/// The exchange a connect and a segments request share on `s`: a [`ConnectMsg`] request of
/// type `ty` under `channel_id`, the server's [`ConnectMsg`] answer (or its refusal), then its
/// status.
fn ask_offer(
    s: &mut Bounded,
    addr: SocketAddr,
    ty: MsgType,
    channel_id: &str,
    timeout: Duration,
) -> Result<ConnectMsg, ClientError> {
    let wire_err = |source| ClientError::Wire { addr, source };
    let req = ConnectMsg::request(channel_id, timeout.as_millis() as i64);
    wire::write_frame(s, &Frame::new(ty, &req).map_err(wire_err)?).map_err(wire_err)?;
    let frame = wire::read_frame(s).map_err(wire_err)?;
    if let Some(refused) = refusal(addr, &frame) {
        return Err(refused);
    }
    let resp: ConnectMsg = frame.parse(ty, "the server's offer").map_err(wire_err)?;
    read_status(s, addr)?;
    Ok(resp)
}

/// Sends one heartbeat on a keepalive socket (3 s send timeout, as HIXL).
///
/// # Errors
/// The I/O error: the peer is gone.
pub fn send_heartbeat(keepalive: &mut TcpStream) -> io::Result<()> {
    keepalive.set_write_timeout(Some(Duration::from_secs(3)))?;
    keepalive.write_all(&wire::heartbeat_bytes())
}

/// Asks the server at `addr` to close the session of `channel_id`, on a new connection
/// (authenticated first if `secret` is given).
///
/// # Errors
/// [`ClientError`]; the caller may ignore it, as HIXL does.
pub fn disconnect(
    addr: SocketAddr,
    channel_id: &str,
    timeout: Duration,
    secret: Option<&str>,
) -> Result<(), ClientError> {
    let wire_err = |source| ClientError::Wire { addr, source };
    let mut s = open(addr, timeout, secret)?;
    let msg = DisconnectMsg {
        channel_id: channel_id.to_owned(),
    };
    wire::write_frame(
        &mut s,
        &Frame::new(MsgType::Disconnect, &msg).map_err(wire_err)?,
    )
    .map_err(wire_err)?;
    read_status(&mut s, addr)
}

/// Sends a notify on a new connection (authenticated first if `secret` is given; no reply,
/// as in HIXL).
///
/// # Errors
/// [`ClientError`] for an unreachable server, a notify over the length limits, or a server
/// that cannot prove it knows `secret`.
pub fn send_notify(
    addr: SocketAddr,
    msg: &NotifyMsg,
    timeout: Duration,
    secret: Option<&str>,
) -> Result<(), ClientError> {
    let wire_err = |source| ClientError::Wire { addr, source };
    msg.validate().map_err(wire_err)?;
    let mut s = open(addr, timeout, secret)?;
    wire::write_frame(
        &mut s,
        &Frame::new(MsgType::SendNotify, msg).map_err(wire_err)?,
    )
    .map_err(wire_err)
}
