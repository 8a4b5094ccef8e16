//! The process-wide test lock.

use std::sync::{Mutex, MutexGuard, PoisonError};

static LOCK: Mutex<()> = Mutex::new(());

/// Takes the lock every test of this process that touches process-global state holds for its
/// whole run (a poisoned lock, left by a failed test, is taken over: the next test still runs).
#[must_use = "the lock is held until the guard drops"]
pub fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::lock;

    #[test]
    fn a_poisoned_lock_is_taken_over() {
        let r = std::thread::spawn(|| {
            let _g = lock();
            panic!("poisons the lock");
        })
        .join();
        assert!(r.is_err(), "the thread panicked");
        assert!(super::LOCK.is_poisoned(), "the panic poisoned the lock");
        // Taken over, not a panic of this test too.
        drop(lock());
    }
}
