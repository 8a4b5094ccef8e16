//! This process's threads and open descriptors, as `/proc` shows them.
//!
//! A joined thread can still be listed: the kernel wakes the joiner while the thread is on its
//! way out (after it cleared its thread id, before the thread leaves the process's task list),
//! and a busy machine can hold it there for a while. The kernel marks a thread as exiting
//! (`PF_EXITING` in the flags of `/proc/self/task/<tid>/stat`) before the joiner can wake, so
//! [`live_threads`] leaves those out: a count taken after a join is exact.

use std::path::Path;

/// The kernel's flag of a task that has begun to exit.
const PF_EXITING: u64 = 0x4;

/// A thread of this process that is not exiting.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Thread {
    /// The kernel's thread id.
    pub tid: u64,
    /// Its name (the kernel keeps the first 15 bytes).
    pub name: String,
}

/// The threads of this process that have not begun to exit, by thread id.
///
/// # Panics
/// If a thread's state cannot be read (other than for a thread gone meanwhile), or the
/// calling thread is not in the list: a count that silently left threads out would hide leaks.
pub fn live_threads() -> Vec<Thread> {
    let mut v: Vec<Thread> = std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|e| {
            let e = e.expect("a /proc/self/task entry");
            let tid = e.file_name().to_str()?.parse().ok()?;
            let stat = match std::fs::read_to_string(e.path().join("stat")) {
                Ok(s) => s,
                // Gone between the listing and this read: not live either.
                Err(err) if gone(&err) => return None,
                Err(err) => panic!("cannot read the state of thread {tid}: {err}"),
            };
            is_live(&stat).then(|| Thread {
                tid,
                name: name_of(&e.path()),
            })
        })
        .collect();
    v.sort();
    let me = current_tid();
    assert!(
        v.iter().any(|t| t.tid == me),
        "the calling thread {me} is not among the live threads read: {v:?}"
    );
    v
}

fn gone(e: &std::io::Error) -> bool {
    const ESRCH: i32 = 3;
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(ESRCH)
}

/// The calling thread's id (`/proc/thread-self` links to `<pid>/task/<tid>`).
fn current_tid() -> u64 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .and_then(|n| n.to_str()?.parse().ok())
        .unwrap_or_else(|| panic!("/proc/thread-self links to {}", link.display()))
}

/// How many threads of this process have not begun to exit.
pub fn live_thread_count() -> usize {
    live_threads().len()
}

/// The live threads named `name` (compared with the first 15 bytes the kernel keeps).
pub fn live_threads_named(name: &str) -> Vec<Thread> {
    let kept = &name.as_bytes()[..name.len().min(15)];
    live_threads()
        .into_iter()
        .filter(|t| t.name.as_bytes() == kept)
        .collect()
}

/// How many descriptors this process has open.
pub fn open_fds() -> usize {
    // The listing's own descriptor is counted too, as in every reading: the counts compare.
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

fn name_of(task: &Path) -> String {
    std::fs::read_to_string(task.join("comm"))
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_default()
}

/// Whether a task's `stat` line shows it running its code: neither exiting nor a zombie.
///
/// # Panics
/// On a line that does not have the fields proc(5) gives.
fn is_live(stat: &str) -> bool {
    // The name, in parentheses, may hold spaces and parentheses: fields start after the last.
    let fields: Vec<&str> = stat
        .rfind(')')
        .map(|i| stat[i + 1..].split_whitespace().collect())
        .unwrap_or_default();
    // Fields 3 (state) and 9 (flags) of proc(5), counted from the pid.
    let (Some(state), Some(Ok(flags))) = (fields.first(), fields.get(6).map(|f| f.parse::<u64>()))
    else {
        panic!("a thread's stat line without a state and flags: {stat:?}");
    };
    !matches!(*state, "Z" | "X" | "x") && flags & PF_EXITING == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_thread_is_live_and_a_joined_one_is_not() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let t = std::thread::Builder::new()
            .name("testkit-probe".into())
            .spawn(move || {
                ready_tx.send(()).unwrap();
                rx.recv().unwrap();
            })
            .unwrap();
        ready_rx.recv().unwrap();
        assert_eq!(live_threads_named("testkit-probe").len(), 1);
        tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(live_threads_named("testkit-probe").len(), 0);
    }

    #[test]
    fn stat_lines_are_read_past_names_with_parentheses() {
        let live = "12 (a) b) S 1 12 12 0 -1 4194368 0 0";
        let exiting = "12 (a) b) R 1 12 12 0 -1 4194372 0 0";
        assert!(is_live(live));
        assert!(!is_live(exiting));
        assert!(!is_live("12 (z) Z 1 12 12 0 -1 4194368"));
    }

    #[test]
    #[should_panic(expected = "without a state and flags")]
    fn an_unreadable_stat_line_is_an_error_not_a_thread_left_out() {
        is_live("garbage");
    }
}
