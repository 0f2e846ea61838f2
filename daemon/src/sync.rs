//! Small synchronisation helpers shared across the daemon.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poisoning: every mutex here guards plain maps and queues that a
/// panicking holder cannot leave half-updated, so carrying on is safe.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `work` to its end even if the caller stops waiting for it. A gRPC handler's future
/// is dropped when its client cancels or its deadline passes; a committed write must still
/// be followed by what it implies (a claimed turn started, queued input kicked), or a thread
/// would stay `running` with no turn, or its input would wait for the next restart.
pub async fn uncancelled<T: Send + 'static>(
    work: impl Future<Output = crate::error::Result<T>> + Send + 'static,
) -> crate::error::Result<T> {
    match tokio::spawn(work).await {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(crate::error::Error::Unavailable("kikid is stopping".into())),
    }
}
