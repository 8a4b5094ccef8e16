//! Streams and events, stream-ordered values (waits a stream blocks on, writes that release
//! it, writes into pinned host memory the host reads directly), a stream pool and waiting
//! on a stream from another thread.

use std::time::{Duration, Instant};

use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::{
    DeviceBuffer, ErrorKind, Event, EventFlags, Feature, HostBuffer, PinnedWords, Stream,
    StreamFlags, StreamPool, ValueWord, WaitCmp,
};
use ascend_testkit::pattern;

use crate::ctx::{ensure, same_bytes, Ctx, Res, STEP};
use crate::harness::Outcome;
use crate::skip_if;

const LEN: usize = 2 << 20;

/// Host → device → device on one stream, between two timing events and before an event a
/// second stream waits for; the second stream copies back to the host. Every byte checked.
pub fn copies_and_events(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Vmm)));
    let dev = ctx.device()?;
    let (src, back) = (HostBuffer::new(&dev, LEN)?, HostBuffer::new(&dev, LEN)?);
    let (d1, d2) = (DeviceBuffer::new(&dev, LEN)?, DeviceBuffer::new(&dev, LEN)?);
    let data = pattern(5, src.len());
    src.write_from(&data, 0)?;
    back.fill(0)?;
    let (mut s1, mut s2) = (Stream::new(&dev)?, Stream::new(&dev)?);
    let start = Event::with_flags(&dev, EventFlags::TIME_LINE)?;
    let end = Event::with_flags(&dev, EventFlags::TIME_LINE)?;
    let copied = Event::new(&dev)?;
    start.record(&mut s1)?;
    s1.fill_async(&d2, 0xee)?;
    s1.copy_async(&d1, &src)?;
    s1.copy_async(&d2, &d1)?;
    end.record(&mut s1)?;
    copied.record(&mut s1)?;
    s2.wait_event(&copied)?;
    s2.copy_async(&back, &d2)?;
    s2.synchronize_timeout(STEP)?;
    ensure(
        copied.is_complete()?,
        "the event s2 waited for is not complete",
    )?;
    same_bytes(&back.to_vec()?, &data, "after three copies on two streams")?;
    end.synchronize_timeout(STEP)?;
    let ms = end.elapsed_since(&start)?;
    ensure(ms.is_finite() && ms >= 0.0, format!("elapsed time {ms} ms"))?;
    s1.synchronize_timeout(STEP)?;
    ensure(s1.is_complete()?, "a synchronized stream is not complete")?;
    Ok(Outcome::Pass)
}

/// A stream waits on a word of HBM before a copy: it stays blocked (a bounded synchronize
/// times out, the copy has not happened) until another stream writes the word; then a wait
/// for an exact value released by a host store.
pub fn stream_values(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::StreamValues)));
    let dev = ctx.device()?;
    let words = DeviceBuffer::new(&dev, 4096)?;
    words.fill(0)?;
    let (src, dst) = (DeviceBuffer::new(&dev, LEN)?, DeviceBuffer::new(&dev, LEN)?);
    let data = pattern(6, src.len());
    src.write_from(&data, 0)?;
    dst.fill(0)?;
    let (go, seen) = (
        ValueWord::at(words.mapping(), 0)?,
        ValueWord::at(words.mapping(), 8)?,
    );
    let (mut waiter, mut writer) = (Stream::new(&dev)?, Stream::new(&dev)?);
    waiter.value_wait(&go, WaitCmp::Geq, 5)?;
    waiter.copy_async(&dst, &src)?;
    waiter.value_write(&seen, 1)?;
    still_waiting(&mut waiter, "a stream waiting on an unwritten word")?;
    ensure(
        !waiter.is_complete()?,
        "the waiting stream says it is complete",
    )?;
    ensure(
        seen.load()? == 0,
        "work queued after the wait ran before it",
    )?;
    ensure(
        dst.to_vec()?.iter().all(|&b| b == 0),
        "the copy after the wait ran before it",
    )?;
    writer.value_write(&go, 5)?;
    writer.synchronize_timeout(STEP)?;
    waiter.synchronize_timeout(STEP)?;
    same_bytes(&dst.to_vec()?, &data, "the copy released by the value")?;
    ensure(
        go.load()? == 5 && seen.load()? == 1,
        "the words after the release",
    )?;

    waiter.value_wait(&go, WaitCmp::Eq, 9)?;
    waiter.value_write(&seen, 2)?;
    go.store(8)?;
    still_waiting(&mut waiter, "a stream waiting for 9 with the word at 8")?;
    ensure(seen.load()? == 1, "a wait for 9 passed on 8")?;
    go.store(9)?;
    waiter.synchronize_timeout(STEP)?;
    ensure(seen.load()? == 2, "the write after the wait for 9")?;
    Ok(Outcome::Pass)
}

/// A failure unless `stream`, blocked on a value wait its word does not satisfy, stays
/// blocked: a bounded synchronize must end in a timeout. A runtime that honours the wait
/// always gives one, so this never fails by chance; after a wait that passed wrongly the
/// stream has only short work left, which the synchronize waits for. `what` names the case.
fn still_waiting(stream: &mut Stream, what: &str) -> Res<()> {
    match stream.synchronize_timeout(Duration::from_millis(50)) {
        Err(e) if e.kind() == ErrorKind::Timeout => Ok(()),
        other => Err(format!("{what}: a bounded synchronize gave {other:?}").into()),
    }
}

/// Values a stream writes into pinned host memory after a copy: the host sees the word by
/// reading memory, and once it sees it the copy before it is done.
pub fn host_value_write(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::HostValueWrite)));
    let dev = ctx.device()?;
    let flags = PinnedWords::new(&dev, 4)?;
    let (src, dst) = (HostBuffer::new(&dev, LEN)?, DeviceBuffer::new(&dev, LEN)?);
    let mut s = Stream::new(&dev)?;
    for round in 1..=3u64 {
        let data = pattern(round as u8, src.len());
        src.write_from(&data, 0)?;
        s.copy_async(&dst, &src)?;
        s.value_write_pinned(&flags, 2, round)?;
        let deadline = Instant::now() + STEP;
        while flags.load(2)? != round {
            // A runtime may run queued work only when asked (as the engine's waits allow
            // for): ask, and fail if the stream is idle without having written the flag.
            let idle = s.is_complete()?;
            ensure(
                !idle || flags.load(2)? == round,
                format!("the stream went idle without writing flag {round}"),
            )?;
            ensure(
                Instant::now() < deadline,
                format!("flag {round} not seen within {STEP:?}"),
            )?;
            std::thread::yield_now();
        }
        same_bytes(
            &dst.to_vec()?,
            &data,
            &format!("round {round}: the copy before the flag"),
        )?;
    }
    s.synchronize_timeout(STEP)?;
    for i in [0, 1, 3] {
        ensure(flags.load(i)? == 0, format!("word {i} was written"))?;
    }
    Ok(Outcome::Pass)
}

/// Copies on streams leased from a pool, waited for by another thread through a waiter,
/// then by the owner.
pub fn pool_and_waiter(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Vmm)));
    let dev = ctx.device()?;
    let pool = StreamPool::new(&dev, 2, StreamFlags::empty())?;
    let (src, mid, dst) = (
        HostBuffer::new(&dev, LEN)?,
        DeviceBuffer::new(&dev, LEN)?,
        HostBuffer::new(&dev, LEN)?,
    );
    let data = pattern(8, src.len());
    src.write_from(&data, 0)?;
    let (mut a, mut b) = (pool.lease(), pool.lease());
    ensure(
        pool.try_lease().is_none(),
        "a pool of 2 leased a third stream",
    )?;
    a.copy_async(&mid, &src)?;
    let w = a.waiter();
    std::thread::scope(|t| t.spawn(|| w.synchronize_timeout(STEP)).join())
        .map_err(|_| "the waiting thread panicked")??;
    b.copy_async(&dst, &mid)?;
    b.synchronize_timeout(STEP)?;
    a.synchronize_timeout(STEP)?;
    same_bytes(
        &dst.to_vec()?,
        &data,
        "host -> device -> host on leased streams",
    )?;
    drop(a);
    ensure(
        pool.try_lease().is_some(),
        "a returned lease is not leased again",
    )?;
    Ok(Outcome::Pass)
}
