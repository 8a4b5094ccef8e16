//! Batched copies: `aclrtMemcpyBatchAsync` batches host to device and back, and copies
//! between the entries of mapping tables; the batches a runtime documents as invalid are
//! refused naming the copy, before anything is queued.

use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::{
    BatchCopy, DeviceBuffer, Error, Feature, HostBuffer, MappingSlice, MappingTable, Stream,
    TableCopy,
};
use ascend_testkit::pattern;

use crate::ctx::{ensure, same_bytes, Ctx, Res, STEP};
use crate::harness::Outcome;
use crate::skip_if;

const PIECE: usize = 256 << 10;
const PIECES: usize = 8;

/// Piece `i` of a view.
fn piece<'a>(m: &'a impl MemView, i: usize) -> Res<MappingSlice<'a>> {
    Ok(m.slice(i * PIECE..(i + 1) * PIECE)?)
}

/// Checks that `copies` is refused as a whole, naming copy `index`.
fn refused(s: &mut Stream, copies: &[BatchCopy<'_>], index: usize, what: &str) -> Res<()> {
    match s.copy_batch_async(copies) {
        Err(Error::BatchCopy { copy, .. }) if copy == index => Ok(()),
        other => Err(format!("{what}: {other:?}, expected a refusal of copy {index}").into()),
    }
}

/// Eight pieces host to device in one batch (reversed), back in another, each checked; a
/// device-to-device copy, a copy against the batch's direction and a copy longer than its
/// destination are refused.
pub fn host_device_batches(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::BatchCopy)));
    let dev = ctx.device()?;
    let n = PIECE * PIECES;
    let (src, back) = (HostBuffer::new(&dev, n)?, HostBuffer::new(&dev, n)?);
    let (hbm, other) = (DeviceBuffer::new(&dev, n)?, DeviceBuffer::new(&dev, n)?);
    let data = pattern(9, n);
    src.write_from(&data, 0)?;
    back.fill(0)?;
    let mut s = Stream::new(&dev)?;
    let up = (0..PIECES)
        .map(|i| {
            Ok(BatchCopy::new(
                piece(&hbm, PIECES - 1 - i)?,
                piece(&src, i)?,
            ))
        })
        .collect::<Res<Vec<_>>>()?;
    s.copy_batch_async(&up)?;
    let down = (0..PIECES)
        .map(|i| Ok(BatchCopy::new(piece(&back, i)?, piece(&hbm, i)?)))
        .collect::<Res<Vec<_>>>()?;
    s.copy_batch_async(&down)?;
    s.synchronize_timeout(STEP)?;
    let got = back.to_vec()?;
    for i in 0..PIECES {
        let j = PIECES - 1 - i;
        same_bytes(
            &got[j * PIECE..(j + 1) * PIECE],
            &data[i * PIECE..(i + 1) * PIECE],
            &format!("piece {i}"),
        )?;
    }
    let h2d = BatchCopy::new(piece(&hbm, 0)?, piece(&src, 0)?);
    let d2d = BatchCopy::new(piece(&other, 0)?, piece(&hbm, 0)?);
    let d2h = BatchCopy::new(piece(&back, 0)?, piece(&hbm, 0)?);
    refused(&mut s, &[h2d, d2d], 1, "a device-to-device copy in a batch")?;
    refused(&mut s, &[h2d, h2d, d2h], 2, "a batch in both directions")?;
    let long = BatchCopy::new(piece(&hbm, 0)?, src.slice(..2 * PIECE)?);
    refused(
        &mut s,
        &[h2d, long],
        1,
        "a copy longer than its destination",
    )?;
    s.synchronize_timeout(STEP)?;
    Ok(Outcome::Pass)
}

/// Copies between the entries of two tables (host pieces in one, device pieces in the
/// other): a run host to device, device to device within the table, device to host; each
/// checked. A copy naming an entry or range the table lacks is refused, nothing queued.
pub fn table_copies(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Vmm)));
    let dev = ctx.device()?;
    let n = PIECE * PIECES;
    let (host, hbm) = (HostBuffer::new(&dev, n)?, DeviceBuffer::new(&dev, n)?);
    let data = pattern(10, n);
    host.write_from(&data, 0)?;
    hbm.fill(0)?;
    let hosts = MappingTable::new(
        &dev,
        (0..PIECES)
            .map(|i| piece(&host, i))
            .collect::<Res<Vec<_>>>()?,
    )?;
    let devs = MappingTable::new(
        &dev,
        (0..PIECES)
            .map(|i| piece(&hbm, i))
            .collect::<Res<Vec<_>>>()?,
    )?;
    let copy = |dst, src, len| TableCopy {
        dst,
        dst_offset: 0,
        src,
        src_offset: 0,
        len,
    };
    let mut s = Stream::new(&dev)?;
    // Host pieces 0..4 into device pieces 0..4, then device piece 0 into device piece 7.
    let up: Vec<TableCopy> = (0..4).map(|i| copy(i, i, PIECE)).collect();
    s.copy_table_async(&devs, &hosts, &up)?;
    s.copy_table_async(&devs, &devs, &[copy(7, 0, PIECE)])?;
    s.synchronize_timeout(STEP)?;
    host.fill(0)?;
    s.copy_table_async(&hosts, &devs, &[copy(0, 7, PIECE), copy(1, 3, PIECE)])?;
    s.synchronize_timeout(STEP)?;
    let got = host.to_vec()?;
    same_bytes(
        &got[..PIECE],
        &data[..PIECE],
        "piece 0 via device pieces 0 and 7",
    )?;
    same_bytes(
        &got[PIECE..2 * PIECE],
        &data[3 * PIECE..4 * PIECE],
        "piece 3 into host piece 1",
    )?;
    match s.copy_table_async(&devs, &hosts, &[copy(0, 0, PIECE), copy(PIECES, 0, PIECE)]) {
        Err(Error::NoTableEntry { .. }) => {}
        other => return Err(format!("a copy to a missing entry: {other:?}").into()),
    }
    match s.copy_table_async(&devs, &hosts, &[copy(1, 1, PIECE + 1)]) {
        Err(Error::TableRange { .. }) => {}
        other => return Err(format!("a copy past its entry: {other:?}").into()),
    }
    s.synchronize_timeout(STEP)?;
    ensure(
        hosts.len() == PIECES && devs.is_host(0) == Some(false),
        "the tables' entries",
    )?;
    Ok(Outcome::Pass)
}
