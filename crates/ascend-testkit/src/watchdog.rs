//! A child's guard against a parent that stopped driving it.

use std::time::Duration;

/// Exits this process with status 3 after `after`: in a child, so a broken parent (one that
/// died or stopped answering) never leaves it hanging. A guard only: the exit status 3 is a
/// failure to every parent, never a result.
pub fn watchdog(after: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        eprintln!("child watchdog: no progress after {after:?}, giving up");
        std::process::exit(3);
    });
}
