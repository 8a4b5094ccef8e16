//! The control server under a connection flood: one thread whatever the load, silent and
//! trickling connections closed at their deadline, a real peer served meanwhile, and nothing
//! of the server left after drop. One test in this binary, so thread and descriptor counts
//! are this test's alone.

#[allow(dead_code)]
#[path = "control/util.rs"]
mod control_util;

use ascend_fabric::control::ServerConfig;
use ascend_fabric::wire::{ConnectMsg, Frame, MsgType};
use ascend_testkit::process::{live_thread_count as threads, open_fds as fds};
use control_util::*;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IDLE: usize = 2000;
const TRICKLERS: usize = 300;
/// Connections per attacking source address (under the per-IP cap of 256).
const PER_IP: usize = 200;
/// The request deadline: long enough that the flood is surely still open while the real peer
/// connects and transfers (under a second on an idle machine, a few seconds with both cores
/// loaded), short enough to keep the test quick.
const DEADLINE: Duration = Duration::from_secs(10);

fn attacker_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (i / PER_IP) as u8))
}

/// A dropped server leaves no thread and no descriptor behind, with connections and a session
/// open at the time.
fn drop_leaves_nothing() {
    let (t0, f0) = (threads(), fds());
    let (srv, h) = server(fake_entries(1), ServerConfig::default());
    assert_eq!(threads(), t0 + 1, "one thread per server");
    let addr = srv.local_addr();
    let session = ascend_fabric::control::connect(addr, "s", T, None).unwrap();
    let idle: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(addr).unwrap()).collect();
    wait_until("connections accepted", || {
        srv.stats().open_connections == 11
    });
    let client_fds = fds();
    drop(srv);
    assert_eq!(threads(), t0, "the server's thread was joined");
    // Our 11 client sockets are still open; every server descriptor is gone.
    assert_eq!(fds(), f0 + 11, "server descriptors left open");
    assert!(client_fds > f0 + 11);
    assert_eq!(*h.events.lock(), ["open s", "close s"]);
    drop((session, idle));
    assert_eq!(fds(), f0);
}

#[test]
fn flood_of_idle_and_trickling_connections() {
    let soft = set_soft_nofile(u64::MAX);
    let needed = 2 * (IDLE + TRICKLERS) as u64 + 256;
    if soft < needed {
        eprintln!("skipped: RLIMIT_NOFILE hard limit {soft} is below the {needed} this test needs");
        return;
    }
    drop_leaves_nothing();

    let dev = device();
    let target = exported(&dev, MIB2);
    let config = ServerConfig {
        request_timeout: DEADLINE,
        ..ServerConfig::default()
    };
    let (srv, _h) = server(vec![target.entry.clone()], config);
    let addr = srv.local_addr();
    let t_server = threads();

    // The flood: silent connections, then tricklers sending a valid connect request one byte
    // at a time, each from attacker addresses 127.0.0.2 and up.
    // They go in batches, each accepted before the next: the listen backlog is finite, and
    // a connection the kernel could not queue completes only after SYN-ACK retries, which
    // with both cores loaded could outlast the deadline of the first ones.
    let started = Instant::now();
    let mut socks: Vec<TcpStream> = Vec::with_capacity(IDLE + TRICKLERS);
    for i in 0..IDLE + TRICKLERS {
        socks.push(connect_from(attacker_ip(i), addr).expect("flood connection"));
        if socks.len() % 50 == 0 || socks.len() == IDLE + TRICKLERS {
            let n = socks.len() as u64;
            wait_until("the flood accepted", || srv.stats().open_connections == n);
        }
    }
    let tricklers = socks.split_off(IDLE);
    let idle = socks;
    assert_eq!(
        threads(),
        t_server,
        "the server added threads under the flood"
    );

    let request = Frame::new(MsgType::Connect, &ConnectMsg::request("trickler", 1000))
        .unwrap()
        .encode();
    let stop = Arc::new(AtomicBool::new(false));
    let trickle = {
        let mut socks: Vec<TcpStream> = tricklers.iter().map(|s| s.try_clone().unwrap()).collect();
        let stop = stop.clone();
        std::thread::spawn(move || {
            // One byte per connection about every 500 ms: the pace of the attack, not a wait.
            for byte in request.iter().cycle() {
                if stop.load(Ordering::Relaxed) || socks.is_empty() {
                    return;
                }
                socks.retain_mut(|s| s.write_all(&[*byte]).is_ok());
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };

    // A real peer, on 127.0.0.1, gets through while all of that is open.
    let engine = client_engine(&dev, None);
    connect_and_write(&engine, &dev, addr, &target, 0, 7);
    let during = srv.stats();
    let connected_after = started.elapsed();
    assert!(
        connected_after < DEADLINE,
        "setup took {connected_after:?}; the flood was no longer open"
    );
    assert_eq!(during.sessions, 1);
    assert_eq!(during.open_connections, (IDLE + TRICKLERS + 1) as u64);
    assert_eq!(during.closed_at_deadline, 0);

    // Every flood connection is closed at its deadline, not before.
    for (i, mut s) in idle.into_iter().chain(tricklers).enumerate() {
        assert!(
            closed_by_peer(&mut s, GUARD),
            "connection {i} was not closed by the server"
        );
        assert!(started.elapsed() >= DEADLINE, "connection {i} closed early");
    }
    wait_until("deadline closes counted", || {
        srv.stats().closed_at_deadline == (IDLE + TRICKLERS) as u64
    });
    stop.store(true, Ordering::Relaxed);
    trickle.join().unwrap();
    let after = srv.stats();
    assert_eq!(after.open_connections, 1, "{after:?}");
    assert_eq!(after.sessions, 1);
    assert_eq!(after.refused_over_cap, 0);
    assert_eq!(after.malformed, 0);
    // The real peer's session was untouched by all of it.
    assert!(engine.is_connected(&addr.to_string()));
    drop(engine);
    wait_until("the peer's session ends", || srv.stats().sessions == 0);
}
