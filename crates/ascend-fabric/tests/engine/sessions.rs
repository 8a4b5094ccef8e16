//! Channel ids and sessions across an engine restart. A listening engine sends its engine
//! string as its channel id, as a C++ HIXL engine does, so a server that keys sessions by id
//! sees the restarted engine as the same client: HIXL's server with auto-cleanup replaces the
//! old session; without it (its engine's default) it refuses the duplicate, the way HIXL's
//! server does: it answers the connect with SUCCESS and then closes the connection. The first
//! engine runs in a child process that is SIGKILLed (a crash); the restarted one binds the
//! same address in the test.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ascend_fabric::wire::{self, ConnectMsg, DisconnectMsg, Frame, MsgType, StatusMsg};
use ascend_fabric::{Engine, Error, HixlCode};
use ascend_testkit::{role, test_name, Spawn};
use parking_lot::Mutex;

use crate::util::{listening, setup, test_options};

const T: Duration = Duration::from_secs(20);

/// What the session server saw.
#[derive(Debug, Default)]
struct Seen {
    /// Open sessions by channel id (their sockets, never read: like a server that has not yet
    /// noticed a client's loss, as when its host vanished without closing the connection).
    sessions: HashMap<String, TcpStream>,
    /// Every channel id that asked to connect, in order.
    connects: Vec<String>,
    replaced: usize,
    refused: usize,
    /// Requests of a type HIXL's server does not know (closed unanswered).
    unknown: usize,
}

/// A control server with the session rules of HIXL's FabricMem server (hicann/hixl
/// `fabric_mem_control.cc`): sessions keyed by the connect request's `channel_id`; with
/// auto-cleanup a connect under an id that has a session closes the old one and takes its
/// place; without it the duplicate is refused as HIXL's server refuses it (the connect
/// response and a SUCCESS status are written first, then the connection is closed and no
/// session made). It offers no memory.
struct SessionServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn status_frame(code: HixlCode) -> Frame {
    let msg = StatusMsg {
        error_code: code.0,
        error_message: String::new(),
    };
    Frame::new(MsgType::Status, &msg).unwrap()
}

impl SessionServer {
    fn start(auto_cleanup: bool) -> SessionServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    serve(c, &s2, auto_cleanup);
                }
            }
        });
        SessionServer {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn addr(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for SessionServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// One request: a connect (answered, and the socket kept as the session) or a disconnect.
fn serve(mut c: TcpStream, seen: &Mutex<Seen>, auto_cleanup: bool) {
    c.set_read_timeout(Some(T)).unwrap();
    let Ok(frame) = wire::read_frame(&mut c) else {
        return;
    };
    match MsgType::from_raw(frame.msg_type) {
        Some(MsgType::Connect) => {
            let req: ConnectMsg = frame.parse(MsgType::Connect, "connect").unwrap();
            let mut s = seen.lock();
            s.connects.push(req.channel_id.clone());
            let resp = Frame::new(MsgType::Connect, &ConnectMsg::response(&req, Vec::new()));
            wire::write_frame(&mut c, &resp.unwrap()).unwrap();
            wire::write_frame(&mut c, &status_frame(HixlCode::SUCCESS)).unwrap();
            c.flush().unwrap();
            let duplicate = s.sessions.contains_key(&req.channel_id);
            if duplicate && !auto_cleanup {
                s.refused += 1;
                let _ = c.shutdown(Shutdown::Both);
                return;
            }
            if let Some(old) = s.sessions.insert(req.channel_id, c) {
                let _ = old.shutdown(Shutdown::Both);
                s.replaced += 1;
            }
        }
        Some(MsgType::Disconnect) => {
            let msg: DisconnectMsg = frame.parse(MsgType::Disconnect, "disconnect").unwrap();
            if let Some(old) = seen.lock().sessions.remove(&msg.channel_id) {
                let _ = old.shutdown(Shutdown::Both);
            }
            let _ = wire::write_frame(&mut c, &status_frame(HixlCode::SUCCESS));
        }
        _ => seen.lock().unknown += 1,
    }
}

/// The child: a listening engine connects to the server (its address from stdin) and
/// reports its own address and channel id, then waits to be killed.
fn first_incarnation() {
    let env = setup();
    let dev = env.rt.device(0).unwrap();
    let server = ascend_testkit::role::read_stdin_line().expect("the server from the parent");
    let (e, addr) = listening(&dev, test_options(1));
    e.connect(&server, T).unwrap();
    println!("CONNECTED {addr} {}", e.channel_id());
    let _ = ascend_testkit::role::read_stdin_line(); // killed before this returns
    panic!("the first incarnation was not killed");
}

/// Runs the first incarnation of an engine against `server`, kills it once it is connected,
/// and returns its address and the channel id it used. (The restarted engine must bind the
/// same address; nothing else of this process takes ports from the free-port range.)
fn crash_after_connecting(test: &str, server: &str) -> (String, String) {
    let mut child = Spawn::new(test, "first").start();
    let line = child.ask(server, "CONNECTED ");
    child.child.kill().unwrap();
    child.child.wait().unwrap();
    let (addr, id) = line.split_once(' ').expect("ADDR ID");
    (addr.to_owned(), id.to_owned())
}

#[test]
fn restarted_engine_replaces_its_session_on_a_server_with_auto_cleanup() {
    if role().is_some() {
        return first_incarnation();
    }
    let env = setup();
    let dev = env.rt.device(0).unwrap();
    let server = SessionServer::start(true);
    let test = test_name!(restarted_engine_replaces_its_session_on_a_server_with_auto_cleanup);
    let (addr, first) = crash_after_connecting(test, &server.addr());
    assert_eq!(
        first, addr,
        "a listening engine's channel id is its engine string"
    );

    let restarted = Engine::new(&dev, &addr, test_options(1)).unwrap();
    assert_eq!(restarted.channel_id(), addr);
    restarted.connect(&server.addr(), T).unwrap();
    assert!(restarted.is_connected(&server.addr()));
    {
        let s = server.seen.lock();
        assert_eq!(s.connects, [addr.clone(), addr.clone()]);
        assert_eq!((s.replaced, s.refused), (1, 0), "{s:?}");
        assert_eq!(
            s.sessions.len(),
            1,
            "the old session is gone, not kept beside the new"
        );
    }
    restarted.disconnect(&server.addr(), T).unwrap();
    assert!(server.seen.lock().sessions.is_empty());
}

#[test]
fn restarted_engine_is_refused_by_a_server_without_auto_cleanup() {
    if role().is_some() {
        return first_incarnation();
    }
    let env = setup();
    let dev = env.rt.device(0).unwrap();
    let server = SessionServer::start(false);
    let test = test_name!(restarted_engine_is_refused_by_a_server_without_auto_cleanup);
    let (addr, _) = crash_after_connecting(test, &server.addr());

    let restarted = Engine::new(&dev, &addr, test_options(1)).unwrap();
    // HIXL's server answers SUCCESS and then closes: the connect returns, and the channel is
    // lost as soon as its keepalive reader sees the close.
    restarted.connect(&server.addr(), T).unwrap();
    ascend_testkit::wait_until("the refused channel's loss", T, || {
        !restarted.is_connected(&server.addr())
    });
    let e = restarted.disconnect(&server.addr(), T).unwrap_err();
    assert!(matches!(e, Error::NotConnected { .. }), "{e:?}");
    let s = server.seen.lock();
    assert_eq!((s.replaced, s.refused), (0, 1), "{s:?}");
    assert_eq!(
        s.sessions.keys().collect::<Vec<_>>(),
        [&addr],
        "the old session stays"
    );
}

/// Our own server: it ends the crashed engine's session once it reads the closed socket
/// (the event waited for), and serves the restarted engine under the same id.
#[test]
fn restarted_engine_is_served_by_our_server() {
    if role().is_some() {
        return first_incarnation();
    }
    let env = setup();
    let dev = env.rt.device(0).unwrap();
    let (server, server_addr) = listening(&dev, test_options(1));
    let test = test_name!(restarted_engine_is_served_by_our_server);
    let (addr, _) = crash_after_connecting(test, &server_addr);
    ascend_testkit::wait_until("the crashed engine's session to end", T, || {
        server.sessions().is_empty()
    });
    let restarted = Engine::new(&dev, &addr, test_options(1)).unwrap();
    restarted.connect(&server_addr, T).unwrap();
    assert_eq!(server.sessions(), std::slice::from_ref(&addr));
    restarted.disconnect(&server_addr, T).unwrap();
}

/// An engine without a port gets an id of its own: every such engine of a host has the same
/// plain `ip`.
#[test]
fn portless_engines_have_instance_unique_channel_ids() {
    let env = setup();
    let dev = env.rt.device(0).unwrap();
    let a = Engine::new(&dev, "127.0.0.1", test_options(1)).unwrap();
    let b = Engine::new(&dev, "127.0.0.1", test_options(1)).unwrap();
    for e in [&a, &b] {
        let (ip, suffix) = e.channel_id().split_once('#').expect("ip#suffix");
        assert_eq!(ip, "127.0.0.1");
        assert_eq!(suffix.len(), 16);
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()), "{suffix}");
    }
    assert_ne!(a.channel_id(), b.channel_id());
    // An unspecified address names no host: it gets an id of its own too.
    let (c, c_addr) = (0..20)
        .find_map(|_| {
            let addr = format!("0.0.0.0:{}", crate::util::free_port());
            Engine::new(&dev, &addr, test_options(1))
                .ok()
                .map(|e| (e, addr))
        })
        .expect("a free port");
    assert!(
        c.channel_id().starts_with(&format!("{c_addr}#")),
        "{}",
        c.channel_id()
    );
}

/// A server with HIXL's rules knows no segments request (it closes the connection, as for
/// any type it does not know): the peer's segments are those of the connect. Asking reports
/// [`Error::SegmentsFixed`] (UNSUPPORTED), the channel stays, and the answer is remembered
/// (the server is not asked again).
#[test]
fn a_hixl_server_s_segments_are_those_of_the_connect() {
    let env = setup();
    let server = SessionServer::start(true);
    let engine = Engine::new(&env.dev, "127.0.0.1", test_options(1)).unwrap();
    engine.connect(&server.addr(), T).unwrap();
    for _ in 0..2 {
        let e = engine.refresh_segments(&server.addr(), T).unwrap_err();
        assert!(matches!(e, Error::SegmentsFixed { .. }), "{e:?}");
        assert_eq!(e.status(), HixlCode::UNSUPPORTED);
    }
    assert!(engine.is_connected(&server.addr()));
    assert_eq!(server.seen.lock().unknown, 1, "asked once");
    assert_eq!(server.seen.lock().connects.len(), 1, "no reconnect");
    engine.disconnect(&server.addr(), T).unwrap();
    drop(engine);
    drop(server);
    env.finish();
}
