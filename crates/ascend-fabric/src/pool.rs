//! The engine's VA pool: one reservation made up front, sub-allocated first-fit in whole,
//! 1 GiB-aligned slots (as HIXL's `VirtualMemoryManager`). Imported segments and device
//! aliases of foreign memory are mapped into slots.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ascend_mem::{Addr, Device, Mapping, PhysicalMem, ReservedVa};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Slot size and alignment.
pub const SLOT: usize = 1 << 30;

pub(crate) struct VaPool {
    va: ReservedVa,
    /// One bit per slot, set = used.
    bits: Mutex<Vec<u64>>,
    slots: usize,
    /// Slots kept out of service because unmapping what was mapped in them failed.
    quarantined: AtomicUsize,
}

impl std::fmt::Debug for VaPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VaPool")
            .field("base", &self.va.as_raw())
            .field("slots", &self.slots)
            .field("used", &self.used_slots())
            .finish()
    }
}

/// A run of slots; returned to the pool on drop unless quarantined.
pub(crate) struct VaSlot {
    pool: Arc<VaPool>,
    first: usize,
    n: usize,
    quarantined: bool,
}

impl Drop for VaSlot {
    fn drop(&mut self) {
        if self.quarantined {
            // Something may still be mapped here: the slots stay marked used, for good.
            self.pool.quarantined.fetch_add(self.n, Ordering::Relaxed);
            return;
        }
        let mut bits = self.pool.bits.lock();
        for i in self.first..self.first + self.n {
            bits[i / 64] &= !(1u64 << (i % 64));
        }
    }
}

/// A mapping in a pool slot. Dropping it unmaps (retrying once), then returns the slot to
/// the pool; if the unmap fails twice, the slot is quarantined instead (never handed out again while the range may
/// still be mapped) and counted in [`VaPool::quarantined`].
pub(crate) struct SlotMapping {
    map: Option<Mapping>,
    slot: VaSlot,
}

impl SlotMapping {
    /// The mapping (present until drop).
    pub(crate) fn mapping(&self) -> &Mapping {
        self.map
            .as_ref()
            .expect("a SlotMapping holds its mapping until dropped")
    }
}

impl Drop for SlotMapping {
    fn drop(&mut self) {
        let Some(map) = self.map.take() else {
            return;
        };
        let Err(first) = map.unmap() else {
            return;
        };
        let (e, map) = first.into_parts();
        tracing::warn!(slot = self.slot.first, error = %e, "VA pool: unmapping failed; retrying once");
        if let Err(again) = map.unmap() {
            let (e, map) = again.into_parts();
            tracing::error!(
                slot = self.slot.first,
                slots = self.slot.n,
                error = %e,
                "VA pool: unmapping a slot failed twice; the slot is quarantined"
            );
            self.slot.quarantined = true;
            // Its own drop tries once more and, failing again, leaks the memory and the
            // reservation rather than free them under a live mapping.
            drop(map);
        }
    }
}

impl VaPool {
    /// Reserves `capacity` bytes (rounded down to whole slots, at least one). As HIXL's pool:
    /// at `start` without the unified-cache path where the product has that
    /// (`aclrtReserveMemAddressNoUCMemory`, A3), else anywhere. The pool is per engine here
    /// (per process in HIXL), so when `start` is taken (another engine of this process has
    /// it) or refused, the pool is reserved anywhere too, with a log line saying why.
    pub(crate) fn new(dev: &Device, capacity: usize, start: Addr) -> Result<Arc<VaPool>> {
        let slots = (capacity / SLOT).max(1);
        // Whole slots of a capacity that is a usize: no overflow.
        let len = dev.granular(slots * SLOT)?;
        let fixed = match start {
            at if !at.is_null() => match ReservedVa::new_no_uc(dev, len, at) {
                Ok(va) => Some(va),
                Err(e) => {
                    if e.kind() == ascend_mem::ErrorKind::NotSupported {
                        tracing::debug!("VA pool: no fixed-address reservation on this product");
                    } else {
                        tracing::info!(start = start.get(), error = %e, "VA pool: start address not available; reserving anywhere");
                    }
                    None
                }
            },
            _ => None,
        };
        let va = match fixed {
            Some(va) => va,
            None => ReservedVa::new(dev, len)?,
        };
        Ok(Arc::new(VaPool {
            va,
            bits: Mutex::new(vec![0; slots.div_ceil(64)]),
            slots,
            quarantined: AtomicUsize::new(0),
        }))
    }

    pub(crate) fn used_slots(&self) -> usize {
        self.bits
            .lock()
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// Slots out of service because an unmap in them failed (counted in
    /// [`VaPool::used_slots`] too).
    pub(crate) fn quarantined(&self) -> usize {
        self.quarantined.load(Ordering::Relaxed)
    }

    pub(crate) fn capacity_slots(&self) -> usize {
        self.slots
    }

    /// First fit: `len` bytes rounded up to whole slots.
    fn alloc(self: &Arc<Self>, len: usize) -> Result<VaSlot> {
        let n = len.div_ceil(SLOT).max(1);
        let mut bits = self.bits.lock();
        let used = |b: &Vec<u64>, i: usize| b[i / 64] & (1u64 << (i % 64)) != 0;
        let mut run = 0;
        for i in 0..self.slots {
            if used(&bits, i) {
                run = 0;
                continue;
            }
            run += 1;
            if run == n {
                let first = i + 1 - n;
                for j in first..=i {
                    bits[j / 64] |= 1u64 << (j % 64);
                }
                return Ok(VaSlot {
                    pool: self.clone(),
                    first,
                    n,
                    quarantined: false,
                });
            }
        }
        Err(Error::ResourceExhausted {
            what: "VA pool",
            detail: format!(
                "no run of {n} free 1 GiB slot(s) among {} ({} used)",
                self.slots,
                bits.iter().map(|w| w.count_ones()).sum::<u32>()
            ),
        })
    }

    /// Maps all of `mem` at a fresh slot.
    pub(crate) fn map(self: &Arc<Self>, dev: &Device, mem: &PhysicalMem) -> Result<SlotMapping> {
        let slot = self.alloc(mem.len())?;
        let at = dev.granular(slot.first * SLOT)?;
        let map = self.va.map(mem, at)?;
        Ok(SlotMapping {
            map: Some(map),
            slot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_reuses_freed_slots() {
        let rt = ascend_mem::Runtime::emulated().unwrap();
        let dev = rt.device(0).unwrap();
        let pool = VaPool::new(&dev, 8 * SLOT, Addr::NULL).unwrap();
        let a = pool.alloc(1).unwrap();
        let b = pool.alloc(SLOT + 1).unwrap();
        assert_eq!((a.first, b.first, b.n), (0, 1, 2));
        drop(a);
        let c = pool.alloc(SLOT).unwrap();
        assert_eq!(c.first, 0);
        let d = pool.alloc(5 * SLOT).unwrap();
        assert_eq!(d.first, 3);
        assert!(matches!(
            pool.alloc(1),
            Err(Error::ResourceExhausted { .. })
        ));
        drop((b, c, d));
        assert_eq!(pool.used_slots(), 0);
    }
}
