//! VMM: reserve, allocate, map, copy; the three dropped in every order; explicit teardown
//! and its refusals; host DRAM mapped for the device.

use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::{DeviceBuffer, Error, Feature, HostBuffer, MemSpec, PhysicalMem, ReservedVa, Stream};
use ascend_testkit::pattern;

use crate::ctx::{ensure, same_bytes, Ctx, Res, STEP};
use crate::harness::Outcome;
use crate::skip_if;

/// Two HBM allocations mapped with a hole between them in one reservation: written from the
/// host, copied device to device (synchronously and on a stream), read back. Mapping over a
/// taken range and past the end are refused before the runtime is called.
pub fn map_copy_read(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Vmm)));
    let dev = ctx.device()?;
    let len = dev.round_up(3 << 20)?;
    let va = ReservedVa::new(&dev, len.checked_mul(3).ok_or("size")?)?;
    let (a, b) = (PhysicalMem::hbm(&dev, len)?, PhysicalMem::hbm(&dev, len)?);
    let ma = va.map(&a, len.zero())?;
    let mb = va.map(&b, len.checked_mul(2).ok_or("size")?)?;
    ensure(
        mb.as_raw() as usize - ma.as_raw() as usize == 2 * len.get(),
        "the second mapping is not two lengths after the first",
    )?;
    let data = pattern(1, len.get());
    ma.write_from(&data, 0)?;
    mb.copy_from(&ma)?;
    same_bytes(
        &mb.to_vec()?,
        &data,
        "after the synchronous device-to-device copy",
    )?;
    mb.fill(0)?;
    let mut s = Stream::new(&dev)?;
    s.copy_async(&mb, &ma)?;
    s.synchronize_timeout(STEP)?;
    same_bytes(&mb.to_vec()?, &data, "after the copy on a stream")?;

    let c = PhysicalMem::hbm(&dev, len)?;
    match va.map(&c, len.zero()) {
        Err(Error::Overlap { .. }) => {}
        other => return Err(format!("a map over a mapped range gave {other:?}").into()),
    }
    match va.map(&c, len.checked_mul(3).ok_or("size")?) {
        Err(Error::OutOfBounds { .. }) => {}
        other => return Err(format!("a map past the reservation gave {other:?}").into()),
    }
    // The hole is still free.
    let mc = va.map(&c, len)?;
    mc.fill(7)?;
    ensure(
        mc.to_vec()?.iter().all(|&x| x == 7),
        "the mapping in the hole",
    )?;
    same_bytes(&ma.to_vec()?, &data, "the first mapping after the third")?;
    Ok(Outcome::Pass)
}

/// The reservation, the memory and the mapping dropped in each of the six orders. The
/// mapping holds the other two, so while it lives it still reads its bytes; no drop leaves
/// an error behind on the device.
pub fn drop_orders(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Vmm)));
    let dev = ctx.device()?;
    let len = dev.round_up(1)?;
    for (n, order) in ascend_testkit::orders::ORDERS_OF_THREE.iter().enumerate() {
        let va = ReservedVa::new(&dev, len)?;
        let mem = PhysicalMem::hbm(&dev, len)?;
        let map = va.map(&mem, len.zero())?;
        let data = pattern(n as u8, len.get());
        map.write_from(&data, 0)?;
        let (mut va, mut mem, mut map) = (Some(va), Some(mem), Some(map));
        for &which in order {
            match which {
                0 => drop(va.take()),
                1 => drop(mem.take()),
                _ => drop(map.take()),
            }
            if let Some(m) = &map {
                same_bytes(
                    &m.to_vec()?,
                    &data,
                    &format!("order {order:?}: the mapping"),
                )?;
            }
        }
        dev.check_sticky()?;
    }
    Ok(Outcome::Pass)
}

/// Teardown by hand: a reservation or memory still mapped refuses to close and is handed
/// back; once unmapped both close.
pub fn explicit_close(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Vmm)));
    let dev = ctx.device()?;
    let len = dev.round_up(1)?;
    let va = ReservedVa::new(&dev, len)?;
    let mem = PhysicalMem::hbm(&dev, len)?;
    let map = va.map(&mem, len.zero())?;
    let va = match va.close() {
        Err(e) if matches!(e.error(), Error::Busy { .. }) => e.into_inner(),
        other => return Err(format!("closing a mapped reservation gave {other:?}").into()),
    };
    let mem = match mem.close() {
        Err(e) if matches!(e.error(), Error::Busy { .. }) => e.into_inner(),
        other => return Err(format!("closing mapped memory gave {other:?}").into()),
    };
    map.fill(3)?;
    ensure(
        map.to_vec()?.iter().all(|&x| x == 3),
        "the mapping after the refusals",
    )?;
    map.unmap()?;
    mem.close()?;
    va.close()?;
    dev.check_sticky()?;
    Ok(Outcome::Pass)
}

/// Host DRAM as physical memory mapped into a reservation, and a host buffer: copies between
/// them and HBM both ways.
pub fn host_memory(ctx: &Ctx) -> Res<Outcome> {
    skip_if!(ctx.lacks(Need::Mem(Feature::Vmm)));
    let dev = ctx.device()?;
    let len = dev.round_up_for(MemSpec::HOST, 2 << 20)?;
    let va = ReservedVa::new(&dev, len)?;
    let host = va.map(&PhysicalMem::host(&dev, len, None)?, len.zero())?;
    ensure(
        host.is_host(),
        "a mapping of host memory says it is not host memory",
    )?;
    let n = len.get();
    let (host_buf, dev_buf) = (HostBuffer::new(&dev, n)?, DeviceBuffer::new(&dev, n)?);
    let (buf, hbm) = (host_buf.slice(..n)?, dev_buf.slice(..n)?);
    let data = pattern(2, n);
    host.write_from(&data, 0)?;
    hbm.copy_from(&host)?;
    buf.copy_from(&hbm)?;
    same_bytes(&buf.to_vec()?, &data, "host mapping -> HBM -> host buffer")?;
    host.fill(0)?;
    let mut s = Stream::new(&dev)?;
    s.copy_async(&host, &hbm)?;
    s.synchronize_timeout(STEP)?;
    same_bytes(&host.to_vec()?, &data, "HBM -> host mapping on a stream")?;
    Ok(Outcome::Pass)
}
