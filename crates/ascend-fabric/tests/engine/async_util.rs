//! Helpers of the async tests: a hand-written executor (polls a future only when its waker
//! was woken, so a future that is never woken fails the test instead of being polled into
//! completion) and a connected pair of engines in this process.
#![allow(dead_code)]

use ascend_fabric::Addr;
use ascend_mem::prelude::*;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use ascend_fabric::{Engine, EngineOptions, Registration};
use ascend_mem::{Device, DeviceBuffer, Runtime};

use crate::util::{listening, options};

/// A waker that records being woken and unparks the executor's thread.
pub struct Flag {
    woken: AtomicBool,
    wakes: AtomicUsize,
    thread: Thread,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.woken.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

impl Flag {
    pub fn new() -> Arc<Flag> {
        Arc::new(Flag {
            woken: AtomicBool::new(false),
            wakes: AtomicUsize::new(0),
            thread: std::thread::current(),
        })
    }

    /// Times woken.
    pub fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }

    fn take(&self) -> bool {
        self.woken.swap(false, Ordering::SeqCst)
    }
}

/// What `block_on` saw.
#[derive(Debug)]
pub struct Run<T> {
    pub output: T,
    /// Polls made (the first one, then one per wake).
    pub polls: usize,
}

/// Runs `f` on this thread, polling it once and then only after its waker was woken.
///
/// # Panics
/// If the future stays unwoken for `limit` (a lost wake-up).
pub fn block_on<F: Future>(f: F, limit: Duration) -> Run<F::Output> {
    let flag = Flag::new();
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(output) = f.as_mut().poll(&mut cx) {
            return Run { output, polls };
        }
        let until = Instant::now() + limit;
        while !flag.take() {
            let now = Instant::now();
            assert!(now < until, "not woken within {limit:?} (poll {polls})");
            std::thread::park_timeout(until - now);
        }
    }
}

/// Polls every future of `fs` on this thread, each only after its own waker was woken;
/// returns their outputs in order.
///
/// # Panics
/// If none is woken for `limit` while some are pending.
pub fn join_all<F: Future + Unpin>(fs: Vec<F>, limit: Duration) -> Vec<F::Output> {
    let flags: Vec<Arc<Flag>> = fs.iter().map(|_| Flag::new()).collect();
    let wakers: Vec<Waker> = flags.iter().map(|f| Waker::from(f.clone())).collect();
    let mut fs: Vec<Option<F>> = fs.into_iter().map(Some).collect();
    let mut out: Vec<Option<F::Output>> = fs.iter().map(|_| None).collect();
    let mut due: Vec<usize> = (0..fs.len()).collect();
    let mut left = fs.len();
    while left > 0 {
        for i in due.drain(..) {
            let Some(f) = fs[i].as_mut() else { continue };
            let mut cx = Context::from_waker(&wakers[i]);
            if let Poll::Ready(o) = std::pin::Pin::new(f).poll(&mut cx) {
                out[i] = Some(o);
                fs[i] = None;
                left -= 1;
            }
        }
        let until = Instant::now() + limit;
        while left > 0 && due.is_empty() {
            due.extend((0..flags.len()).filter(|&i| flags[i].take()));
            if due.is_empty() {
                let now = Instant::now();
                assert!(
                    now < until,
                    "none of {left} pending futures woken within {limit:?}"
                );
                std::thread::park_timeout((until - now).min(Duration::from_millis(50)));
            }
        }
    }
    out.into_iter()
        .map(|o| o.expect("every future ended"))
        .collect()
}

/// Two engines in this process: `peer` listens and offers `remote`; `client` registered
/// `local` and is connected to `peer` (unless built with `connect: false`).
pub struct Pair {
    pub client: Engine,
    pub peer: Engine,
    pub peer_addr: String,
    pub local: DeviceBuffer,
    pub remote: DeviceBuffer,
    pub local_reg: Registration,
    pub remote_reg: Registration,
    pub dev: Device,
    pub rt: Runtime,
}

impl Pair {
    pub fn new(bytes: usize, opts: EngineOptions, connect: bool) -> Pair {
        let rt = Runtime::emulated().unwrap();
        let dev = rt.device(0).unwrap();
        let (peer, peer_addr) = listening(&dev, options(2, 4));
        let remote = peer.alloc_device(bytes).unwrap();
        let remote_reg = peer.register(&remote).unwrap();
        let client = Engine::new(&dev, "127.0.0.1", opts).unwrap();
        let local = client.alloc_device(bytes).unwrap();
        let local_reg = client.register(&local).unwrap();
        if connect {
            client.connect(&peer_addr, Duration::from_secs(20)).unwrap();
        }
        Pair {
            client,
            peer,
            peer_addr,
            local,
            remote,
            local_reg,
            remote_reg,
            dev,
            rt,
        }
    }

    pub fn local_addr(&self, off: usize) -> Addr {
        self.local.addr() + off
    }

    pub fn remote_addr(&self, off: usize) -> Addr {
        self.remote.addr() + off
    }

    /// Drops everything in an order that releases all, the client engine first.
    pub fn close(self) {
        let Pair {
            client,
            peer,
            local,
            remote,
            local_reg,
            remote_reg,
            ..
        } = self;
        drop(client);
        drop(local_reg);
        drop(local);
        drop(peer);
        drop(remote_reg);
        drop(remote);
    }
}
