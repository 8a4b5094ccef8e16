//! The tests of ascend-mem on the emulator, one binary with a module per topic. Every test
//! that touches the emulator holds the process-wide test lock (`common::setup`), so the
//! emulator's counters, faults and call log are one test's at a time; tests that need a
//! process of their own (environment, a SoC model, a second process) re-run this binary as a
//! child in a role (`ascend_testkit::role`).

mod common;
mod hccl_util;

mod backend;
mod bad_inputs;
mod batch_copies;
mod capabilities;
mod drop_order;
mod fault_injection;
mod hccl_collectives;
mod hccl_metrics;
mod hccl_onesided;
mod hccl_onesided_procs;
mod hccl_procs;
mod hccl_windows;
mod npu_vmm;
mod pinned_words;
mod sharing;
mod stream_values;
mod stream_waiter;
mod streams;
mod table_batches;
mod tables;
mod typed;
mod views;
mod vmm_rules;
