//! Live-object counters: what each export creates and destroys is counted here, and
//! [`Counters`] reports them (the public API and, `#[repr(C)]`, the C call
//! `ascendSimGetCounters`).

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// Indices into the live-object counters.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ctr {
    Reservations = 0,
    Physical,
    Imports,
    Mappings,
    Exports,
    Streams,
    Events,
    Contexts,
    DeviceMallocs,
    HostMallocs,
    Comms,
    Windows,
}

const NCTR: usize = 12;
static COUNTERS: [AtomicI64; NCTR] = [const { AtomicI64::new(0) }; NCTR];

pub(crate) fn inc(c: Ctr) {
    COUNTERS[c as usize].fetch_add(1, Relaxed);
}

pub(crate) fn dec(c: Ctr) {
    COUNTERS[c as usize].fetch_sub(1, Relaxed);
}

fn counter_values() -> [u64; NCTR] {
    let mut out = [0u64; NCTR];
    for (o, c) in out.iter_mut().zip(COUNTERS.iter()) {
        *o = c.load(Relaxed).max(0) as u64;
    }
    out
}

/// Live-object counters (see [`counters`]).
/// `#[repr(C)]`: the C call `ascendSimGetCounters` writes it as the struct
/// `AscendSimCounters` (same fields in the same order).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Live reservations.
    pub reservations: u64,
    /// Live handles from `aclrtMallocPhysical` and `aclrtMemRetainAllocationHandle`.
    pub physical: u64,
    /// Live handles from imports.
    pub imports: u64,
    /// Live mappings.
    pub mappings: u64,
    /// Live exported allocations.
    pub exports: u64,
    /// Live user streams.
    pub streams: u64,
    /// Live events.
    pub events: u64,
    /// Live explicit contexts.
    pub contexts: u64,
    /// Live `aclrtMalloc` blocks.
    pub device_mallocs: u64,
    /// Live `aclrtMallocHost` blocks.
    pub host_mallocs: u64,
    /// Live HCCL communicators (`HcclCommInitRootInfo*` minus `HcclCommDestroy`).
    pub comms: u64,
    /// Live symmetric windows (registered minus deregistered; destroy deregisters).
    pub windows: u64,
}

impl Counters {
    /// Whether every counter is zero (nothing leaked).
    pub fn is_zero(&self) -> bool {
        *self == Counters::default()
    }

    /// Every counter with its field's name, in field order.
    pub fn named(&self) -> [(&'static str, u64); NCTR] {
        [
            ("reservations", self.reservations),
            ("physical", self.physical),
            ("imports", self.imports),
            ("mappings", self.mappings),
            ("exports", self.exports),
            ("streams", self.streams),
            ("events", self.events),
            ("contexts", self.contexts),
            ("device_mallocs", self.device_mallocs),
            ("host_mallocs", self.host_mallocs),
            ("comms", self.comms),
            ("windows", self.windows),
        ]
    }

    fn from_array(a: [u64; NCTR]) -> Self {
        Counters {
            reservations: a[0],
            physical: a[1],
            imports: a[2],
            mappings: a[3],
            exports: a[4],
            streams: a[5],
            events: a[6],
            contexts: a[7],
            device_mallocs: a[8],
            host_mallocs: a[9],
            comms: a[10],
            windows: a[11],
        }
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reservations {}, physical {}, imports {}, mappings {}, exports {}, streams {}, \
             events {}, contexts {}, device_mallocs {}, host_mallocs {}, comms {}, windows {}",
            self.reservations,
            self.physical,
            self.imports,
            self.mappings,
            self.exports,
            self.streams,
            self.events,
            self.contexts,
            self.device_mallocs,
            self.host_mallocs,
            self.comms,
            self.windows
        )
    }
}

/// The live-object counters of this process.
pub fn counters() -> Counters {
    Counters::from_array(counter_values())
}
