//! ascend-fabric: a one-sided Fabric Mem transfer engine for Ascend, built on ascend-mem's
//! types and wire-compatible with HIXL's FabricMem control plane.
//!
//! This release carries the engine's building blocks:
//! * [`wire`]: the control-plane codec (request/response framing, heartbeat framing, JSON
//!   messages) exactly as a C++ HIXL engine writes and reads them;
//! * [`options`]: the typed configuration and HIXL's option map read into it;
//! * [`ranges`]: the sorted range map that checks and translates descriptor addresses.
#![deny(unsafe_code)]

pub mod control;
pub mod options;
pub mod ranges;
pub mod wire;
