//! ascend-fabric: a one-sided Fabric Mem transfer engine for Ascend, built on ascend-mem's
//! types and wire-compatible with HIXL's FabricMem control plane.
//!
//! This release carries the control-plane codec ([`wire`]): the request/response framing, the
//! heartbeat framing and the JSON messages, exactly as a C++ HIXL engine writes and reads them.
#![deny(unsafe_code)]

pub mod wire;
