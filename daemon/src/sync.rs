//! Small synchronisation helpers shared across the daemon.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poisoning: every mutex here guards plain maps and queues that a
/// panicking holder cannot leave half-updated, so carrying on is safe.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
