//! The HixlCS emulation at the C level, through the in-process loader table: round trips
//! (sync and async, VMM, `aclrtMalloc` and `aclrtMallocHost` memory), every refusal with its
//! status, completion states, destroy with batches in flight, caught panics, and the HIXL
//! counters back to zero. Cross-process use: `tests/hixl_procs.rs`.

#[macro_use]
mod common;

use std::ffi::{c_char, c_void, CStr};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use common::*;
use hixl_sys::*;

fn x() -> &'static HixlLib {
    ascend_sim::hixl_table()
}

/// Calls a HIXL table method, unwrapping the missing-symbol layer.
macro_rules! hx {
    ($f:ident($($a:expr),* $(,)?)) => {{
        #[allow(unused_unsafe)]
        // SAFETY: test calls follow the C contract; arguments are live locals.
        let r = unsafe { x().$f($($a),*) };
        r.expect(concat!(stringify!($f), " missing"))
    }};
}

/// Asserts a HIXL call returns `code`, printing the emulator's message otherwise.
macro_rules! hexpect {
    ($code:expr, $f:ident($($a:expr),* $(,)?)) => {{
        let got = hx!($f($($a),*));
        let want: HixlStatus = $code;
        assert_eq!(
            got, want,
            "{} returned {got}, expected {want}; message: {:?}",
            stringify!($f),
            ascend_sim::hixl_last_error_message()
        );
    }};
}

macro_rules! hok {
    ($f:ident($($a:expr),* $(,)?)) => {
        hexpect!(HIXL_SUCCESS, $f($($a),*))
    };
}

const LOCALHOST: &CStr = c"127.0.0.1";
/// The timeout (ms) of calls expected to succeed: far above what they take on a loaded machine.
const OK_MS: u32 = 20_000;

fn ep(protocol: CommProtocol) -> EndpointDesc {
    let mut e = [EndpointDesc::default()];
    assert_eq!(endpoint_desc_init(&mut e), 0);
    e[0].protocol = protocol;
    e[0]
}

use ascend_testkit::free_port;

fn server_desc(eps: &[EndpointDesc], port: u32) -> HixlServerDesc {
    HixlServerDesc {
        endpoint_list: eps.as_ptr(),
        server_ip: LOCALHOST.as_ptr(),
        server_port: port,
        endpoint_list_num: eps.len() as u32,
        reserved: [0; 104],
    }
}

fn new_server(port: u16) -> HixlServerHandle {
    let eps = [ep(COMM_PROTOCOL_HCCS), ep(COMM_PROTOCOL_UB_MEM)];
    let mut s = null_mut();
    hok!(HixlCSServerCreate(
        &server_desc(&eps, port.into()),
        null(),
        &mut s
    ));
    s
}

fn client_desc<'a>(l: &'a EndpointDesc, r: &'a EndpointDesc, port: u32) -> HixlClientDesc {
    HixlClientDesc {
        local_endpoint: l,
        remote_endpoint: r,
        server_ip: LOCALHOST.as_ptr(),
        server_port: port,
        tc: 0,
        sl: 0,
        reserved: [0; 98],
    }
}

fn new_client(port: u16, protocol: CommProtocol) -> HixlClientHandle {
    let e = ep(protocol);
    let mut c = null_mut();
    hok!(HixlCSClientCreate(
        &client_desc(&e, &e, port.into()),
        null(),
        &mut c
    ));
    c
}

fn cm(t: CommMemType, p: *mut c_void, size: usize) -> CommMem {
    CommMem {
        type_: t,
        addr: p,
        size: size as u64,
    }
}

fn op(remote: *mut c_void, local: *mut c_void, len: usize) -> HixlOneSideOpDesc {
    HixlOneSideOpDesc {
        remote_buf: remote,
        local_buf: local,
        len: len as u64,
    }
}

fn add(p: *mut c_void, off: usize) -> *mut c_void {
    (p as usize + off) as *mut c_void
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed))
        .collect()
}

/// Polls a completion until it leaves WAITING.
fn wait(c: HixlClientHandle, h: CompleteHandle) -> HixlCompleteStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut st = 99;
        hok!(HixlCSClientQueryCompleteStatus(c, h, &mut st));
        if st != HIXL_COMPLETE_STATUS_WAITING {
            return st;
        }
        assert!(Instant::now() < deadline, "batch never finished");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The server's list as (tag, mem) pairs.
fn remote_list(c: HixlClientHandle) -> Vec<(String, CommMem)> {
    let mut mems: *mut CommMem = null_mut();
    let mut tags: *mut *mut c_char = null_mut();
    let mut n = 0u32;
    hok!(HixlCSClientGetRemoteMem(
        c, &mut mems, &mut tags, &mut n, OK_MS
    ));
    (0..n as usize)
        .map(|i| {
            // SAFETY: the library returned n entries, valid until the next call.
            unsafe {
                let t = CStr::from_ptr(*tags.add(i)).to_string_lossy().into_owned();
                (t, *mems.add(i))
            }
        })
        .collect()
}

fn assert_hixl_clean() {
    let h = ascend_sim::hixl_counters();
    assert!(h.is_zero(), "HIXL objects leaked: {h}");
}

#[test]
fn c_roundtrip_sync_and_async_over_every_memory_kind() {
    let _g = LOCK.lock();
    set_device(0);
    let port = free_port();
    let s = new_server(port);

    // Server memory: a VMM device buffer, an aclrtMalloc block, an aclrtMallocHost block.
    let (sva, sh) = mapped(MIB2, &dev_prop(0));
    write_dev(sva, &vec![0u8; MIB2]);
    let mut mal = null_mut();
    ok!(aclrtMalloc(&mut mal, 65536, 0));
    let mut hostp = null_mut();
    ok!(aclrtMallocHost(&mut hostp, 8192));
    let mut m = [null_mut(); 3];
    hok!(HixlCSServerRegMem(
        s,
        c"vmm".as_ptr(),
        &cm(COMM_MEM_TYPE_DEVICE, sva, MIB2),
        &mut m[0]
    ));
    hok!(HixlCSServerRegMem(
        s,
        c"malloc".as_ptr(),
        &cm(COMM_MEM_TYPE_DEVICE, mal, 65536),
        &mut m[1]
    ));
    hok!(HixlCSServerRegMem(
        s,
        c"host".as_ptr(),
        &cm(COMM_MEM_TYPE_HOST, hostp, 8192),
        &mut m[2]
    ));
    hok!(HixlCSServerListen(s, 8));

    let c = new_client(port, COMM_PROTOCOL_HCCS);
    hok!(HixlCSClientConnect(c, OK_MS));
    let list = remote_list(c);
    let tags: Vec<&str> = list.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tags, ["vmm", "malloc", "host"]);
    assert_eq!(list[0].1, cm(COMM_MEM_TYPE_DEVICE, sva, MIB2));
    assert_eq!(list[1].1, cm(COMM_MEM_TYPE_DEVICE, mal, 65536));
    assert_eq!(list[2].1, cm(COMM_MEM_TYPE_HOST, hostp, 8192));

    let (lva, lh) = mapped(MIB2, &dev_prop(0));
    let mut lm = null_mut();
    hok!(HixlCSClientRegMem(
        c,
        null(),
        &cm(COMM_MEM_TYPE_DEVICE, lva, MIB2),
        &mut lm
    ));
    let data = pattern(7, 8192);
    write_dev(lva, &data);

    // Sync put into each block, sync get back into another part of the local buffer.
    for (i, (remote, len)) in [(add(sva, 4096), 8192), (mal, 8192), (hostp, 8192)]
        .into_iter()
        .enumerate()
    {
        hok!(HixlCSClientBatchPutSync(c, 1, &op(remote, lva, len), OK_MS));
        let back = add(lva, (i + 1) << 16);
        hok!(HixlCSClientBatchGetSync(
            c,
            1,
            &op(remote, back, len),
            OK_MS
        ));
        assert_eq!(read_dev(back, len), data[..len], "block {i}");
    }
    assert_eq!(read_dev(add(sva, 4096), 8192), data, "server VMM memory");
    assert_eq!(read_dev(mal, 8192), data, "server malloc memory");

    // Async: WAITING while workers are held, then COMPLETED; the handle is then forgotten.
    let data2 = pattern(99, 4096);
    write_dev(add(lva, 1 << 20), &data2);
    let descs = [
        op(add(sva, 1 << 20), add(lva, 1 << 20), 2048),
        op(add(sva, (1 << 20) + 2048), add(lva, (1 << 20) + 2048), 2048),
    ];
    let hold = ascend_sim::hixl_testing::hold();
    let mut h = null_mut();
    hok!(HixlCSClientBatchPutAsync(c, 2, descs.as_ptr(), &mut h));
    assert_eq!(ascend_sim::hixl_counters().ops, 1);
    let mut st = 99;
    hok!(HixlCSClientQueryCompleteStatus(c, h, &mut st));
    assert_eq!(st, HIXL_COMPLETE_STATUS_WAITING);
    drop(hold);
    assert_eq!(wait(c, h), HIXL_COMPLETE_STATUS_COMPLETED);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientQueryCompleteStatus(c, h, &mut st)
    );
    let mut g = null_mut();
    hok!(HixlCSClientBatchGetAsync(
        c,
        1,
        &op(add(sva, 1 << 20), add(lva, 3 << 19), 4096),
        &mut g
    ));
    assert_eq!(wait(c, g), HIXL_COMPLETE_STATUS_COMPLETED);
    assert_eq!(read_dev(add(lva, 3 << 19), 4096), data2);
    assert_eq!(ascend_sim::hixl_counters().ops, 0);

    // A block registered after connect shows up on the next GetRemoteMem; unregistered ones go.
    hok!(HixlCSServerUnregMem(s, m[2]));
    assert_eq!(remote_list(c).len(), 2);

    hok!(HixlCSClientUnregMem(c, lm));
    hok!(HixlCSClientDestroy(c));
    hok!(HixlCSServerUnregMem(s, m[0]));
    hok!(HixlCSServerDestroy(s)); // unregisters "malloc"
    assert_hixl_clean();
    teardown(lva, lh);
    teardown(sva, sh);
    ok!(aclrtFree(mal));
    ok!(aclrtFreeHost(hostp));
    assert_clean();
}

#[test]
fn c_bad_inputs_get_their_status() {
    let _g = LOCK.lock();
    set_device(0);
    let port = free_port();
    let hccs = ep(COMM_PROTOCOL_HCCS);
    let mut s = null_mut();

    // Server creation.
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerCreate(null(), null(), &mut s)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerCreate(&server_desc(&[hccs], 1), null(), null_mut())
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerCreate(&server_desc(&[], 1), null(), &mut s)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerCreate(&server_desc(&[hccs], 70000), null(), &mut s)
    );
    let mut bad_ip = server_desc(&[hccs], 1);
    bad_ip.server_ip = c"not-an-ip".as_ptr();
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerCreate(&bad_ip, null(), &mut s)
    );
    hexpect!(
        HIXL_UNSUPPORTED,
        HixlCSServerCreate(&server_desc(&[ep(COMM_PROTOCOL_ROCE)], 1), null(), &mut s)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerCreate(
            &server_desc(&[ep(COMM_PROTOCOL_RESERVED)], 1),
            null(),
            &mut s
        )
    );
    assert!(ascend_sim::hixl_last_error_message()
        .unwrap()
        .contains("COMM_PROTOCOL_RESERVED"));

    // Null, unknown, wrong-kind and stale server handles.
    let bogus = 0x1234usize as *mut c_void;
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerListen(null_mut(), 1));
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerListen(bogus, 1));
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerDestroy(null_mut()));
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerDestroy(bogus));
    let s = new_server(port);
    let c = new_client(port, COMM_PROTOCOL_HCCS);
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerListen(c, 1)); // a client handle
    hexpect!(HIXL_PARAM_INVALID, HixlCSClientConnect(s, 100)); // a server handle

    // Registration.
    let (va, h) = mapped(MIB2, &dev_prop(0));
    let mut mh = null_mut();
    let dev_mem = cm(COMM_MEM_TYPE_DEVICE, va, MIB2);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, null(), &dev_mem, &mut mh)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, c"t".as_ptr(), null(), &mut mh)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, c"t".as_ptr(), &dev_mem, null_mut())
    );
    let mut plain = vec![0u8; 4096];
    let plain_mem = cm(COMM_MEM_TYPE_HOST, plain.as_mut_ptr().cast(), 4096);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, c"t".as_ptr(), &plain_mem, &mut mh)
    );
    let wrong_type = cm(COMM_MEM_TYPE_HOST, va, MIB2);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, c"t".as_ptr(), &wrong_type, &mut mh)
    );
    let too_long = cm(COMM_MEM_TYPE_DEVICE, va, MIB2 + 1);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, c"t".as_ptr(), &too_long, &mut mh)
    );
    let zero = cm(COMM_MEM_TYPE_DEVICE, va, 0);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, c"t".as_ptr(), &zero, &mut mh)
    );
    hok!(HixlCSServerRegMem(
        s,
        c"kv".as_ptr(),
        &cm(COMM_MEM_TYPE_DEVICE, va, MIB2 / 2),
        &mut mh
    ));
    let mut mh2 = null_mut();
    let upper = cm(COMM_MEM_TYPE_DEVICE, add(va, MIB2 / 2), MIB2 / 2);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, c"kv".as_ptr(), &upper, &mut mh2)
    ); // tag taken
    let overlap = cm(COMM_MEM_TYPE_DEVICE, add(va, 4096), 4096);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSServerRegMem(s, c"other".as_ptr(), &overlap, &mut mh2)
    );
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerUnregMem(s, null_mut()));
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerUnregMem(s, bogus));

    // Client creation.
    let mut c2 = null_mut();
    let roce = ep(COMM_PROTOCOL_ROCE);
    let ub = ep(COMM_PROTOCOL_UB_MEM);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientCreate(null(), null(), &mut c2)
    );
    hexpect!(
        HIXL_UNSUPPORTED,
        HixlCSClientCreate(&client_desc(&roce, &roce, port.into()), null(), &mut c2)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientCreate(&client_desc(&hccs, &ub, port.into()), null(), &mut c2)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientCreate(&client_desc(&hccs, &hccs, 0), null(), &mut c2)
    );
    let mut no_ep = client_desc(&hccs, &hccs, port.into());
    no_ep.remote_endpoint = null();
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientCreate(&no_ep, null(), &mut c2)
    );

    // Before connecting.
    let (lva, lh) = mapped(MIB2, &dev_prop(0));
    let mut lm = null_mut();
    hok!(HixlCSClientRegMem(
        c,
        null(),
        &cm(COMM_MEM_TYPE_DEVICE, lva, MIB2),
        &mut lm
    ));
    let one = op(va, lva, 64);
    hexpect!(
        HIXL_NOT_CONNECTED,
        HixlCSClientBatchPutSync(c, 1, &one, 100)
    );
    let (mut mems, mut tags, mut n) = (null_mut(), null_mut(), 0u32);
    hexpect!(
        HIXL_NOT_CONNECTED,
        HixlCSClientGetRemoteMem(c, &mut mems, &mut tags, &mut n, 100)
    );
    hexpect!(HIXL_PARAM_INVALID, HixlCSClientConnect(c, 0));

    // Nobody listens yet: the connect times out.
    let t0 = Instant::now();
    hexpect!(HIXL_TIMEOUT, HixlCSClientConnect(c, 150));
    assert!(t0.elapsed() >= Duration::from_millis(140));

    hok!(HixlCSServerListen(s, 4));
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerListen(s, 4)); // twice
    hok!(HixlCSClientConnect(c, OK_MS));
    hexpect!(HIXL_ALREADY_CONNECTED, HixlCSClientConnect(c, 2000));
    // A UB_MEM client of a server with only HCCS... this server has both: use a HCCS-only one.
    let port2 = free_port();
    let mut s2 = null_mut();
    hok!(HixlCSServerCreate(
        &server_desc(&[ub], port2.into()),
        null(),
        &mut s2
    ));
    hok!(HixlCSServerListen(s2, 1));
    let c3 = new_client(port2, COMM_PROTOCOL_HCCS);
    hexpect!(HIXL_PARAM_INVALID, HixlCSClientConnect(c3, 2000));
    hok!(HixlCSClientDestroy(c3));
    hok!(HixlCSServerDestroy(s2));

    // Batches.
    let mut ch = null_mut();
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchPutSync(c, 0, &one, 100)
    ); // zero-length list
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchGetAsync(c, 0, &one, &mut ch)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchPutSync(c, 1, null(), 100)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchPutSync(c, 1, &op(va, lva, 0), 100)
    );
    hexpect!(HIXL_PARAM_INVALID, HixlCSClientBatchPutSync(c, 1, &one, 0));
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchPutAsync(c, 1, &one, null_mut())
    );
    // Outside the remote memory (the registered half), in the middle and at the end.
    let outside = op(add(va, MIB2 / 2), lva, 64);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchPutSync(c, 1, &outside, 100)
    );
    let straddle = op(add(va, MIB2 / 2 - 32), lva, 64);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchGetSync(c, 1, &straddle, 100)
    );
    assert!(ascend_sim::hixl_last_error_message()
        .unwrap()
        .contains("no block"));
    // Local memory that is not registered with the client.
    let unregistered = op(va, plain.as_mut_ptr().cast(), 64);
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchPutSync(c, 1, &unregistered, 100)
    );
    // Null and unknown client and completion handles.
    let mut st = 0;
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchPutSync(null_mut(), 1, &one, 100)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientBatchPutAsync(bogus, 1, &one, &mut ch)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientQueryCompleteStatus(c, null_mut(), &mut st)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientQueryCompleteStatus(c, bogus, &mut st)
    );
    hexpect!(
        HIXL_PARAM_INVALID,
        HixlCSClientQueryCompleteStatus(c, mh, &mut st)
    ); // a mem handle
    hexpect!(HIXL_PARAM_INVALID, HixlCSClientUnregMem(c, mh)); // the server's mem handle
    hexpect!(HIXL_PARAM_INVALID, HixlCSClientDestroy(bogus));
    hok!(HixlCSClientBatchPutSync(c, 1, &one, OK_MS)); // the good one works

    // After the server is destroyed, the list cannot be fetched; copies into memory already
    // mapped still work (the mapping keeps the memory).
    hok!(HixlCSServerDestroy(s));
    hexpect!(HIXL_PARAM_INVALID, HixlCSServerDestroy(s)); // stale
    hexpect!(
        HIXL_NOT_CONNECTED,
        HixlCSClientGetRemoteMem(c, &mut mems, &mut tags, &mut n, 500)
    );
    hok!(HixlCSClientBatchPutSync(c, 1, &one, OK_MS));

    hok!(HixlCSClientDestroy(c));
    hexpect!(HIXL_PARAM_INVALID, HixlCSClientDestroy(c)); // stale
    assert_hixl_clean();
    teardown(lva, lh);
    teardown(va, h);
    assert_clean();
}

#[test]
fn c_timeouts_and_destroy_with_batches_in_flight() {
    let _g = LOCK.lock();
    set_device(0);
    let port = free_port();
    let s = new_server(port);
    let (va, h) = mapped(MIB2, &dev_prop(0));
    let mut mh = null_mut();
    hok!(HixlCSServerRegMem(
        s,
        c"kv".as_ptr(),
        &cm(COMM_MEM_TYPE_DEVICE, va, MIB2),
        &mut mh
    ));
    hok!(HixlCSServerListen(s, 4));
    let c = new_client(port, COMM_PROTOCOL_UB_MEM);
    hok!(HixlCSClientConnect(c, OK_MS));
    let (lva, lh) = mapped(MIB2, &dev_prop(0));
    let mut lm = null_mut();
    hok!(HixlCSClientRegMem(
        c,
        c"local".as_ptr(),
        &cm(COMM_MEM_TYPE_DEVICE, lva, MIB2),
        &mut lm
    ));
    let one = op(va, lva, 4096);

    let hold = ascend_sim::hixl_testing::hold();
    // A sync batch that cannot start in time.
    let t0 = Instant::now();
    hexpect!(HIXL_TIMEOUT, HixlCSClientBatchGetSync(c, 1, &one, 50));
    assert!(t0.elapsed() >= Duration::from_millis(45));
    // Destroy is refused while an async batch is in flight; the client stays usable.
    let mut ch = null_mut();
    hok!(HixlCSClientBatchPutAsync(c, 1, &one, &mut ch));
    hexpect!(HIXL_FAILED, HixlCSClientDestroy(c));
    assert!(ascend_sim::hixl_last_error_message()
        .unwrap()
        .contains("in flight"));
    assert_eq!(ascend_sim::hixl_counters().clients, 1);
    drop(hold);
    assert_eq!(wait(c, ch), HIXL_COMPLETE_STATUS_COMPLETED);

    // An async batch not started within the async timeout reports TIMEOUT and never runs.
    ascend_sim::hixl_testing::set_async_timeout(Duration::from_millis(30));
    let hold = ascend_sim::hixl_testing::hold();
    write_dev(va, &[0xAB; 64]);
    write_dev(lva, &[0x11; 64]);
    hok!(HixlCSClientBatchPutAsync(c, 1, &op(va, lva, 64), &mut ch));
    std::thread::sleep(Duration::from_millis(40));
    let mut st = 99;
    hok!(HixlCSClientQueryCompleteStatus(c, ch, &mut st));
    assert_eq!(st, HIXL_COMPLETE_STATUS_TIMEOUT);
    drop(hold);
    ascend_sim::hixl_testing::set_async_timeout(Duration::from_secs(60));
    hok!(HixlCSClientBatchGetSync(
        c,
        1,
        &op(va, add(lva, 4096), 64),
        1000
    ));
    assert_eq!(
        read_dev(add(lva, 4096), 64),
        [0xAB; 64],
        "the timed-out put never ran"
    );

    // A batch whose local memory was freed meanwhile reports FAILED.
    let (tva, th) = mapped(MIB2, &dev_prop(0));
    let mut tm = null_mut();
    hok!(HixlCSClientRegMem(
        c,
        null(),
        &cm(COMM_MEM_TYPE_DEVICE, tva, MIB2),
        &mut tm
    ));
    let hold = ascend_sim::hixl_testing::hold();
    hok!(HixlCSClientBatchGetAsync(c, 1, &op(va, tva, 64), &mut ch));
    ok!(aclrtUnmapMem(tva));
    drop(hold);
    assert_eq!(wait(c, ch), HIXL_COMPLETE_STATUS_FAILED);
    assert!(ascend_sim::hixl_last_error_message()
        .unwrap()
        .contains("not mapped"));
    hok!(HixlCSClientUnregMem(c, tm));
    ok!(aclrtFreePhysical(th));
    ok!(aclrtReleaseMemAddress(tva));

    // Finished but unqueried batches do not block destroy.
    hok!(HixlCSClientBatchPutAsync(c, 1, &one, &mut ch));
    let deadline = Instant::now() + Duration::from_secs(5);
    while hx!(HixlCSClientDestroy(c)) != HIXL_SUCCESS {
        assert!(Instant::now() < deadline, "destroy never accepted");
        std::thread::sleep(Duration::from_millis(2));
    }
    hok!(HixlCSServerDestroy(s));
    assert_hixl_clean();
    teardown(lva, lh);
    teardown(va, h);
    assert_clean();
}

#[test]
fn c_panics_are_caught_and_faults_injected() {
    let _g = LOCK.lock();
    let eps = [ep(COMM_PROTOCOL_HCCS)];
    let d = server_desc(&eps, 0);
    let mut s = null_mut();
    let before = ascend_sim::hixl_fault::calls("HixlCSServerCreate");
    assert!(ascend_sim::hixl_fault::fail_nth(
        "HixlCSServerCreate",
        1,
        ascend_sim::hixl_fault::PANIC
    ));
    assert!(ascend_sim::hixl_fault::fail_nth(
        "HixlCSServerCreate",
        2,
        HIXL_RESOURCE_EXHAUSTED
    ));
    assert!(!ascend_sim::hixl_fault::fail_nth("HixlCSNoSuchCall", 1, 1));
    hexpect!(HIXL_FAILED, HixlCSServerCreate(&d, null(), &mut s));
    assert!(ascend_sim::hixl_last_error_message()
        .unwrap()
        .contains("panic"));
    hexpect!(
        HIXL_RESOURCE_EXHAUSTED,
        HixlCSServerCreate(&d, null(), &mut s)
    );
    hok!(HixlCSServerCreate(&d, null(), &mut s));
    assert_eq!(
        ascend_sim::hixl_fault::calls("HixlCSServerCreate"),
        before + 3
    );
    // Port 0: Listen succeeds and never listens.
    hok!(HixlCSServerListen(s, 1));
    hok!(HixlCSServerDestroy(s));
    ascend_sim::hixl_fault::clear();
    assert_hixl_clean();
}

#[test]
fn every_symbol_resolves_with_its_type() {
    for name in hixl_sys::SYMBOLS {
        assert!(!ascend_sim::hixl_lookup(name).is_null(), "{name}");
        assert!(x().is_available(name), "{name}");
    }
    assert!(ascend_sim::hixl_lookup("aclrtMalloc").is_null());
}
