//! Waiting for a state another thread or process reaches, and free ports.

use std::time::{Duration, Instant};

/// Waits until `f` holds, asking it every few milliseconds: for a state reached in the
/// background that has no event of its own to wait on. `within` only ends a hang (it panics
/// naming `what`); the test's guarantee is the state, not the time it took.
#[track_caller]
pub fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A loopback port nobody listens on right now, below the ephemeral range and never handed
/// out twice in this process (`ascend_launch::free_port`), so no outgoing connection takes it
/// before a test binds it.
#[track_caller]
pub fn free_port() -> u16 {
    ascend_launch::free_port().expect("a free loopback port")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_the_state_and_panics_on_a_hang() {
        let mut n = 0;
        wait_until("three asks", Duration::from_secs(5), || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
        let hung =
            std::panic::catch_unwind(|| wait_until("never", Duration::from_millis(20), || false));
        assert!(hung.is_err());
        assert_ne!(free_port(), free_port());
    }
}
