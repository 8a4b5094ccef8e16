//! `ascend`: the facade over the ascend-mem crate family.
//!
//! Re-exports the safe layer ([`mem`], also glob-exported at the root, with its [`prelude`]:
//! `use ascend::prelude::*;` brings the copy verbs of [`MemView`] into scope), the transfer
//! engine ([`fabric`]), the HixlCS wrapper ([`cs`]), the raw ACL bindings ([`acl_sys`]) and the
//! emulator ([`sim`]), and owns the workspace's examples and its cross-crate test. Library users
//! normally depend on `ascend-mem`, `ascend-fabric` and `ascend-cs` directly.
//! [`build_info()`] tells which CANN toolkit, if any, the crate was built against.
//!
//! | crate | what it is |
//! |---|---|
//! | `acl-sys` | raw ACL runtime bindings and the lazy loader table |
//! | `ascend-mem` | safe types: `Runtime`, `Device`, `ReservedVa`, `PhysicalMem`, `Mapping`, `FabricHandle`, buffers, streams, and HCCL communicators, collectives and symmetric windows (`hccl`) |
//! | `hccl-sys` | raw HCCL bindings (communicators, collectives, symmetric windows) |
//! | `hixl-sys` | raw HixlCS bindings (HIXL's C client/server API) |
//! | `ascend-cs` | the safe HixlCS wrapper (HIXL's client/server one-sided C API): servers, clients, tagged registrations, batch put/get |
//! | `ascend-fabric` | the transfer engine (HIXL FabricMem, wire-compatible), the engine directory |
//! | `ascend-sim` | the host emulator implementing the same C symbols (ACL, HCCL, HixlCS) |
//! | `ascend-launch` | `ascend-run`: starts N ranks as processes with the rendezvous variables set |
//! | `ascend-bench` | benchmarks printing ratios against memcpy and UCX, and the soak test |
//! | `ascend-build` | build-script support: CANN discovery and binding regeneration |
//! | `ascend-testkit` | test helpers shared by the crates' tests (not published) |

mod build_info;
pub mod report;

pub use build_info::{build_info, BuildInfo, OLDEST_SUPPORTED_CANN};

pub use acl_sys;
pub use ascend_cs as cs;
pub use ascend_fabric as fabric;
pub use ascend_mem as mem;
pub use ascend_mem::*;
pub use ascend_sim as sim;
