//! Devices: thread binding, the granularity cache, the sticky error, and `Granular` sizes.

use std::any::Any;
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};

use acl::AclLib;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::ffi;
use crate::runtime::Runtime;
use crate::spec::MemSpec;

thread_local! {
    /// (table address, device id) last bound on this thread by this crate: a hint only, checked
    /// with `aclrtGetDevice` before it is trusted (user code may change the device through the
    /// raw table).
    static BOUND: Cell<(usize, i32)> = const { Cell::new((0, -1)) };
}

pub(crate) struct DeviceCtx {
    rt: Runtime,
    id: i32,
    /// RECOMMENDED granularity per memory kind, asked once each.
    gran: Mutex<HashMap<MemSpec, usize>>,
    /// The first error a Drop on this device could not return; handed to the next fallible call.
    sticky: Mutex<Option<Error>>,
}

/// `aclrtMemGetAllocationGranularity` for a property struct.
///
/// # Errors
/// As [`ffi::phys::granularity`].
#[allow(unsafe_code)]
pub(crate) fn granularity(
    lib: &AclLib,
    prop: &acl::aclrtPhysicalMemProp,
    option: acl::aclrtMemGranularityOptions,
) -> Result<usize> {
    // SAFETY: plain values: the property struct is only read, the result is an out-value.
    unsafe { ffi::phys::granularity(lib, prop, option) }
}

/// One device of a [`Runtime`]: cheap to clone (an `Arc`), `Send` and `Sync`.
///
/// ACL binds the current device to the calling thread; every operation of this crate binds
/// its device first ([`Device::bind`]: `aclrtSetDevice`, skipped when `aclrtGetDevice` says it
/// is already current), Drop included, so handles can move between threads freely.
///
/// A Drop that fails cannot return its error: it logs it with `tracing::error!` and records it
/// here, and the next fallible call on this device returns it as [`Error::Sticky`].
#[derive(Clone)]
pub struct Device {
    ctx: Arc<DeviceCtx>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("id", &self.ctx.id)
            .field("backend", self.ctx.rt.backend())
            .finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.ctx, &other.ctx)
    }
}
impl Eq for Device {}

impl Device {
    pub(crate) fn open(rt: Runtime, id: i32) -> Result<Device> {
        let dev = Device {
            ctx: Arc::new(DeviceCtx {
                rt,
                id,
                gran: Mutex::new(HashMap::new()),
                sticky: Mutex::new(None),
            }),
        };
        dev.force_bind()?;
        Ok(dev)
    }

    /// The device id.
    pub fn id(&self) -> i32 {
        self.ctx.id
    }

    /// The runtime this device belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.ctx.rt
    }

    pub(crate) fn lib(&self) -> &'static AclLib {
        self.ctx.rt.inner.lib
    }

    fn force_bind(&self) -> Result<()> {
        let lib = self.lib();
        ffi::device::set(lib, self.ctx.id)?;
        // `try_with`: a Drop may run while this thread's locals are being destroyed.
        let _ = BOUND.try_with(|b| b.set((lib as *const AclLib as usize, self.ctx.id)));
        Ok(())
    }

    /// Makes this device current on the calling thread (`aclrtSetDevice`), unless it already is.
    ///
    /// "Already is" is not taken from a cache alone: when this crate bound the device on this
    /// thread before, `aclrtGetDevice` confirms it is still current, so a raw `aclrtSetDevice`,
    /// `aclrtSetCurrentContext` or `aclrtResetDevice` made through [`Runtime::acl`] in
    /// between cannot make a later call (a V2 import, a stream or event creation) land on
    /// another device. A failing `aclrtGetDevice` (no current context, or an old runtime
    /// lacking it) just means "not current": the device is set again.
    ///
    /// # Errors
    /// An `aclrtSetDevice` failure.
    #[doc(alias = "aclrtSetDevice")]
    #[doc(alias = "aclrtGetDevice")]
    pub fn bind(&self) -> Result<()> {
        let lib = self.lib();
        let key = (lib as *const AclLib as usize, self.ctx.id);
        if BOUND.try_with(|b| b.get()).ok() == Some(key) {
            match ffi::device::current(lib) {
                Ok(id) if id == self.ctx.id => return Ok(()),
                Ok(other) => {
                    tracing::debug!(
                        expected = self.ctx.id,
                        current = other,
                        "current device changed behind ascend-mem; binding again"
                    );
                }
                Err(e) => {
                    tracing::debug!(error = %e, "aclrtGetDevice failed; binding again");
                }
            }
        }
        self.force_bind()
    }

    /// Returns (and clears) the error a failed Drop recorded, then binds the device: the
    /// prologue of every fallible call.
    pub(crate) fn enter(&self) -> Result<()> {
        if let Some(e) = self.ctx.sticky.lock().take() {
            return Err(Error::Sticky {
                device: self.ctx.id,
                source: Box::new(e),
            });
        }
        self.bind()
    }

    /// Records an error from a Drop (the first one wins until it is returned).
    pub(crate) fn record_sticky(&self, e: Error) {
        let mut s = self.ctx.sticky.lock();
        if s.is_none() {
            *s = Some(e);
        }
    }

    /// Returns (and clears) an error recorded by a failed Drop on this device.
    ///
    /// # Errors
    /// [`Error::Sticky`] with the recorded error.
    pub fn check_sticky(&self) -> Result<()> {
        match self.ctx.sticky.lock().take() {
            Some(e) => Err(Error::Sticky {
                device: self.ctx.id,
                source: Box::new(e),
            }),
            None => Ok(()),
        }
    }

    /// The RECOMMENDED allocation granularity for `spec` on this device, asked once and cached.
    ///
    /// # Errors
    /// An `aclrtMemGetAllocationGranularity` failure; [`Error::InvalidArgument`] if the runtime
    /// reports a granule that is zero or not a power of two.
    #[doc(alias = "aclrtMemGetAllocationGranularity")]
    pub fn granularity(&self, spec: MemSpec) -> Result<usize> {
        if let Some(g) = self.ctx.gran.lock().get(&spec) {
            return Ok(*g);
        }
        self.enter()?;
        let prop = spec.to_prop(self.ctx.id);
        let g = granularity(
            self.lib(),
            &prop,
            acl::ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )?;
        if g == 0 || !g.is_power_of_two() {
            return Err(Error::InvalidArgument {
                api: "aclrtMemGetAllocationGranularity",
                what: "granularity returned",
                value: g as i128,
            });
        }
        self.ctx.gran.lock().insert(spec, g);
        Ok(g)
    }

    /// `bytes` as a [`Granular`] size for device HBM ([`MemSpec::DEVICE_HBM`]).
    ///
    /// # Errors
    /// [`Error::Misaligned`] naming the value and the granule; a granularity query failure.
    pub fn granular(&self, bytes: usize) -> Result<Granular> {
        self.granular_for(MemSpec::DEVICE_HBM, bytes)
    }

    /// `bytes` as a [`Granular`] size for memory of kind `spec`.
    ///
    /// # Errors
    /// [`Error::Misaligned`] naming the value and the granule; a granularity query failure.
    pub fn granular_for(&self, spec: MemSpec, bytes: usize) -> Result<Granular> {
        let granule = self.granularity(spec)?;
        if bytes % granule != 0 {
            return Err(Error::Misaligned {
                what: "size",
                value: bytes,
                granule,
            });
        }
        Ok(Granular { bytes, granule })
    }

    /// `bytes` rounded up to whole granules of device HBM.
    ///
    /// # Errors
    /// A granularity query failure; [`Error::InvalidArgument`] if rounding overflows.
    pub fn round_up(&self, bytes: usize) -> Result<Granular> {
        self.round_up_for(MemSpec::DEVICE_HBM, bytes)
    }

    /// `bytes` rounded up to whole granules of memory kind `spec`.
    ///
    /// # Errors
    /// A granularity query failure; [`Error::InvalidArgument`] if rounding overflows.
    pub fn round_up_for(&self, spec: MemSpec, bytes: usize) -> Result<Granular> {
        let granule = self.granularity(spec)?;
        let rounded = bytes
            .checked_add(granule - 1)
            .map(|b| b & !(granule - 1))
            .ok_or(Error::InvalidArgument {
                api: "round_up",
                what: "size",
                value: bytes as i128,
            })?;
        Ok(Granular {
            bytes: rounded,
            granule,
        })
    }

    /// The pid other processes' allow-lists should name for this process
    /// (`aclrtDeviceGetBareTgid`: the host pid, also inside a container).
    ///
    /// # Errors
    /// An `aclrtDeviceGetBareTgid` failure.
    #[doc(alias = "aclrtDeviceGetBareTgid")]
    pub fn bare_pid(&self) -> Result<i32> {
        self.enter()?;
        ffi::device::bare_tgid(self.lib())
    }
}

impl Runtime {
    /// A handle on device `id`, binding it to the calling thread once to check it exists.
    /// Every `Device` for the same id of one runtime shares its state (granularity cache,
    /// sticky error).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a negative id; an `aclrtSetDevice` failure
    /// (`ACL_ERROR_RT_INVALID_DEVICEID`, …) for an id the runtime does not have.
    #[doc(alias = "aclrtSetDevice")]
    pub fn device(&self, id: i32) -> Result<Device> {
        if id < 0 {
            return Err(Error::InvalidArgument {
                api: "aclrtSetDevice",
                what: "device id",
                value: id.into(),
            });
        }
        let mut devs = self.inner.devices.lock();
        let known = devs.get(&id).and_then(Weak::upgrade);
        if let Some(ctx) = known.and_then(|any| any.downcast::<DeviceCtx>().ok()) {
            return Ok(Device { ctx });
        }
        let dev = Device::open(self.clone(), id)?;
        let ctx: Arc<dyn Any + Send + Sync> = dev.ctx.clone();
        devs.insert(id, Arc::downgrade(&ctx));
        Ok(dev)
    }
}

/// Same runtime and device id (two `Runtime` values over one table share the device).
pub(crate) fn same_device(a: &Device, b: &Device) -> bool {
    std::ptr::eq(a.lib(), b.lib()) && a.id() == b.id()
}

/// A size or offset that is a whole number of allocation granules.
///
/// Made only through a [`Device`] ([`Device::granular`], [`Device::round_up`], …), which asked
/// `aclrtMemGetAllocationGranularity` once; never from a bare `usize`:
///
/// ```compile_fail
/// let g = ascend_mem::Granular { bytes: 2 << 20, granule: 2 << 20 }; // fields are private
/// ```
/// ```compile_fail
/// let g: ascend_mem::Granular = (2usize << 20).into(); // no conversion from usize
/// ```
///
/// Arithmetic is checked and keeps the invariant.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Granular {
    // Invariant: `bytes % granule == 0` and `granule` is a power of two reported by a device.
    bytes: usize,
    granule: usize,
}

impl Granular {
    /// The size in bytes.
    pub fn get(self) -> usize {
        self.bytes
    }

    /// The granule this size is a multiple of.
    pub fn granule(self) -> usize {
        self.granule
    }

    /// Whether the size is zero.
    pub fn is_zero(self) -> bool {
        self.bytes == 0
    }

    /// A zero offset with the same granule.
    pub fn zero(self) -> Granular {
        Granular {
            bytes: 0,
            granule: self.granule,
        }
    }

    /// `self + other`, `None` on overflow. The result is a multiple of the finer granule.
    pub fn checked_add(self, other: Granular) -> Option<Granular> {
        Some(Granular {
            bytes: self.bytes.checked_add(other.bytes)?,
            granule: self.granule.min(other.granule),
        })
    }

    /// `self - other`, `None` on underflow.
    pub fn checked_sub(self, other: Granular) -> Option<Granular> {
        Some(Granular {
            bytes: self.bytes.checked_sub(other.bytes)?,
            granule: self.granule.min(other.granule),
        })
    }

    /// `self * n`, `None` on overflow.
    pub fn checked_mul(self, n: usize) -> Option<Granular> {
        Some(Granular {
            bytes: self.bytes.checked_mul(n)?,
            granule: self.granule,
        })
    }

    /// Whether this is also a multiple of `granule` (a power of two).
    pub(crate) fn is_multiple_of(self, granule: usize) -> bool {
        granule != 0 && self.bytes % granule == 0
    }
}

impl fmt::Display for Granular {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.bytes)
    }
}

impl From<Granular> for usize {
    fn from(g: Granular) -> usize {
        g.bytes
    }
}

#[cfg(all(test, feature = "emulator"))]
mod tests {
    use super::*;

    #[test]
    fn granular_arithmetic_keeps_the_invariant() {
        let rt = Runtime::emulated().unwrap();
        let dev = rt.device(0).unwrap();
        let g = dev.granular(2 << 20).unwrap();
        assert_eq!(g.get(), 2 << 20);
        assert_eq!(g.granule(), 2 << 20);
        let four = g.checked_add(g).unwrap();
        assert_eq!(four.get(), 4 << 20);
        assert_eq!(four.checked_sub(g).unwrap(), g);
        assert!(g.checked_sub(four).is_none());
        assert!(g.checked_mul(usize::MAX).is_none());
        assert!(g.zero().is_zero());
        assert_eq!(dev.round_up(1).unwrap().get(), 2 << 20);
        assert_eq!(dev.round_up(0).unwrap().get(), 0);
        assert!(dev.round_up(usize::MAX).is_err());
        let e = dev.granular(3 << 19).unwrap_err();
        assert!(
            matches!(e, Error::Misaligned { value, granule, .. } if value == 3 << 19 && granule == 2 << 20)
        );
        assert!(e.to_string().contains("0x180000"), "{e}");
    }

    #[test]
    fn one_context_per_device_id() {
        let rt = Runtime::emulated().unwrap();
        let a = rt.device(2).unwrap();
        let b = rt.device(2).unwrap();
        assert_eq!(a, b);
        a.record_sticky(Error::AlreadyExported);
        assert!(matches!(
            b.check_sticky(),
            Err(Error::Sticky { device: 2, .. })
        ));
        assert!(b.check_sticky().is_ok());
    }
}
