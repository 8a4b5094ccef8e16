//! The engine's tests on the emulator, one binary with a module per topic: transfers,
//! registrations, pools, failures and teardown. Every test holds the process-wide test lock
//! for its whole run (`setup`), so the emulator's counters, faults and stream holds are one
//! test's at a time; the multi-process ones re-run this binary as their own children in a role
//! (`ascend_testkit::role`).

mod async_util;
mod peer;
mod util;

mod autoconnect;
mod backpressure;
mod bad_inputs;
mod batching;
mod cancel;
mod capabilities;
mod completion;
mod completion_queue;
mod connect_failure;
mod detached_drop;
mod errors;
mod failure;
mod futures;
mod hixl_scenarios;
mod late_segments;
mod metrics;
mod perf;
mod pool;
mod prepared;
mod reconnect;
mod registrations;
mod revocation;
mod sessions;
mod spans;
mod stall;
mod submit_threads;
mod summary;
mod teardown;
mod threads;
mod transfer;
mod unmap_failure;
mod waits;
