//! Each thread's event log, which ThreadWait reads.

use async_trait::async_trait;

use super::*;

words! {
    EventKind {
        Terminal => "terminal",
        Attention => "attention",
        Lifecycle => "lifecycle",
        Undeliverable => "undeliverable",
        /// A background task of the thread ended.
        Task => "task",
    }
}

words! {
    /// What happened to a thread, as a `lifecycle` event says.
    Lifecycle {
        Created => "created",
        Archived => "archived",
        Unarchived => "unarchived",
        Renamed => "renamed",
        Enabled => "enabled",
        Disabled => "disabled",
        Deleted => "deleted",
    }
}

/// Two positions in a thread's event log, as ThreadWait cursors count (`seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventPositions {
    /// The newest event's seq (0 if none).
    pub last: i64,
    /// Where the log stood when the thread's latest turn started, so that turn's events
    /// and later ones follow it; `last` for a thread without turns.
    pub latest_turn: i64,
}

/// One entry of a thread's event log (ThreadWait).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    pub seq: i64,
    pub thread_id: String,
    pub kind: EventKind,
    pub turn_id: Option<String>,
    pub turn_status: Option<TurnStatus>,
    pub reason: String,
    /// A `lifecycle` event's change.
    pub lifecycle: Option<Lifecycle>,
    pub message_id: Option<String>,
    /// An `attention` event's permission request, answered by `kiki approve` / `deny`.
    pub request_id: Option<String>,
    pub at: Millis,
}

impl EventRecord {
    /// An `attention` event of a turn (its seq is assigned when it is logged).
    pub fn attention(thread_id: &str, turn_id: &str, reason: String, at: Millis) -> Self {
        Self {
            seq: 0,
            thread_id: thread_id.to_string(),
            kind: EventKind::Attention,
            turn_id: Some(turn_id.to_string()),
            turn_status: None,
            reason,
            lifecycle: None,
            message_id: None,
            request_id: None,
            at,
        }
    }
}

#[async_trait]
pub trait EventStore: Send + Sync {
    /// Appends an event to a thread's log; returns its seq.
    async fn add_event(&self, event: &EventRecord) -> StoreResult<i64>;

    /// The thread's events with `seq > after`, oldest first.
    async fn events_after(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<EventRecord>>;

    /// Where the thread's event log stands (see [`EventPositions`]).
    async fn event_positions(&self, thread_id: &str) -> StoreResult<EventPositions>;

    /// The open attention events of unarchived threads, oldest first, at most `limit`: a
    /// permission request's while it waits for an answer, any other while its thread has had
    /// no user input since.
    async fn open_attention(&self, limit: u32) -> StoreResult<Vec<EventRecord>>;
}

/// An event about to be logged (its seq is assigned by the insert).
pub(crate) fn event(thread_id: &str, kind: EventKind, now: Millis) -> EventRecord {
    EventRecord {
        seq: 0,
        thread_id: thread_id.to_string(),
        kind,
        turn_id: None,
        turn_status: None,
        reason: String::new(),
        lifecycle: None,
        message_id: None,
        request_id: None,
        at: now,
    }
}
