//! `ascend`: the facade over the ascend-mem crate family.
//!
//! Re-exports the safe layer ([`mem`], also glob-exported at the root), the raw ACL bindings
//! ([`acl_sys`]) and the emulator ([`sim`]), and owns the workspace's examples and integration
//! tests. Library users normally depend on `ascend-mem` directly.
//!
//! | crate | what it is |
//! |---|---|
//! | `acl-sys` | raw ACL runtime bindings and the lazy loader table |
//! | `ascend-mem` | safe types: `Runtime`, `Device`, `ReservedVa`, `PhysicalMem`, `Mapping`, `FabricHandle`, buffers, streams |
//! | `ascend-sim` | the host emulator implementing the same C symbols |

pub use acl_sys;
pub use ascend_fabric as fabric;
pub use ascend_mem as mem;
pub use ascend_mem::*;
pub use ascend_sim as sim;
