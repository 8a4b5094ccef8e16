//! The tests of ascend-cs on the emulator, one binary with a module per topic. Every test holds
//! the process-wide test lock for its whole run (`setup`), so the emulator's counters, faults
//! and worker holds are one test's at a time; the multi-process one re-runs this binary as its
//! own child in a role (`ascend_testkit::role`).

mod util;

mod hixl_cs;
mod hixl_cs_procs;
