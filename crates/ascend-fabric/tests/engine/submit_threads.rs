//! Several submitting threads (`EngineOptions::submit_threads`): a transfer's streams shared
//! among them queue every copy once, in WRITE and READ, with prepared lists too; a copy the
//! runtime refuses on any of them fails the transfer with a descriptor of it, and the engine
//! goes on; the option's range is checked.

use std::time::Duration;

use ascend_fabric::{EngineOptions, Error, OptionError, TransferDesc, TransferOp};
use ascend_mem::prelude::*;
use ascend_testkit::emulator::copy_calls;

use crate::async_util::Pair;
use crate::util::{pattern, setup, INTERNAL};

const T: Duration = Duration::from_secs(20);
const BLOCK: usize = 4096;
/// Enough copies for every thread (at least `SUBMIT_THREAD_MIN_COPIES` each).
const N: usize = 512;
const LEN: usize = N * BLOCK * 2;

fn threaded(threads: u32) -> EngineOptions {
    EngineOptions::builder()
        .task_stream_num(4)
        .submit_threads(threads)
        .heartbeat_interval(Duration::from_millis(100))
        .pool_capacity(4 << 30)
        .build()
        .unwrap()
}

/// Descriptor i: local block i to remote block `(i * 37) % N` (none adjacent: no merging).
fn descs(p: &Pair) -> Vec<TransferDesc> {
    (0..N)
        .map(|i| {
            let j = (i * 37) % N;
            TransferDesc::raw(p.local_addr(i * BLOCK), p.remote_addr(j * BLOCK), BLOCK)
        })
        .collect()
}

fn assert_scattered(remote: &[u8], local: &[u8]) {
    for i in 0..N {
        let j = (i * 37) % N;
        assert!(
            remote[j * BLOCK..(j + 1) * BLOCK] == local[i * BLOCK..(i + 1) * BLOCK],
            "block {i}"
        );
    }
}

#[test]
fn several_submitters_queue_every_copy_once() {
    const { assert!(N / 4 >= ascend_fabric::SUBMIT_THREAD_MIN_COPIES) };
    let _env = setup();
    for threads in [2, 4] {
        let p = Pair::new(LEN, threaded(threads), true);
        p.local.write_from(&pattern(threads as u8, LEN), 0).unwrap();
        let d = descs(&p);
        let n = copy_calls(|| {
            p.client
                .transfer_sync(&p.peer_addr, TransferOp::Write, &d, T)
                .unwrap()
        });
        assert_eq!(n, (0, N as u64), "{threads} threads: (batch calls, copies)");
        assert_scattered(&p.remote.to_vec().unwrap(), &p.local.to_vec().unwrap());
        // READ it back into the zeroed local buffer, by an asynchronous request.
        p.local.fill(0).unwrap();
        p.client
            .transfer_async(&p.peer_addr, TransferOp::Read, &d)
            .unwrap()
            .wait(T)
            .unwrap();
        assert_scattered(&p.remote.to_vec().unwrap(), &p.local.to_vec().unwrap());
        p.close();
    }
}

#[test]
fn a_refused_copy_on_any_submitter_fails_the_transfer_with_its_descriptor() {
    let _env = setup();
    let p = Pair::new(LEN, threaded(4), true);
    p.local.write_from(&pattern(9, LEN), 0).unwrap();
    let d = descs(&p);
    for nth in [1, 200, N as u64] {
        ascend_sim::fault::fail_nth("aclrtMemcpyAsync", nth, INTERNAL);
        let e = p
            .client
            .transfer_sync(&p.peer_addr, TransferOp::Write, &d, T)
            .unwrap_err();
        ascend_sim::fault::clear();
        match &e {
            Error::CopyRefused { index, source } => {
                assert!(*index < N, "call {nth}: descriptor {index}");
                assert_eq!(source.code().map(|c| c.0), Some(INTERNAL), "{e:?}");
            }
            other => panic!("call {nth}: {other:?}"),
        }
    }
    p.client
        .transfer_sync(&p.peer_addr, TransferOp::Write, &d, T)
        .unwrap();
    assert_scattered(&p.remote.to_vec().unwrap(), &p.local.to_vec().unwrap());
    p.close();
}

#[test]
fn submit_threads_out_of_range_are_refused() {
    for (streams, threads) in [(4, 0), (4, 5), (1, 2)] {
        let e = EngineOptions::builder()
            .task_stream_num(streams)
            .submit_threads(threads)
            .build()
            .unwrap_err();
        match e {
            OptionError::Invalid { key, value, .. } => {
                assert_eq!(
                    (key.as_str(), value),
                    ("submit_threads", threads.to_string())
                )
            }
            other => panic!("{other:?}"),
        }
    }
    let o = EngineOptions::builder()
        .task_stream_num(8)
        .submit_threads(8)
        .build()
        .unwrap();
    assert_eq!(o.submit_threads, 8);
    assert_eq!(EngineOptions::default().submit_threads, 1);
}
