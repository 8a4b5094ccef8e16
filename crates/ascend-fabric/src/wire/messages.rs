//! The JSON messages HIXL's control plane carries: connect, status, disconnect, notify and
//! the share-handle entries, read leniently where HIXL is lenient and element by element.

use super::*;

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
    /// Ours, not HIXL's: names the server's registrations were given (response). Written
    /// only when there are any, so a response without names is byte for byte HIXL's; HIXL
    /// reads objects by key and skips it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segment_names: Vec<SegmentName>,
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
            segment_names: Vec::new(),
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
            segment_names: Vec::new(),
            share_handles,
            timeout: 0,
        }
    }
}

/// A name an engine gave one of its registrations, offered with its share-handle list (ours,
/// not HIXL's): the registered range `[va_addr, va_addr + len)` in the exporter's addresses.
/// Fields in alphabetical order, as every object on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentName {
    /// Length of the registered range.
    pub len: u64,
    /// The name, at most [`MAX_SEGMENT_NAME`] bytes.
    pub name: String,
    /// First address of the registered range.
    pub va_addr: u64,
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

/// A revocation of segments (ours: [`KEEPALIVE_REVOKE`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeMsg {
    /// The `va_addr`s of the revoked share-handle entries.
    pub va_addrs: Vec<u64>,
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
