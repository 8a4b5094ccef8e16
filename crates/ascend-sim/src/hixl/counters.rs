//! Live HIXL objects of the process.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

#[derive(Debug, Clone, Copy)]
pub(crate) enum XCtr {
    Servers = 0,
    Clients,
    ServerMems,
    ClientMems,
    RemoteMaps,
    Ops,
}

const NXCTR: usize = 6;
static XCOUNTERS: [AtomicI64; NXCTR] = [const { AtomicI64::new(0) }; NXCTR];

pub(crate) fn xinc(c: XCtr) {
    XCOUNTERS[c as usize].fetch_add(1, Relaxed);
}

pub(crate) fn xdec(c: XCtr) {
    XCOUNTERS[c as usize].fetch_sub(1, Relaxed);
}

/// Live HIXL objects of this process (see [`hixl_counters`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HixlCounters {
    /// Live servers (`HixlCSServerCreate` minus `HixlCSServerDestroy`).
    pub servers: u64,
    /// Live clients (`HixlCSClientCreate` minus `HixlCSClientDestroy`).
    pub clients: u64,
    /// Live server memory registrations (destroy unregisters the rest).
    pub server_mems: u64,
    /// Live client memory registrations (destroy unregisters the rest).
    pub client_mems: u64,
    /// Server memory blocks a client has imported and mapped (or reaches by pid).
    pub remote_maps: u64,
    /// Async operations not yet reported finished by a query (destroy drops finished ones).
    pub ops: u64,
}

impl HixlCounters {
    /// Whether every counter is zero (nothing leaked).
    pub fn is_zero(&self) -> bool {
        *self == HixlCounters::default()
    }
}

impl fmt::Display for HixlCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "servers {}, clients {}, server_mems {}, client_mems {}, remote_maps {}, ops {}",
            self.servers,
            self.clients,
            self.server_mems,
            self.client_mems,
            self.remote_maps,
            self.ops
        )
    }
}

/// The live HIXL objects of this process.
pub fn hixl_counters() -> HixlCounters {
    let v = |c: XCtr| XCOUNTERS[c as usize].load(Relaxed).max(0) as u64;
    HixlCounters {
        servers: v(XCtr::Servers),
        clients: v(XCtr::Clients),
        server_mems: v(XCtr::ServerMems),
        client_mems: v(XCtr::ClientMems),
        remote_maps: v(XCtr::RemoteMaps),
        ops: v(XCtr::Ops),
    }
}
