//! The control server's bounds and session management: caps, heartbeat reaping, failure
//! statuses instead of silent drops, unique engine channel ids, and revocation.

use crate::util::*;
use ascend_fabric::control::{
    self, status, ClientError, ControlHandler, ControlServer, ServerConfig,
};
use ascend_fabric::wire::ShareHandleEntry;
use parking_lot::Mutex;
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

#[test]
fn over_cap_connections_are_closed_at_once_and_counted() {
    let config = ServerConfig {
        max_connections: 8,
        max_connections_per_ip: 3,
        // Far beyond the test: a connection closed here was closed by a cap, not a deadline.
        request_timeout: Duration::from_secs(600),
        ..ServerConfig::default()
    };
    let (srv, _h) = server(fake_entries(1), config);
    let addr = srv.local_addr();
    let mut held: Vec<TcpStream> = (0..3).map(|_| connect_from(ip(5), addr).unwrap()).collect();
    wait_until("three accepted", || srv.stats().open_connections == 3);
    // The fourth from the same address is closed as soon as it is accepted.
    let mut extra = connect_from(ip(5), addr).unwrap();
    assert!(
        closed_by_peer(&mut extra, GUARD),
        "over the per-IP cap, still open"
    );
    assert_eq!(srv.stats().refused_over_cap, 1);
    // A real peer from another address gets through.
    let _real = control::connect(addr, "real", T, None).unwrap();
    // Fill the global cap (3 + 1 session + 4 = 8) from addresses under their own cap.
    held.extend((0..4).map(|i| connect_from(ip(6 + i / 3), addr).unwrap()));
    wait_until("eight open", || srv.stats().open_connections == 8);
    let mut ninth = connect_from(ip(20), addr).unwrap();
    assert!(
        closed_by_peer(&mut ninth, GUARD),
        "over the global cap, still open"
    );
    // A client over the cap is told so (not a bare close, not an I/O error).
    let err = control::connect(addr, "late", T, None).unwrap_err();
    assert!(
        matches!(err, ClientError::Status { code, ref message, .. }
            if code == status::RESOURCE_EXHAUSTED && message.contains("connection cap of 8")),
        "{err}"
    );
    assert!(err.to_string().contains("RESOURCE_EXHAUSTED"), "{err}");
    let st = srv.stats();
    assert_eq!(
        (st.refused_over_cap, st.open_connections, st.sessions),
        (3, 8, 1),
        "{st:?}"
    );
    assert_eq!(st.closed_at_deadline, 0);
    // Freeing one slot lets the next one in.
    drop(held.pop());
    wait_until("slot freed", || srv.stats().open_connections == 7);
    control::connect(addr, "late", T, None).unwrap();
}

/// With a shared secret, a client over the cap is told about the cap, not that the server
/// could not prove it knows the secret.
#[test]
fn over_the_cap_with_a_secret_says_cap_not_secret() {
    let config = ServerConfig {
        max_connections_per_ip: 1,
        request_timeout: Duration::from_secs(600),
        shared_secret: Some("a long shared secret for the test".into()),
        ..ServerConfig::default()
    };
    let (srv, _h) = server(fake_entries(1), config);
    let addr = srv.local_addr();
    // Held from 127.0.0.1, the address the client below connects from.
    let _held = connect_from(ip(1), addr).unwrap();
    wait_until("one accepted", || srv.stats().open_connections == 1);
    let secret = Some("a long shared secret for the test");
    let err = control::connect(addr, "late", T, secret).unwrap_err();
    assert!(
        matches!(err, ClientError::Status { code, ref message, .. }
            if code == status::RESOURCE_EXHAUSTED && message.contains("per peer address")),
        "{err}"
    );
}

#[test]
fn sessions_without_heartbeats_are_reaped() {
    const TIMEOUT: Duration = Duration::from_millis(1000);
    let config = ServerConfig {
        session_heartbeat_timeout: Some(TIMEOUT),
        ..ServerConfig::default()
    };
    let (srv, h) = server(fake_entries(1), config);
    let addr = srv.local_addr();
    let started = Instant::now();
    let mut silent = control::connect(addr, "silent", T, None).unwrap();
    let mut alive = control::connect(addr, "alive", T, None).unwrap();
    let beat = {
        let mut ka = alive.keepalive.try_clone().unwrap();
        std::thread::spawn(move || {
            // A heartbeat every 100 ms, a tenth of the timeout, until the server closes.
            while control::send_heartbeat(&mut ka).is_ok() {
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    assert!(closed_by_peer(&mut silent.keepalive, GUARD), "not reaped");
    assert!(started.elapsed() >= TIMEOUT, "reaped before the timeout");
    wait_until("reap counted", || srv.stats().reaped == 1);
    assert_eq!(
        srv.sessions(),
        ["alive"],
        "the session with heartbeats stays"
    );
    assert!(h.events.lock().contains(&"close silent".to_owned()));
    // Closing the client's side ends the other session (and the heartbeat thread).
    alive.keepalive.shutdown(std::net::Shutdown::Write).ok();
    beat.join().unwrap();
    assert!(closed_by_peer(&mut alive.keepalive, GUARD));
    wait_until("all sessions gone", || srv.sessions().is_empty());
    assert_eq!(srv.stats().reaped, 1);
}

#[test]
fn a_list_too_large_for_a_frame_is_refused_not_dropped() {
    let (srv, _h) = server(fake_entries(2500), ServerConfig::default());
    let err = control::connect(srv.local_addr(), "big", T, None).unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Status {
                code: status::RESOURCE_EXHAUSTED,
                ..
            }
        ),
        "{err}"
    );
    assert!(srv.sessions().is_empty());
}

#[test]
fn two_portless_engines_transfer_through_one_server() {
    let dev = device();
    let target = exported(&dev, MIB2);
    let (srv, _h) = server(vec![target.entry.clone()], ServerConfig::default());
    let (a, b) = (client_engine(&dev, None), client_engine(&dev, None));
    assert_eq!(a.local_addr().as_str(), b.local_addr().as_str());
    connect_and_write(&a, &dev, srv.local_addr(), &target, 0, 1);
    connect_and_write(&b, &dev, srv.local_addr(), &target, 1 << 20, 2);
    let mut ids = srv.sessions();
    ids.sort();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_ne!(ids[0], ids[1]);
    assert!(
        ids.iter()
            .all(|i| i.starts_with("127.0.0.1#") && i.len() == 10 + 16),
        "{ids:?}"
    );
    // Both still work after the other transferred.
    let remote = srv.local_addr().to_string();
    assert!(a.is_connected(&remote) && b.is_connected(&remote));
    a.disconnect(&remote, T).unwrap();
    assert_eq!(srv.sessions().len(), 1);
    drop((a, b));
    wait_until("sessions end", || srv.sessions().is_empty());
}

/// Offers whatever list it holds at the time of each connect.
#[derive(Default)]
struct Switchable {
    entries: Mutex<Vec<ShareHandleEntry>>,
    closed: Mutex<Vec<String>>,
}

impl ControlHandler for Switchable {
    fn share_handles(&self) -> Vec<ShareHandleEntry> {
        self.entries.lock().clone()
    }
    fn session_closed(&self, id: &str) {
        self.closed.lock().push(id.to_owned());
    }
}

#[test]
fn revoke_closes_the_sessions_offered_an_address() {
    let dev = device();
    let (first, second) = (exported(&dev, MIB2), exported(&dev, MIB2));
    let h = Arc::new(Switchable::default());
    let srv = ControlServer::start(
        "127.0.0.1:0".parse().unwrap(),
        h.clone(),
        ServerConfig::default(),
    )
    .unwrap();
    let remote = srv.local_addr().to_string();
    // An engine offered the first segment; a raw client (which never closes by itself)
    // offered the second.
    *h.entries.lock() = vec![first.entry.clone()];
    let engine = client_engine(&dev, None);
    connect_and_write(&engine, &dev, srv.local_addr(), &first, 0, 3);
    let engine_id = srv.sessions().pop().unwrap();
    *h.entries.lock() = vec![second.entry.clone()];
    let mut raw = control::connect(srv.local_addr(), "raw", T, None).unwrap();

    assert_eq!(
        srv.revoke(&[0x1234_0000], GUARD),
        0,
        "nobody was offered that"
    );
    // The engine takes revocations of single segments: it drops its import and answers, and
    // revoke returns on the answer; its session and channel stay.
    assert_eq!(srv.revoke(&[first.entry.va_addr], GUARD), 1);
    let mut sessions = srv.sessions();
    sessions.sort();
    let mut want = vec![engine_id.clone(), "raw".to_owned()];
    want.sort();
    assert_eq!(sessions, want);
    assert!(h.closed.lock().is_empty());
    assert!(engine.is_connected(&remote));
    assert_eq!(engine.remote_segments(&remote).unwrap(), []);

    // The raw client does not close: revoke waits only as long as asked, and the session
    // stays half-closed until the client closes it.
    let t0 = Instant::now();
    assert_eq!(
        srv.revoke(&[second.entry.va_addr], Duration::from_millis(200)),
        1
    );
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert!(
        closed_by_peer(&mut raw.keepalive, GUARD),
        "no FIN for the raw client"
    );
    assert!(srv.sessions().contains(&"raw".to_owned()));
    drop(raw);
    wait_until("raw session gone", || srv.sessions() == [engine_id.clone()]);
    assert_eq!(*h.closed.lock(), ["raw".to_owned()]);
}

/// A client that sent the subscribe frame is sent the revocation of what it was offered, on
/// its keepalive socket, and the revocation returns on its answer (not on a close, nor the
/// wait running out); the session stays. What it was not offered is not sent.
#[test]
fn revoke_asks_a_subscribed_client_and_returns_on_its_answer() {
    use ascend_fabric::wire::{self, RevokeMsg};
    use std::io::Write;
    let dev = device();
    let (first, second) = (exported(&dev, MIB2), exported(&dev, MIB2));
    let h = Arc::new(Switchable::default());
    let srv = ControlServer::start(
        "127.0.0.1:0".parse().unwrap(),
        h.clone(),
        ServerConfig::default(),
    )
    .unwrap();
    *h.entries.lock() = vec![first.entry.clone()];
    let mut c = control::connect(srv.local_addr(), "subscriber", T, None).unwrap();
    c.keepalive
        .write_all(&wire::keepalive_bytes(wire::KEEPALIVE_SUBSCRIBE, b"{}"))
        .unwrap();
    // A heartbeat after it: once the server has read that (its last heartbeat is newer than
    // the send), it has read the subscribe too.
    let sent = Instant::now();
    control::send_heartbeat(&mut c.keepalive).unwrap();
    wait_until("the heartbeat read", || {
        srv.since_heartbeat("subscriber")
            .is_some_and(|d| d < sent.elapsed())
    });
    assert_eq!(
        srv.revoke(&[second.entry.va_addr], GUARD),
        0,
        "never offered"
    );
    std::thread::scope(|s| {
        let revoking = s.spawn(|| srv.revoke(&[first.entry.va_addr, second.entry.va_addr], GUARD));
        c.keepalive.set_read_timeout(Some(GUARD)).unwrap();
        let (ty, body) = wire::read_keepalive(&mut c.keepalive).unwrap();
        assert_eq!(ty, wire::KEEPALIVE_REVOKE);
        let msg: RevokeMsg = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            msg.va_addrs,
            [first.entry.va_addr],
            "only what it was offered"
        );
        c.keepalive
            .write_all(&wire::keepalive_bytes(wire::KEEPALIVE_REVOKE_ACK, b"{}"))
            .unwrap();
        assert_eq!(revoking.join().unwrap(), 1);
    });
    assert_eq!(srv.sessions(), ["subscriber"]);
    // Revoked already: not sent again.
    assert_eq!(srv.revoke(&[first.entry.va_addr], GUARD), 0);
    drop(c);
    wait_until("session gone", || srv.sessions().is_empty());
}

/// The engine's option reaches its server: a client that sends no heartbeats is reaped, an
/// engine (heartbeats every 200 ms) keeps its session.
#[test]
fn an_engine_server_reaps_silent_clients_and_keeps_engines() {
    use ascend_fabric::{Engine, EngineOptions};
    let dev = device();
    let remote = engine_addr();
    let opts = EngineOptions::builder()
        .pool_capacity(64 << 30)
        .session_heartbeat_timeout(Some(Duration::from_secs(2)))
        .build()
        .unwrap();
    let srv = Engine::new(&dev, &remote, opts).unwrap();
    let peer = client_engine(&dev, None);
    peer.connect(&remote, T).unwrap();
    let mut silent = control::connect(srv.listen_addr().unwrap(), "silent", T, None).unwrap();
    assert_eq!(srv.sessions().len(), 2);
    assert!(closed_by_peer(&mut silent.keepalive, GUARD), "not reaped");
    wait_until("reaped", || srv.sessions().len() == 1);
    assert!(srv.sessions()[0].starts_with("127.0.0.1#"));
    assert!(peer.is_connected(&remote));
}

/// Before a server proves the secret, only its "over the cap" status is believed: any other
/// status in place of the challenge is a server that did not prove it knows the secret.
#[test]
fn a_status_instead_of_a_challenge_is_not_believed() {
    use ascend_fabric::wire::{self, Frame, MsgType, StatusMsg};
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = fake.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        let _hello = wire::read_frame(&mut s).unwrap();
        let st = StatusMsg {
            error_code: status::ALREADY_CONNECTED,
            error_message: "believe me".into(),
        };
        wire::write_frame(&mut s, &Frame::new(MsgType::Status, &st).unwrap()).unwrap();
    });
    let err =
        control::connect(addr, "c", T, Some("a long shared secret for the test")).unwrap_err();
    assert!(matches!(err, ClientError::ServerAuth { .. }), "{err}");
    t.join().unwrap();
}
