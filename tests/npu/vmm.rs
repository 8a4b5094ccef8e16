//! VMM: reserve, allocate, map, copy, and every drop order of the three.

use ascend::fabric::Need;
use ascend::prelude::*;
use ascend::{Feature, PhysicalMem, ReservedVa};

use crate::ctx::{ensure, pattern, Ctx};
use crate::harness::Outcome;
use crate::need;

/// A mapping written from the host, copied device to device, read back.
pub fn roundtrip(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::Vmm));
    let dev = ctx.dev()?;
    let len = dev.round_up(4 << 20)?;
    let va = ReservedVa::new(&dev, len.checked_mul(2).ok_or("size")?)?;
    let a = PhysicalMem::hbm(&dev, len)?;
    let b = PhysicalMem::hbm(&dev, len)?;
    let ma = va.map(&a, len.zero())?;
    let mb = va.map(&b, len)?;
    let data = pattern(7, len.get());
    ma.write_from(&data, 0)?;
    mb.copy_from(&ma)?;
    ensure(mb.to_vec()? == data, "the device-to-device copy differs")?;
    Ok(None)
}

/// The reservation, the memory and the mapping dropped in each of the six orders: the
/// runtime always sees unmap, free, release.
pub fn drop_orders(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::Vmm));
    let dev = ctx.dev()?;
    let len = dev.round_up(1)?;
    for order in 0..6 {
        let va = ReservedVa::new(&dev, len)?;
        let mem = PhysicalMem::hbm(&dev, len)?;
        let map = va.map(&mem, len.zero())?;
        map.fill(order as u8)?;
        ensure(map.to_vec()?.iter().all(|&b| b == order as u8), "fill")?;
        let (mut va, mut mem, mut map) = (Some(va), Some(mem), Some(map));
        let steps: [u8; 3] = match order {
            0 => [0, 1, 2],
            1 => [0, 2, 1],
            2 => [1, 0, 2],
            3 => [1, 2, 0],
            4 => [2, 0, 1],
            _ => [2, 1, 0],
        };
        for s in steps {
            match s {
                0 => drop(va.take()),
                1 => drop(mem.take()),
                _ => drop(map.take()),
            }
        }
    }
    // The device still works after all of it.
    let again = ascend::DeviceBuffer::new(&dev, 4096)?;
    again.fill(1)?;
    ensure(
        again.to_vec()?.iter().all(|&b| b == 1),
        "a buffer after the drops",
    )?;
    Ok(None)
}

/// Host DRAM mapped for the device, copied to and from HBM.
pub fn host_memory(ctx: &Ctx) -> Outcome {
    need!(ctx, Need::Mem(Feature::Vmm));
    let dev = ctx.dev()?;
    let h = ascend::HostBuffer::new(&dev, 1 << 20)?;
    let d = ascend::DeviceBuffer::new(&dev, 1 << 20)?;
    let data = pattern(3, h.len());
    h.write_from(&data, 0)?;
    d.copy_from(&h)?;
    h.fill(0)?;
    h.copy_from(&d)?;
    ensure(h.to_vec()? == data, "host to device and back")?;
    Ok(None)
}
