//! What committed writes changed, published by the store after each commit — before their
//! callers hear back — to whoever listens: ThreadWait and senders waiting for delivery,
//! ThreadInbox, followers of running turns, permission requests waiting for an answer, the
//! outbox worker, the bridge table, the cron scheduler. No write site wakes anybody by hand:
//! a backend notes each change where it writes it (in the few generic steps every write goes
//! through: an event, a queued input, a turn started, a part, an answer, an outbox entry, a
//! cron), and a listener that learns of a change reads the store again, so a change noted by
//! a write that was then rolled back costs one look and nothing more.

use std::sync::{Arc, RwLock};

/// One change, by what listens for it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    /// A thread's event log or turns, or its messages delivered: what ThreadWait and a
    /// sender waiting for delivery look at.
    Thread(String),
    /// Input that may wake a running thread arrived, or may now be taken: its communication
    /// switch changed, or the bridge that brought it was turned back on (ThreadInbox).
    Inbox(String),
    /// A running turn of the thread kept a part of its progress (followers).
    Parts(String),
    /// A permission request was answered.
    Answered(String),
    /// Outbox entries were written or made due.
    Outbox,
    /// The home's bridges changed (a decision, a grant, a revocation, a link's health): the
    /// bridge table every peer call is checked against is read again.
    Bridges,
    /// The home's scheduled prompts changed (one made, deleted or fired): the cron scheduler
    /// looks at the next fire time again.
    Crons,
    /// Other processes' changes may have gone unheard (the database's notifications were
    /// cut off for a while): every listener looks again.
    Missed,
}

pub type Listener = Arc<dyn Fn(&[Change]) + Send + Sync>;

/// Told of each commit: how many writes it carried (a SQLite writer commits the writes
/// queued together in one transaction) and how long it took.
pub type CommitListener = Arc<dyn Fn(usize, std::time::Duration) + Send + Sync>;

/// The store's listeners.
#[derive(Default)]
pub struct Publisher {
    listeners: RwLock<Vec<Listener>>,
    commits: RwLock<Vec<CommitListener>>,
}

impl Publisher {
    /// Adds a listener for every change committed from now on.
    pub fn listen(&self, listener: Listener) {
        self.listeners.write().unwrap_or_else(|p| p.into_inner()).push(listener);
    }

    /// Adds a listener for every commit from now on (the metrics).
    pub fn on_commit(&self, listener: CommitListener) {
        self.commits.write().unwrap_or_else(|p| p.into_inner()).push(listener);
    }

    /// A commit of `writes` writes took `took`.
    pub fn committed(&self, writes: usize, took: std::time::Duration) {
        for listener in self.commits.read().unwrap_or_else(|p| p.into_inner()).iter() {
            listener(writes, took);
        }
    }

    /// Tells every listener of `changes` (each once), after their commit.
    pub fn publish(&self, mut changes: Vec<Change>) {
        if changes.is_empty() {
            return;
        }
        changes.sort();
        changes.dedup();
        for listener in self.listeners.read().unwrap_or_else(|p| p.into_inner()).iter() {
            listener(&changes);
        }
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}
