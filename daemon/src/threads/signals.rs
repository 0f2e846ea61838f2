//! Per-thread wake-ups for parked callers (ThreadWait, and ThreadSend waiting for delivery).
//!
//! A caller registers one `Notify` under each thread it waits on; a change to a thread
//! wakes only the callers registered for that thread (no thundering herd). `notify_one`
//! stores a permit when the caller is not parked yet, so a change that lands between the
//! caller's check of the store and its wait is never lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// What callers of a thread's inbox (ThreadInbox) park on: signalled when input that would
/// wake the thread arrives, which nobody else waits for.
pub fn inbox(thread_id: &str) -> String {
    format!("{thread_id}#inbox")
}

/// What followers of a thread's running turn park on: signalled as its parts are kept.
pub fn parts(thread_id: &str) -> String {
    format!("{thread_id}#parts")
}

/// What a caller waiting for the owner's answer to a permission request parks on.
pub fn answered(request_id: &str) -> String {
    format!("{request_id}#answered")
}

/// Wakes, for each change the store commits, the callers parked on it, and the outbox
/// worker for new or due entries.
pub fn wake_on(signals: Signals, outbox_work: Arc<Notify>) -> crate::store::Listener {
    use crate::store::Change;
    Arc::new(move |changes: &[Change]| {
        for change in changes {
            match change {
                Change::Thread(thread) => signals.notify(thread),
                Change::Inbox(thread) => signals.notify(&inbox(thread)),
                Change::Parts(thread) => signals.notify(&parts(thread)),
                Change::Answered(request) => signals.notify(&answered(request)),
                Change::Outbox => outbox_work.notify_one(),
                // The bridge table and the cron scheduler listen for theirs themselves.
                Change::Bridges | Change::Crons => {}
                Change::Missed => {
                    signals.notify_all();
                    outbox_work.notify_one();
                }
            }
        }
    })
}

#[derive(Clone, Default)]
pub struct Signals {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: AtomicU64,
    /// thread id → parked callers (by registration id).
    waiters: Mutex<HashMap<String, HashMap<u64, Arc<Notify>>>>,
}

/// A caller's registration; dropping it unregisters.
pub struct Subscription {
    signals: Signals,
    id: u64,
    threads: Vec<String>,
    notify: Arc<Notify>,
}

impl Signals {
    /// Registers for changes to any of `threads`.
    pub fn subscribe(&self, threads: Vec<String>) -> Subscription {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        let mut waiters = self.lock();
        for thread in &threads {
            waiters.entry(thread.clone()).or_default().insert(id, notify.clone());
        }
        drop(waiters);
        Subscription { signals: self.clone(), id, threads, notify }
    }

    /// Something about `thread` changed: wake the callers waiting on it.
    pub fn notify(&self, thread: &str) {
        if let Some(parked) = self.lock().get(thread) {
            for notify in parked.values() {
                notify.notify_one();
            }
        }
    }

    /// Anything may have changed: wake every parked caller.
    pub fn notify_all(&self) {
        for parked in self.lock().values() {
            for notify in parked.values() {
                notify.notify_one();
            }
        }
    }

    /// How many threads have parked callers (for tests and metrics).
    pub fn watched_threads(&self) -> usize {
        self.lock().len()
    }

    /// How many callers are parked (ThreadWaits, senders waiting for delivery, followers,
    /// permission requests waiting for an answer).
    pub fn parked(&self) -> usize {
        let waiters = self.lock();
        let mut ids: std::collections::HashSet<u64> = std::collections::HashSet::new();
        for parked in waiters.values() {
            ids.extend(parked.keys());
        }
        ids.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u64, Arc<Notify>>>> {
        self.inner.waiters.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Subscription {
    /// Resolves after a change to one of the threads (at once if one happened since the
    /// last call).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut waiters = self.signals.lock();
        for thread in &self.threads {
            if let Some(parked) = waiters.get_mut(thread) {
                parked.remove(&self.id);
                if parked.is_empty() {
                    waiters.remove(thread);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_only_subscribers_of_the_thread_and_keeps_early_permits() {
        let signals = Signals::default();
        let a = signals.subscribe(vec!["th_a".into()]);
        let b = signals.subscribe(vec!["th_b".into()]);
        signals.notify("th_a"); // before anyone waits: kept as a permit
        tokio::time::timeout(Duration::from_secs(1), a.changed()).await.expect("a woken");
        let b_woken = tokio::time::timeout(Duration::from_millis(50), b.changed()).await;
        assert!(b_woken.is_err(), "b waits on another thread");
        assert_eq!(signals.watched_threads(), 2);
        drop(a);
        drop(b);
        assert_eq!(signals.watched_threads(), 0, "unregistered on drop");
    }
}
