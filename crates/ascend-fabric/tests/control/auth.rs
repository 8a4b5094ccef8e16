//! The shared secret: every request type needs a valid proof, the client detects a server
//! that cannot prove it knows the secret, the secret never crosses the wire, and the
//! handshake parsers take any input without panicking.

use crate::util::*;
use ascend_fabric::control::{self, status, ClientError, ServerConfig};
use ascend_fabric::wire::{
    self, AuthChallenge, AuthHello, AuthProof, DisconnectMsg, Frame, MsgType, NotifyMsg,
};
use ascend_mem::prelude::*;
use ascend_testkit::send_raw;
use parking_lot::Mutex;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const SECRET: &str = "correct-horse-battery-staple-42";

fn secret_config() -> ServerConfig {
    ServerConfig {
        shared_secret: Some(SECRET.into()),
        ..ServerConfig::default()
    }
}

fn notify(name: &str) -> NotifyMsg {
    NotifyMsg {
        name: name.into(),
        notify_msg: "block 7 ready".into(),
    }
}

#[test]
fn disconnect_and_notify_need_the_secret() {
    let (srv, h) = server(fake_entries(1), secret_config());
    let addr = srv.local_addr();
    let _victim = control::connect(addr, "victim", T, Some(SECRET)).unwrap();
    assert_eq!(srv.sessions(), ["victim"]);

    // Unauthenticated disconnect naming the victim: no answer, nothing done.
    let err = control::disconnect(addr, "victim", T, None).unwrap_err();
    assert!(matches!(err, ClientError::Wire { .. }), "{err}");
    wait_until("auth failure counted", || srv.stats().auth_failures == 1);
    // Unauthenticated notify: the client cannot tell (no reply), the server drops it.
    control::send_notify(addr, &notify("forged"), T, None).unwrap();
    wait_until("auth failure counted", || srv.stats().auth_failures == 2);
    // A raw client with a valid hello and a wrong proof, then a disconnect request.
    let mut raw = Frame::new(
        MsgType::AuthHello,
        &AuthHello {
            client_nonce: [9; 32],
        },
    )
    .unwrap()
    .encode();
    raw.extend(
        Frame::new(
            MsgType::AuthProof,
            &AuthProof {
                client_mac: [0; 32],
            },
        )
        .unwrap()
        .encode(),
    );
    raw.extend(
        Frame::new(
            MsgType::Disconnect,
            &DisconnectMsg {
                channel_id: "victim".into(),
            },
        )
        .unwrap()
        .encode(),
    );
    let answer = send_raw(addr, &raw, GUARD);
    // Only the challenge came back (no status): the disconnect was never acted on.
    let (f, used) = wire::decode_frame(&answer, wire::MAX_FRAME_LEN)
        .unwrap()
        .unwrap();
    assert_eq!(f.msg_type, MsgType::AuthChallenge.to_raw());
    assert_eq!(used, answer.len(), "nothing after the challenge");
    wait_until("auth failure counted", || srv.stats().auth_failures == 3);

    assert_eq!(
        srv.sessions(),
        ["victim"],
        "the victim's session is untouched"
    );
    assert_eq!(*h.events.lock(), ["open victim"]);
    assert!(
        srv.take_notifies().is_empty(),
        "the forged notify was queued"
    );

    // With the secret, both work.
    control::send_notify(addr, &notify("real"), T, Some(SECRET)).unwrap();
    let mut got = Vec::new();
    wait_until("notify", || {
        got.extend(srv.take_notifies());
        !got.is_empty()
    });
    assert_eq!(got, [notify("real")]);
    control::disconnect(addr, "victim", T, Some(SECRET)).unwrap();
    assert!(srv.sessions().is_empty());
    assert_eq!(*h.events.lock(), ["open victim", "close victim"]);
    let st = srv.stats();
    assert_eq!((st.auth_failures, st.malformed), (3, 0), "{st:?}");
}

#[test]
fn a_client_with_the_wrong_secret_is_refused() {
    let (srv, _h) = server(fake_entries(1), secret_config());
    let err = control::connect(srv.local_addr(), "w", T, Some("not-the-secret")).unwrap_err();
    // The server's proof does not verify under the client's secret, so the client stops.
    assert!(matches!(err, ClientError::ServerAuth { .. }), "{err}");
    assert_eq!(err.status().0, status::FAILED);
    wait_until("auth failure counted", || srv.stats().auth_failures == 1);
    // Without any secret: the plain request is refused.
    let err = control::connect(srv.local_addr(), "w", T, None).unwrap_err();
    assert!(matches!(err, ClientError::Wire { .. }), "{err}");
    wait_until("auth failure counted", || srv.stats().auth_failures == 2);
    assert!(srv.sessions().is_empty());
    assert_eq!(srv.stats().open_connections, 0);
}

#[test]
fn an_impostor_server_is_detected_before_any_request() {
    // A server without the secret closes on the unknown handshake message.
    let (plain, _h) = server(fake_entries(1), ServerConfig::default());
    let err = control::connect(plain.local_addr(), "c", T, Some(SECRET)).unwrap_err();
    assert!(matches!(err, ClientError::ServerAuth { .. }), "{err}");
    assert!(plain.sessions().is_empty());
    // A server with another secret answers, but its proof does not verify.
    let other = ServerConfig {
        shared_secret: Some("another".into()),
        ..ServerConfig::default()
    };
    let (wrong, _h) = server(fake_entries(1), other);
    for r in [
        control::connect(wrong.local_addr(), "c", T, Some(SECRET)).map(|_| ()),
        control::disconnect(wrong.local_addr(), "c", T, Some(SECRET)),
        control::send_notify(wrong.local_addr(), &notify("n"), T, Some(SECRET)),
    ] {
        assert!(matches!(r, Err(ClientError::ServerAuth { .. })), "{r:?}");
    }
    // A fake server answering with a made-up challenge receives nothing after the hello.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let seen = std::thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        s.set_read_timeout(Some(GUARD)).unwrap();
        let mut buf = Vec::new();
        let hello = loop {
            let mut chunk = [0u8; 512];
            let n = s.read(&mut chunk).unwrap();
            buf.extend_from_slice(&chunk[..n]);
            if let Some((f, used)) = wire::decode_frame(&buf, 1024).unwrap() {
                buf.drain(..used);
                break f;
            }
        };
        let challenge = AuthChallenge {
            server_mac: [0x5a; 32],
            server_nonce: [1; 32],
        };
        s.write_all(
            &Frame::new(MsgType::AuthChallenge, &challenge)
                .unwrap()
                .encode(),
        )
        .unwrap();
        s.read_to_end(&mut buf).unwrap();
        (hello, buf)
    });
    let err = control::connect(fake_addr, "c", T, Some(SECRET)).unwrap_err();
    assert!(matches!(err, ClientError::ServerAuth { .. }), "{err}");
    let (hello, after) = seen.join().unwrap();
    assert_eq!(hello.msg_type, MsgType::AuthHello.to_raw());
    assert!(
        after.is_empty(),
        "the client sent {} bytes to an impostor",
        after.len()
    );
}

/// A TCP relay that records every byte in both directions.
struct Relay {
    addr: SocketAddr,
    capture: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<Vec<std::thread::JoinHandle<()>>>>,
}

fn pump(mut from: TcpStream, mut to: TcpStream, capture: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                capture.lock().extend_from_slice(&buf[..n]);
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Relay {
    fn start(target: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let capture = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st) = (capture.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            let mut pumps = Vec::new();
            for s in l.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let client = s.unwrap();
                let server = TcpStream::connect(target).unwrap();
                let (c1, c2) = (c.clone(), c.clone());
                let (cr, sr) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                pumps.push(std::thread::spawn(move || pump(cr, server, c1)));
                pumps.push(std::thread::spawn(move || pump(sr, client, c2)));
            }
            pumps
        });
        Relay {
            addr,
            capture,
            stop,
            accept: Some(accept),
        }
    }

    /// Stops accepting, waits for every relayed connection to end, returns the capture.
    fn finish(mut self) -> Vec<u8> {
        self.stop.store(true, Ordering::SeqCst);
        drop(TcpStream::connect(self.addr));
        for p in self.accept.take().unwrap().join().unwrap() {
            p.join().unwrap();
        }
        std::mem::take(&mut *self.capture.lock())
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_secret_never_crosses_the_wire() {
    let (srv, _h) = server(fake_entries(2), secret_config());
    let relay = Relay::start(srv.local_addr());
    let via = relay.addr;
    let mut c = control::connect(via, "relayed", T, Some(SECRET)).unwrap();
    assert_eq!(c.entries.len(), 2);
    control::send_heartbeat(&mut c.keepalive).unwrap();
    control::send_notify(via, &notify("n"), T, Some(SECRET)).unwrap();
    control::connect(via, "x", T, Some("wrong")).unwrap_err();
    control::connect(via, "y", T, None).unwrap_err();
    control::disconnect(via, "relayed", T, Some(SECRET)).unwrap();
    assert!(closed_by_peer(&mut c.keepalive, GUARD));
    drop(c);
    let capture = relay.finish();
    // The capture holds the handshakes and requests...
    assert!(contains(&capture, &1001i32.to_ne_bytes()));
    assert!(contains(&capture, b"\"channel_id\":\"relayed\""));
    // ... and not the secret, in any of the obvious encodings.
    let hex: String = SECRET.bytes().map(|b| format!("{b:02x}")).collect();
    for needle in [SECRET.as_bytes(), hex.as_bytes(), &SECRET.as_bytes()[..12]] {
        assert!(!contains(&capture, needle), "the secret crossed the wire");
    }
    assert_eq!(srv.stats().auth_failures, 2);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// Any payload under any handshake type parses to a message or a typed error.
    #[test]
    fn handshake_parsers_never_panic(
        ty in 1000i32..1005,
        payload in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
    ) {
        let f = Frame { msg_type: ty, payload };
        let _ = f.parse::<AuthHello>(MsgType::AuthHello, "hello");
        let _ = f.parse::<AuthChallenge>(MsgType::AuthChallenge, "challenge");
        let _ = f.parse::<AuthProof>(MsgType::AuthProof, "proof");
    }

    /// JSON of the right shape with any string value: only 64 lowercase hex digits parse, and
    /// they round-trip.
    #[test]
    fn hex_fields_take_only_lowercase_hex(text in "[0-9a-fA-Fxz\\\\\"]{0,70}", bytes in proptest::array::uniform32(proptest::num::u8::ANY)) {
        let payload = serde_json::to_vec(&serde_json::json!({ "client_mac": text })).unwrap();
        let f = Frame { msg_type: MsgType::AuthProof.to_raw(), payload };
        let parsed = f.parse::<AuthProof>(MsgType::AuthProof, "proof");
        let valid = text.len() == 64 && text.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
        proptest::prop_assert_eq!(parsed.is_ok(), valid);
        let f = Frame::new(MsgType::AuthProof, &AuthProof { client_mac: bytes }).unwrap();
        proptest::prop_assert_eq!(f.parse::<AuthProof>(MsgType::AuthProof, "proof").unwrap().client_mac, bytes);
    }

    /// The buffering decoder agrees with the blocking reader on any input.
    #[test]
    fn decode_frame_agrees_with_read_frame(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
        match wire::decode_frame(&bytes, wire::MAX_FRAME_LEN) {
            Ok(Some((f, used))) => {
                let r = wire::read_frame(&mut std::io::Cursor::new(&bytes)).unwrap();
                proptest::prop_assert_eq!(&f, &r);
                proptest::prop_assert_eq!(used, 16 + f.payload.len());
            }
            Ok(None) => proptest::prop_assert!(wire::read_frame(&mut std::io::Cursor::new(&bytes)).is_err()),
            Err(_) => proptest::prop_assert!(wire::read_frame(&mut std::io::Cursor::new(&bytes)).is_err()),
        }
        let _ = wire::decode_heartbeat_head(&bytes);
    }
}

/// Arbitrary bytes in place of the proof never open a session and never stop the server.
#[test]
fn a_live_server_survives_arbitrary_proofs() {
    use proptest::strategy::{Strategy, ValueTree};
    let (srv, _h) = server(fake_entries(1), secret_config());
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strat = proptest::collection::vec(proptest::num::u8::ANY, 0..120);
    for i in 0..48u64 {
        let junk = strat.new_tree(&mut runner).unwrap().current();
        let mut raw = Frame::new(
            MsgType::AuthHello,
            &AuthHello {
                client_nonce: [3; 32],
            },
        )
        .unwrap()
        .encode();
        raw.extend(
            Frame {
                msg_type: MsgType::AuthProof.to_raw(),
                payload: junk,
            }
            .encode(),
        );
        let answer = send_raw(srv.local_addr(), &raw, GUARD);
        let (f, used) = wire::decode_frame(&answer, wire::MAX_FRAME_LEN)
            .unwrap()
            .unwrap();
        assert_eq!(
            (f.msg_type, used),
            (MsgType::AuthChallenge.to_raw(), answer.len())
        );
        wait_until("the refusal counted", || {
            let s = srv.stats();
            s.auth_failures + s.malformed == i + 1
        });
    }
    assert!(srv.sessions().is_empty());
    control::connect(srv.local_addr(), "after", T, Some(SECRET)).unwrap();
}

/// Engines with the same secret connect, transfer, notify and disconnect; an engine without
/// it can do none of that.
#[test]
fn engines_with_the_secret_work_and_without_it_do_not() {
    use ascend_fabric::{Engine, EngineOptions, TransferDesc, TransferOp};
    let dev = device();
    let remote = engine_addr();
    let opts = EngineOptions::builder()
        .pool_capacity(64 << 30)
        .shared_secret(SECRET)
        .build()
        .unwrap();
    let srv = Engine::new(&dev, &remote, opts).unwrap();
    let target = srv.alloc_device(MIB2).unwrap();
    let _reg = srv.register(&target).unwrap();

    let outsider = client_engine(&dev, None);
    assert!(outsider.connect(&remote, T).is_err());
    assert!(
        outsider.send_notify(&remote, "n", "forged", T).is_ok(),
        "no reply to notify"
    );
    let wrong = client_engine(&dev, Some("wrong"));
    assert!(wrong.connect(&remote, T).is_err());

    let member = client_engine(&dev, Some(SECRET));
    member.connect(&remote, T).unwrap();
    let local = member.alloc_device(MIB2).unwrap();
    let data = pattern(5, 4096);
    local.write_from(&data, 0).unwrap();
    let _lreg = member.register(&local).unwrap();
    let d = TransferDesc::raw(local.addr(), target.addr(), 4096);
    member
        .transfer_sync(&remote, TransferOp::Write, &[d], T)
        .unwrap();
    let mut back = vec![0u8; 4096];
    target.read_into(&mut back, 0).unwrap();
    assert!(back == data);
    member.send_notify(&remote, "kv", "ready", T).unwrap();
    let mut got = Vec::new();
    wait_until("notify", || {
        got.extend(srv.take_notifies());
        !got.is_empty()
    });
    assert_eq!(got, [("kv".to_owned(), "ready".to_owned())]);
    assert_eq!(srv.sessions().len(), 1);
    member.disconnect(&remote, T).unwrap();
    assert!(
        srv.sessions().is_empty(),
        "the disconnect request was honoured"
    );
    // The outsider's connect and notify and the wrong secret's handshake were all refused.
    wait_until("refusals counted", || srv.rejected_connections() == 3);
    assert!(
        srv.take_notifies().is_empty(),
        "the forged notify was queued"
    );
}
