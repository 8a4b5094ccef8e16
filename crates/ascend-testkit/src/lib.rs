//! Helpers shared by the workspace's test suites and its bench (a crate that is not published).
//!
//! Without features it depends on no other crate of the workspace but the launcher (for its
//! free ports), so every crate's tests can use it:
//!
//! - [`lock`](mod@lock): the process-wide test lock (the emulator's counters, faults and call log are
//!   global to a process, so tests that read or arm them serialize on it);
//! - [`role`](mod@role): child processes of the current test binary in a named role (the env var
//!   protocol), with line I/O, and the self-spawn of a test as its own child;
//! - [`result`]: the `RESULT ...` lines children report back;
//! - [`watchdog`](mod@watchdog): a child that gives up on its own when its parent stops driving it;
//! - [`net`]: raw bytes to a server and its whole answer;
//! - [`hex`]: bytes as hex text, for handing binary values to a child on a line;
//! - [`process`]: this process's live threads and open descriptors;
//! - [`wait`](mod@wait): waiting for a state reached in the background, and free ports;
//! - [`etcd`]: a throwaway etcd on free loopback ports (the binary is the machine's);
//! - [`metrics`](mod@metrics): what a debugging metrics recorder recorded, looked up by name
//!   and labels;
//! - [`orders`]: every order of three things, for drop-order tests;
//! - [`cluster`]: an emulated supernode of several hosts, one network namespace each (root).
//!
//! With the `emulator` feature, `emulator` adds a test's session on the in-process emulator
//! (the lock, cleared faults, device 0, and the check that nothing is left at its end).

pub mod cluster;
#[cfg(feature = "emulator")]
pub mod emulator;
pub mod etcd;
pub mod hex;
pub mod lock;
pub mod metrics;
pub mod net;
pub mod netns;
pub mod orders;
pub mod pattern;
pub mod process;
pub mod result;
pub mod role;
mod spawn;
pub mod wait;
pub mod watchdog;

pub use hex::{from_hex, to_hex};
pub use lock::lock;
pub use net::send_raw;
pub use pattern::pattern;
pub use result::{assert_ok, result_line, result_numbers, result_of};
pub use role::{role, wait_success, ChildProc, Spawn, ROLE_VAR};
pub use wait::{free_port, wait_until};
pub use watchdog::watchdog;
