//! The shared-secret handshake's messages (our own request types 1001-1003).

use super::*;

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
