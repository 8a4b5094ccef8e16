//! How a transfer's end is observed: each used stream writes the transfer's number into its
//! pinned completion flag (`aclrtValueWrite`), read by the host with no runtime call; a
//! stream that stops on a failed copy never writes it, and the request still fails with the
//! copy's error; on a runtime without the value call, events.

use std::time::{Duration, Instant};

use crate::util::*;
use ascend_fabric::{Engine, Error, TransferDesc, TransferOp, TransferStatus};
use ascend_sim::fault::calls;
use ascend_testkit::emulator::runtime_without;

const T: Duration = Duration::from_secs(10);
const MIB: usize = 1 << 20;
const BLOCK: u64 = 4096;

/// `n` 4 KiB descriptors from `l` to `r`, every other block (none adjacent).
fn descs(l: u64, r: u64, n: u64) -> Vec<TransferDesc> {
    (0..n)
        .map(|i| TransferDesc::new(l + 2 * i * BLOCK, r + 2 * i * BLOCK, BLOCK))
        .collect()
}

/// The calls of `names` the emulator received while `f` ran.
fn counted<const N: usize>(names: [&str; N], f: impl FnOnce()) -> [u64; N] {
    let before = names.map(calls);
    f();
    let after = names.map(calls);
    std::array::from_fn(|i| after[i] - before[i])
}

#[test]
fn a_transfer_ends_when_its_streams_flags_hold_its_number() {
    let env = setup();
    {
        let (a, addr) = listening(&env.dev, test_options(4));
        let remote = a.alloc_device(MIB).unwrap();
        let _ra = a.register(&remote).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(4)).unwrap();
        let local = b.alloc_device(MIB).unwrap();
        let _rb = b.register(&local).unwrap();
        b.connect(&addr, T).unwrap();
        let data = pattern(4, MIB);
        local.write_from(&data, 0).unwrap();
        let d = descs(local.as_raw() as u64, remote.as_raw() as u64, 16);
        // The first transfer makes the slot (its flags, and a first write of 0 that checks
        // the runtime has the call).
        b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap();
        let names = [
            "aclrtValueWrite",
            "aclrtRecordEvent",
            "aclrtQueryEventStatus",
        ];
        let n = counted(names, || {
            b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap();
            let req = b.transfer_async(&addr, TransferOp::Write, &d).unwrap();
            req.wait(T).unwrap();
        });
        assert_eq!(n, [8, 0, 0], "{names:?}: one flag write per used stream");
        let got = remote.slice(..).unwrap().read_to_vec::<u8>().unwrap();
        for i in 0..16 {
            let at = (2 * i * BLOCK) as usize..(2 * i + 1) as usize * BLOCK as usize;
            assert_eq!(got[at.clone()], data[at]);
        }
    }
    env.finish();
}

/// A copy that fails on its stream stops the stream before its flag write: the request
/// fails with that error, whether its waiter blocks on it or polls its status (which then
/// asks the stream), and the engine goes on.
#[test]
fn a_stream_stopped_by_a_failed_copy_fails_its_request() {
    let env = setup();
    {
        let (a, addr) = listening(&env.dev, test_options(1));
        let remote = a.alloc_device(MIB).unwrap();
        let _ra = a.register(&remote).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(1)).unwrap();
        let local = b.alloc_device(MIB).unwrap();
        let _rb = b.register(&local).unwrap();
        b.connect(&addr, T).unwrap();
        let d = descs(local.as_raw() as u64, remote.as_raw() as u64, 4);
        for poll in [false, true] {
            ascend_sim::testing::fail_next_queued_copy(acl_sys::ACL_ERROR_RT_DEVICE_MEM_ERROR);
            let req = b.transfer_async(&addr, TransferOp::Write, &d).unwrap();
            if poll {
                let until = Instant::now() + T;
                while req.status() == TransferStatus::Waiting {
                    assert!(Instant::now() < until, "still waiting after {T:?}");
                    std::thread::yield_now();
                }
            }
            let e = req.wait(T).unwrap_err();
            let code = acl_sys::ACL_ERROR_RT_DEVICE_MEM_ERROR;
            assert!(
                matches!(&e, Error::Mem(m) if m.code().map(|c| c.0) == Some(code)),
                "poll {poll}: {e:?}"
            );
            b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap();
        }
    }
    env.finish();
}

/// A failed flag write fails its transfer as a failed copy does, and the next one works.
#[test]
fn a_refused_flag_write_fails_its_transfer() {
    let env = setup();
    {
        let (a, addr) = listening(&env.dev, test_options(2));
        let remote = a.alloc_device(MIB).unwrap();
        let _ra = a.register(&remote).unwrap();
        let b = Engine::new(&env.dev, "127.0.0.1", test_options(2)).unwrap();
        let local = b.alloc_device(MIB).unwrap();
        let _rb = b.register(&local).unwrap();
        b.connect(&addr, T).unwrap();
        let d = descs(local.as_raw() as u64, remote.as_raw() as u64, 4);
        b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap();
        ascend_sim::fault::fail_nth("aclrtValueWrite", 2, INTERNAL);
        let e = b
            .transfer_sync(&addr, TransferOp::Write, &d, T)
            .unwrap_err();
        ascend_sim::fault::clear();
        assert!(
            matches!(&e, Error::Mem(m) if m.api() == Some("aclrtValueWrite")),
            "{e:?}"
        );
        b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap();
    }
    env.finish();
}

/// On a runtime without `aclrtValueWrite` a slot's streams record events instead, and
/// transfers work as before.
#[test]
fn without_the_value_call_streams_record_events() {
    let env = setup();
    {
        let (a, addr) = listening(&env.dev, test_options(2));
        let remote = a.alloc_device(MIB).unwrap();
        let _ra = a.register(&remote).unwrap();
        let old = runtime_without(&["aclrtValueWrite"]);
        let dev = old.device(0).unwrap();
        let b = Engine::new(&dev, "127.0.0.1", test_options(2)).unwrap();
        let local = b.alloc_device(MIB).unwrap();
        let _rb = b.register(&local).unwrap();
        b.connect(&addr, T).unwrap();
        let data = pattern(9, MIB);
        local.write_from(&data, 0).unwrap();
        let d = descs(local.as_raw() as u64, remote.as_raw() as u64, 8);
        let names = ["aclrtValueWrite", "aclrtRecordEvent"];
        let n = counted(names, || {
            b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap();
            let req = b.transfer_async(&addr, TransferOp::Write, &d).unwrap();
            req.wait(T).unwrap();
        });
        assert_eq!(n, [0, 4], "{names:?}");
        let got = remote
            .slice(..BLOCK as usize)
            .unwrap()
            .read_to_vec::<u8>()
            .unwrap();
        assert_eq!(got, data[..BLOCK as usize]);
        drop((_rb, local, b, dev, old));
        ascend_sim::fault::clear();
    }
    env.finish();
}
