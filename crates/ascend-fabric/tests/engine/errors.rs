//! Error texts: each level of an error chain says its own part once, so a reporter that
//! prints the chain (`anyhow`'s `{:#}`, `tracing`'s error chains) never repeats the OS text.

use std::error::Error as _;
use std::net::TcpListener;

use crate::util::*;
use ascend_fabric::{Engine, EngineOptions, Error};
use ascend_mem::prelude::*;

/// The chain as `{:#}` of anyhow prints it: every level's Display, joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

#[test]
fn a_listen_error_names_the_address_and_the_os_error_once() {
    let env = setup();
    let rt = &env.rt;
    let dev = rt.device(0).unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("127.0.0.1:{}", taken.local_addr().unwrap().port());
    let opts = EngineOptions::builder()
        .pool_capacity(2 << 30)
        .build()
        .unwrap();
    let e = Engine::new(&dev, &addr, opts).unwrap_err();
    assert!(matches!(e, Error::Listen { .. }), "{e:?}");
    let text = chain(&e);
    let os = e.source().expect("the OS error is the source").to_string();
    assert!(text.contains(&addr), "{text}");
    assert_eq!(text.matches(&os).count(), 1, "the OS text once: {text}");
}

#[test]
fn memory_of_another_device_is_refused_by_name() {
    let env = setup();
    let rt = &env.rt;
    let (d0, d1) = (rt.device(0).unwrap(), rt.device(1).unwrap());
    let opts = EngineOptions::builder()
        .pool_capacity(2 << 30)
        .build()
        .unwrap();
    let engine = Engine::new(&d0, "127.0.0.1", opts).unwrap();
    let other = ascend_mem::DeviceBuffer::new(&d1, 2 << 20).unwrap();
    match engine.register(&other) {
        Err(Error::Mem(ascend_mem::Error::WrongDevice {
            expected, found, ..
        })) => assert_eq!((expected, found), (0, 1)),
        other => panic!("expected WrongDevice, got {other:?}"),
    }
    let mine = engine.alloc_device(2 << 20).unwrap();
    let _reg = engine.register(&mine).unwrap();
}

#[test]
fn engines_are_addressed_by_host_name() {
    let env = setup();
    let rt = &env.rt;
    let dev = rt.device(0).unwrap();
    let name = format!("localhost:{}", free_port());
    let opts = || {
        EngineOptions::builder()
            .pool_capacity(2 << 30)
            .build()
            .unwrap()
    };
    let server = Engine::new(&dev, &name, opts()).unwrap();
    assert_eq!(server.local_addr().as_str(), name);
    let remote = server.alloc_device(2 << 20).unwrap();
    let _rreg = server.register(&remote).unwrap();
    let client = Engine::new(&dev, "localhost", opts()).unwrap();
    let local = client.alloc_device(2 << 20).unwrap();
    let _lreg = client.register(&local).unwrap();
    local.write_from(b"by name", 0).unwrap();
    client
        .connect(&name, std::time::Duration::from_secs(10))
        .unwrap();
    let d = ascend_fabric::TransferDesc::raw(local.addr(), remote.addr(), 7);
    client
        .transfer_sync(
            &name,
            ascend_fabric::TransferOp::Write,
            &[d],
            std::time::Duration::from_secs(10),
        )
        .unwrap();
    let mut got = [0u8; 7];
    remote.read_into(&mut got, 0).unwrap();
    assert_eq!(&got, b"by name");
}

/// A server that accepts and never answers: the connect times out, and says so
/// (`Error::Timeout` naming the control exchange, HIXL's TIMEOUT status), not an I/O error.
#[test]
fn a_server_that_never_answers_is_a_timeout() {
    let env = setup();
    // Listening, never accepting: the kernel completes the handshake, nobody answers.
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = mute.local_addr().unwrap().to_string();
    let e = Engine::new(&env.dev, "127.0.0.1", test_options(1)).unwrap();
    let t = std::time::Duration::from_millis(300);
    let err = e.connect(&addr, t).unwrap_err();
    assert!(
        matches!(err, Error::Timeout { what, after } if what.contains("control exchange") && after == t),
        "{err:?}"
    );
    assert_eq!(err.status(), ascend_fabric::HixlCode::TIMEOUT);
    assert!(!e.is_connected(&addr));
    drop((e, mute));
    env.finish();
}
