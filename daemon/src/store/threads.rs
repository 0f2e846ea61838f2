//! Threads: their records, the communication switch as stored, archiving.

use async_trait::async_trait;

use super::*;

words! {
    /// The per-thread communication switch as stored.
    CommunicationSetting {
        Default => "default",
        On => "on",
        Off => "off",
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRecord {
    /// Creation order; ThreadList pages by it (keyset, newest first).
    pub seq: i64,
    pub id: String,
    pub workspace_id: String,
    pub cwd: String,
    pub title: String,
    pub profile: String,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub archived: bool,
    pub enabled: bool,
    /// A turn is in flight.
    pub running: bool,
    /// Turns started so far (the latest turn's seq).
    pub turn_count: i64,
    pub communication: CommunicationSetting,
}

#[derive(Debug, Clone)]
pub struct NewThread {
    pub id: String,
    pub workspace_id: String,
    pub cwd: String,
    pub title: String,
    pub profile: String,
    /// The thread's own switch from the start.
    pub communication: CommunicationSetting,
    /// An existing agent session the thread continues (`--resume-agent-session`).
    pub agent_session: Option<String>,
    pub now: Millis,
}

/// What archiving or unarchiving did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    pub thread: ThreadRecord,
    /// False if the thread already was in that state.
    pub changed: bool,
    /// Threads that got events (the thread, and sources of messages made undeliverable).
    pub notified: Vec<String>,
}

/// One page of threads, newest first.
#[derive(Debug, Clone, Default)]
pub struct ThreadQuery {
    pub workspace_id: Option<String>,
    /// Only threads created before this `seq` (the keyset cursor).
    pub before_seq: Option<i64>,
    pub limit: u32,
}

#[async_trait]
pub trait ThreadStore: Send + Sync {
    /// Creates a thread, its `created` lifecycle event and, in the same transaction, its
    /// first input.
    async fn create_thread(
        &self,
        thread: &NewThread,
        first_input: Option<&NewInput>,
    ) -> StoreResult<ThreadRecord>;

    async fn thread(&self, id: &str) -> StoreResult<Option<ThreadRecord>>;

    /// Enabled, unarchived threads, newest first.
    async fn list_threads(&self, query: &ThreadQuery) -> StoreResult<Vec<ThreadRecord>>;

    async fn count_threads(&self) -> StoreResult<u64>;

    /// Sets `archived` and logs a `lifecycle` event if it changed; `None` if the thread does
    /// not exist. Archiving makes the thread's pending messages undeliverable
    /// (`thread_archived`), with an `undeliverable` event on the target and on each source
    /// thread.
    async fn set_archived(&self, id: &str, archived: bool, now: Millis) -> StoreResult<Option<Archived>>;

    async fn set_communication(
        &self,
        thread_id: &str,
        setting: CommunicationSetting,
        now: Millis,
    ) -> StoreResult<Option<ThreadRecord>>;
}
