//! Framing: request/response frames and heartbeat frames, read from a stream or decoded from
//! a buffer, and written.

use super::*;

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
    keepalive_bytes(HEARTBEAT_MSG_TYPE, HEARTBEAT_JSON.as_bytes())
}

/// The bytes of one keepalive-socket frame of `msg_type` carrying `json` (at most
/// [`MAX_FRAME_LEN`] − 4 bytes, as every caller's body is).
pub fn keepalive_bytes(msg_type: i32, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEARTBEAT_HEADER_LEN + 4 + json.len());
    out.extend_from_slice(&HEARTBEAT_MAGIC.to_ne_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(4 + json.len() as u64).to_ne_bytes());
    out.extend_from_slice(&msg_type.to_ne_bytes());
    out.extend_from_slice(json);
    out
}

/// Reads one keepalive-socket frame and returns its message type (the body is not
/// interpreted, as HIXL's server does not interpret it).
///
/// # Errors
/// [`WireError::BadMagic`], [`WireError::BadLength`], [`WireError::Truncated`] or I/O errors.
#[cfg(any(test, feature = "protocol-internals"))]
pub fn read_heartbeat(r: &mut impl Read) -> Result<i32, WireError> {
    read_keepalive(r).map(|(t, _)| t)
}

/// Reads one keepalive-socket frame: its message type and its body (the JSON after the
/// type).
///
/// # Errors
/// [`WireError::BadMagic`], [`WireError::BadLength`], [`WireError::Truncated`] or I/O errors.
pub fn read_keepalive(r: &mut impl Read) -> Result<(i32, Vec<u8>), WireError> {
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
    let msg_type = i32::from_ne_bytes(body[0..4].try_into().unwrap());
    body.drain(..4);
    Ok((msg_type, body))
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
