//! Small synchronisation helpers shared across the daemon.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poisoning: every mutex here guards plain maps and queues that a
/// panicking holder cannot leave half-updated, so carrying on is safe.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `work` to its end even if the caller stops waiting for it. A gRPC handler's future
/// is dropped when its client cancels or its deadline passes; a committed write must still
/// be followed by what it implies (a claimed turn started, queued input kicked), or a thread
/// would stay `running` with no turn, or its input would wait for the next restart.
///
/// The work runs in the caller's task, and only if the caller is dropped before it ends is
/// the rest spawned as a task of its own: spawning every time would add two task switches
/// (there and back) to each send, a large share of a durable send's cost.
pub fn uncancelled<T, F>(work: F) -> Uncancelled<F>
where
    F: Future<Output = crate::error::Result<T>> + Send + 'static,
{
    // In the caller's span: what it does is part of the call (and of its trace).
    Uncancelled { work: Some(Box::pin(tracing::Instrument::in_current_span(work))) }
}

/// The future [`uncancelled`] returns.
pub struct Uncancelled<F: Future + Send + 'static> {
    /// `None` once it ended.
    work: Option<Pin<Box<tracing::instrument::Instrumented<F>>>>,
}

impl<F: Future + Send + 'static> Future for Uncancelled<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let work = self.work.as_mut().expect("an uncancelled future polled after it ended");
        let done = std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        std::task::Poll::Ready(done)
    }
}

impl<F: Future + Send + 'static> Drop for Uncancelled<F> {
    fn drop(&mut self) {
        // Abandoned half-way: the rest runs on as a task. Without a runtime (the home is
        // being torn down) there is nothing left to run it on.
        if let (Some(work), Ok(runtime)) = (self.work.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move {
                let _ = work.await;
            });
        }
    }
}

/// A sender's idempotency key: (key scope, key).
pub type SendKey = (String, String);

/// One send at a time per sender's key, whichever home it goes to: a cross-home send ships
/// its message while its outbox entry is still being committed, so any other send with that
/// key — local or cross-home — waits for that entry, which then answers it (a replay, or a
/// conflict whose content never leaves this home). Shared by the mailbox and the bridges.
#[derive(Default)]
pub struct KeyLocks {
    held: Mutex<HashMap<SendKey, KeyUsers>>,
}

/// A key's lock, and how many sends hold or await it.
type KeyUsers = (Arc<tokio::sync::Mutex<()>>, usize);

/// The right to send with a key, until dropped.
pub struct KeyGuard {
    locks: Arc<KeyLocks>,
    key: SendKey,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl KeyLocks {
    pub async fn take(self: &Arc<Self>, key: SendKey) -> KeyGuard {
        let mutex = {
            let mut held = lock(&self.held);
            let (mutex, users) = held.entry(key.clone()).or_default();
            *users += 1;
            mutex.clone()
        };
        // Counted from here: a send that goes away while it waits uncounts itself on drop.
        let mut this = KeyGuard { locks: self.clone(), key, guard: None };
        this.guard = Some(mutex.lock_owned().await);
        this
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut held = lock(&self.locks.held);
        if let Some((_, users)) = held.get_mut(&self.key) {
            *users -= 1;
            if *users == 0 {
                held.remove(&self.key);
            }
        }
    }
}
