//! Stream slots: `task_stream_num` streams leased from a [`StreamPool`] plus one event per
//! stream (HIXL's host-mode slot). A transfer takes a slot for itself, deals its pieces
//! round-robin to the slot's streams and queues each stream's share as one table batch
//! ([`ascend_mem::Stream::copy_table_async`] over the channel's imports and the local
//! segments: `aclrtMemcpyAsync`, kind DEVICE_TO_DEVICE for every direction, as HIXL does),
//! records each used stream's event, and is complete when every recorded event is;
//! the streams are then synchronized (instantly) to surface copy errors, and the slot goes back
//! to the pool. A slot whose transfer failed or was aborted is destroyed, not reused. Slots are
//! created lazily, up to a budget of 512 streams per engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ascend_mem::{Device, Event, FailureMode, StreamFlags, StreamLease, StreamPool};
use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// HIXL's per-engine stream budget.
pub const STREAM_BUDGET: usize = 512;

/// A slot: streams and one event per stream. Dropping it destroys them; return it to its
/// [`SlotPool`] instead (or let a [`SlotGuard`] do it).
pub(crate) struct Slot {
    pub(crate) streams: Vec<StreamLease>,
    events: Vec<Event>,
    _pool: StreamPool,
}

impl Slot {
    fn new(dev: &Device, n: usize) -> Result<Slot> {
        let pool = StreamPool::new(dev, n, StreamFlags::FAST_LAUNCH | StreamFlags::FAST_SYNC)?;
        let mut streams = Vec::with_capacity(n);
        for _ in 0..n {
            let mut s = pool.try_lease().ok_or_else(|| Error::ResourceExhausted {
                what: "streams",
                detail: "a new stream pool had no free stream".into(),
            })?;
            s.set_failure_mode(FailureMode::Stop)?;
            streams.push(s);
        }
        let events = (0..n)
            .map(|_| Event::new(dev))
            .collect::<ascend_mem::Result<Vec<_>>>()?;
        Ok(Slot {
            streams,
            events,
            _pool: pool,
        })
    }

    /// The slot's streams.
    pub(crate) fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Records the event of every used stream (bit i of `used`: stream i got work).
    pub(crate) fn record(&mut self, used: u32) -> Result<()> {
        for i in 0..self.streams.len() {
            if used & (1 << i) != 0 {
                self.events[i].record(&mut self.streams[i])?;
            }
        }
        Ok(())
    }

    /// Waits up to `slice` for the used streams' events; true when all are complete.
    pub(crate) fn wait_events(&mut self, used: u32, slice: Duration) -> Result<bool> {
        let until = Instant::now() + slice;
        for i in 0..self.events.len() {
            if used & (1 << i) == 0 {
                continue;
            }
            let ev = &self.events[i];
            let left = until.saturating_duration_since(Instant::now());
            let done = if left.is_zero() {
                ev.is_complete()?
            } else {
                match ev.synchronize_timeout(left) {
                    Ok(()) => true,
                    Err(e) if e.kind() == ascend_mem::ErrorKind::Timeout => false,
                    Err(e) => return Err(e.into()),
                }
            };
            if !done {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether every used stream's event is complete, without waiting.
    pub(crate) fn poll_events(&mut self, used: u32) -> Result<bool> {
        for i in 0..self.events.len() {
            if used & (1 << i) != 0 && !self.events[i].is_complete()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// After the events: synchronizes the used streams (done already) to surface errors.
    pub(crate) fn sync_streams(&mut self, used: u32) -> Result<()> {
        let mut first = None;
        for i in 0..self.streams.len() {
            if used & (1 << i) != 0 {
                if let Err(e) = self.streams[i].synchronize() {
                    first.get_or_insert(e);
                }
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(e.into()),
        }
    }

    /// Aborts the used streams' work and consumes the abort report, so the slot can be
    /// destroyed quietly.
    pub(crate) fn abort(&mut self, used: u32) {
        for (i, s) in self.streams.iter_mut().enumerate() {
            if used & (1 << i) != 0 {
                if let Err(e) = s.abort() {
                    tracing::warn!(error = %e, "aclrtStreamAbort failed");
                }
                let _ = s.synchronize();
            }
        }
    }
}

struct SlotState {
    free: Vec<Slot>,
    created: usize,
}

/// The engine's slots: free ones, and how many exist, within [`STREAM_BUDGET`].
pub(crate) struct SlotPool {
    dev: Device,
    per_slot: usize,
    max_slots: usize,
    st: Mutex<SlotState>,
    cv: Condvar,
}

impl SlotPool {
    pub(crate) fn new(dev: &Device, per_slot: usize) -> Arc<SlotPool> {
        Arc::new(SlotPool {
            dev: dev.clone(),
            per_slot,
            max_slots: (STREAM_BUDGET / per_slot).max(1),
            st: Mutex::new(SlotState {
                free: Vec::new(),
                created: 0,
            }),
            cv: Condvar::new(),
        })
    }

    /// A free slot, a new one within budget, or (with a deadline) waits for one.
    pub(crate) fn acquire(&self, wait_until: Option<Instant>) -> Result<Slot> {
        let t0 = Instant::now();
        let mut st = self.st.lock();
        loop {
            if let Some(s) = st.free.pop() {
                return Ok(s);
            }
            if st.created < self.max_slots {
                st.created += 1;
                drop(st);
                return Slot::new(&self.dev, self.per_slot).inspect_err(|_| {
                    self.st.lock().created -= 1;
                    self.cv.notify_one();
                });
            }
            match wait_until {
                None => {
                    return Err(Error::ResourceExhausted {
                        what: "stream slots",
                        detail: format!(
                            "{} slots of {} streams in use (budget {STREAM_BUDGET} streams)",
                            self.max_slots, self.per_slot
                        ),
                    })
                }
                Some(d) => {
                    if self.cv.wait_until(&mut st, d).timed_out() && st.free.is_empty() {
                        return Err(Error::Timeout {
                            what: "waiting for a free stream slot",
                            after: t0.elapsed(),
                        });
                    }
                }
            }
        }
    }

    /// Returns `slot`, its streams idle, for reuse.
    pub(crate) fn release(&self, slot: Slot) {
        self.st.lock().free.push(slot);
        self.cv.notify_one();
    }

    /// Destroys `slot` (its transfer failed or was aborted), making room for a new one.
    pub(crate) fn discard(&self, slot: Slot) {
        drop(slot);
        self.st.lock().created -= 1;
        self.cv.notify_one();
    }

    /// Slots created and not destroyed.
    pub(crate) fn created(&self) -> usize {
        self.st.lock().created
    }
}

/// A slot taken for a submission, until the submission hands it to its request
/// ([`SlotGuard::into_parts`]). Dropped before that (an error or a panic on the way), it
/// gives the slot back: released for reuse while no stream has work, else aborted and
/// destroyed.
#[must_use = "dropping the guard gives the slot back at once"]
pub(crate) struct SlotGuard {
    pool: Arc<SlotPool>,
    slot: Option<Slot>,
    /// Bit i: stream i may have work queued.
    used: u32,
}

impl SlotGuard {
    /// Takes a slot of `pool` (see [`SlotPool::acquire`]).
    pub(crate) fn acquire(pool: &Arc<SlotPool>, wait_until: Option<Instant>) -> Result<SlotGuard> {
        let slot = pool.acquire(wait_until)?;
        Ok(SlotGuard {
            pool: pool.clone(),
            slot: Some(slot),
            used: 0,
        })
    }

    /// The slot's streams.
    pub(crate) fn streams(&self) -> usize {
        self.slot.as_ref().map_or(0, Slot::streams)
    }

    /// Stream `i`, marked used first: work queued on it, even part of it, is aborted if the
    /// guard drops.
    pub(crate) fn stream(&mut self, i: usize) -> &mut StreamLease {
        self.used |= 1 << i;
        let slot = self
            .slot
            .as_mut()
            .expect("a guard holds its slot until consumed");
        &mut slot.streams[i]
    }

    /// The slot, the streams that got work, and the pool it goes back to.
    pub(crate) fn into_parts(mut self) -> (Slot, u32, Arc<SlotPool>) {
        let slot = self
            .slot
            .take()
            .expect("a guard holds its slot until consumed");
        (slot, self.used, self.pool.clone())
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        if self.used == 0 {
            self.pool.release(slot);
        } else {
            slot.abort(self.used);
            self.pool.discard(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(pool: &SlotPool) -> usize {
        pool.st.lock().free.len()
    }

    #[test]
    fn a_guard_gives_its_slot_back_on_every_exit() {
        let rt = ascend_mem::Runtime::emulated().unwrap();
        let dev = rt.device(0).unwrap();
        let pool = SlotPool::new(&dev, 2);

        // Dropped before any work (an error on the way): released for reuse.
        drop(SlotGuard::acquire(&pool, None).unwrap());
        assert_eq!((pool.created(), free(&pool)), (1, 1));

        // Dropped with a stream marked used: aborted and destroyed, room for a new one.
        let mut g = SlotGuard::acquire(&pool, None).unwrap();
        assert_eq!((g.streams(), free(&pool)), (2, 0));
        let _ = g.stream(1);
        drop(g);
        assert_eq!((pool.created(), free(&pool)), (0, 0));

        // Handed on: the holder returns it, the guard does nothing more.
        let mut g = SlotGuard::acquire(&pool, None).unwrap();
        let _ = g.stream(0);
        let (slot, used, back) = g.into_parts();
        assert_eq!((used, pool.created(), free(&pool)), (0b01, 1, 0));
        back.release(slot);
        assert_eq!((pool.created(), free(&pool)), (1, 1));
    }
}
