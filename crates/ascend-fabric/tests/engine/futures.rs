//! Transfers and connects as futures: driven by a hand-written executor that polls only
//! after a wake (so every wake-up the engine owes is checked) and by tokio; connect on demand
//! inside a transfer future; the errors a future resolves to.

use std::time::Duration;

use crate::async_util::*;
use crate::util::*;
use ascend_fabric::{Error, TransferDesc, TransferOp, TransferOptions};
use ascend_mem::prelude::*;

const T: Duration = Duration::from_secs(30);
const BLOCK: usize = 64 << 10;
const BLOCKS: usize = 16;

fn blocks(p: &Pair) -> Vec<TransferDesc> {
    (0..BLOCKS)
        .map(|i| TransferDesc::raw(p.local_addr(i * BLOCK), p.remote_addr(i * BLOCK), BLOCK))
        .collect()
}

#[test]
fn a_hand_written_executor_drives_transfers_by_their_wakers() {
    let _env = setup();
    let p = Pair::new(BLOCKS * BLOCK, options(4, 4), true);
    let data = pattern(7, BLOCKS * BLOCK);
    p.local.write_from(&data, 0).unwrap();

    // One future for the whole batch.
    let run = block_on(
        p.client
            .transfer(&p.peer_addr, TransferOp::Write, &blocks(&p)),
        T,
    );
    run.output.unwrap();
    assert_eq!(p.remote.to_vec().unwrap()[..data.len()], data[..]);

    // One future per block, all pending at once, each polled only when woken.
    p.local.fill(0).unwrap();
    let futs: Vec<_> = blocks(&p)
        .iter()
        .map(|d| p.client.transfer(&p.peer_addr, TransferOp::Read, &[*d]))
        .collect();
    for r in join_all(futs, T) {
        r.unwrap();
    }
    assert_eq!(p.local.to_vec().unwrap()[..data.len()], data[..]);

    // A request from the synchronous API is a future too; `post` gives one after a slot.
    p.remote.fill(0).unwrap();
    let req = p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Write, &blocks(&p)[..8])
        .unwrap();
    block_on(req, T).output.unwrap();
    let req = block_on(
        p.client.post(
            &p.peer_addr,
            TransferOp::Write,
            &blocks(&p)[8..],
            TransferOptions::new(),
        ),
        T,
    )
    .output
    .unwrap();
    block_on(req, T).output.unwrap();
    assert_eq!(p.remote.to_vec().unwrap()[..data.len()], data[..]);
    p.close();
}

#[test]
fn tokio_drives_connect_and_many_transfers() {
    let _env = setup();
    let p = Pair::new(BLOCKS * BLOCK, options(2, 4), false);
    let data = pattern(3, BLOCKS * BLOCK);
    p.local.write_from(&data, 0).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        p.client.connect_async(&p.peer_addr, T).await.unwrap();
        assert!(p.client.is_connected(&p.peer_addr));
        // Connecting again is an error, from the future too.
        let again = p.client.connect_async(&p.peer_addr, T).await;
        assert!(
            matches!(again, Err(Error::AlreadyConnected { .. })),
            "{again:?}"
        );

        let tasks: Vec<_> = blocks(&p)
            .into_iter()
            .map(|d| {
                let (e, peer) = (p.client.clone(), p.peer_addr.clone());
                tokio::spawn(async move { e.transfer(&peer, TransferOp::Write, &[d]).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        // Under a tokio timeout, which drops the future if it were late.
        tokio::time::timeout(
            T,
            p.client
                .transfer(&p.peer_addr, TransferOp::Read, &blocks(&p)),
        )
        .await
        .expect("in time")
        .unwrap();
    });
    assert_eq!(p.remote.to_vec().unwrap()[..data.len()], data[..]);
    assert_eq!(p.local.to_vec().unwrap()[..data.len()], data[..]);
    drop(rt);
    p.close();
}

#[test]
fn a_transfer_future_connects_on_demand_under_auto_connect() {
    let _env = setup();
    let opts = ascend_fabric::EngineOptions::builder()
        .task_stream_num(2)
        .pool_capacity(4 << 30)
        .auto_connect(true)
        .build()
        .unwrap();
    let p = Pair::new(BLOCKS * BLOCK, opts, false);
    let data = pattern(9, BLOCK);
    p.local.write_from(&data, 0).unwrap();
    assert!(!p.client.is_connected(&p.peer_addr));
    let d = blocks(&p)[0];
    block_on(p.client.transfer(&p.peer_addr, TransferOp::Write, &[d]), T)
        .output
        .unwrap();
    assert!(p.client.is_connected(&p.peer_addr));
    assert_eq!(p.remote.to_vec().unwrap()[..BLOCK], data[..]);
    p.close();
}

#[test]
fn futures_resolve_to_typed_errors() {
    let _env = setup();
    let p = Pair::new(BLOCKS * BLOCK, options(2, 4), false);
    let d = blocks(&p)[0];
    // Not connected (no AutoConnect): at the first poll, no slot taken.
    let r = block_on(p.client.transfer(&p.peer_addr, TransferOp::Write, &[d]), T).output;
    assert!(
        matches!(r, Err(Error::NotConnected { ref peer }) if *peer == p.peer_addr),
        "{r:?}"
    );
    // Bad descriptors are named as by the synchronous API.
    let r = block_on(p.client.transfer(&p.peer_addr, TransferOp::Write, &[]), T).output;
    assert!(matches!(r, Err(Error::EmptyBatch)), "{r:?}");
    let zero = TransferDesc::raw(d.local_addr, d.remote_addr, 0);
    let r = block_on(
        p.client
            .transfer(&p.peer_addr, TransferOp::Write, &[d, zero]),
        T,
    )
    .output;
    assert!(matches!(r, Err(Error::ZeroLength { index: 1 })), "{r:?}");
    // A connect to a port nobody listens on.
    let nobody = listen_addr();
    let mut c = p.client.connect_async(&nobody, Duration::from_secs(2));
    let r = block_on(&mut c, T).output;
    assert!(matches!(r, Err(Error::Control(_))), "{r:?}");
    // Polled again, a finished connect gives its outcome again, not `Pending` for ever.
    let again = block_on(&mut c, T).output;
    assert!(
        matches!(&again, Err(Error::AlreadyReported(m)) if *m == r.unwrap_err().to_string()),
        "{again:?}"
    );

    p.client.connect(&p.peer_addr, T).unwrap();
    let outside = TransferDesc::raw(d.local_addr, d.remote_addr + (1 << 40), 4096);
    let r = block_on(
        p.client
            .transfer(&p.peer_addr, TransferOp::Write, &[outside]),
        T,
    )
    .output;
    assert!(
        matches!(r, Err(Error::NotRegistered { index: 0, .. })),
        "{r:?}"
    );
    // No slot was kept by the failures.
    assert!(p.client.stream_slots() <= 1, "{}", p.client.stream_slots());
    // A finished request polled again gives its outcome again (a success stays one).
    let mut req = p
        .client
        .transfer_async(&p.peer_addr, TransferOp::Write, &[d])
        .unwrap();
    block_on(&mut req, T).output.unwrap();
    let again = block_on(&mut req, T).output;
    assert!(again.is_ok(), "{again:?}");
    p.close();
}

/// `Duration::MAX` as a synchronous transfer's timeout means no limit: the transfer runs
/// (it used to overflow the deadline and panic).
#[test]
fn sync_transfer_with_no_time_limit() {
    let _env = setup();
    let p = Pair::new(BLOCKS * BLOCK, options(2, 4), true);
    let data = pattern(3, BLOCK);
    p.local.write_from(&data, 0).unwrap();
    let d = blocks(&p)[0];
    p.client
        .transfer_sync(&p.peer_addr, TransferOp::Write, &[d], Duration::MAX)
        .unwrap();
    assert_eq!(p.remote.to_vec().unwrap()[..BLOCK], data[..]);
    p.close();
}

/// A post whose channel went away while it waited for a slot connects again on a helper
/// thread, never in its poll: with another connect of the engine holding the engine's
/// connect lock (in its exchange with a listener that never answers), the poll that gets
/// the slot returns pending at once instead of blocking on that lock; the transfer goes
/// through once the other connect has ended.
#[test]
fn a_post_reconnects_off_the_polling_thread() {
    use std::future::Future;
    use std::task::{Context, Waker};
    let _env = setup();
    const STREAMS: u32 = 8;
    let opts = ascend_fabric::EngineOptions::builder()
        .task_stream_num(STREAMS)
        .pool_capacity(4 << 30)
        .auto_connect(true)
        .build()
        .unwrap();
    let p = Pair::new(BLOCKS * BLOCK, opts, true);
    let d = blocks(&p)[0];

    // Every slot busy with held copies: the post queues for a slot.
    let hold = ascend_sim::testing::hold_all_streams();
    let slots = ascend_fabric::STREAM_BUDGET / STREAMS as usize;
    let reqs: Vec<_> = (0..slots)
        .map(|_| {
            p.client
                .transfer_async(&p.peer_addr, TransferOp::Write, &[d])
                .unwrap()
        })
        .collect();
    let mut post = Box::pin(p.client.post(
        &p.peer_addr,
        TransferOp::Write,
        &[d],
        TransferOptions::new(),
    ));
    let flag = Flag::new();
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(post.as_mut().poll(&mut cx).is_pending());

    // The channel goes away: its requests fail, and a slot goes to the post.
    p.client.disconnect(&p.peer_addr, T).unwrap();
    assert!(flag.wakes() > 0);
    drop(reqs);
    drop(hold);

    // Another connect holds the connect lock, in its exchange with a silent listener.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let c = p.client.clone();
    let other = std::thread::spawn(move || c.connect(&silent_addr, T));
    let (conn, _) = silent.accept().unwrap();
    assert!(
        post.as_mut().poll(&mut cx).is_pending(),
        "the poll connected in place"
    );
    drop(conn);
    drop(silent);
    assert!(other.join().unwrap().is_err());
    let req = block_on(post, T).output.unwrap();
    block_on(req, T).output.unwrap();
    assert!(p.client.is_connected(&p.peer_addr));
    p.close();
}

/// A waker that, when woken, asks every request in `reqs` for its status (which takes each
/// request's lock) and counts the wakes.
struct Asks {
    reqs: std::sync::Mutex<Vec<std::sync::Arc<ascend_fabric::TransferRequest>>>,
    wakes: std::sync::atomic::AtomicUsize,
}

impl std::task::Wake for Asks {
    fn wake(self: std::sync::Arc<Self>) {
        for r in self.reqs.lock().unwrap().iter() {
            let _ = r.status();
        }
        self.wakes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A task waiting for a stream slot is woken only after the request that gave the slot up
/// has released its own lock: a waker may run its task at once, and that task may look at
/// the very request (here the waker asks every in-flight request for its status, which
/// would deadlock on the finishing request's lock were the wake made under it).
#[test]
fn a_slot_waiter_is_woken_outside_the_finishing_requests_lock() {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Waker};

    let _env = setup();
    let streams = 4;
    let slots = ascend_fabric::STREAM_BUDGET / streams as usize;
    let p = Pair::new(slots * 4096, options(streams, 4), true);
    let d = |i: usize| TransferDesc::raw(p.local_addr(i * 4096), p.remote_addr(i * 4096), 4096);
    let hold = ascend_sim::testing::hold_all_streams();
    let busy: Vec<Arc<ascend_fabric::TransferRequest>> = (0..slots)
        .map(|i| {
            let r = p
                .client
                .transfer_async(&p.peer_addr, TransferOp::Write, &[d(i)]);
            Arc::new(r.unwrap())
        })
        .collect();
    let asks = Arc::new(Asks {
        reqs: std::sync::Mutex::new(busy.clone()),
        wakes: Default::default(),
    });
    let waker = Waker::from(asks.clone());
    let mut post = Box::pin(p.client.transfer(&p.peer_addr, TransferOp::Write, &[d(0)]));
    assert!(post
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    drop(hold);
    // Waited on a helper thread: were the wake made under a request's lock, that lock would
    // never be released, and the wait on it would block for good.
    let (tx, rx) = std::sync::mpsc::channel();
    let waited = busy.clone();
    let helper = std::thread::spawn(move || {
        let r: Result<(), Error> = waited.iter().try_for_each(|r| r.wait(T));
        let _ = tx.send(r);
    });
    let Ok(done) = rx.recv_timeout(T) else {
        // Unwinding would drop the engine, whose progress thread is the one deadlocked.
        eprintln!("the busy transfers did not finish within {T:?}: a wake deadlocked");
        std::process::abort();
    };
    done.unwrap();
    // Its references to the requests (and so to the engine) are gone before the test ends.
    helper.join().unwrap();
    // The progress thread or the helper finished them; one handed its slot to `post`.
    let t0 = std::time::Instant::now();
    while asks.wakes.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < T, "the slot waiter was never woken");
        std::thread::yield_now();
    }
    asks.reqs.lock().unwrap().clear();
    drop(busy);
    let r = block_on(post, T);
    r.output.unwrap();
    p.close();
}
