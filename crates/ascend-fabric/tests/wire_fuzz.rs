//! Fuzzing of the control-plane codec ([`ascend_fabric::wire`]) with proptest.
//!
//! Inputs: random bytes, valid frames and heartbeats, the same mutated (bit flips, byte
//! changes, insertions, removals, truncations, length fields set to edge values) and valid
//! messages whose JSON had a value spliced in with the wrong type. They go through
//! `wire::read_frame` and `wire::read_heartbeat` over a `&[u8]` reader and through
//! `Frame::parse` for every message type and every JSON message struct.
//!
//! Properties: nothing panics; no single allocation made while decoding is larger than the
//! frame limit plus [`SLACK`] (a counting global allocator records the largest allocation of
//! the decoding thread while a guard is on); a decoded frame re-encodes to exactly the bytes it
//! was read from; valid messages round-trip. Tests at the end show that each property can
//! fail (a decoder with a larger limit, one that panics, one that corrupts).
//!
//! The normal suite runs a fast subset (1,000 cases per property); the long run (100,000
//! cases per property) is `cargo test -p ascend-fabric --test wire_fuzz -- --ignored`.
#![allow(unsafe_code)] // the counting allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ascend_fabric::wire::{
    self, ConnectMsg, DisconnectMsg, Frame, MsgType, NotifyMsg, ShareHandleEntry, StatusMsg,
    WireError, FRAME_HEADER_LEN, HEARTBEAT_HEADER_LEN, MAX_FRAME_LEN, SHARE_HANDLE_LEN,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// The counting allocator

/// Allowed beyond the frame limit for the largest single allocation while decoding.
const SLACK: usize = 64 << 10;
/// The bound of the allocation property.
const ALLOC_LIMIT: usize = MAX_FRAME_LEN as usize + SLACK;

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: no panic while the thread's locals are being destroyed.
    let _ = TRACKING.try_with(|on| {
        if on.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// SAFETY: every call goes to the system allocator with the caller's arguments unchanged;
// `note` only touches const-initialised thread-local cells, which neither allocate nor call
// back into the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Turns tracking off again even if the tracked code panics.
struct Tracking;

impl Drop for Tracking {
    fn drop(&mut self) {
        TRACKING.with(|t| t.set(false));
    }
}

/// Runs `f` with this thread's allocations tracked; returns its result and the largest
/// single allocation (or reallocation) it made.
fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.with(|l| l.set(0));
    let guard = Tracking;
    TRACKING.with(|t| t.set(true));
    let r = f();
    drop(guard);
    (r, LARGEST.with(Cell::get))
}

// ---------------------------------------------------------------------------------------------
// Decoders and the checks of one input

/// A frame decoder over a byte slice: the frame and the bytes it consumed.
type FrameDecoder = fn(&[u8]) -> Result<(Frame, usize), WireError>;

fn decode_frame(bytes: &[u8]) -> Result<(Frame, usize), WireError> {
    let mut r = bytes;
    let f = wire::read_frame(&mut r)?;
    Ok((f, bytes.len() - r.len()))
}

const ALL_TYPES: [MsgType; 4] = [
    MsgType::Connect,
    MsgType::Disconnect,
    MsgType::Status,
    MsgType::SendNotify,
];

/// Parses `payload` as every message struct, under every message type; a parse under a type
/// other than the frame's must be refused as such.
fn parse_everything(msg_type: i32, payload: &[u8]) -> Result<(), String> {
    let frame = Frame {
        msg_type,
        payload: payload.to_vec(),
    };
    for t in ALL_TYPES {
        let results = [
            frame.parse::<ConnectMsg>(t, "connect").map(drop),
            frame.parse::<DisconnectMsg>(t, "disconnect").map(drop),
            frame.parse::<StatusMsg>(t, "status").map(drop),
            frame
                .parse::<NotifyMsg>(t, "notify")
                .and_then(|n| n.validate()),
            frame.parse::<ShareHandleEntry>(t, "entry").map(drop),
            frame.parse::<Vec<ShareHandleEntry>>(t, "entries").map(drop),
        ];
        if t.to_raw() != msg_type {
            for r in results {
                if !matches!(r, Err(WireError::UnexpectedType { found }) if found == msg_type) {
                    return Err(format!("type {t:?} accepted a frame of type {msg_type}"));
                }
            }
        }
    }
    Ok(())
}

/// The properties of one frame input under `decode`, with `limit` as the allocation bound.
fn check_frame(decode: FrameDecoder, bytes: &[u8], limit: usize) -> Result<(), TestCaseError> {
    let (res, largest) = largest_allocation(|| decode(bytes));
    prop_assert!(
        largest <= limit,
        "decoding {} bytes allocated {largest} bytes at once (limit {limit})",
        bytes.len()
    );
    let Ok((frame, used)) = res else {
        return Ok(());
    };
    prop_assert!(frame.payload.len() as u64 + 4 <= MAX_FRAME_LEN);
    prop_assert_eq!(&frame.encode()[..], &bytes[..used], "re-encoding differs");
    let (parsed, largest) = largest_allocation(|| parse_everything(frame.msg_type, &frame.payload));
    prop_assert!(
        largest <= limit,
        "parsing a payload of {} bytes allocated {largest} bytes at once (limit {limit})",
        frame.payload.len()
    );
    parsed.map_err(TestCaseError::fail)
}

/// The properties of one heartbeat input.
fn check_heartbeat(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (res, largest) = largest_allocation(|| {
        let mut r = bytes;
        wire::read_heartbeat(&mut r).map(|t| (t, bytes.len() - r.len()))
    });
    prop_assert!(largest <= ALLOC_LIMIT, "heartbeat: {largest} bytes at once");
    if let Ok((t, used)) = res {
        prop_assert!(used >= HEARTBEAT_HEADER_LEN + 4);
        let body_type = i32::from_ne_bytes(bytes[HEARTBEAT_HEADER_LEN..][..4].try_into().unwrap());
        prop_assert_eq!(t, body_type);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Strategies

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,24}", "[a-z0-9.:]{0,24}", Just(String::new())]
}

fn entry() -> impl Strategy<Value = ShareHandleEntry> {
    (
        any::<u64>(),
        prop::collection::vec(any::<u8>(), SHARE_HANDLE_LEN),
        any::<u64>(),
    )
        .prop_map(|(len, h, va_addr)| ShareHandleEntry {
            len,
            share_handle: h.try_into().unwrap(),
            va_addr,
        })
}

/// A valid message: its type, its frame, and a check that a payload parses back to it.
#[derive(Debug, Clone)]
enum Msg {
    Connect(ConnectMsg),
    Disconnect(DisconnectMsg),
    Status(StatusMsg),
    Notify(NotifyMsg),
}

impl Msg {
    fn frame(&self) -> Frame {
        match self {
            Msg::Connect(m) => Frame::new(MsgType::Connect, m),
            Msg::Disconnect(m) => Frame::new(MsgType::Disconnect, m),
            Msg::Status(m) => Frame::new(MsgType::Status, m),
            Msg::Notify(m) => Frame::new(MsgType::SendNotify, m),
        }
        .expect("small messages fit a frame")
    }

    /// Whether `f` parses back to this message.
    fn parses_back(&self, f: &Frame) -> bool {
        match self {
            Msg::Connect(m) => {
                f.parse::<ConnectMsg>(MsgType::Connect, "c").ok().as_ref() == Some(m)
            }
            Msg::Disconnect(m) => {
                f.parse::<DisconnectMsg>(MsgType::Disconnect, "d")
                    .ok()
                    .as_ref()
                    == Some(m)
            }
            Msg::Status(m) => f.parse::<StatusMsg>(MsgType::Status, "s").ok().as_ref() == Some(m),
            Msg::Notify(m) => {
                f.parse::<NotifyMsg>(MsgType::SendNotify, "n").ok().as_ref() == Some(m)
            }
        }
    }
}

fn msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        (text(), any::<i64>(), prop::collection::vec(entry(), 0..4)).prop_map(|(c, t, e)| {
            let req = ConnectMsg::request(&c, t);
            Msg::Connect(if e.is_empty() {
                req
            } else {
                ConnectMsg::response(&req, e)
            })
        }),
        text().prop_map(|channel_id| Msg::Disconnect(DisconnectMsg { channel_id })),
        (any::<u32>(), text()).prop_map(|(error_code, error_message)| Msg::Status(StatusMsg {
            error_code,
            error_message
        })),
        (text(), text()).prop_map(|(name, notify_msg)| Msg::Notify(NotifyMsg { name, notify_msg })),
    ]
}

/// An edit of encoded bytes. Positions are taken modulo the input's length.
#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(usize, u8),
    SetByte(usize, u8),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    Truncate(usize),
    /// Sets the length field.
    Length(u64),
}

fn length_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..16,
        (MAX_FRAME_LEN - 8)..(MAX_FRAME_LEN + 8),
        (MAX_FRAME_LEN + 1)..(64 << 20),
        any::<u64>(),
        Just(u64::MAX),
        Just(u64::MAX / 2 + 1),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        1 => (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Remove(i, n)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        2 => length_value().prop_map(Mutation::Length),
    ]
}

/// Applies `m` to `b`, whose length field is the u64 at `len_at`.
fn apply(b: &mut Vec<u8>, m: &Mutation, len_at: usize) {
    let n = b.len().max(1);
    match m {
        Mutation::FlipBit(i, bit) if !b.is_empty() => b[i % n] ^= 1 << bit,
        Mutation::SetByte(i, v) if !b.is_empty() => b[i % n] = *v,
        Mutation::Insert(i, v) => {
            let at = i % (b.len() + 1);
            b.splice(at..at, v.iter().copied());
        }
        Mutation::Remove(i, k) if !b.is_empty() => {
            let at = i % n;
            b.drain(at..(at + k).min(b.len()));
        }
        Mutation::Truncate(i) => b.truncate(i % (b.len() + 1)),
        Mutation::Length(v) if b.len() >= len_at + 8 => {
            b[len_at..len_at + 8].copy_from_slice(&v.to_ne_bytes())
        }
        _ => {}
    }
}

/// A JSON value of some type, to put where another type belongs.
fn wrong_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        ".{0,16}".prop_map(Value::String),
        prop::collection::vec(-300i64..300, 0..200).prop_map(Value::from),
        Just(serde_json::json!({ "len": "x", "share_handle": [1, [2]], "va_addr": -1 })),
        Just(serde_json::json!([[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]])),
    ]
}

/// Every path to a value in `v` (object keys and array indices), outermost first.
fn paths(v: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(at.clone());
    let children: Vec<(Value, &Value)> = match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, c)| (Value::from(k.as_str()), c))
            .collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, c)| (Value::from(i), c))
            .collect(),
        _ => return,
    };
    for (k, c) in children {
        at.push(k);
        paths(c, at, out);
        at.pop();
    }
}

fn slot<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(v, |cur, k| match (cur, k) {
        (Value::Object(m), Value::String(k)) => m.get_mut(k).unwrap(),
        (Value::Array(a), Value::Number(i)) => &mut a[i.as_u64().unwrap() as usize],
        _ => unreachable!("paths only lead to existing children"),
    })
}

/// `m`'s JSON with the value at one path (chosen by `pick`) replaced by `with`, or, if
/// `drop_it`, that member removed from its object.
fn splice(m: &Msg, pick: usize, with: Value, drop_it: bool) -> Frame {
    let f = m.frame();
    let mut v: Value = serde_json::from_slice(&f.payload).unwrap();
    let mut all = Vec::new();
    paths(&v, &mut Vec::new(), &mut all);
    let path = &all[pick % all.len()];
    match (drop_it, path.split_last()) {
        (true, Some((Value::String(k), parent))) => {
            if let Value::Object(o) = slot(&mut v, parent) {
                o.remove(k);
            }
        }
        _ => *slot(&mut v, path) = with,
    }
    Frame {
        msg_type: f.msg_type,
        payload: serde_json::to_vec(&v).unwrap(),
    }
}

// ---------------------------------------------------------------------------------------------
// The properties

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

fn run<S: Strategy>(
    cases: u32,
    s: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Result<(), TestError<S::Value>> {
    runner(cases).run(&s, test)
}

fn random_bytes(cases: u32, decode: FrameDecoder, limit: usize) -> Result<(), String> {
    let s = prop::collection::vec(any::<u8>(), 0..256);
    run(cases, s, |b| check_frame(decode, &b, limit)).map_err(|e| e.to_string())?;
    // Random bytes behind a valid magic, so the length and body are reached.
    let s = (length_value(), prop::collection::vec(any::<u8>(), 0..256));
    run(cases, s, |(len, body)| {
        let mut b = wire::FRAME_MAGIC.to_ne_bytes().to_vec();
        b.extend_from_slice(&len.to_ne_bytes());
        b.extend_from_slice(&body);
        check_frame(decode, &b, limit)
    })
    .map_err(|e| e.to_string())
}

fn valid_round_trip(cases: u32) -> Result<(), String> {
    run(cases, msg(), |m| {
        let bytes = m.frame().encode();
        let (f, used) = decode_frame(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(used, bytes.len());
        prop_assert!(m.parses_back(&f), "{:?} did not parse back", m);
        check_frame(decode_frame, &bytes, ALLOC_LIMIT)
    })
    .map_err(|e| e.to_string())
}

fn mutated_frames(cases: u32, decode: FrameDecoder, limit: usize) -> Result<(), String> {
    let s = (msg(), prop::collection::vec(mutation(), 1..5));
    run(cases, s, |(m, muts)| {
        let mut b = m.frame().encode();
        for x in &muts {
            apply(&mut b, x, 4);
        }
        check_frame(decode, &b, limit)
    })
    .map_err(|e| e.to_string())
}

fn spliced_json(cases: u32) -> Result<(), String> {
    let s = (
        msg(),
        any::<usize>(),
        wrong_value(),
        any::<bool>(),
        any::<i32>(),
    );
    run(cases, s, |(m, pick, with, drop_it, other_type)| {
        let f = splice(&m, pick, with, drop_it);
        check_frame(decode_frame, &f.encode(), ALLOC_LIMIT)?;
        // The same payload under an unknown or another type is refused, never parsed.
        let (r, largest) = largest_allocation(|| parse_everything(other_type, &f.payload));
        prop_assert!(largest <= ALLOC_LIMIT);
        r.map_err(TestCaseError::fail)
    })
    .map_err(|e| e.to_string())
}

fn heartbeats(cases: u32) -> Result<(), String> {
    let s = prop::collection::vec(mutation(), 0..5);
    run(cases, s, |muts| {
        let mut b = wire::heartbeat_bytes();
        for x in &muts {
            apply(&mut b, x, 8);
        }
        check_heartbeat(&b)
    })
    .map_err(|e| e.to_string())?;
    run(cases, prop::collection::vec(any::<u8>(), 0..64), |b| {
        check_heartbeat(&b)
    })
    .map_err(|e| e.to_string())
}

/// Cases per property in the normal suite.
const FAST: u32 = 1_000;
/// Cases per property in the long run.
const LONG: u32 = 100_000;

#[test]
fn fast_random_bytes() {
    random_bytes(FAST, decode_frame, ALLOC_LIMIT).unwrap();
}

#[test]
fn fast_valid_round_trip() {
    valid_round_trip(FAST).unwrap();
}

#[test]
fn fast_mutated_frames() {
    mutated_frames(FAST, decode_frame, ALLOC_LIMIT).unwrap();
}

#[test]
fn fast_spliced_json() {
    spliced_json(FAST).unwrap();
}

#[test]
fn fast_heartbeats() {
    heartbeats(FAST).unwrap();
}

#[test]
#[ignore = "long run: cargo test -p ascend-fabric --test wire_fuzz -- --ignored"]
fn long_random_bytes() {
    random_bytes(LONG, decode_frame, ALLOC_LIMIT).unwrap();
}

#[test]
#[ignore = "long run: cargo test -p ascend-fabric --test wire_fuzz -- --ignored"]
fn long_valid_round_trip() {
    valid_round_trip(LONG).unwrap();
}

#[test]
#[ignore = "long run: cargo test -p ascend-fabric --test wire_fuzz -- --ignored"]
fn long_mutated_frames() {
    mutated_frames(LONG, decode_frame, ALLOC_LIMIT).unwrap();
}

#[test]
#[ignore = "long run: cargo test -p ascend-fabric --test wire_fuzz -- --ignored"]
fn long_spliced_json() {
    spliced_json(LONG).unwrap();
}

#[test]
#[ignore = "long run: cargo test -p ascend-fabric --test wire_fuzz -- --ignored"]
fn long_heartbeats() {
    heartbeats(LONG).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Frames at the limit, and the properties failing when they should

/// A connect response as close to the frame limit as whole entries get.
#[test]
fn largest_connect_response_stays_in_bounds() {
    let e = ShareHandleEntry {
        len: u64::MAX,
        share_handle: [255; SHARE_HANDLE_LEN],
        va_addr: u64::MAX,
    };
    let one = serde_json::to_vec(&e).unwrap().len() + 1;
    let n = (MAX_FRAME_LEN as usize - 200) / one;
    let req = ConnectMsg::request("127.0.0.1:26000", 1000);
    let m = ConnectMsg::response(&req, vec![e; n]);
    let f = Frame::new(MsgType::Connect, &m).unwrap();
    assert!(f.payload.len() as u64 + 4 > MAX_FRAME_LEN - 2 * one as u64);
    let bytes = f.encode();
    check_frame(decode_frame, &bytes, ALLOC_LIMIT).unwrap();
    let (back, _) = decode_frame(&bytes).unwrap();
    assert_eq!(back.parse::<ConnectMsg>(MsgType::Connect, "c").unwrap(), m);
}

/// A decoder that trusts the length field up to 64 MiB (and allocates it up front).
fn decode_with_larger_limit(bytes: &[u8]) -> Result<(Frame, usize), WireError> {
    if bytes.len() < FRAME_HEADER_LEN {
        return Err(WireError::Truncated {
            needed: FRAME_HEADER_LEN as u64,
            got: bytes.len() as u64,
        });
    }
    let len = u64::from_ne_bytes(bytes[4..12].try_into().unwrap());
    if !(4..=64 << 20).contains(&len) {
        return Err(WireError::BadLength {
            length: len,
            max: 64 << 20,
        });
    }
    let mut body = vec![0u8; len as usize];
    let got = (bytes.len() - FRAME_HEADER_LEN).min(body.len());
    body[..got].copy_from_slice(&bytes[FRAME_HEADER_LEN..][..got]);
    Err(WireError::Truncated {
        needed: FRAME_HEADER_LEN as u64 + len,
        got: bytes.len() as u64,
    })
}

#[test]
fn allocation_property_trips_on_a_larger_limit() {
    let e = mutated_frames(2_000, decode_with_larger_limit, ALLOC_LIMIT).unwrap_err();
    assert!(e.contains("allocated"), "{e}");
    let e = random_bytes(2_000, decode_with_larger_limit, ALLOC_LIMIT).unwrap_err();
    assert!(e.contains("allocated"), "{e}");
}

fn decode_then_panic(bytes: &[u8]) -> Result<(Frame, usize), WireError> {
    let r = decode_frame(bytes);
    if bytes.len() > 20 {
        panic!("a decoder bug");
    }
    r
}

#[test]
fn panic_property_trips_on_a_panicking_decoder() {
    let e = mutated_frames(50, decode_then_panic, ALLOC_LIMIT).unwrap_err();
    assert!(e.contains("a decoder bug"), "{e}");
}

fn decode_and_corrupt(bytes: &[u8]) -> Result<(Frame, usize), WireError> {
    let (mut f, used) = decode_frame(bytes)?;
    if let Some(b) = f.payload.last_mut() {
        *b ^= 0x20;
    }
    Ok((f, used))
}

#[test]
fn round_trip_property_trips_on_a_corrupting_decoder() {
    let e = mutated_frames(2_000, decode_and_corrupt, ALLOC_LIMIT).unwrap_err();
    assert!(e.contains("re-encoding differs"), "{e}");
}

/// A connect message whose `addrs` (any JSON) or `share_handles` is one long array of
/// small numbers.
fn long_array_payload(key: &str) -> Vec<u8> {
    let n = (MAX_FRAME_LEN as usize - 100) / 2;
    let mut p = format!("{{\"channel_id\":\"x\",\"{key}\":[").into_bytes();
    for i in 0..n {
        p.extend_from_slice(if i == 0 { b"0" } else { b",0" });
    }
    p.extend_from_slice(b"]}");
    p
}

/// Long JSON arrays in a connect message (`addrs`, `share_handles`, a `share_handle`) stay
/// within the allocation bound: read element by element, never through a generic JSON value
/// (which costs 32 bytes per element: 1 MiB of `0,` once made one allocation of 16 MiB).
#[test]
fn long_json_arrays_stay_in_bounds() {
    let mut over = Vec::new();
    for key in ["addrs", "share_handles"] {
        let payload = long_array_payload(key);
        assert!(payload.len() as u64 + 4 <= MAX_FRAME_LEN);
        let f = Frame {
            msg_type: MsgType::Connect.to_raw(),
            payload,
        };
        let (_, largest) = largest_allocation(|| f.parse::<ConnectMsg>(MsgType::Connect, "c"));
        if largest > ALLOC_LIMIT {
            over.push(format!(
                "{key}: a {} byte payload made a {largest} byte allocation",
                f.payload.len()
            ));
        }
    }
    assert!(over.is_empty(), "{over:?}");
}
