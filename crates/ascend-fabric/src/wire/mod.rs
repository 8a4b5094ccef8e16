//! HIXL FabricMem control-plane wire format.
//!
//! Internal to the engine: public only with the `protocol-internals` feature, which is
//! unstable and for this crate's own tests; nothing here is covered by semver. What an engine
//! user meets of it is re-exported at the crate root ([`WireError`], [`MAX_NOTIFY_FIELD`],
//! [`MAX_SEGMENT_NAME`]).
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
//! Our engines add request types of their own, far outside HIXL's range: the shared-secret
//! handshake ([`AuthHello`], [`AuthChallenge`], [`AuthProof`], types 1001–1003), sent only
//! when a secret is configured, and the segments request ([`MsgType::Segments`], 1004), sent
//! only when a caller asks for a peer's registrations made since the connect. Without either
//! the bytes on the wire are exactly HIXL's; a C++ HIXL server closes the connection on 1004
//! (a type it does not know), which our client reads as "segments fixed at the connect".

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
/// Ours, not HIXL's (keepalive framing, client → server, body `{}`): the client takes
/// revocations of single segments on this socket ([`KEEPALIVE_REVOKE`]) instead of losing the
/// whole session. A C++ HIXL server logs the frame and skips it, and sends nothing back.
pub const KEEPALIVE_SUBSCRIBE: i32 = 1101;
/// Ours (keepalive framing, server → a subscribed client, a [`RevokeMsg`]): the server's
/// memory at these addresses is being deregistered; the client fails its transfers that use
/// it, unmaps its imports of it, and answers [`KEEPALIVE_REVOKE_ACK`].
pub const KEEPALIVE_REVOKE: i32 = 1102;
/// Ours (keepalive framing, client → server, body `{}`): the oldest revocation not yet
/// answered is done (no copy of the client can touch that memory any more).
pub const KEEPALIVE_REVOKE_ACK: i32 = 1103;
/// Bytes in a fabric share handle.
pub const SHARE_HANDLE_LEN: usize = 128;
/// Longest notify name or message, in bytes (HIXL's limit;
/// [`Engine::send_notify`](crate::Engine::send_notify) refuses longer ones).
pub const MAX_NOTIFY_FIELD: usize = 1024;
/// Longest registration name, in bytes
/// ([`Engine::register_named`](crate::Engine::register_named); offered to peers with the
/// export list).
pub const MAX_SEGMENT_NAME: usize = 256;

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
    /// Ours, not HIXL's: a connected client asks for the server's export list now (request:
    /// a [`ConnectMsg`] request under the client's session id; response: a [`ConnectMsg`]
    /// response, then `kStatus`). A C++ HIXL server closes the connection instead, as for
    /// any type it does not know.
    Segments,
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
            MsgType::Segments => 1004,
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
            1004 => MsgType::Segments,
            _ => return None,
        })
    }
}

/// A malformed or unexpected frame, or the I/O error that interrupted one
/// ([`Error::Wire`](crate::Error::Wire), and inside
/// [`ClientError::Wire`](crate::ClientError::Wire)).
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

mod auth;
mod frame;
mod messages;

pub use auth::*;
pub use frame::*;
pub use messages::*;

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
    fn segment_names_are_written_only_when_there_are_any() {
        let req = ConnectMsg::request("[::1]:26000", 3000);
        let plain = ConnectMsg::response(&req, vec![entry(1)]);
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("segment_names"), "{text}");
        let mut named = plain.clone();
        named.segment_names = vec![SegmentName {
            len: 4096,
            name: "kv".into(),
            va_addr: 43_980_465_111_040,
        }];
        let text = serde_json::to_string(&named).unwrap();
        assert!(
            text.contains(r#""comm_res":"","segment_names":[{"len":4096,"name":"kv","va_addr":43980465111040}],"share_handles":["#),
            "{text}"
        );
        // Our reader takes both; a reader that knows no names (HIXL's, or an older engine of
        // ours) reads the named response as the plain one.
        assert_eq!(serde_json::from_str::<ConnectMsg>(&text).unwrap(), named);
        #[derive(serde::Deserialize, PartialEq, Debug)]
        struct Old {
            channel_id: String,
            share_handles: Vec<ShareHandleEntry>,
        }
        let old: Old = serde_json::from_str(&text).unwrap();
        assert_eq!(old.share_handles, plain.share_handles);
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
