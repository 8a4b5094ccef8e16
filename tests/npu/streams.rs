//! Streams, events and stream-ordered values, and batched host-device copies.

use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::{
    BatchCopy, DeviceBuffer, Event, Feature, HostBuffer, PinnedWords, Stream, ValueWord, WaitCmp,
};

use crate::ctx::{ensure, pattern, Ctx};
use crate::harness::Outcome;
use crate::need;

const LEN: usize = 1 << 20;

/// Async copies host → device → device → host on one stream, an event recorded after them
/// that a second stream waits for, then that stream's copy; every byte checked.
pub fn streams_and_events(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::Vmm));
    let dev = ctx.dev()?;
    let (h, back) = (HostBuffer::new(&dev, LEN)?, HostBuffer::new(&dev, LEN)?);
    let (d1, d2) = (DeviceBuffer::new(&dev, LEN)?, DeviceBuffer::new(&dev, LEN)?);
    let data = pattern(5, h.len());
    h.write_from(&data, 0)?;
    back.fill(0)?;
    let (mut s1, mut s2) = (Stream::new(&dev)?, Stream::new(&dev)?);
    let (start, done) = (Event::new(&dev)?, Event::new(&dev)?);
    start.record(&mut s1)?;
    s1.copy_async(&d1, &h)?;
    s1.copy_async(&d2, &d1)?;
    done.record(&mut s1)?;
    s2.wait_event(&done)?;
    s2.copy_async(&back, &d2)?;
    s2.synchronize()?;
    done.synchronize()?;
    s1.synchronize()?;
    ensure(
        back.to_vec()? == data,
        "the bytes after three copies on two streams",
    )?;
    let ms = done.elapsed_since(&start)?;
    ensure(ms >= 0.0, format!("elapsed time {ms} ms"))?;
    Ok(None)
}

/// A value written by a stream into device memory, a second stream waiting for it, and a
/// value written into pinned host memory read by the host after a synchronize.
pub fn stream_values(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::StreamValues));
    let dev = ctx.dev()?;
    let buf = DeviceBuffer::new(&dev, 4096)?;
    buf.fill(0)?;
    let word = ValueWord::at(buf.mapping(), 0)?;
    let (mut writer, mut waiter) = (Stream::new(&dev)?, Stream::new(&dev)?);
    let flag = ValueWord::at(buf.mapping(), 8)?;
    waiter.value_wait(&word, WaitCmp::Geq, 7)?;
    waiter.value_write(&flag, 99)?;
    writer.value_write(&word, 7)?;
    writer.synchronize()?;
    waiter.synchronize()?;
    ensure(
        word.load()? == 7 && flag.load()? == 99,
        "the values after the wait",
    )?;
    need!(ctx, Need::Mem(Feature::HostValueWrite));
    let pinned = PinnedWords::new(&dev, 2)?;
    writer.value_write_pinned(&pinned, 1, 0xfeed)?;
    writer.synchronize()?;
    ensure(pinned.load(1)? == 0xfeed, "the value in pinned host memory")?;
    Ok(None)
}

/// One batch host to device, one device to host, each copy's bytes checked.
pub fn batch_copies(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::BatchCopy));
    let dev = ctx.dev()?;
    let (h, back) = (
        HostBuffer::new(&dev, 4 * LEN)?,
        HostBuffer::new(&dev, 4 * LEN)?,
    );
    let d = DeviceBuffer::new(&dev, 4 * LEN)?;
    let data = pattern(9, 4 * LEN);
    h.write_from(&data, 0)?;
    back.fill(0)?;
    let mut s = Stream::new(&dev)?;
    let up: Vec<BatchCopy<'_>> = (0..4)
        .map(|i| {
            Ok(BatchCopy::new(
                d.slice(i * LEN..(i + 1) * LEN)?,
                h.slice(i * LEN..(i + 1) * LEN)?,
            ))
        })
        .collect::<ascend::Result<_>>()?;
    s.copy_batch_async(&up)?;
    let down: Vec<BatchCopy<'_>> = (0..4)
        .map(|i| {
            Ok(BatchCopy::new(
                back.slice(i * LEN..(i + 1) * LEN)?,
                d.slice(i * LEN..(i + 1) * LEN)?,
            ))
        })
        .collect::<ascend::Result<_>>()?;
    s.copy_batch_async(&down)?;
    s.synchronize()?;
    ensure(
        back.to_vec()?[..4 * LEN] == data[..],
        "the bytes after two batches",
    )?;
    Ok(None)
}
