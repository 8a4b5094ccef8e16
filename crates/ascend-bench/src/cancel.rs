//! What cancelling transfers costs the thread that cancels: 1,000 transfer futures of 32 MiB
//! WRITEs each (32 descriptors of 1 MiB, over the engine's streams), every one polled once, so
//! every slot holds a transfer whose copies run and the rest wait for a slot; then all are
//! dropped on this one thread. The same again with
//! [`TransferRequest::cancel`](ascend_fabric::TransferRequest::cancel) on each instead, which
//! waits for the aborted streams (what a drop cost before drops stopped waiting). Reported: the
//! time the drop took, the time until the engine had let everything go (the registration no
//! longer in use), and the cancel loop's time; medians of three.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use ascend_fabric::{Addr, Engine, Registration, TransferDesc, TransferOp};

use crate::Res;

const FUTURES: usize = 1000;
const PIECE: usize = 1 << 20;
const PIECES: usize = 32;
const REPS: usize = 3;
const T: Duration = Duration::from_secs(60);

/// A waker that does nothing: each future is polled once, to submit it.
struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// The figures of one run (medians of [`REPS`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cancel {
    pub(crate) futures: usize,
    /// Transfers holding a slot (copies queued or running) when they were dropped.
    pub(crate) in_flight: u64,
    pub(crate) drop_ms: f64,
    /// From the start of the drop until the engine had released everything they held.
    pub(crate) released_ms: f64,
    /// `cancel()` on each of as many requests in flight, one after the other.
    pub(crate) cancel_ms: f64,
}

impl Cancel {
    /// The drop's cost over the waiting cancel's (a cost ratio: lower is better).
    pub(crate) fn drop_vs_cancel(&self) -> f64 {
        self.drop_ms / self.cancel_ms
    }
}

/// Where the transfers go: local `l0` to remote `r0`, each `region` bytes, `reg` registering
/// the local side.
pub(crate) struct Target<'a> {
    pub(crate) eng: &'a Engine,
    pub(crate) peer: &'a str,
    pub(crate) reg: &'a Registration,
    pub(crate) l0: Addr,
    pub(crate) r0: Addr,
    pub(crate) region: usize,
}

impl Target<'_> {
    fn descs(&self, i: usize) -> Vec<TransferDesc> {
        let span = PIECE * PIECES;
        let blocks = (self.region / span).max(1);
        let base = (i % blocks) * span;
        (0..PIECES)
            .map(|p| {
                let off = base + p * PIECE;
                TransferDesc::raw(self.l0 + off, self.r0 + off, PIECE)
            })
            .collect()
    }

    fn released(&self) -> Res<()> {
        let t0 = Instant::now();
        while self.reg.in_flight() != 0 {
            if t0.elapsed() > T {
                return Err("the dropped transfers were never released".into());
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// One drop of [`FUTURES`] futures: (in flight, drop time, release time).
    fn drop_once(&self) -> Res<(u64, Duration, Duration)> {
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut futs: Vec<_> = (0..FUTURES)
            .map(|i| {
                self.eng
                    .transfer(self.peer, TransferOp::Write, &self.descs(i))
            })
            .collect();
        for f in &mut futs {
            if let std::task::Poll::Ready(r) = Pin::new(f).poll(&mut cx) {
                r?;
            }
        }
        let in_flight = self.eng.peer_stats(self.peer).map_or(0, |s| s.in_flight);
        let t0 = Instant::now();
        drop(futs);
        let dropped = t0.elapsed();
        self.released()?;
        Ok((in_flight, dropped, t0.elapsed()))
    }

    /// `cancel()` on `n` requests in flight, one after the other.
    fn cancel_once(&self, n: usize) -> Res<Duration> {
        let reqs = (0..n)
            .map(|i| {
                self.eng
                    .transfer_async(self.peer, TransferOp::Write, &self.descs(i))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let t0 = Instant::now();
        for r in &reqs {
            r.cancel();
        }
        let d = t0.elapsed();
        drop(reqs);
        self.released()?;
        Ok(d)
    }
}

/// The median of `v` in milliseconds.
fn median_ms(v: Vec<Duration>) -> f64 {
    crate::util::median(v).as_secs_f64() * 1e3
}

/// Measures the drop and the cancel loop.
pub(crate) fn measure(t: &Target<'_>) -> Res<Cancel> {
    let (mut drops, mut releases, mut cancels) = (Vec::new(), Vec::new(), Vec::new());
    let mut in_flight = 0;
    for _ in 0..REPS {
        let (n, d, r) = t.drop_once()?;
        in_flight = n;
        drops.push(d);
        releases.push(r);
        cancels.push(t.cancel_once(n as usize)?);
    }
    Ok(Cancel {
        futures: FUTURES,
        in_flight,
        drop_ms: median_ms(drops),
        released_ms: median_ms(releases),
        cancel_ms: median_ms(cancels),
    })
}
