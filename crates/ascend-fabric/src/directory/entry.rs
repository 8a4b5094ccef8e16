//! The directory entry format: what an engine publishes about itself, as JSON, and the checks
//! every entry read back passes before anyone uses it.

use ascend_mem::Addr;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::options::EngineAddr;

use super::DirectoryError;

/// The entry format written by this version (`"format"` in the JSON).
pub const ENTRY_FORMAT: u32 = 1;

/// Longest engine name, in bytes.
pub const MAX_NAME: usize = 128;

/// Largest encoded entry accepted, in bytes (an entry lists every segment it offers).
pub const MAX_ENTRY: usize = 256 << 10;

/// One segment an engine offers, by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// What the segment holds (e.g. `"kv"`), unique within the entry.
    pub name: String,
    /// The segment's address in the owner's process, as peers address it in transfers (a
    /// number in the JSON).
    #[serde(serialize_with = "addr_out", deserialize_with = "addr_in")]
    pub addr: Addr,
    /// Its length in bytes (non-zero).
    pub len: usize,
}

fn addr_out<S: Serializer>(a: &Addr, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(a.get())
}

fn addr_in<'de, D: Deserializer<'de>>(d: D) -> Result<Addr, D::Error> {
    u64::deserialize(d).map(Addr::new)
}

impl SegmentInfo {
    /// A segment named `name` at `addr`, `len` bytes.
    pub fn new(name: impl Into<String>, addr: Addr, len: usize) -> SegmentInfo {
        SegmentInfo {
            name: name.into(),
            addr,
            len,
        }
    }
}

/// What an engine publishes under `<prefix>/engines/<name>`.
///
/// Encoded as one JSON object:
/// `{"format":1,"addr":"10.0.0.7:26000","device":3,"product":"Ascend910_93","segments":[{"name":"kv","addr":…,"len":…}],"version":2}`.
/// Unknown fields are ignored (a newer writer may add some); an entry of another `format`, or
/// one that fails [`EngineEntry::check`], is skipped by readers with a warning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineEntry {
    /// The entry format ([`ENTRY_FORMAT`]).
    pub format: u32,
    /// The engine's control address (`ip:port`), what [`Engine::connect`](crate::Engine::connect) takes.
    pub addr: String,
    /// The device the engine runs on.
    pub device: i32,
    /// The product the engine runs on (e.g. `Ascend910_93`, or `emulator`), as its owner names it.
    pub product: String,
    /// The segments it offers.
    pub segments: Vec<SegmentInfo>,
    /// The publisher's own version of this entry: raised each time it republishes (after
    /// its lease was lost), so readers can tell a new incarnation from the old one.
    pub version: u64,
}

impl EngineEntry {
    /// An entry for an engine at `addr` on `device` of `product`, offering `segments`.
    pub fn new(
        addr: impl Into<String>,
        device: i32,
        product: impl Into<String>,
        segments: Vec<SegmentInfo>,
    ) -> EngineEntry {
        EngineEntry {
            format: ENTRY_FORMAT,
            addr: addr.into(),
            device,
            product: product.into(),
            segments,
            version: 1,
        }
    }

    /// The segment named `name`.
    pub fn segment(&self, name: &str) -> Option<&SegmentInfo> {
        self.segments.iter().find(|s| s.name == name)
    }

    /// Checks what readers rely on: the format, a control address with a port, named
    /// non-empty segments that do not overflow, unique segment names.
    ///
    /// # Errors
    /// [`DirectoryError::Malformed`] naming `key` and the first problem found.
    pub fn check(&self, key: &str) -> Result<(), DirectoryError> {
        let bad = |reason: String| DirectoryError::Malformed {
            key: key.to_owned(),
            reason,
        };
        if self.format != ENTRY_FORMAT {
            return Err(bad(format!(
                "entry format {} (this reader knows {ENTRY_FORMAT})",
                self.format
            )));
        }
        match EngineAddr::parse(&self.addr) {
            Ok(a) if a.listens() => {}
            Ok(_) => return Err(bad(format!("address {:?} has no port", self.addr))),
            Err(e) => return Err(bad(format!("address {:?}: {e}", self.addr))),
        }
        for (i, s) in self.segments.iter().enumerate() {
            if s.name.is_empty() || s.name.len() > MAX_NAME {
                return Err(bad(format!("segment {i}: name of {} bytes", s.name.len())));
            }
            if s.len == 0 {
                return Err(bad(format!("segment {i} ({}): zero length", s.name)));
            }
            if s.addr.checked_add(s.len).is_none() {
                return Err(bad(format!("segment {i} ({}): range overflows", s.name)));
            }
            if self.segments[..i].iter().any(|o| o.name == s.name) {
                return Err(bad(format!("segment {i}: name {:?} repeated", s.name)));
            }
        }
        Ok(())
    }

    /// The entry as stored.
    ///
    /// # Errors
    /// [`DirectoryError::Malformed`] if it fails [`EngineEntry::check`] or encodes over
    /// [`MAX_ENTRY`] bytes.
    pub fn encode(&self, key: &str) -> Result<Vec<u8>, DirectoryError> {
        self.check(key)?;
        let v = serde_json::to_vec(self).map_err(|e| DirectoryError::Malformed {
            key: key.to_owned(),
            reason: e.to_string(),
        })?;
        if v.len() > MAX_ENTRY {
            return Err(DirectoryError::Malformed {
                key: key.to_owned(),
                reason: format!("{} bytes encoded, over {MAX_ENTRY}", v.len()),
            });
        }
        Ok(v)
    }

    /// Reads a stored entry (the value under `key`) and checks it.
    ///
    /// # Errors
    /// [`DirectoryError::Malformed`] for anything but a valid entry of this format.
    pub fn decode(key: &str, bytes: &[u8]) -> Result<EngineEntry, DirectoryError> {
        let bad = |reason: String| DirectoryError::Malformed {
            key: key.to_owned(),
            reason,
        };
        if bytes.len() > MAX_ENTRY {
            return Err(bad(format!("{} bytes, over {MAX_ENTRY}", bytes.len())));
        }
        let e: EngineEntry =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not an entry: {e}")))?;
        e.check(key)?;
        Ok(e)
    }
}

/// Checks an engine name: 1 to [`MAX_NAME`] bytes of ASCII letters, digits, `.`, `_`, `-`
/// (no `/`, so a name is one key below `<prefix>/engines/`).
///
/// # Errors
/// [`DirectoryError::BadName`].
pub fn check_name(name: &str) -> Result<(), DirectoryError> {
    let bad = |reason: &'static str| DirectoryError::BadName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_NAME {
        return Err(bad("longer than 128 bytes"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(bad(
            "only ASCII letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> EngineEntry {
        EngineEntry::new(
            "127.0.0.1:26000",
            0,
            "emulator",
            vec![SegmentInfo::new("kv", Addr::new(0x1000), 0x2000)],
        )
    }

    #[test]
    fn round_trip() {
        let e = entry();
        let v = e.encode("k").unwrap();
        assert_eq!(EngineEntry::decode("k", &v).unwrap(), e);
    }

    #[test]
    fn bad_entries_are_typed_errors() {
        for raw in [
            &b""[..],
            b"{",
            b"null",
            b"[1,2]",
            b"{\"format\":1}",
            b"{\"format\":2,\"addr\":\"127.0.0.1:1\",\"device\":0,\"product\":\"x\",\"segments\":[],\"version\":1}",
            b"{\"format\":1,\"addr\":\"127.0.0.1\",\"device\":0,\"product\":\"x\",\"segments\":[],\"version\":1}",
            b"{\"format\":1,\"addr\":\"no address\",\"device\":0,\"product\":\"x\",\"segments\":[],\"version\":1}",
            b"{\"format\":1,\"addr\":\"127.0.0.1:1\",\"device\":0,\"product\":\"x\",\"segments\":[{\"name\":\"a\",\"addr\":1,\"len\":0}],\"version\":1}",
            b"{\"format\":1,\"addr\":\"127.0.0.1:1\",\"device\":0,\"product\":\"x\",\"segments\":[{\"name\":\"a\",\"addr\":18446744073709551615,\"len\":2}],\"version\":1}",
            b"\xff\xfe",
        ] {
            match EngineEntry::decode("the/key", raw) {
                Err(DirectoryError::Malformed { key, .. }) => assert_eq!(key, "the/key"),
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(raw)),
            }
        }
    }

    #[test]
    fn names() {
        for ok in ["a", "prefill-0", "decode_1.x", &"n".repeat(MAX_NAME)] {
            check_name(ok).unwrap();
        }
        for bad in ["", "a/b", "a b", "ü", &"n".repeat(MAX_NAME + 1)] {
            assert!(matches!(
                check_name(bad),
                Err(DirectoryError::BadName { .. })
            ));
        }
    }
}
