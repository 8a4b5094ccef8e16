//! A connect that fails after the peer accepted it (an import or a mapping fails) ends the
//! session it opened at the peer before returning, so an immediate retry is accepted and its
//! channel lives (it was once answered as a duplicate and closed). It holds the test lock:
//! faults and counters are process-wide.

use ascend_mem::prelude::*;
use std::time::Duration;

use crate::util::*;
use ascend_fabric::{Engine, TransferDesc, TransferOp};

const T: Duration = Duration::from_secs(20);

#[test]
fn a_failed_connect_leaves_no_session_behind_and_a_retry_works() {
    let env = setup();
    let rt = &env.rt;
    let dev = rt.device(0).unwrap();
    let opts = || options(1, 8);
    let addr = listen_addr();
    let owner = Engine::new(&dev, &addr, opts()).unwrap();
    let remote = owner.alloc_device(2 << 20).unwrap();
    let _rreg = owner.register(&remote).unwrap();
    let client = Engine::new(&dev, "127.0.0.1", opts()).unwrap();
    let local = client.alloc_device(2 << 20).unwrap();
    let _lreg = client.register(&local).unwrap();

    for symbol in ["aclrtMemImportFromShareableHandleV2", "aclrtMapMem"] {
        ascend_sim::fault::fail_nth(symbol, 1, INTERNAL);
        let e = client.connect(&addr, T).unwrap_err();
        ascend_sim::fault::clear();
        assert!(e.to_string().contains(symbol), "{symbol}: {e}");
        assert!(!client.is_connected(&addr));
        // The owner let the session go before answering the disconnect the failed connect
        // sent, so it is gone already, and the retry is a fresh session.
        assert!(
            owner.sessions().is_empty(),
            "{symbol}: {:?}",
            owner.sessions()
        );
        assert_eq!(client.pool_usage().0, 0);
        client.connect(&addr, T).unwrap();
        let d = TransferDesc::raw(local.addr(), remote.addr(), 4096);
        client
            .transfer_sync(&addr, TransferOp::Write, &[d], T)
            .unwrap();
        assert!(client.is_connected(&addr));
        assert_eq!(owner.sessions().len(), 1);
        client.disconnect(&addr, T).unwrap();
    }
}

/// A timeout too long for the clock (`Duration::MAX`, or what a caller's "no limit" turns
/// into) is a long wait, never a panic: each control call takes it.
#[test]
fn control_calls_take_a_timeout_too_long_for_the_clock() {
    let env = setup();
    let dev = env.rt.device(0).unwrap();
    let addr = listen_addr();
    let owner = Engine::new(&dev, &addr, options(1, 8)).unwrap();
    let client = Engine::new(&dev, "127.0.0.1", options(1, 8)).unwrap();
    client.connect(&addr, Duration::MAX).unwrap();
    client.send_notify(&addr, "n", "m", Duration::MAX).unwrap();
    client.disconnect(&addr, Duration::MAX).unwrap();
    assert!(!client.is_connected(&addr));
    drop(owner);
}
