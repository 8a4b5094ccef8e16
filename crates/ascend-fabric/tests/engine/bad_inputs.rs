//! Bad inputs to the Fabric Mem engine: each gets a typed error naming what is wrong (and the
//! HIXL status it maps to), nothing leaks, and the engine keeps working. Two engines run in
//! this process (the emulator shares memory in-process too); malformed control frames come
//! over raw TCP.

use ascend_fabric::Addr;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::peer::*;
use crate::util::*;
use ascend_fabric::wire::{self, Frame, MsgType};
use ascend_fabric::{
    Engine, EngineOptions, Error, HixlCode, OptionError, Side, TransferDesc, TransferOp,
};
use ascend_mem::prelude::*;
use ascend_testkit::send_raw;

const T: Duration = Duration::from_secs(5);

fn hixl(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[track_caller]
fn expect_status<T: std::fmt::Debug>(r: Result<T, Error>, code: HixlCode) -> Error {
    let e = r.expect_err("expected an error");
    assert_eq!(e.status(), code, "status of {e}");
    assert!(!e.to_string().is_empty());
    e
}

#[test]
fn bad_inputs_get_typed_errors_and_the_engine_keeps_serving() {
    let env = setup();
    let (pa, pb) = (free_port(), free_port());
    let (a_addr, b_addr) = (format!("127.0.0.1:{pa}"), format!("127.0.0.1:{pb}"));
    {
        let a = Engine::new(&env.dev, &a_addr, test_options(2)).unwrap();
        let b = Engine::new(&env.dev, &b_addr, test_options(2)).unwrap();
        let a_buf = a.alloc_device(REGION).unwrap();
        let _a_reg = a.register(&a_buf).unwrap();
        let b_buf = b.alloc_host(REGION).unwrap();
        let b_reg = b.register(&b_buf).unwrap();
        let (ra, lb) = (a_buf.addr(), b_buf.addr());

        // --- malformed control frames: each closes only its connection -------------------
        let server = a.listen_addr().unwrap();
        let good = Frame::new(MsgType::Connect, &wire::ConnectMsg::request("x", 1))
            .unwrap()
            .encode();
        let mut bad_magic = good.clone();
        bad_magic[0] ^= 0xFF;
        let mut too_long = good.clone();
        too_long[4..12].copy_from_slice(&((1u64 << 20) + 1).to_ne_bytes());
        let truncated = good[..good.len() - 5].to_vec();
        let frame = |t: i32, p: &[u8]| {
            Frame {
                msg_type: t,
                payload: p.to_vec(),
            }
            .encode()
        };
        let cases = [
            ("wrong magic", bad_magic),
            ("length over 1 MiB", too_long),
            ("truncated", truncated),
            ("invalid JSON", frame(1, b"{\"channel_id\":")),
            (
                "wrong field types",
                frame(1, br#"{"channel_id":7,"timeout":"soon"}"#),
            ),
            ("unknown message type", frame(99, b"{}")),
        ];
        for (i, (what, bytes)) in cases.iter().enumerate() {
            assert!(
                send_raw(server, bytes, Duration::from_secs(10)).is_empty(),
                "{what}: got a reply"
            );
            assert_eq!(a.rejected_connections(), i as u64 + 1, "{what}");
        }

        // --- connect: bad peer addresses, nobody listening, then a good connect -----------
        expect_status(b.connect("not-an-address", T), HixlCode::PARAM_INVALID);
        expect_status(b.connect("127.0.0.1", T), HixlCode::PARAM_INVALID);
        let dead = format!("127.0.0.1:{}", free_port());
        let e = expect_status(
            b.connect(&dead, Duration::from_millis(300)),
            HixlCode::FAILED,
        );
        assert!(matches!(e, Error::Control(_)), "{e:?}");
        b.connect(&a_addr, T)
            .expect("the engine still serves after malformed frames");
        let e = expect_status(b.connect(&a_addr, T), HixlCode::ALREADY_CONNECTED);
        assert!(matches!(e, Error::AlreadyConnected { ref peer } if *peer == a_addr));
        // The session is named by B's channel id: its engine string, as HIXL's.
        assert_eq!(b.channel_id(), b_addr);
        assert_eq!(a.sessions(), std::slice::from_ref(&b_addr));

        // A good transfer works.
        let ok = TransferDesc::raw(lb, ra, 4096);
        b.transfer_sync(&a_addr, TransferOp::Write, &[ok], T)
            .unwrap();

        // --- descriptors ------------------------------------------------------------------
        let w = |d: &[TransferDesc]| b.transfer_sync(&a_addr, TransferOp::Write, d, T);
        let e = expect_status(w(&[]), HixlCode::PARAM_INVALID);
        assert!(matches!(e, Error::EmptyBatch));
        let e = expect_status(
            w(&[ok, TransferDesc::raw(lb, ra, 0)]),
            HixlCode::PARAM_INVALID,
        );
        assert!(matches!(e, Error::ZeroLength { index: 1 }));
        let e = expect_status(
            w(&[TransferDesc::raw(Addr::new(u64::MAX - 10), ra, 100)]),
            HixlCode::PARAM_INVALID,
        );
        assert!(matches!(
            e,
            Error::Overflow {
                index: 0,
                side: Side::Local,
                ..
            }
        ));
        let e = expect_status(
            w(&[ok, ok, TransferDesc::raw(lb, Addr::new(u64::MAX), 2)]),
            HixlCode::PARAM_INVALID,
        );
        assert!(matches!(
            e,
            Error::Overflow {
                index: 2,
                side: Side::Remote,
                ..
            }
        ));
        // Unregistered local memory: a heap buffer.
        let heap = vec![0u8; 4096];
        let e = expect_status(
            w(&[TransferDesc::raw(Addr::from_ptr(heap.as_ptr()), ra, 4096)]),
            HixlCode::PARAM_INVALID,
        );
        assert!(
            matches!(e, Error::NotRegistered { index: 0, side: Side::Local, addr, .. } if addr == Addr::from_ptr(heap.as_ptr())),
            "{e:?}"
        );
        assert!(e.to_string().contains("descriptor 0"), "{e}");
        // Local range running past its registration.
        let e = expect_status(
            w(&[ok, TransferDesc::raw(lb + REGION - 10, ra, 100)]),
            HixlCode::PARAM_INVALID,
        );
        assert!(
            matches!(e, Error::NotRegistered { index: 1, side: Side::Local, uncovered, .. } if uncovered == lb + REGION),
            "{e:?}"
        );
        // Remote address the peer never offered, and one running past its segment.
        let e = expect_status(
            w(&[TransferDesc::raw(lb, Addr::new(0x1000), 16)]),
            HixlCode::PARAM_INVALID,
        );
        assert!(matches!(
            e,
            Error::NotRegistered {
                index: 0,
                side: Side::Remote,
                addr,
                ..
            } if addr == Addr::new(0x1000)
        ));
        let e = expect_status(
            w(&[TransferDesc::raw(lb, ra + REGION - 1, 2)]),
            HixlCode::PARAM_INVALID,
        );
        assert!(matches!(
            e,
            Error::NotRegistered {
                side: Side::Remote,
                ..
            }
        ));
        // Unknown peer.
        let e = expect_status(
            b.transfer_sync("127.0.0.1:1", TransferOp::Read, &[ok], T),
            HixlCode::NOT_CONNECTED,
        );
        assert!(matches!(e, Error::NotConnected { .. }));
        let e = expect_status(
            b.transfer_async("10.9.9.9:5", TransferOp::Read, &[ok]),
            HixlCode::NOT_CONNECTED,
        );
        assert!(matches!(e, Error::NotConnected { .. }));

        // --- registration -----------------------------------------------------------------
        // Plain heap memory cannot be registered; the error says how to allocate.
        let e = expect_status(
            b.register_raw(Addr::from_ptr(heap.as_ptr()), 4096),
            HixlCode::PARAM_INVALID,
        );
        assert!(
            matches!(e, Error::NotShareable { .. }) && e.to_string().contains("alloc_device"),
            "{e}"
        );
        expect_status(b.register_raw(lb, 0), HixlCode::PARAM_INVALID);
        expect_status(
            b.register_raw(Addr::new(u64::MAX - 1), 10),
            HixlCode::PARAM_INVALID,
        );
        // Same range twice: the same registration; an overlapping different range: an error.
        assert_eq!(b.register(&b_buf).unwrap(), b_reg);
        let e = expect_status(
            b.register(&b_buf.slice(4096..8192).unwrap()),
            HixlCode::PARAM_INVALID,
        );
        assert!(matches!(e, Error::RegistrationOverlap { existing, .. } if existing == lb));

        // Deregistration during a transfer: Busy until the transfer is seen complete.
        let req = b
            .transfer_async(
                &a_addr,
                TransferOp::Write,
                &[TransferDesc::raw(lb, ra, REGION)],
            )
            .unwrap();
        assert_eq!(b_reg.in_flight(), 1);
        let (e, b_reg) = b.deregister(b_reg.clone()).expect_err("busy").into_parts();
        assert!(matches!(e, Error::Busy { in_flight: 1, .. }), "{e:?}");
        assert_eq!(e.status(), HixlCode::FAILED);
        req.wait(T).unwrap();
        assert_eq!(b_reg.in_flight(), 0);
        // Waiting again reports the earlier outcome (success stays success).
        req.wait(T).unwrap();
        drop(req);
        b.deregister(b_reg).unwrap();
        assert_eq!(b.registrations(), 0);
        let e = expect_status(w(&[ok]), HixlCode::PARAM_INVALID);
        assert!(matches!(
            e,
            Error::NotRegistered {
                side: Side::Local,
                ..
            }
        ));

        // --- disconnect -------------------------------------------------------------------
        b.disconnect(&a_addr, T).unwrap();
        let e = expect_status(b.disconnect(&a_addr, T), HixlCode::NOT_CONNECTED);
        assert!(matches!(e, Error::NotConnected { .. }));
        expect_status(w(&[ok]), HixlCode::NOT_CONNECTED);
        drop((a, b, a_buf, b_buf, _a_reg));
    }

    // --- options ------------------------------------------------------------------------
    let on = ("EnableUseFabricMem", "1");
    let e = expect_status(
        Engine::from_hixl(&env.dev, "127.0.0.1", &hixl(&[on, ("BufferPool", "4:8")])),
        HixlCode::PARAM_INVALID,
    );
    assert!(
        matches!(e, Error::Option(OptionError::Invalid { ref key, .. }) if key == "BufferPool"),
        "{e:?}"
    );
    assert!(e.to_string().contains("cannot be set together"), "{e}");
    for bad in [
        hixl(&[("EnableUseFabricMem", "2")]),
        hixl(&[
            on,
            (
                "GlobalResourceConfig",
                r#"{"fabric_memory.task_stream_num": 9}"#,
            ),
        ]),
        hixl(&[
            on,
            (
                "GlobalResourceConfig",
                r#"{"fabric_memory.task_stream_num": "x"}"#,
            ),
        ]),
        hixl(&[on, ("GlobalResourceConfig", "[1]")]),
        hixl(&[on, ("AutoConnect", "yes")]),
        hixl(&[on, ("Bogus", "1")]),
    ] {
        expect_status(
            Engine::from_hixl(&env.dev, "127.0.0.1", &bad),
            HixlCode::PARAM_INVALID,
        );
    }
    expect_status(
        Engine::from_hixl(&env.dev, "127.0.0.1", &hixl(&[("EnableUseFabricMem", "0")])),
        HixlCode::UNSUPPORTED,
    );
    // HIXL's rule: more than one stream needs AICPU unfold off (it is on unless the map says
    // otherwise); the refusal names the option.
    let four = r#"{"fabric_memory.task_stream_num": 4, "fabric_memory.max_capacity": 1}"#;
    let e = expect_status(
        Engine::from_hixl(
            &env.dev,
            "127.0.0.1",
            &hixl(&[on, ("GlobalResourceConfig", four)]),
        ),
        HixlCode::PARAM_INVALID,
    );
    assert!(
        e.to_string().contains("fabric_memory.task_stream_num"),
        "{e}"
    );
    let four_host = r#"{"fabric_memory.task_stream_num": 4, "fabric_memory.max_capacity": 1, "fabric_memory.enable_aicpu_unfold": false}"#;
    let engine = Engine::from_hixl(
        &env.dev,
        "127.0.0.1",
        &hixl(&[on, ("GlobalResourceConfig", four_host)]),
    );
    drop(engine.expect("the same map with AICPU unfold off"));
    // A pool anywhere (start address 0), as HIXL's VA pool falls back on an A3.
    let anywhere =
        r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.start_address": 0}"#;
    let engine = Engine::from_hixl(
        &env.dev,
        "127.0.0.1",
        &hixl(&[on, ("GlobalResourceConfig", anywhere)]),
    );
    drop(engine.expect("start address 0"));
    let mut o = EngineOptions::default();
    o.task_stream_num = 0;
    expect_status(
        Engine::new(&env.dev, "127.0.0.1", o),
        HixlCode::PARAM_INVALID,
    );
    expect_status(
        Engine::new(&env.dev, "300.1.1.1:5", EngineOptions::default()),
        HixlCode::PARAM_INVALID,
    );
    // A taken port.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = format!("127.0.0.1:{}", l.local_addr().unwrap().port());
    let e = expect_status(
        Engine::new(&env.dev, &taken, test_options(1)),
        HixlCode::FAILED,
    );
    assert!(matches!(e, Error::Listen { .. }));
    env.finish();
}

#[test]
fn failed_transfer_reports_once_then_already_reported() {
    let env = setup();
    let pa = free_port();
    let a_addr = format!("127.0.0.1:{pa}");
    {
        let a = Engine::new(&env.dev, &a_addr, test_options(1)).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(1)).unwrap();
        let a_buf = a.alloc_device(REGION).unwrap();
        let _ra = a.register(&a_buf).unwrap();
        let b_buf = b.alloc_device(REGION).unwrap();
        let _rb = b.register(&b_buf).unwrap();
        b.connect(&a_addr, T).unwrap();
        let d = TransferDesc::raw(b_buf.addr(), a_buf.addr(), REGION);
        // Held, so the copy is still queued when the channel goes (else it may finish first).
        let hold = ascend_sim::testing::hold_all_streams();
        let req = b.transfer_async(&a_addr, TransferOp::Read, &[d]).unwrap();
        b.disconnect(&a_addr, T).unwrap();
        drop(hold);
        let e = req.wait(T).unwrap_err();
        assert!(e.is_peer_lost(), "{e:?}");
        assert_eq!(e.status(), HixlCode::NOT_CONNECTED);
        let again = req.wait(T).unwrap_err();
        assert!(matches!(again, Error::AlreadyReported(_)), "{again:?}");
    }
    env.finish();
}

/// Descriptors made from what the caller holds: a registration and a peer's segment, each
/// range checked when made (`OutOfRange` naming the side, `ZeroLength`); a good one moves its
/// bytes; `remote_segment` names a segment by index or name, and refuses one not offered.
#[test]
fn typed_descriptors_are_checked_when_made() {
    let _env = setup();
    const LEN: usize = 2 << 20;
    let p = crate::async_util::Pair::new(LEN, test_options(1), true);
    let seg = p
        .client
        .remote_segment(&p.peer_addr, ascend_fabric::SegmentRef::Index(0))
        .unwrap();
    assert_eq!((seg.peer(), seg.len()), (p.peer_addr.as_str(), LEN));
    let e = p
        .client
        .remote_segment(&p.peer_addr, ascend_fabric::SegmentRef::from("nope"))
        .unwrap_err();
    assert!(matches!(e, Error::Prepare { .. }), "{e:?}");
    let between = |lo, ro, n| TransferDesc::between(&p.local_reg, lo, &seg, ro, n);
    for (lo, ro, n, side) in [
        (LEN - 4095, 0, 4096, Side::Local),
        (0, LEN, 1, Side::Remote),
        (0, usize::MAX, 2, Side::Remote),
    ] {
        match between(lo, ro, n) {
            Err(Error::OutOfRange {
                side: s,
                offset,
                len,
                ..
            }) => {
                assert_eq!(s, side);
                assert_eq!(
                    (len, offset),
                    (n, if side == Side::Local { lo } else { ro })
                );
            }
            other => panic!("({lo}, {ro}, {n}): expected OutOfRange, got {other:?}"),
        }
    }
    assert!(matches!(between(0, 0, 0), Err(Error::ZeroLength { .. })));
    p.local.write_from(&pattern(4, 4096), 8192).unwrap();
    let d = between(8192, 4096, 4096).unwrap();
    p.client
        .transfer_sync(&p.peer_addr, TransferOp::Write, &[d], T)
        .unwrap();
    assert!(p.remote.to_vec().unwrap()[4096..8192] == pattern(4, 4096)[..]);
    p.close();
}

/// Options are checked in one place: values changed through the public fields after the
/// builder checked them are refused by `Engine::new` with the builder's own error (an empty
/// shared secret never reaches the server).
#[test]
fn options_changed_after_the_builder_are_checked_again() {
    let env = setup();
    type Change = fn(&mut ascend_fabric::EngineOptions);
    let cases: [(&str, Change); 3] = [
        ("shared_secret", |o| o.shared_secret = Some(String::new())),
        ("pool_capacity", |o| o.pool_capacity = 0),
        ("task_stream_num", |o| o.task_stream_num = 9),
    ];
    for (key, change) in cases {
        let mut o = test_options(1);
        change(&mut o);
        match Engine::new(&env.dev, &listen_addr(), o) {
            Err(Error::Option(ascend_fabric::OptionError::Invalid { key: k, .. })) => {
                assert_eq!(k, key)
            }
            other => panic!("{key}: expected the option refused, got {other:?}"),
        }
    }
    env.finish();
}
