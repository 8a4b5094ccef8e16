//! The control server and client over real loopback sockets.

use ascend_fabric::control::{self, status, ClientError, ServerConfig};
use ascend_fabric::wire::{self, Frame, MsgType, NotifyMsg};
use ascend_testkit::send_raw;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::util::*;

#[test]
fn connect_heartbeat_disconnect() {
    let (srv, h) = server(fake_entries(3), ServerConfig::default());
    let addr = srv.local_addr();
    let mut c = control::connect(addr, "127.0.0.1:26001", T, None).unwrap();
    assert_eq!(c.entries, fake_entries(3));
    wait_until("session", || srv.sessions() == ["127.0.0.1:26001"]);
    std::thread::sleep(Duration::from_millis(50));
    let before = srv.since_heartbeat("127.0.0.1:26001").unwrap();
    control::send_heartbeat(&mut c.keepalive).unwrap();
    wait_until("heartbeat", || {
        srv.since_heartbeat("127.0.0.1:26001").unwrap() < before
    });
    control::disconnect(addr, "127.0.0.1:26001", T, None).unwrap();
    wait_until("session gone", || srv.sessions().is_empty());
    // The server shut the keepalive socket down.
    let mut b = [0u8; 1];
    assert_eq!(c.keepalive.read(&mut b).unwrap_or(0), 0);
    assert_eq!(
        *h.events.lock(),
        ["open 127.0.0.1:26001", "close 127.0.0.1:26001"]
    );
    assert_eq!(srv.rejected(), 0);
}

#[test]
fn closing_the_keepalive_socket_ends_the_session() {
    let (srv, h) = server(fake_entries(1), ServerConfig::default());
    let c = control::connect(srv.local_addr(), "peer-a", T, None).unwrap();
    wait_until("session", || srv.sessions().len() == 1);
    drop(c);
    wait_until("session end", || srv.sessions().is_empty());
    assert_eq!(h.events.lock().last().unwrap(), "close peer-a");
}

/// A session is listed only once the handler has seen it open, and until the handler has
/// seen it close, however long the handler takes.
#[test]
fn sessions_are_listed_between_the_handlers_open_and_close() {
    let (srv, h) = server(fake_entries(1), ServerConfig::default());
    *h.slow.lock() = Duration::from_millis(100);
    let c = control::connect(srv.local_addr(), "peer-s", T, None).unwrap();
    wait_until("session", || srv.sessions().len() == 1);
    assert_eq!(*h.events.lock(), ["open peer-s"]);
    drop(c);
    wait_until("session end", || srv.sessions().is_empty());
    assert_eq!(*h.events.lock(), ["open peer-s", "close peer-s"]);
}

#[test]
fn duplicate_channel_id_is_refused_with_already_connected() {
    let (srv, _h) = server(fake_entries(1), ServerConfig::default());
    let _a = control::connect(srv.local_addr(), "dup", T, None).unwrap();
    wait_until("session", || srv.sessions().len() == 1);
    let err = control::connect(srv.local_addr(), "dup", T, None).unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Status {
                code: status::ALREADY_CONNECTED,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(srv.sessions(), ["dup"]);
    assert_eq!(srv.stats().sessions, 1);
    // Once the first session is gone, the id is free again.
    drop(_a);
    wait_until("first session gone", || srv.sessions().is_empty());
    control::connect(srv.local_addr(), "dup", T, None).unwrap();
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let (srv, _h) = server(fake_entries(2), ServerConfig::default());
    let addr = srv.local_addr();
    let good = Frame::new(MsgType::Connect, &wire::ConnectMsg::request("x", 1))
        .unwrap()
        .encode();
    let mut bad_magic = good.clone();
    bad_magic[0] = 0;
    let mut too_long = good.clone();
    too_long[4..12].copy_from_slice(&((1u64 << 20) + 1).to_ne_bytes());
    let truncated = good[..good.len() - 5].to_vec();
    let invalid_json = Frame {
        msg_type: 1,
        payload: b"{\"channel_id\":".to_vec(),
    }
    .encode();
    let wrong_types = Frame {
        msg_type: 1,
        payload: br#"{"channel_id":7,"timeout":"soon"}"#.to_vec(),
    }
    .encode();
    let unknown_type = Frame {
        msg_type: 99,
        payload: b"{}".to_vec(),
    }
    .encode();
    let bad_disconnect = Frame {
        msg_type: 2,
        payload: br#"{"channel_id":[1]}"#.to_vec(),
    }
    .encode();
    let cases = [
        bad_magic,
        too_long,
        truncated,
        invalid_json,
        wrong_types,
        unknown_type,
        bad_disconnect,
    ];
    for (i, bytes) in cases.iter().enumerate() {
        // No response at all: the server closes the connection.
        assert!(
            send_raw(addr, bytes, GUARD).is_empty(),
            "case {i} got a reply"
        );
        assert_eq!(srv.rejected(), i as u64 + 1, "case {i}");
        // ... and keeps serving other peers.
        let ok = control::connect(addr, &format!("peer-{i}"), T, None).unwrap();
        assert_eq!(ok.entries.len(), 2);
    }
}

#[test]
fn shared_secret_and_allow_list() {
    let config = ServerConfig {
        shared_secret: Some("s3cret".into()),
        ..Default::default()
    };
    let (srv, _h) = server(fake_entries(1), config);
    // Without the handshake the server closes the connection: no answer at all.
    let err = control::connect(srv.local_addr(), "a", T, None).unwrap_err();
    assert!(matches!(err, ClientError::Wire { .. }), "{err}");
    assert_eq!(srv.stats().auth_failures, 1);
    // With the wrong secret the client rejects the server's proof first.
    let err = control::connect(srv.local_addr(), "a", T, Some("wrong")).unwrap_err();
    assert!(matches!(err, ClientError::ServerAuth { .. }), "{err}");
    let ok = control::connect(srv.local_addr(), "a", T, Some("s3cret")).unwrap();
    assert_eq!(ok.entries.len(), 1);
    wait_until("auth failures counted", || srv.stats().auth_failures == 2);
    assert_eq!(srv.sessions(), ["a"]);
    drop(ok);

    let config = ServerConfig {
        allowed_peers: Some(vec!["10.9.9.9".parse().unwrap()]),
        ..Default::default()
    };
    let (srv, _h) = server(fake_entries(1), config);
    let err = control::connect(srv.local_addr(), "b", T, None).unwrap_err();
    assert!(matches!(err, ClientError::Wire { .. }), "{err}");
    assert_eq!(srv.rejected(), 1);
}

#[test]
fn notifies_are_queued_and_limited() {
    let (srv, _h) = server(fake_entries(0), ServerConfig::default());
    let n = NotifyMsg {
        name: "kv".into(),
        notify_msg: "block 7 ready".into(),
    };
    control::send_notify(srv.local_addr(), &n, T, None).unwrap();
    wait_until("notify", || !srv.take_notifies().is_empty());
    let long = NotifyMsg {
        name: "x".repeat(1025),
        notify_msg: String::new(),
    };
    assert!(control::send_notify(srv.local_addr(), &long, T, None).is_err());
}

#[test]
fn unreachable_server_is_a_connect_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let err = control::connect(addr, "a", Duration::from_millis(300), None).unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err}");
}

/// A client written only from the wire-format facts (Python, no shared code) reads the list.
#[test]
fn independent_client_reads_the_share_handle_list() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/wire/fabricmem_client.py"
    );
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let (srv, _h) = server(fake_entries(5), ServerConfig::default());
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg("127.0.0.1")
        .arg(srv.local_addr().port().to_string())
        .arg("127.0.0.1:39999")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("entry ")).count(),
        5,
        "{text}"
    );
    assert!(text.contains("status 0 entries=5"), "{text}");
    wait_until("python session", || {
        srv.sessions() == ["127.0.0.1:39999"] || srv.sessions().is_empty()
    });
}

/// A server that answers a byte at a time, slower than nothing but never silent for the whole
/// timeout, cannot stretch a connect past its timeout: the exchange as a whole has one
/// deadline, not each read.
#[test]
fn a_trickling_server_cannot_stretch_a_connect() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // A valid response frame, sent one byte every 100 ms for at most 20 s.
        let resp = Frame::new(
            MsgType::Connect,
            &wire::ConnectMsg::response(&wire::ConnectMsg::request("x", 0), fake_entries(64)),
        )
        .unwrap()
        .encode();
        let t0 = Instant::now();
        for b in resp {
            if t0.elapsed() > Duration::from_secs(20) || s.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let t0 = Instant::now();
    let r = control::connect(addr, "client", Duration::from_secs(1), None);
    let took = t0.elapsed();
    match r {
        Err(e) => assert_eq!(e.status().0, status::TIMEOUT, "{e}"),
        Ok(_) => panic!("a connect that never got its answer succeeded"),
    }
    // The bound is the 1 s timeout; the 10 s here only tells "ended by its deadline" from
    // "ran as long as the server kept trickling" (20 s).
    assert!(took < Duration::from_secs(10), "connect took {took:?}");
    server.join().unwrap();
}

/// The segments request: a client with a session gets the export list now; any other id
/// gets nothing and NOT_CONNECTED (only a connected client may ask).
#[test]
fn only_a_connected_client_is_told_the_segments_now() {
    let (srv, _h) = server(fake_entries(2), ServerConfig::default());
    let addr = srv.local_addr();
    let e = control::segments(addr, "nobody", T, None).unwrap_err();
    assert_eq!(e.status(), ascend_fabric::HixlCode::NOT_CONNECTED, "{e}");
    let _c = control::connect(addr, "peer-s", T, None).unwrap();
    let (entries, names) = control::segments(addr, "peer-s", T, None).unwrap();
    assert_eq!(entries, fake_entries(2));
    assert!(names.is_empty());
}
