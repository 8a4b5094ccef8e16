//! HixlCS across two real processes at the C level: this test (the server) registers a VMM
//! device buffer (reached by the client through `pidfd_getfd` + its own mapping of the memfd)
//! and an `aclrtMalloc` block (reached with `process_vm_*`), then re-executes the test binary
//! as the client (role `client` of `ascend_testkit::role`, port in `ASCEND_SIM_HIXL_PORT`), which puts a
//! pattern into both, gets it back and verifies it. The server then checks its own memory.

#[macro_use]
mod common;

use std::ffi::{c_char, c_void, CStr};
use std::ptr::{null, null_mut};

use ascend_testkit::{role, test_name, Spawn};
use common::*;
use hixl_sys::{
    endpoint_desc_init, CommMem, EndpointDesc, HixlClientDesc, HixlOneSideOpDesc, HixlServerDesc,
    HixlStatus, COMM_MEM_TYPE_DEVICE, COMM_PROTOCOL_HCCS, HIXL_SUCCESS,
};

const PORT: &str = "ASCEND_SIM_HIXL_PORT";
const LEN: usize = 64 << 10;

macro_rules! hok {
    ($f:ident($($a:expr),* $(,)?)) => {{
        // SAFETY: test calls follow the C contract; arguments are live locals.
        let got: HixlStatus = unsafe { ascend_sim::hixl_table().$f($($a),*) }.unwrap();
        assert_eq!(got, HIXL_SUCCESS, "{}: {:?}", stringify!($f), ascend_sim::hixl_last_error_message());
    }};
}

fn ep() -> EndpointDesc {
    let mut e = [EndpointDesc::default()];
    endpoint_desc_init(&mut e);
    e[0].protocol = COMM_PROTOCOL_HCCS;
    e[0]
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| ((i * 7) as u8).wrapping_add(seed))
        .collect()
}

/// The client process: connect, find both blocks, put, get back, verify.
fn client_role(port: u16) {
    set_device(0);
    let e = ep();
    let desc = HixlClientDesc {
        local_endpoint: &e,
        remote_endpoint: &e,
        server_ip: c"127.0.0.1".as_ptr(),
        server_port: port.into(),
        tc: 0,
        sl: 0,
        reserved: [0; 98],
    };
    let mut c = null_mut();
    hok!(HixlCSClientCreate(&desc, null(), &mut c));
    hok!(HixlCSClientConnect(c, 10_000));
    let (mut mems, mut tags, mut n) = (null_mut::<CommMem>(), null_mut::<*mut c_char>(), 0u32);
    hok!(HixlCSClientGetRemoteMem(
        c, &mut mems, &mut tags, &mut n, 5000
    ));
    assert_eq!(n, 2);
    // SAFETY: two entries, valid until the next call on this client.
    let list: Vec<(String, CommMem)> = unsafe {
        (0..2)
            .map(|i| {
                let t = CStr::from_ptr(*tags.add(i)).to_string_lossy().into_owned();
                (t, *mems.add(i))
            })
            .collect()
    };
    let (lva, lh) = mapped(MIB2, &dev_prop(0));
    let mut lm = null_mut();
    let local = CommMem {
        type_: COMM_MEM_TYPE_DEVICE,
        addr: lva,
        size: MIB2 as u64,
    };
    hok!(HixlCSClientRegMem(c, null(), &local, &mut lm));
    for (i, (tag, m)) in list.iter().enumerate() {
        let want = pattern(i as u8 + 1);
        write_dev(lva, &want);
        let back = (lva as usize + MIB2 / 2) as *mut c_void;
        let put = HixlOneSideOpDesc {
            remote_buf: m.addr,
            local_buf: lva,
            len: LEN as u64,
        };
        let get = HixlOneSideOpDesc {
            local_buf: back,
            ..put
        };
        hok!(HixlCSClientBatchPutSync(c, 1, &put, 5000));
        let mut h = null_mut();
        hok!(HixlCSClientBatchGetAsync(c, 1, &get, &mut h));
        loop {
            let mut st = 0;
            hok!(HixlCSClientQueryCompleteStatus(c, h, &mut st));
            if st != hixl_sys::HIXL_COMPLETE_STATUS_WAITING {
                assert_eq!(st, hixl_sys::HIXL_COMPLETE_STATUS_COMPLETED, "{tag}");
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(read_dev(back, LEN), want, "block {tag} came back different");
        println!("client: block {tag} round trip ok");
    }
    hok!(HixlCSClientDestroy(c));
    teardown(lva, lh);
    assert!(ascend_sim::hixl_counters().is_zero());
}

#[test]
fn c_roundtrip_across_processes() {
    if let Some(role) = role() {
        assert_eq!(role, "client");
        let port = std::env::var(PORT).unwrap().parse().unwrap();
        client_role(port);
        return;
    }
    let _g = LOCK.lock();
    set_device(0);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let eps = [ep()];
    let desc = HixlServerDesc {
        endpoint_list: eps.as_ptr(),
        server_ip: c"127.0.0.1".as_ptr(),
        server_port: port.into(),
        endpoint_list_num: 1,
        reserved: [0; 104],
    };
    let mut s = null_mut();
    hok!(HixlCSServerCreate(&desc, null(), &mut s));
    let (va, h) = mapped(MIB2, &dev_prop(0));
    let mut mal = null_mut();
    ok!(aclrtMalloc(&mut mal, LEN, 0));
    write_dev(va, &vec![0u8; LEN]);
    write_dev(mal, &vec![0u8; LEN]);
    let mut mh = [null_mut(); 2];
    let vmm = CommMem {
        type_: COMM_MEM_TYPE_DEVICE,
        addr: va,
        size: LEN as u64,
    };
    let malloc = CommMem { addr: mal, ..vmm };
    hok!(HixlCSServerRegMem(s, c"vmm".as_ptr(), &vmm, &mut mh[0]));
    hok!(HixlCSServerRegMem(
        s,
        c"malloc".as_ptr(),
        &malloc,
        &mut mh[1]
    ));
    hok!(HixlCSServerListen(s, 4));

    let out = Spawn::new(test_name!(c_roundtrip_across_processes), "client")
        .env(PORT, port.to_string())
        .output();
    assert_child_ok(&out);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        so.contains("block vmm round trip ok") && so.contains("block malloc round trip ok"),
        "{so}"
    );
    assert_eq!(read_dev(va, LEN), pattern(1), "server VMM memory");
    assert_eq!(read_dev(mal, LEN), pattern(2), "server aclrtMalloc memory");

    hok!(HixlCSServerUnregMem(s, mh[0]));
    hok!(HixlCSServerDestroy(s));
    assert!(ascend_sim::hixl_counters().is_zero());
    teardown(va, h);
    ok!(aclrtFree(mal));
    assert_clean();
}
