//! A reconnect right after the peer process was killed needs no retry loop: `connect` does not
//! answer "already connected" for the dying channel (it asks the keepalive socket whether
//! the peer closed it, and waits for a teardown under way), and once the peer is back it
//! connects at once.

use std::time::Duration;

use ascend_fabric::{Engine, Error};
use ascend_testkit::{role, test_name, Spawn};

use crate::util::{listen_addr, setup, test_options};

const T: Duration = Duration::from_secs(20);
const ADDR_VAR: &str = "ASCEND_FABRIC_TEST_PEER_ADDR";

/// The peer: a listening engine offering one registration, until its stdin closes.
fn peer_role() {
    let env = setup();
    let addr = std::env::var(ADDR_VAR).expect("the peer's address");
    let e = Engine::new(&env.dev, &addr, test_options(1)).unwrap();
    let buf = e.alloc_device(2 << 20).unwrap();
    let _reg = e.register(&buf).unwrap();
    println!("READY");
    let _ = ascend_testkit::role::read_stdin_line();
    println!("RESULT ok");
}

#[test]
fn reconnect_right_after_a_kill_needs_no_retry() {
    if role().is_some() {
        return peer_role();
    }
    let name = test_name!(reconnect_right_after_a_kill_needs_no_retry);
    let env = setup();
    let addr = listen_addr();
    let mut peer = Spawn::new(name, "peer").env(ADDR_VAR, &addr).start();
    peer.expect_line("READY");
    let client = Engine::new(&env.dev, "127.0.0.1", test_options(1)).unwrap();
    client.connect(&addr, T).unwrap();
    peer.child.kill().unwrap();
    peer.child.wait().unwrap();

    // At once, whatever the keepalive reader has done yet: the dead peer's channel is not
    // "already connected"; the connect tears it down and then finds nobody listening.
    let e = client.connect(&addr, T).unwrap_err();
    assert!(
        matches!(e, Error::Control(_)),
        "a connect to a dead peer, not {e:?}"
    );
    assert!(!client.is_connected(&addr));

    let mut peer2 = Spawn::new(name, "peer").env(ADDR_VAR, &addr).start();
    peer2.expect_line("READY");
    client.connect(&addr, T).unwrap();
    assert_eq!(client.remote_segments(&addr).map(|s| s.len()), Some(1));
    client.disconnect(&addr, T).unwrap();
    peer2.finish();
    drop(client);
    env.finish();
}
