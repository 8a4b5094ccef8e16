//! The FabricMem control plane over TCP: the server an engine runs on its `ip:port`, and the
//! client calls a connecting engine makes.
//!
//! Server: every accepted connection carries exactly one request frame. A connect request is
//! answered with the current share-handle list and a status; the socket then becomes that
//! client's keepalive session, which carries heartbeat frames until it closes. A disconnect
//! request closes the named session. A notify is queued. Anything malformed (wrong magic,
//! length over 1 MiB, truncated, invalid JSON, wrong field types, unknown message type) closes
//! that one connection with a logged error; the server keeps serving everyone else.
//!
//! Client: [`connect`] opens a new connection, exchanges connect/response/status, and returns
//! the offered entries with the socket kept as the keepalive channel; [`disconnect`] and
//! [`send_notify`] each use a new connection, as HIXL does.

use crate::wire::{
    self, ConnectMsg, DisconnectMsg, Frame, MsgType, NotifyMsg, ShareHandleEntry, StatusMsg,
    WireError,
};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// HIXL status codes carried in status messages.
pub mod status {
    /// Success.
    pub const SUCCESS: u32 = 0;
    /// Bad argument, bad option, unknown request.
    pub const PARAM_INVALID: u32 = 103_900;
    /// A wait ran out.
    pub const TIMEOUT: u32 = 103_901;
    /// No connection to that peer.
    pub const NOT_CONNECTED: u32 = 103_902;
    /// Already connected to that peer.
    pub const ALREADY_CONNECTED: u32 = 103_903;
    /// Option, call or feature not available.
    pub const UNSUPPORTED: u32 = 103_905;
    /// Out of a resource.
    pub const RESOURCE_EXHAUSTED: u32 = 203_900;
    /// Generic failure.
    pub const FAILED: u32 = 503_900;
}

/// JSON key our engines add to a connect request when a shared secret is configured. HIXL
/// ignores keys it does not know, so the request stays compatible.
pub const AUTH_KEY: &str = "auth";
/// Notify queue capacity.
pub const NOTIFY_QUEUE_CAP: usize = 4096;
/// Timeout for the server's sends (HIXL: 3 s) and for reading a request frame.
pub const SERVER_IO_TIMEOUT: Duration = Duration::from_secs(3);

/// What the server needs from its engine.
pub trait ControlHandler: Send + Sync + 'static {
    /// The current export list offered to a connecting client.
    fn share_handles(&self) -> Vec<ShareHandleEntry>;
    /// A client's keepalive session began.
    fn session_opened(&self, _channel_id: &str) {}
    /// A client's keepalive session ended (closed socket or disconnect request).
    fn session_closed(&self, _channel_id: &str) {}
}

/// Server settings.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// Require this secret in connect requests.
    pub shared_secret: Option<String>,
    /// Accept connections only from these IPs.
    pub allowed_peers: Option<Vec<IpAddr>>,
}

struct Session {
    id: u64,
    stream: TcpStream,
    last_heartbeat: Instant,
}

struct Shared {
    handler: Arc<dyn ControlHandler>,
    config: ServerConfig,
    stop: AtomicBool,
    sessions: Mutex<HashMap<String, Session>>,
    next_session: AtomicU64,
    notifies: Mutex<VecDeque<NotifyMsg>>,
    /// Connections closed because of a malformed or refused request.
    rejected: AtomicU64,
}

/// A running control server. Dropping it stops the accept loop and closes every session.
pub struct ControlServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ControlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ControlServer {
    /// Binds `addr` and starts serving.
    ///
    /// # Errors
    /// The bind error (e.g. the port is taken).
    pub fn start(
        addr: SocketAddr,
        handler: Arc<dyn ControlHandler>,
        config: ServerConfig,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            handler,
            config,
            stop: AtomicBool::new(false),
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            notifies: Mutex::new(VecDeque::new()),
            rejected: AtomicU64::new(0),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name(format!("fabric-ctl-{}", addr.port()))
            .spawn(move || accept_loop(listener, s))?;
        tracing::debug!(%addr, "control server listening");
        Ok(ControlServer {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Channel ids of the live keepalive sessions.
    pub fn sessions(&self) -> Vec<String> {
        self.shared.sessions.lock().keys().cloned().collect()
    }

    /// Drains the queued notifies.
    pub fn take_notifies(&self) -> Vec<NotifyMsg> {
        self.shared.notifies.lock().drain(..).collect()
    }

    /// Connections closed because their request was malformed or refused.
    pub fn rejected(&self) -> u64 {
        self.shared.rejected.load(Ordering::Relaxed)
    }

    /// Time since the last heartbeat of a session.
    pub fn since_heartbeat(&self, channel_id: &str) -> Option<Duration> {
        self.shared
            .sessions
            .lock()
            .get(channel_id)
            .map(|s| s.last_heartbeat.elapsed())
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let sessions: Vec<_> = self.shared.sessions.lock().drain().collect();
        for (_, s) in sessions {
            let _ = s.stream.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Some(allowed) = &shared.config.allowed_peers {
                    if !allowed.contains(&peer.ip()) {
                        tracing::warn!(%peer, "control connection refused: peer not on the allow-list");
                        shared.rejected.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                }
                let s = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("fabric-ctl-conn".into())
                    .spawn(move || serve_connection(stream, peer, s));
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot spawn a control connection thread");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn reject(shared: &Shared, peer: SocketAddr, e: &dyn std::fmt::Display) {
    shared.rejected.fetch_add(1, Ordering::Relaxed);
    tracing::error!(%peer, error = %e, "control connection closed: bad request");
}

fn send_status(stream: &mut TcpStream, code: u32) -> Result<(), WireError> {
    let f = Frame::new(
        MsgType::Status,
        &StatusMsg {
            error_code: code,
            error_message: String::new(),
        },
    )?;
    wire::write_frame(stream, &f)
}

fn serve_connection(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(SERVER_IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(SERVER_IO_TIMEOUT));
    let frame = match wire::read_frame(&mut stream) {
        Ok(f) => f,
        Err(e) => return reject(&shared, peer, &e),
    };
    match MsgType::from_raw(frame.msg_type) {
        Some(MsgType::Connect) => serve_connect(stream, peer, &frame, &shared),
        Some(MsgType::Disconnect) => {
            let msg: DisconnectMsg = match frame.parse(MsgType::Disconnect, "disconnect request") {
                Ok(m) => m,
                Err(e) => return reject(&shared, peer, &e),
            };
            // Close the session before answering, so a client that sees the status knows the
            // server has let go of it.
            let removed = shared.sessions.lock().remove(&msg.channel_id);
            if let Some(s) = removed {
                let _ = s.stream.shutdown(Shutdown::Both);
                shared.handler.session_closed(&msg.channel_id);
                tracing::debug!(channel = %msg.channel_id, "session closed by disconnect request");
            }
            let _ = send_status(&mut stream, status::SUCCESS);
        }
        Some(MsgType::SendNotify) => {
            let msg: NotifyMsg = match frame.parse(MsgType::SendNotify, "notify") {
                Ok(m) => m,
                Err(e) => return reject(&shared, peer, &e),
            };
            if let Err(e) = msg.validate() {
                return reject(&shared, peer, &e);
            }
            let mut q = shared.notifies.lock();
            if q.len() >= NOTIFY_QUEUE_CAP {
                tracing::warn!("notify queue full; notify dropped");
            } else {
                q.push_back(msg);
            }
        }
        _ => reject(
            &shared,
            peer,
            &WireError::UnexpectedType {
                found: frame.msg_type,
            },
        ),
    }
}

fn serve_connect(mut stream: TcpStream, peer: SocketAddr, frame: &Frame, shared: &Arc<Shared>) {
    let value: serde_json::Value = match serde_json::from_slice(&frame.payload) {
        Ok(v) => v,
        Err(source) => {
            return reject(
                shared,
                peer,
                &WireError::Json {
                    message: "connect request",
                    source,
                },
            )
        }
    };
    let auth = value
        .get(AUTH_KEY)
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let req: ConnectMsg = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(source) => {
            return reject(
                shared,
                peer,
                &WireError::Json {
                    message: "connect request",
                    source,
                },
            )
        }
    };
    let authorised = match &shared.config.shared_secret {
        None => true,
        Some(secret) => auth.as_deref() == Some(secret.as_str()),
    };
    let entries = if authorised {
        shared.handler.share_handles()
    } else {
        Vec::new()
    };
    let resp = match Frame::new(MsgType::Connect, &ConnectMsg::response(&req, entries)) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "share-handle list does not fit in one frame");
            let _ = send_status(&mut stream, status::FAILED);
            return;
        }
    };
    let code = if authorised {
        status::SUCCESS
    } else {
        status::PARAM_INVALID
    };
    // The socket becomes the client's keepalive session. It is registered before the answer
    // goes out, so a client that sees success finds its session in place. A duplicate channel
    // id is still answered with success (as HIXL does) but not registered, and is closed.
    let id = shared.next_session.fetch_add(1, Ordering::Relaxed);
    let mut registered = false;
    if authorised {
        let mut sessions = shared.sessions.lock();
        if sessions.contains_key(&req.channel_id) {
            tracing::warn!(channel = %req.channel_id, "duplicate channel id; new session closed");
        } else if let Ok(clone) = stream.try_clone() {
            sessions.insert(
                req.channel_id.clone(),
                Session {
                    id,
                    stream: clone,
                    last_heartbeat: Instant::now(),
                },
            );
            registered = true;
        }
    }
    if registered {
        shared.handler.session_opened(&req.channel_id);
    }
    if let Err(e) =
        wire::write_frame(&mut stream, &resp).and_then(|()| send_status(&mut stream, code))
    {
        tracing::warn!(%peer, error = %e, "connect response not delivered");
        if registered {
            end_session(shared, &req.channel_id, id);
        }
        return;
    }
    if !authorised {
        reject(shared, peer, &"connect request without the shared secret");
        return;
    }
    if !registered {
        return;
    }
    tracing::debug!(channel = %req.channel_id, %peer, "session opened");
    // Block on whole heartbeat frames; the server's Drop and a disconnect request shut the
    // socket down, which ends this loop.
    let _ = stream.set_read_timeout(None);
    loop {
        match wire::read_heartbeat(&mut stream) {
            Ok(t) if t == wire::HEARTBEAT_MSG_TYPE => {
                if let Some(s) = shared.sessions.lock().get_mut(&req.channel_id) {
                    s.last_heartbeat = Instant::now();
                }
            }
            Ok(t) => {
                tracing::warn!(channel = %req.channel_id, msg_type = t, "keepalive frame of unknown type skipped")
            }
            Err(e) => {
                if !matches!(e, WireError::Truncated { got: 0, .. })
                    && !shared.stop.load(Ordering::SeqCst)
                {
                    reject(shared, peer, &e);
                }
                break;
            }
        }
    }
    end_session(shared, &req.channel_id, id);
}

/// Removes session `id` of `channel_id` if it is still the registered one, and tells the
/// handler.
fn end_session(shared: &Shared, channel_id: &str, id: u64) {
    let mut sessions = shared.sessions.lock();
    if sessions.get(channel_id).is_some_and(|s| s.id == id) {
        sessions.remove(channel_id);
        drop(sessions);
        shared.handler.session_closed(channel_id);
        tracing::debug!(channel = %channel_id, "session ended");
    }
}

/// An error of a client exchange.
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
    /// The server answered with a non-zero status.
    #[error("{addr} refused the request with status {code}")]
    Status {
        /// The server.
        addr: SocketAddr,
        /// The HIXL status code.
        code: u32,
    },
}

impl ClientError {
    /// The HIXL status this error corresponds to.
    pub fn status(&self) -> u32 {
        match self {
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
        }
    }
}

fn open(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, ClientError> {
    let t = if timeout.is_zero() {
        Duration::from_secs(3)
    } else {
        timeout
    };
    let s = TcpStream::connect_timeout(&addr, t)
        .map_err(|source| ClientError::Connect { addr, source })?;
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(t));
    let _ = s.set_write_timeout(Some(t));
    Ok(s)
}

/// A successful connect: what the server offered, and the keepalive socket.
#[derive(Debug)]
pub struct Connected {
    /// The server's share-handle list.
    pub entries: Vec<ShareHandleEntry>,
    /// The socket that now carries heartbeats; closing it ends the session.
    pub keepalive: TcpStream,
}

/// Connects as `channel_id` (our own engine address) to the server at `addr`.
///
/// # Errors
/// [`ClientError`] for an unreachable server, a malformed or unexpected frame, or a refusal.
pub fn connect(
    addr: SocketAddr,
    channel_id: &str,
    timeout: Duration,
    secret: Option<&str>,
) -> Result<Connected, ClientError> {
    let wire_err = |source| ClientError::Wire { addr, source };
    let mut s = open(addr, timeout)?;
    let req = ConnectMsg::request(channel_id, timeout.as_millis() as i64);
    let mut value = serde_json::to_value(&req).expect("serialisable");
    if let Some(secret) = secret {
        value[AUTH_KEY] = serde_json::Value::String(secret.to_owned());
    }
    wire::write_frame(
        &mut s,
        &Frame::new(MsgType::Connect, &value).map_err(wire_err)?,
    )
    .map_err(wire_err)?;
    let resp: ConnectMsg = wire::read_frame(&mut s)
        .and_then(|f| f.parse(MsgType::Connect, "connect response"))
        .map_err(wire_err)?;
    let st: StatusMsg = wire::read_frame(&mut s)
        .and_then(|f| f.parse(MsgType::Status, "status"))
        .map_err(wire_err)?;
    if st.error_code != status::SUCCESS {
        return Err(ClientError::Status {
            addr,
            code: st.error_code,
        });
    }
    let _ = s.set_read_timeout(None);
    Ok(Connected {
        entries: resp.share_handles,
        keepalive: s,
    })
}

/// Sends one heartbeat on a keepalive socket (3 s send timeout, as HIXL).
///
/// # Errors
/// The I/O error: the peer is gone.
pub fn send_heartbeat(keepalive: &mut TcpStream) -> io::Result<()> {
    keepalive.set_write_timeout(Some(Duration::from_secs(3)))?;
    keepalive.write_all(&wire::heartbeat_bytes())
}

/// Asks the server at `addr` to close the session of `channel_id`, on a new connection.
///
/// # Errors
/// [`ClientError`]; the caller may ignore it, as HIXL does.
pub fn disconnect(
    addr: SocketAddr,
    channel_id: &str,
    timeout: Duration,
) -> Result<(), ClientError> {
    let wire_err = |source| ClientError::Wire { addr, source };
    let mut s = open(addr, timeout)?;
    let msg = DisconnectMsg {
        channel_id: channel_id.to_owned(),
    };
    wire::write_frame(
        &mut s,
        &Frame::new(MsgType::Disconnect, &msg).map_err(wire_err)?,
    )
    .map_err(wire_err)?;
    let st: StatusMsg = wire::read_frame(&mut s)
        .and_then(|f| f.parse(MsgType::Status, "status"))
        .map_err(wire_err)?;
    if st.error_code != status::SUCCESS {
        return Err(ClientError::Status {
            addr,
            code: st.error_code,
        });
    }
    Ok(())
}

/// Sends a notify on a new connection (no reply, as in HIXL).
///
/// # Errors
/// [`ClientError`] for an unreachable server or a notify over the length limits.
pub fn send_notify(
    addr: SocketAddr,
    msg: &NotifyMsg,
    timeout: Duration,
) -> Result<(), ClientError> {
    let wire_err = |source| ClientError::Wire { addr, source };
    msg.validate().map_err(wire_err)?;
    let mut s = open(addr, timeout)?;
    wire::write_frame(
        &mut s,
        &Frame::new(MsgType::SendNotify, msg).map_err(wire_err)?,
    )
    .map_err(wire_err)
}
