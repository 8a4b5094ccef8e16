//! `ascend_cs` over the in-process emulator: the round trip sync and async, every bad
//! input as a typed error (host checks first, then the library's status through the table and
//! at the raw C level), destroy with a batch in flight, and the emulator's ACL and HIXL
//! counters back to zero.

use std::net::{IpAddr, Ipv4Addr};
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::util::*;
use ascend_cs::{Client, CompleteStatus, Endpoint, Error, HixlCode, MemKind, Op, Protocol, Server};
use ascend_mem::prelude::*;
use ascend_mem::{Device, DeviceBuffer, HostBuffer};
use ascend_testkit::emulator::sim_library;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// The timeout of calls expected to succeed: far above what they take on a loaded machine.
const SEC: Duration = Duration::from_secs(20);

fn hccs() -> Endpoint {
    Endpoint::new(Protocol::Hccs).on_device(0)
}

/// Asserts `e` is `Error::Hixl` from `api` with `code`.
#[track_caller]
fn assert_hixl(e: &Error, api: &str, code: HixlCode) {
    match e {
        Error::Hixl {
            api: a,
            code: c,
            msg,
        } => {
            assert_eq!((*a, *c), (api, code), "{e}");
            assert!(!msg.is_empty(), "the emulator's message is carried: {e}");
        }
        other => panic!("expected {api} failing with {code}, got {other:?}"),
    }
    assert_eq!(e.code(), code);
}

fn assert_hixl_clean() {
    let h = ascend_sim::hixl_counters();
    assert!(h.is_zero(), "HIXL objects leaked: {h}");
}

/// A server with a 2 MiB device buffer tagged "kv" and a host buffer tagged "host", listening.
struct Fixture {
    port: u16,
    kv: Arc<DeviceBuffer>,
}

fn serve(dev: &Device, f: impl FnOnce(&Server, &Fixture)) {
    let port = free_port();
    let server = Server::new(dev, LOCALHOST, port, &[hccs()]).unwrap();
    let kv = Arc::new(DeviceBuffer::new(dev, 2 << 20).unwrap());
    kv.fill(0).unwrap();
    let host = Arc::new(HostBuffer::new(dev, 4096).unwrap());
    let r1 = server.register("kv", kv.clone()).unwrap();
    let r2 = server.register("host", host).unwrap();
    assert_eq!((r1.tag(), r1.kind()), ("kv", MemKind::Device));
    assert_eq!(r2.kind(), MemKind::Host);
    server.listen(8).unwrap();
    f(&server, &Fixture { port, kv });
    r2.unregister().unwrap();
    drop(r1);
    server.close().unwrap();
}

#[test]
fn roundtrip_sync_and_async() {
    let env = setup();
    let dev = env.dev.clone();
    serve(&dev, |_, fx| {
        let client = Client::new(&dev, LOCALHOST, fx.port, &hccs(), &hccs()).unwrap();
        client.connect(SEC).unwrap();
        let list = client.remote_memory(SEC).unwrap();
        assert_eq!(list.len(), 2);
        let kv = list.find("kv").unwrap();
        assert_eq!((kv.len(), kv.kind()), (2 << 20, MemKind::Device));
        assert_eq!(kv.addr(), fx.kv.addr());
        assert_eq!(list.get("host").unwrap().kind(), MemKind::Host);

        let src = Arc::new(DeviceBuffer::new(&dev, 1 << 20).unwrap());
        let dst = Arc::new(DeviceBuffer::new(&dev, 1 << 20).unwrap());
        let want = pattern(3, 1 << 20);
        src.write_from(&want, 0).unwrap();
        let s = client.register(src).unwrap();
        let d = client.register(dst.clone()).unwrap();

        // Sync: put in two descriptors, get back in one.
        let half = 1 << 19;
        client
            .put(
                &[
                    Op::new(&s, 0, kv, 4096, half),
                    Op::new(&s, half, kv, 4096 + half, half),
                ],
                SEC,
            )
            .unwrap();
        assert!(
            fx.kv.to_vec().unwrap()[4096..4096 + (1 << 20)] == want[..],
            "server memory"
        );
        client
            .get(&[Op::new(&d, 0, kv, 4096, 1 << 20)], SEC)
            .unwrap();
        assert!(dst.to_vec().unwrap()[..1 << 20] == want[..], "got back");

        // Async: WAITING while the workers are held, then COMPLETED.
        let want2 = pattern(77, 8192);
        dst.write_from(&want2, 0).unwrap();
        let hold = ascend_sim::hixl_testing::hold();
        let mut put = client.put_async(&[Op::new(&d, 0, kv, 0, 8192)]).unwrap();
        assert_eq!(client.in_flight(), 1);
        assert_eq!(put.status().unwrap(), CompleteStatus::WAITING);
        drop(hold);
        put.wait(SEC).unwrap();
        assert_eq!(put.status().unwrap(), CompleteStatus::COMPLETED); // remembered
        drop(put);
        assert_eq!(client.in_flight(), 0);
        let mut get = client.get_async(&[Op::new(&s, 0, kv, 0, 8192)]).unwrap();
        get.wait(SEC).unwrap();
        drop(get);
        let mut back = vec![0u8; 8192];
        s.len(); // the registration is still usable
        client.get(&[Op::new(&d, 8192, kv, 0, 8192)], SEC).unwrap();
        dst.read_into(&mut back, 8192).unwrap();
        assert_eq!(back, want2);

        // A completion dropped unwaited waits for its batch.
        let c = client.put_async(&[Op::new(&s, 0, kv, 0, 4096)]).unwrap();
        drop(c);
        assert_eq!(client.in_flight(), 0);

        drop((s, d));
        client.close().unwrap();
    });
    assert_hixl_clean();
    env.finish();
}

#[test]
fn bad_inputs_are_typed_errors() {
    let env = setup();
    let dev = env.dev.clone();

    // 1-3: endpoints: unsupported protocol on either side, none at all.
    let roce = Endpoint::new(Protocol::Roce);
    let e = Server::new(&dev, LOCALHOST, 0, &[roce]).unwrap_err();
    assert_hixl(&e, "HixlCSServerCreate", HixlCode::UNSUPPORTED);
    let e = Client::new(&dev, LOCALHOST, 1, &roce, &roce).unwrap_err();
    assert_hixl(&e, "HixlCSClientCreate", HixlCode::UNSUPPORTED);
    let e = Server::new(&dev, LOCALHOST, 0, &[]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                api: "HixlCSServerCreate",
                ..
            }
        ),
        "{e}"
    );
    // 4: port 0 for a client.
    let e = Client::new(&dev, LOCALHOST, 0, &hccs(), &hccs()).unwrap_err();
    assert_hixl(&e, "HixlCSClientCreate", HixlCode::PARAM_INVALID);

    // 5: connect timeout to a port nobody listens on.
    let lonely = Client::new(&dev, LOCALHOST, free_port(), &hccs(), &hccs()).unwrap();
    let t0 = Instant::now();
    let e = lonely.connect(Duration::from_millis(100)).unwrap_err();
    assert_hixl(&e, "HixlCSClientConnect", HixlCode::TIMEOUT);
    assert!(t0.elapsed() >= Duration::from_millis(90));
    // 6: a zero timeout is refused before the call.
    let e = lonely.connect(Duration::ZERO).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                api: "HixlCSClientConnect",
                ..
            }
        ),
        "{e}"
    );
    // 7: list before connecting.
    let e = lonely.remote_memory(SEC).unwrap_err();
    assert_hixl(&e, "HixlCSClientGetRemoteMem", HixlCode::NOT_CONNECTED);

    serve(&dev, |server, fx| {
        // 8: a tag used twice; 9: a tag with NUL; 10: plain host memory is not registrable
        // (a Mapping of memory the runtime knows is, so use an overlapping one instead).
        let extra = Arc::new(DeviceBuffer::new(&dev, 4096).unwrap());
        let e = server.register("kv", extra.clone()).unwrap_err();
        assert_hixl(&e, "HixlCSServerRegMem", HixlCode::PARAM_INVALID);
        let e = server.register("a\0b", extra).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    what: "mem_tag",
                    ..
                }
            ),
            "{e}"
        );
        let e = server.register("again", fx.kv.clone()).unwrap_err();
        assert_hixl(&e, "HixlCSServerRegMem", HixlCode::PARAM_INVALID); // overlaps "kv"
                                                                        // 11: a second listen on the same port.
        let other = Server::new(&dev, LOCALHOST, fx.port, &[hccs()]).unwrap();
        let e = other.listen(1).unwrap_err();
        assert_hixl(&e, "HixlCSServerListen", HixlCode::FAILED);
        drop(other);

        let client = Client::new(&dev, LOCALHOST, fx.port, &hccs(), &hccs()).unwrap();
        client.connect(SEC).unwrap();
        // 12: connected twice.
        let e = client.connect(SEC).unwrap_err();
        assert_hixl(&e, "HixlCSClientConnect", HixlCode::ALREADY_CONNECTED);
        let list = client.remote_memory(SEC).unwrap();
        // 13: unknown tag.
        let e = list.get("nope").unwrap_err();
        assert!(
            matches!(&e, Error::UnknownTag { tag, known } if &**tag == "nope" && known.len() == 2),
            "{e}"
        );
        assert_eq!(e.code(), HixlCode::PARAM_INVALID);
        let kv = list.get("kv").unwrap();
        let buf = Arc::new(DeviceBuffer::new(&dev, 8192).unwrap());
        let local = client.register(buf.clone()).unwrap();
        // 14: the same memory registered twice with one client.
        let e = client.register(buf).unwrap_err();
        assert_hixl(&e, "HixlCSClientRegMem", HixlCode::PARAM_INVALID);
        // 15: zero-length list; 16: zero-length op.
        let e = client.put(&[], SEC).unwrap_err();
        assert!(
            matches!(
                e,
                Error::EmptyBatch {
                    api: "HixlCSClientBatchPutSync"
                }
            ),
            "{e}"
        );
        let e = client
            .get_async(&[Op::new(&local, 0, kv, 0, 0)])
            .unwrap_err();
        assert!(matches!(e, Error::ZeroLength { index: 0 }), "{e}");
        // 17: op outside the remote memory; 18: outside the local registration.
        let e = client
            .put(
                &[
                    Op::new(&local, 0, kv, 0, 64),
                    Op::new(&local, 0, kv, (2 << 20) - 32, 64),
                ],
                SEC,
            )
            .unwrap_err();
        assert!(
            matches!(&e, Error::RemoteOutOfBounds { index: 1, offset, len: 64, size, .. } if *offset == (2 << 20) - 32 && *size == 2 << 20),
            "{e}"
        );
        let end = local.len() - 2; // the buffer is whole granules
        let e = client
            .get(&[Op::new(&local, end, kv, 0, 4)], SEC)
            .unwrap_err();
        assert!(
            matches!(e, Error::LocalOutOfBounds { index: 0, offset, len: 4, size } if offset == end && size == local.len()),
            "{e}"
        );
        // 19: a registration of another client.
        let client2 = Client::new(&dev, LOCALHOST, fx.port, &hccs(), &hccs()).unwrap();
        let e = client2
            .put(&[Op::new(&local, 0, kv, 0, 64)], SEC)
            .unwrap_err();
        assert!(matches!(e, Error::ForeignRegistration { index: 0 }), "{e}");
        // 20: a batch on a client that never connected (its own registration, a valid block).
        let buf2 = Arc::new(DeviceBuffer::new(&dev, 4096).unwrap());
        let local2 = client2.register(buf2).unwrap();
        let e = client2
            .put(&[Op::new(&local2, 0, kv, 0, 64)], SEC)
            .unwrap_err();
        assert_hixl(&e, "HixlCSClientBatchPutSync", HixlCode::NOT_CONNECTED);
        drop(local2);
        drop(client2);

        // 21-24: the same mistakes at the C level, through the raw table: null and unknown
        // handles, an op outside the remote memory, a zero-length list.
        let t = ascend_cs::table(env.dev.runtime()).unwrap();
        let bogus = 0xdead_0000usize as *mut std::ffi::c_void;
        // SAFETY: the emulator checks every handle and pointer these calls pass.
        unsafe {
            assert_eq!(
                t.HixlCSClientDestroy(null_mut()).unwrap(),
                HixlCode::PARAM_INVALID.0
            );
            assert_eq!(
                t.HixlCSServerDestroy(bogus).unwrap(),
                HixlCode::PARAM_INVALID.0
            );
            let mut st = 0;
            let r = t.HixlCSClientQueryCompleteStatus(client.as_raw(), bogus, &mut st);
            assert_eq!(r.unwrap(), HixlCode::PARAM_INVALID.0);
            let d = ascend_cs::sys::HixlOneSideOpDesc {
                remote_buf: (kv.addr() + kv.len()).as_ptr(),
                local_buf: local.addr().as_ptr(),
                len: 64,
            };
            let r = t.HixlCSClientBatchPutSync(client.as_raw(), 1, &d, 1000);
            assert_eq!(r.unwrap(), HixlCode::PARAM_INVALID.0);
            let r = t.HixlCSClientBatchPutSync(client.as_raw(), 0, &d, 1000);
            assert_eq!(r.unwrap(), HixlCode::PARAM_INVALID.0);
        }

        // 25: an async batch that cannot start in time reports TIMEOUT.
        ascend_sim::hixl_testing::set_async_timeout(Duration::from_millis(30));
        let hold = ascend_sim::hixl_testing::hold();
        let mut c = client.put_async(&[Op::new(&local, 0, kv, 0, 64)]).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        let e = c.wait(SEC).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Timeout {
                    op: "put",
                    reported: true
                }
            ),
            "{e}"
        );
        assert_eq!(e.code(), HixlCode::TIMEOUT);
        drop(c);
        ascend_sim::hixl_testing::set_async_timeout(Duration::from_secs(60));

        // 26: destroy with a batch in flight (its Completion leaked): refused, handed back.
        let c = client.put_async(&[Op::new(&local, 0, kv, 0, 64)]).unwrap();
        std::mem::forget(c);
        drop(local); // unregisters; the in-flight table still holds the memory
        let (e, client) = client.close().unwrap_err().into_parts();
        assert!(
            matches!(&e, Error::Busy { in_flight: 1, source } if matches!(**source, Error::Hixl { api: "HixlCSClientDestroy", code: HixlCode::FAILED, .. })),
            "{e}"
        );
        assert_eq!(ascend_sim::hixl_counters().clients, 2); // it and `lonely`
        drop(hold);
        // Once the batch ran, the library accepts the destroy.
        let deadline = Instant::now() + SEC;
        let mut client = client;
        loop {
            match client.close().map_err(|e| e.into_parts()) {
                Ok(()) => break,
                Err((_, c)) if Instant::now() < deadline => {
                    client = c;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((e, _)) => panic!("close after the batch ran: {e}"),
            }
        }
    });
    drop(lonely);
    assert_hixl_clean();
    env.finish();
}

#[test]
fn dlopen_backend_opens_the_same_library_for_hixl() {
    let env = setup();
    let Some(lib) = sim_library() else {
        panic!("libascend_sim.so not built next to the test binary (cargo build -p ascend-sim)")
    };
    // SAFETY: the emulator's shared library exports the ACL functions with acl-sys signatures.
    let rt = unsafe { ascend_mem::Runtime::from_library_path(&lib) }.unwrap();
    let t = ascend_cs::table(&rt).unwrap();
    assert!(!std::ptr::eq(t, ascend_sim::hixl_table()));
    assert_eq!(t.source().describe(), lib.to_string_lossy());
    assert!(
        std::ptr::eq(t, ascend_cs::table(&rt).unwrap()),
        "chosen once"
    );
    assert!(std::ptr::eq(
        ascend_cs::table(env.dev.runtime()).unwrap(),
        ascend_sim::hixl_table()
    ));
    // A round trip served entirely by the shared library's emulator instance.
    let dev = rt.device(0).unwrap();
    let port = free_port();
    let server = Server::new(&dev, LOCALHOST, port, &[hccs()]).unwrap();
    let kv = Arc::new(DeviceBuffer::new(&dev, 4096).unwrap());
    let reg = server.register("kv", kv.clone()).unwrap();
    server.listen(1).unwrap();
    let client = Client::new(&dev, LOCALHOST, port, &hccs(), &hccs()).unwrap();
    client.connect(SEC).unwrap();
    let list = client.remote_memory(SEC).unwrap();
    let local = Arc::new(DeviceBuffer::new(&dev, 4096).unwrap());
    local.write_from(&pattern(9, 4096), 0).unwrap();
    let l = client.register(local).unwrap();
    client
        .put(&[Op::new(&l, 0, list.get("kv").unwrap(), 0, 4096)], SEC)
        .unwrap();
    assert_eq!(kv.to_vec().unwrap()[..4096], pattern(9, 4096)[..]);
    // Errors from the shared library carry no message (only the in-process one has a side
    // channel), but still the call and the code.
    let e = list
        .get("kv")
        .map(|kv| client.get(&[Op::new(&l, 0, kv, 0, 0)], SEC));
    assert!(matches!(e, Ok(Err(Error::ZeroLength { index: 0 }))));
    let e = server
        .register("kv", Arc::new(DeviceBuffer::new(&dev, 4096).unwrap()))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Hixl { api: "HixlCSServerRegMem", code: HixlCode::PARAM_INVALID, msg } if msg.is_empty()),
        "{e}"
    );
    drop(l);
    drop(client);
    drop(reg);
    drop(server);
    assert_hixl_clean(); // nothing of this process's in-process instance was used
    env.finish();
}
