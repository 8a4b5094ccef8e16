//! Virtual memory: reservations, physical allocations (memfds), mappings, access, plain
//! mallocs, the address table used to validate copies, and the synchronous copies (single and
//! batched).

mod access;
pub(crate) mod addr_map;
pub(crate) mod batch;
pub(crate) mod copy;
mod malloc;
mod map;
pub(crate) mod memfd;
pub(crate) mod phys;
mod reserve;
pub(crate) mod state;

pub use access::*;
pub use batch::{aclrtMemcpyBatch, aclrtMemcpyBatchV2};
pub use copy::*;
pub use malloc::*;
pub use map::*;
pub use phys::*;
pub use reserve::*;
