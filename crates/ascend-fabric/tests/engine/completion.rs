//! How a transfer's end is observed: each used stream writes the transfer's number into its
//! pinned completion flag (`aclrtValueWrite`), read by the host with no runtime call; a
//! stream that stops on a failed copy never writes it, and the request still fails with the
//! copy's error; on a runtime without the value call, events.

use ascend_fabric::Addr;
use std::time::{Duration, Instant};

use crate::async_util::Pair;
use crate::util::*;
use ascend_fabric::{Engine, Error, TransferDesc, TransferOp, TransferStatus};
use ascend_mem::prelude::*;
use ascend_sim::fault::calls;
use ascend_testkit::emulator::runtime_without;

const T: Duration = Duration::from_secs(10);
const MIB: usize = 1 << 20;
const BLOCK: usize = 4096;

/// `n` 4 KiB descriptors from `l` to `r`, every other block (none adjacent).
fn descs(l: Addr, r: Addr, n: usize) -> Vec<TransferDesc> {
    (0..n)
        .map(|i| TransferDesc::raw(l + 2 * i * BLOCK, r + 2 * i * BLOCK, BLOCK))
        .collect()
}

/// `n` descriptors of `p`'s client buffer to its peer's (see [`descs`]).
fn pair_descs(p: &Pair, n: usize) -> Vec<TransferDesc> {
    descs(p.local_addr(0), p.remote_addr(0), n)
}

/// The calls of `names` the emulator received while `f` ran.
fn counted<const N: usize>(names: [&str; N], f: impl FnOnce()) -> [u64; N] {
    let before = names.map(calls);
    f();
    let after = names.map(calls);
    std::array::from_fn(|i| after[i] - before[i])
}

/// Checks that the blocks [`descs`] names landed in `got` from `data`.
fn assert_landed(got: &[u8], data: &[u8], n: u64) {
    for i in 0..n as usize {
        let at = 2 * i * BLOCK..(2 * i + 1) * BLOCK;
        assert_eq!(got[at.clone()], data[at], "block {i}");
    }
}

#[test]
fn a_transfer_ends_when_its_streams_flags_hold_its_number() {
    let env = setup();
    let p = Pair::new(MIB, test_options(4), true);
    let data = pattern(4, MIB);
    p.local.write_from(&data, 0).unwrap();
    let d = pair_descs(&p, 16);
    // The first transfer makes the slot and its flags.
    let b = &p.client;
    b.transfer_sync(&p.peer_addr, TransferOp::Write, &d, T)
        .unwrap();
    let names = [
        "aclrtValueWrite",
        "aclrtRecordEvent",
        "aclrtQueryEventStatus",
    ];
    let n = counted(names, || {
        b.transfer_sync(&p.peer_addr, TransferOp::Write, &d, T)
            .unwrap();
        let req = b
            .transfer_async(&p.peer_addr, TransferOp::Write, &d)
            .unwrap();
        req.wait(T).unwrap();
    });
    assert_eq!(n, [8, 0, 0], "{names:?}: one flag write per used stream");
    assert_landed(&p.remote.to_vec().unwrap(), &data, 16);
    p.close();
    env.finish();
}

/// A copy that fails on its stream stops the stream, and the flag write queued behind it is
/// discarded (every stream is held until the whole transfer is queued): the transfer fails
/// with that error (a task timeout too: it is the copy's failure, not the wait running out)
/// whether its caller waits synchronously, waits on the request or polls its status (which
/// then asks the stream), and the engine goes on.
#[test]
fn a_stream_stopped_by_a_failed_copy_fails_its_request() {
    let env = setup();
    let p = Pair::new(MIB, test_options(1), true);
    let d = pair_descs(&p, 4);
    let (c, addr) = (&p.client, &p.peer_addr);
    // The slot and its flags exist before any stream is held.
    c.transfer_sync(addr, TransferOp::Write, &d, T).unwrap();
    let codes = [
        acl_sys::ACL_ERROR_RT_DEVICE_MEM_ERROR,
        acl_sys::ACL_ERROR_RT_TASK_TIMEOUT,
    ];
    for code in codes {
        for how in ["sync", "wait", "status"] {
            ascend_sim::testing::fail_next_queued_copy(code);
            let hold = ascend_sim::testing::hold_all_streams();
            let e = std::thread::scope(|sc| {
                if how == "sync" {
                    let t = sc.spawn(|| c.transfer_sync(addr, TransferOp::Write, &d, T));
                    // Queued (its flag write too) once it is in flight.
                    let until = Instant::now() + T;
                    while c.peer_stats(addr).unwrap().in_flight == 0 {
                        assert!(Instant::now() < until, "not in flight after {T:?}");
                        std::thread::yield_now();
                    }
                    drop(hold);
                    return t.join().unwrap().unwrap_err();
                }
                let req = c.transfer_async(addr, TransferOp::Write, &d).unwrap();
                drop(hold);
                let until = Instant::now() + T;
                while how == "status" && req.status() == TransferStatus::Waiting {
                    assert!(Instant::now() < until, "still waiting after {T:?}");
                    std::thread::yield_now();
                }
                req.wait(T).unwrap_err()
            });
            assert!(
                matches!(&e, Error::Mem(m) if m.code().map(|c| c.0) == Some(code)),
                "{how}, code {code}: {e:?}"
            );
            c.transfer_sync(addr, TransferOp::Write, &d, T).unwrap();
        }
    }
    p.close();
    env.finish();
}

/// The flags' allocation refused for a reason of its own fails that transfer, and the next
/// slot has flags; refused as unsupported, it means events.
#[test]
fn a_refused_flag_allocation() {
    let env = setup();
    let names = ["aclrtValueWrite", "aclrtRecordEvent"];
    for (code, events) in [
        (INTERNAL, false),
        (acl_sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT, true),
    ] {
        let p = Pair::new(MIB, test_options(2), true);
        let d = pair_descs(&p, 8);
        let sync = || {
            p.client
                .transfer_sync(&p.peer_addr, TransferOp::Write, &d, T)
        };
        ascend_sim::fault::fail_nth("aclrtMallocHost", 1, code);
        let first = sync();
        ascend_sim::fault::clear();
        if events {
            first.unwrap();
        } else {
            let e = first.unwrap_err();
            assert!(
                matches!(&e, Error::Mem(m) if m.api() == Some("aclrtMallocHost")),
                "{e:?}"
            );
        }
        let n = counted(names, || sync().unwrap());
        let want = if events { [0, 2] } else { [2, 0] };
        assert_eq!(n, want, "{names:?} after a refusal with code {code}");
        p.close();
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
        let d = descs(local.addr(), remote.addr(), 8);
        let names = ["aclrtValueWrite", "aclrtRecordEvent"];
        let n = counted(names, || {
            b.transfer_sync(&addr, TransferOp::Write, &d, T).unwrap();
            let req = b.transfer_async(&addr, TransferOp::Write, &d).unwrap();
            req.wait(T).unwrap();
        });
        assert_eq!(n, [0, 4], "{names:?}");
        assert_landed(&remote.to_vec().unwrap(), &data, 8);
        drop((_rb, local, b, dev, old));
        ascend_sim::fault::clear();
    }
    env.finish();
}

/// A flag write the runtime refuses as unsupported (here the second `aclrtValueWrite` of the
/// first transfer: the first stream's write was queued already) means events, for that
/// transfer and every one after; a refusal for another reason fails its transfer only.
#[test]
fn a_flag_write_refused_as_unsupported_means_events() {
    let env = setup();
    let p = Pair::new(MIB, test_options(2), true);
    let data = pattern(7, MIB);
    p.local.write_from(&data, 0).unwrap();
    let d = pair_descs(&p, 8);
    let sync = || {
        p.client
            .transfer_sync(&p.peer_addr, TransferOp::Write, &d, T)
    };
    ascend_sim::fault::fail_nth("aclrtValueWrite", 1, INTERNAL);
    let e = sync().unwrap_err();
    assert!(
        matches!(&e, Error::Mem(m) if m.api() == Some("aclrtValueWrite")),
        "{e:?}"
    );
    let names = ["aclrtValueWrite", "aclrtRecordEvent"];
    assert_eq!(
        counted(names, || sync().unwrap()),
        [2, 0],
        "{names:?}: flags still"
    );
    ascend_sim::fault::fail_nth(
        "aclrtValueWrite",
        2,
        acl_sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    );
    let n = counted(names, || {
        sync().unwrap();
        sync().unwrap();
    });
    ascend_sim::fault::clear();
    assert_eq!(
        n,
        [2, 4],
        "{names:?}: one write queued, one refused, then events"
    );
    assert_landed(&p.remote.to_vec().unwrap(), &data, 8);
    p.close();
    env.finish();
}
