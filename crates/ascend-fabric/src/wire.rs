//! HIXL FabricMem control-plane wire format.
//!
//! Two framings share one TCP port:
//!
//! * **Request/response frames** (12-byte packed header): magic `0xA4B3C2D1` (u32), length
//!   (u64, 4 + payload bytes, at most 1 MiB), message type (i32), then compact UTF-8 JSON.
//! * **Heartbeat frames** on the keepalive socket (16-byte header: magic `0xA1B2C3D4` (u32),
//!   4 bytes of padding, body size (u64, 4 + JSON bytes, at most 1 MiB)), then the message type
//!   (i32, 1 = heartbeat) and `{"msg":72}`.
//!
//! All integers are in host byte order (little-endian on the targets HIXL supports). JSON
//! objects are written with their keys in alphabetical order, as HIXL's serialiser writes
//! them, and read by key. Every limit is checked before a byte of payload is allocated.
//!
//! Our engines add three request types of their own, far outside HIXL's range, for the
//! shared-secret handshake ([`AuthHello`], [`AuthChallenge`], [`AuthProof`], types 1001–1003).
//! They travel in the request framing and are only ever sent when a secret is configured, so
//! without one the bytes on the wire are exactly HIXL's.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::io::{self, Read, Write};

/// Magic of request/response frames.
pub const FRAME_MAGIC: u32 = 0xA4B3_C2D1;
/// Magic of heartbeat frames.
pub const HEARTBEAT_MAGIC: u32 = 0xA1B2_C3D4;
/// Largest accepted `length` / `body_size` (both framings).
pub const MAX_FRAME_LEN: u64 = 1 << 20;
/// Bytes of the request/response header.
pub const FRAME_HEADER_LEN: usize = 12;
/// Bytes of the heartbeat header (before the message type).
pub const HEARTBEAT_HEADER_LEN: usize = 16;
/// Heartbeat message type.
pub const HEARTBEAT_MSG_TYPE: i32 = 1;
/// The heartbeat body: the character `'H'` serialised as a number.
pub const HEARTBEAT_JSON: &str = "{\"msg\":72}";
/// Bytes in a fabric share handle.
pub const SHARE_HANDLE_LEN: usize = 128;
/// Longest notify name or message.
pub const MAX_NOTIFY_FIELD: usize = 1024;

/// Request/response message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MsgType {
    /// `kConnect`: request (client → server) and response (server → client).
    Connect,
    /// `kDisconnect`: client → server.
    Disconnect,
    /// `kStatus`: server → client.
    Status,
    /// `kSendNotifyReq`: client → server.
    SendNotify,
    /// Ours, not HIXL's: client → server, opens the shared-secret handshake ([`AuthHello`]).
    AuthHello,
    /// Ours: server → client, the server's nonce and proof ([`AuthChallenge`]).
    AuthChallenge,
    /// Ours: client → server, the client's proof ([`AuthProof`]).
    AuthProof,
}

impl MsgType {
    /// The wire value.
    pub const fn to_raw(self) -> i32 {
        match self {
            MsgType::Connect => 1,
            MsgType::Disconnect => 2,
            MsgType::Status => 3,
            MsgType::SendNotify => 4,
            MsgType::AuthHello => 1001,
            MsgType::AuthChallenge => 1002,
            MsgType::AuthProof => 1003,
        }
    }

    /// The type for a wire value, if known.
    pub const fn from_raw(v: i32) -> Option<Self> {
        Some(match v {
            1 => MsgType::Connect,
            2 => MsgType::Disconnect,
            3 => MsgType::Status,
            4 => MsgType::SendNotify,
            1001 => MsgType::AuthHello,
            1002 => MsgType::AuthChallenge,
            1003 => MsgType::AuthProof,
            _ => return None,
        })
    }
}

/// A malformed or unexpected frame, or the I/O error that interrupted one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The first four bytes were not the expected magic.
    #[error("bad frame magic {found:#010x} (expected {expected:#010x})")]
    BadMagic {
        /// What arrived.
        found: u32,
        /// What the framing requires.
        expected: u32,
    },
    /// The length field is below 4 or above 1 MiB.
    #[error("frame length {length} outside 4..={max}")]
    BadLength {
        /// The length field.
        length: u64,
        /// The limit.
        max: u64,
    },
    /// The peer closed the connection part-way through a frame.
    #[error("connection closed after {got} of {needed} bytes of a frame")]
    Truncated {
        /// Bytes the frame needs.
        needed: u64,
        /// Bytes that arrived.
        got: u64,
    },
    /// The message type is not one this side accepts here.
    #[error("unexpected message type {found}")]
    UnexpectedType {
        /// The type field.
        found: i32,
    },
    /// The payload is not valid JSON for the expected message, or a field has the wrong type
    /// or value.
    #[error("invalid {message} payload")]
    Json {
        /// Which message was being parsed.
        message: &'static str,
        /// serde_json's description (names the field and position).
        #[source]
        source: serde_json::Error,
    },
    /// A field is outside its documented limit.
    #[error("{field} is {len} bytes, over the limit of {max}")]
    FieldTooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The frame being written would exceed the 1 MiB limit.
    #[error("payload of {len} bytes exceeds the frame limit")]
    PayloadTooLarge {
        /// The payload length.
        len: usize,
    },
    /// Reading or writing the socket failed.
    #[error("control-plane I/O")]
    Io(#[from] io::Error),
}

/// One request/response frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Raw message type (see [`MsgType`]).
    pub msg_type: i32,
    /// The JSON payload bytes.
    pub payload: Vec<u8>,
}

impl Frame {
    /// A frame carrying `msg` serialised as compact JSON.
    ///
    /// # Errors
    /// [`WireError::PayloadTooLarge`] over the 1 MiB limit.
    pub fn new<T: Serialize>(msg_type: MsgType, msg: &T) -> Result<Self, WireError> {
        let payload = serde_json::to_vec(msg).expect("wire messages always serialise");
        if payload.len() as u64 + 4 > MAX_FRAME_LEN {
            return Err(WireError::PayloadTooLarge { len: payload.len() });
        }
        Ok(Frame {
            msg_type: msg_type.to_raw(),
            payload,
        })
    }

    /// The encoded bytes: header then payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FRAME_HEADER_LEN + 4 + self.payload.len());
        out.extend_from_slice(&FRAME_MAGIC.to_ne_bytes());
        out.extend_from_slice(&(4 + self.payload.len() as u64).to_ne_bytes());
        out.extend_from_slice(&self.msg_type.to_ne_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Parses the payload as `T`, requiring the frame to be of type `expected`.
    ///
    /// # Errors
    /// [`WireError::UnexpectedType`] or [`WireError::Json`].
    pub fn parse<T: for<'de> Deserialize<'de>>(
        &self,
        expected: MsgType,
        message: &'static str,
    ) -> Result<T, WireError> {
        if self.msg_type != expected.to_raw() {
            return Err(WireError::UnexpectedType {
                found: self.msg_type,
            });
        }
        serde_json::from_slice(&self.payload).map_err(|source| WireError::Json { message, source })
    }
}

/// Reads exactly `buf.len()` bytes, reporting a clean close part-way as [`WireError::Truncated`].
fn read_full(r: &mut impl Read, buf: &mut [u8], needed: u64, before: u64) -> Result<(), WireError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(WireError::Truncated {
                    needed,
                    got: before + got as u64,
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn check_length(length: u64) -> Result<(), WireError> {
    if !(4..=MAX_FRAME_LEN).contains(&length) {
        return Err(WireError::BadLength {
            length,
            max: MAX_FRAME_LEN,
        });
    }
    Ok(())
}

/// Reads one request/response frame. Validates magic and length before reading the payload.
///
/// # Errors
/// [`WireError::BadMagic`], [`WireError::BadLength`], [`WireError::Truncated`] or I/O errors
/// (a read timeout surfaces as `Io` with kind `WouldBlock`/`TimedOut`).
pub fn read_frame(r: &mut impl Read) -> Result<Frame, WireError> {
    let mut header = [0u8; FRAME_HEADER_LEN];
    read_full(r, &mut header, FRAME_HEADER_LEN as u64, 0)?;
    let magic = u32::from_ne_bytes(header[0..4].try_into().unwrap());
    if magic != FRAME_MAGIC {
        return Err(WireError::BadMagic {
            found: magic,
            expected: FRAME_MAGIC,
        });
    }
    let length = u64::from_ne_bytes(header[4..12].try_into().unwrap());
    check_length(length)?;
    let total = FRAME_HEADER_LEN as u64 + length;
    let mut body = vec![0u8; length as usize];
    read_full(r, &mut body, total, FRAME_HEADER_LEN as u64)?;
    let msg_type = i32::from_ne_bytes(body[0..4].try_into().unwrap());
    body.drain(..4);
    Ok(Frame {
        msg_type,
        payload: body,
    })
}

/// Writes one request/response frame in a single `write_all`.
///
/// # Errors
/// I/O errors.
pub fn write_frame(w: &mut impl Write, frame: &Frame) -> Result<(), WireError> {
    w.write_all(&frame.encode())?;
    w.flush()?;
    Ok(())
}

/// The bytes of one heartbeat frame (30 bytes).
pub fn heartbeat_bytes() -> Vec<u8> {
    let mut out = Vec::with_capacity(HEARTBEAT_HEADER_LEN + 4 + HEARTBEAT_JSON.len());
    out.extend_from_slice(&HEARTBEAT_MAGIC.to_ne_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(4 + HEARTBEAT_JSON.len() as u64).to_ne_bytes());
    out.extend_from_slice(&HEARTBEAT_MSG_TYPE.to_ne_bytes());
    out.extend_from_slice(HEARTBEAT_JSON.as_bytes());
    out
}

/// Reads one keepalive-socket frame and returns its message type (the body is not
/// interpreted, as HIXL's server does not interpret it).
///
/// # Errors
/// [`WireError::BadMagic`], [`WireError::BadLength`], [`WireError::Truncated`] or I/O errors.
pub fn read_heartbeat(r: &mut impl Read) -> Result<i32, WireError> {
    let mut header = [0u8; HEARTBEAT_HEADER_LEN];
    read_full(r, &mut header, HEARTBEAT_HEADER_LEN as u64, 0)?;
    let magic = u32::from_ne_bytes(header[0..4].try_into().unwrap());
    if magic != HEARTBEAT_MAGIC {
        return Err(WireError::BadMagic {
            found: magic,
            expected: HEARTBEAT_MAGIC,
        });
    }
    let size = u64::from_ne_bytes(header[8..16].try_into().unwrap());
    check_length(size)?;
    let mut body = vec![0u8; size as usize];
    read_full(
        r,
        &mut body,
        HEARTBEAT_HEADER_LEN as u64 + size,
        HEARTBEAT_HEADER_LEN as u64,
    )?;
    Ok(i32::from_ne_bytes(body[0..4].try_into().unwrap()))
}

/// Decodes one request/response frame from the front of `buf`, for a reader that buffers
/// partial input: `Ok(None)` while the frame is incomplete, else the frame and the bytes it
/// used. The header is checked as soon as its 12 bytes are there, and `length` against
/// `max_len` (at most [`MAX_FRAME_LEN`]), before the payload has arrived.
///
/// # Errors
/// [`WireError::BadMagic`], [`WireError::BadLength`].
pub fn decode_frame(buf: &[u8], max_len: u64) -> Result<Option<(Frame, usize)>, WireError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let magic = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes"));
    if magic != FRAME_MAGIC {
        return Err(WireError::BadMagic {
            found: magic,
            expected: FRAME_MAGIC,
        });
    }
    if buf.len() < FRAME_HEADER_LEN {
        return Ok(None);
    }
    let length = u64::from_ne_bytes(buf[4..12].try_into().expect("8 bytes"));
    let max = max_len.min(MAX_FRAME_LEN);
    if !(4..=max).contains(&length) {
        return Err(WireError::BadLength { length, max });
    }
    // `length` is at most 1 MiB, so this cannot overflow.
    let total = FRAME_HEADER_LEN + length as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let msg_type = i32::from_ne_bytes(buf[12..16].try_into().expect("4 bytes"));
    Ok(Some((
        Frame {
            msg_type,
            payload: buf[16..total].to_vec(),
        },
        total,
    )))
}

/// Decodes the fixed part of a keepalive-socket frame (header and message type, 20 bytes) from
/// the front of `buf`: `Ok(None)` while incomplete, else the message type and how many body
/// bytes follow the type (to be skipped: the body is not interpreted). The magic is checked as
/// soon as 4 bytes are there.
///
/// # Errors
/// [`WireError::BadMagic`], [`WireError::BadLength`].
pub fn decode_heartbeat_head(buf: &[u8]) -> Result<Option<(i32, u64)>, WireError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let magic = u32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes"));
    if magic != HEARTBEAT_MAGIC {
        return Err(WireError::BadMagic {
            found: magic,
            expected: HEARTBEAT_MAGIC,
        });
    }
    if buf.len() < HEARTBEAT_HEADER_LEN {
        return Ok(None);
    }
    let size = u64::from_ne_bytes(buf[8..16].try_into().expect("8 bytes"));
    check_length(size)?;
    if buf.len() < HEARTBEAT_HEADER_LEN + 4 {
        return Ok(None);
    }
    let msg_type = i32::from_ne_bytes(buf[16..20].try_into().expect("4 bytes"));
    Ok(Some((msg_type, size - 4)))
}

/// One exported segment in a connect response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareHandleEntry {
    /// Segment length in bytes; the importer maps exactly this many bytes.
    pub len: u64,
    /// The 128 bytes of the `aclrtMemFabricHandle`, as an array of numbers.
    #[serde(
        serialize_with = "ser_share_handle",
        deserialize_with = "de_share_handle"
    )]
    pub share_handle: [u8; SHARE_HANDLE_LEN],
    /// The exporter's virtual address of the segment (what peers put in `remote_addr`).
    pub va_addr: u64,
}

fn ser_share_handle<S: Serializer>(h: &[u8; SHARE_HANDLE_LEN], s: S) -> Result<S::Ok, S::Error> {
    h.as_slice().serialize(s)
}

/// Exactly 128 numbers in 0..=255, read straight into the array: a longer array is refused
/// at its 129th element, with nothing allocated.
fn de_share_handle<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; SHARE_HANDLE_LEN], D::Error> {
    struct Handle;
    impl<'de> serde::de::Visitor<'de> for Handle {
        type Value = [u8; SHARE_HANDLE_LEN];
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("exactly 128 numbers in 0..=255 (share_handle)")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = [0u8; SHARE_HANDLE_LEN];
            for (i, b) in out.iter_mut().enumerate() {
                *b = seq
                    .next_element()?
                    .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
            }
            if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                return Err(serde::de::Error::invalid_length(
                    SHARE_HANDLE_LEN + 1,
                    &self,
                ));
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Handle)
}

/// Missing, null or non-array `share_handles` reads as empty, as HIXL's client reads it; an
/// array whose entries are malformed is still an error. Read element by element (never
/// through a generic JSON value, which would cost tens of bytes per element of any array a
/// peer sends).
fn de_lenient_entries<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ShareHandleEntry>, D::Error> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = Vec<ShareHandleEntry>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array of share-handle entries (anything else reads as none)")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(e) = seq.next_element()? {
                out.push(e);
            }
            Ok(out)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(Vec::new())
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(Entries)
}

/// `addrs` is unused by FabricMem: whatever a peer sends there is skipped without being
/// kept (HIXL writes `[]`).
fn de_ignored<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<serde_json::Value>, D::Error> {
    serde::de::IgnoredAny::deserialize(d)?;
    Ok(Vec::new())
}

/// The connect request and response (`kConnect`). Fields are declared in alphabetical order
/// so the compact JSON matches HIXL's byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectMsg {
    /// Unused by FabricMem; always written empty, and skipped (not kept) when read.
    #[serde(default, deserialize_with = "de_ignored")]
    pub addrs: Vec<serde_json::Value>,
    /// The client's own engine address (request); echoed back (response).
    pub channel_id: String,
    /// Unused by FabricMem; always empty.
    #[serde(default)]
    pub comm_res: String,
    /// The server's export list (response); empty in requests.
    #[serde(default, deserialize_with = "de_lenient_entries")]
    pub share_handles: Vec<ShareHandleEntry>,
    /// The caller's connect timeout in ms (request); 0 (response).
    #[serde(default)]
    pub timeout: i64,
}

impl ConnectMsg {
    /// A connect request from the engine at `channel_id`.
    pub fn request(channel_id: &str, timeout_ms: i64) -> Self {
        ConnectMsg {
            addrs: Vec::new(),
            channel_id: channel_id.to_owned(),
            comm_res: String::new(),
            share_handles: Vec::new(),
            timeout: timeout_ms,
        }
    }

    /// The response to `request`, offering `share_handles`.
    pub fn response(request: &ConnectMsg, share_handles: Vec<ShareHandleEntry>) -> Self {
        ConnectMsg {
            addrs: Vec::new(),
            channel_id: request.channel_id.clone(),
            comm_res: String::new(),
            share_handles,
            timeout: 0,
        }
    }
}

/// The status message (`kStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusMsg {
    /// 0 for success, else a HIXL status code.
    pub error_code: u32,
    /// Always empty from HIXL.
    #[serde(default)]
    pub error_message: String,
}

/// The disconnect request (`kDisconnect`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisconnectMsg {
    /// The client's own engine address.
    #[serde(default)]
    pub channel_id: String,
}

/// A notify (`kSendNotifyReq`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyMsg {
    /// Notify name, at most 1024 bytes.
    pub name: String,
    /// Notify body, at most 1024 bytes.
    pub notify_msg: String,
}

impl NotifyMsg {
    /// Checks the documented length limits.
    ///
    /// # Errors
    /// [`WireError::FieldTooLong`].
    pub fn validate(&self) -> Result<(), WireError> {
        for (field, v) in [("name", &self.name), ("notify_msg", &self.notify_msg)] {
            if v.len() > MAX_NOTIFY_FIELD {
                return Err(WireError::FieldTooLong {
                    field,
                    len: v.len(),
                    max: MAX_NOTIFY_FIELD,
                });
            }
        }
        Ok(())
    }
}

/// Bytes in an authentication nonce.
pub const AUTH_NONCE_LEN: usize = 32;
/// Bytes in an authentication MAC (HMAC-SHA256).
pub const AUTH_MAC_LEN: usize = 32;
/// Longest accepted frame `length` for the handshake messages (they are about 150 bytes).
pub const MAX_AUTH_FRAME_LEN: u64 = 1024;

/// 32 bytes carried as 64 lowercase hex digits; anything else is refused when reading.
mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(b: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        let mut out = String::with_capacity(64);
        for byte in b {
            out.push(char::from_digit(u32::from(byte >> 4), 16).expect("nibble"));
            out.push(char::from_digit(u32::from(byte & 15), 16).expect("nibble"));
        }
        s.serialize_str(&out)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        parse(&text).ok_or_else(|| serde::de::Error::custom("expected 64 lowercase hex digits"))
    }

    pub(super) fn parse(text: &str) -> Option<[u8; 32]> {
        let digits = text.as_bytes();
        if digits.len() != 64 {
            return None;
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        for (i, pair) in digits.chunks_exact(2).enumerate() {
            out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(out)
    }
}

/// The handshake's first message (type 1001), client → server: the client's fresh nonce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthHello {
    /// 32 random bytes, new for every connection.
    #[serde(with = "hex32")]
    pub client_nonce: [u8; AUTH_NONCE_LEN],
}

/// The server's answer (type 1002): its nonce and its proof of knowing the secret,
/// `HMAC-SHA256(secret, "ascend-fabric/control/server" ‖ client_nonce ‖ server_nonce)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthChallenge {
    /// The server's proof.
    #[serde(with = "hex32")]
    pub server_mac: [u8; AUTH_MAC_LEN],
    /// 32 random bytes, new for every connection.
    #[serde(with = "hex32")]
    pub server_nonce: [u8; AUTH_NONCE_LEN],
}

/// The client's proof (type 1003),
/// `HMAC-SHA256(secret, "ascend-fabric/control/client" ‖ client_nonce ‖ server_nonce)`; the
/// request frame follows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthProof {
    /// The client's proof.
    #[serde(with = "hex32")]
    pub client_mac: [u8; AUTH_MAC_LEN],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn entry(seed: u8) -> ShareHandleEntry {
        let mut h = [0u8; SHARE_HANDLE_LEN];
        for (i, b) in h.iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
        ShareHandleEntry {
            len: 1 << 30,
            share_handle: h,
            va_addr: 43_980_465_111_040,
        }
    }

    #[test]
    fn frame_header_is_packed_in_host_order() {
        let f = Frame::new(
            MsgType::Status,
            &StatusMsg {
                error_code: 0,
                error_message: String::new(),
            },
        )
        .unwrap();
        let bytes = f.encode();
        assert_eq!(&bytes[0..4], &[0xD1, 0xC2, 0xB3, 0xA4]);
        let payload = br#"{"error_code":0,"error_message":""}"#;
        assert_eq!(
            u64::from_ne_bytes(bytes[4..12].try_into().unwrap()),
            4 + payload.len() as u64
        );
        assert_eq!(i32::from_ne_bytes(bytes[12..16].try_into().unwrap()), 3);
        assert_eq!(&bytes[16..], payload);
    }

    #[test]
    fn connect_json_keys_are_alphabetical_and_compact() {
        let req = ConnectMsg::request("127.0.0.1:26001", 1000);
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"addrs":[],"channel_id":"127.0.0.1:26001","comm_res":"","share_handles":[],"timeout":1000}"#
        );
        let e = serde_json::to_string(&entry(0)).unwrap();
        assert!(
            e.starts_with(r#"{"len":1073741824,"share_handle":[0,1,2,"#),
            "{e}"
        );
        assert!(e.ends_with(r#"127],"va_addr":43980465111040}"#), "{e}");
    }

    #[test]
    fn roundtrip_through_a_stream() {
        let req = ConnectMsg::request("[::1]:26000", 3000);
        let resp = ConnectMsg::response(&req, vec![entry(1), entry(9)]);
        let mut buf = Vec::new();
        write_frame(&mut buf, &Frame::new(MsgType::Connect, &resp).unwrap()).unwrap();
        let f = read_frame(&mut Cursor::new(buf)).unwrap();
        let back: ConnectMsg = f.parse(MsgType::Connect, "connect response").unwrap();
        assert_eq!(back, resp);
    }

    #[test]
    fn lenient_share_handles_as_hixl_reads_them() {
        let missing: ConnectMsg = serde_json::from_str(r#"{"channel_id":"a"}"#).unwrap();
        assert!(missing.share_handles.is_empty());
        let not_array: ConnectMsg =
            serde_json::from_str(r#"{"channel_id":"a","share_handles":7}"#).unwrap();
        assert!(not_array.share_handles.is_empty());
        let short =
            r#"{"channel_id":"a","share_handles":[{"len":1,"va_addr":2,"share_handle":[1,2,3]}]}"#;
        let err = serde_json::from_str::<ConnectMsg>(short)
            .unwrap_err()
            .to_string();
        assert!(err.contains("128"), "{err}");
        let big = format!(
            r#"{{"len":1,"va_addr":2,"share_handle":[{}256]}}"#,
            "0,".repeat(127)
        );
        assert!(serde_json::from_str::<ShareHandleEntry>(&big).is_err());
    }

    #[test]
    fn malformed_frames_are_typed_errors() {
        let good = Frame::new(
            MsgType::Disconnect,
            &DisconnectMsg {
                channel_id: "x".into(),
            },
        )
        .unwrap()
        .encode();
        let mut bad_magic = good.clone();
        bad_magic[0] ^= 0xFF;
        assert!(matches!(
            read_frame(&mut Cursor::new(bad_magic)),
            Err(WireError::BadMagic { .. })
        ));

        let mut too_long = good.clone();
        too_long[4..12].copy_from_slice(&(MAX_FRAME_LEN + 1).to_ne_bytes());
        assert!(matches!(
            read_frame(&mut Cursor::new(too_long)),
            Err(WireError::BadLength { length, .. }) if length == MAX_FRAME_LEN + 1
        ));
        let mut too_short = good.clone();
        too_short[4..12].copy_from_slice(&3u64.to_ne_bytes());
        assert!(matches!(
            read_frame(&mut Cursor::new(too_short)),
            Err(WireError::BadLength { .. })
        ));

        let truncated = good[..good.len() - 2].to_vec();
        assert!(matches!(
            read_frame(&mut Cursor::new(truncated)),
            Err(WireError::Truncated { got, needed }) if got + 2 == needed
        ));
        assert!(matches!(
            read_frame(&mut Cursor::new(&good[..5])),
            Err(WireError::Truncated { .. })
        ));

        let f = read_frame(&mut Cursor::new(good)).unwrap();
        assert!(matches!(
            f.parse::<StatusMsg>(MsgType::Status, "status"),
            Err(WireError::UnexpectedType { found: 2 })
        ));
        let invalid = Frame {
            msg_type: 3,
            payload: b"{not json".to_vec(),
        };
        assert!(matches!(
            invalid.parse::<StatusMsg>(MsgType::Status, "status"),
            Err(WireError::Json { .. })
        ));
        let wrong_type = Frame {
            msg_type: 3,
            payload: br#"{"error_code":"zero"}"#.to_vec(),
        };
        assert!(matches!(
            wrong_type.parse::<StatusMsg>(MsgType::Status, "status"),
            Err(WireError::Json { .. })
        ));
    }

    #[test]
    fn heartbeat_is_thirty_bytes_and_reads_back() {
        let hb = heartbeat_bytes();
        assert_eq!(hb.len(), 30);
        assert_eq!(&hb[0..4], &HEARTBEAT_MAGIC.to_ne_bytes());
        assert_eq!(&hb[4..8], &[0; 4]);
        assert_eq!(&hb[20..], HEARTBEAT_JSON.as_bytes());
        assert_eq!(read_heartbeat(&mut Cursor::new(hb.clone())).unwrap(), 1);
        let mut bad = hb;
        bad[8..16].copy_from_slice(&0u64.to_ne_bytes());
        assert!(matches!(
            read_heartbeat(&mut Cursor::new(bad)),
            Err(WireError::BadLength { length: 0, .. })
        ));
    }

    #[test]
    fn notify_limits() {
        let ok = NotifyMsg {
            name: "n".repeat(1024),
            notify_msg: String::new(),
        };
        assert!(ok.validate().is_ok());
        let long = NotifyMsg {
            name: String::new(),
            notify_msg: "m".repeat(1025),
        };
        assert!(matches!(
            long.validate(),
            Err(WireError::FieldTooLong {
                field: "notify_msg",
                len: 1025,
                ..
            })
        ));
    }

    #[test]
    fn oversized_payload_is_refused_when_writing() {
        let entries: Vec<_> = (0..2500).map(|i| entry(i as u8)).collect();
        let resp = ConnectMsg::response(&ConnectMsg::request("a", 0), entries);
        assert!(matches!(
            Frame::new(MsgType::Connect, &resp),
            Err(WireError::PayloadTooLarge { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_to_a_frame_or_a_typed_error(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            // Never a panic; a frame that decodes re-encodes to the bytes it consumed.
            if let Ok(f) = read_frame(&mut Cursor::new(&bytes)) {
                let enc = f.encode();
                proptest::prop_assert_eq!(&bytes[..enc.len()], &enc[..]);
            }
            if let Ok(t) = read_heartbeat(&mut Cursor::new(&bytes)) {
                proptest::prop_assert_eq!(&bytes[16..20], &t.to_ne_bytes()[..]);
            }
        }

        #[test]
        fn entries_roundtrip(len in proptest::num::u64::ANY, va in proptest::num::u64::ANY, seed in proptest::num::u8::ANY) {
            let mut e = entry(seed);
            e.len = len;
            e.va_addr = va;
            let text = serde_json::to_string(&e).unwrap();
            proptest::prop_assert_eq!(serde_json::from_str::<ShareHandleEntry>(&text).unwrap(), e);
        }
    }
}
