//! Durable state behind one [`Store`] trait. Each backend has its own SQL and migrations
//! (`migrations/<backend>/`); the conformance suite in `kiki-tests` runs against every one.
//!
//! Every method is one transaction: when it returns `Ok`, its effect has been committed
//! (SQLite: `synchronous = FULL`, so it also survives power loss, not only `kill -9`).

mod sqlite;

use async_trait::async_trait;

pub use sqlite::SqliteStore;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was hit (idempotency keys rest on this).
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("{0}")]
    Backend(String),
    #[error("unsupported store url {0:?} (expected sqlite://PATH or a file path)")]
    UnsupportedUrl(String),
    #[error("migration {version} ({name}) failed: {message}")]
    Migration { version: i64, name: &'static str, message: String },
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The per-thread communication switch as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommunicationSetting {
    Default,
    On,
    Off,
}

impl CommunicationSetting {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::On => "on",
            Self::Off => "off",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "default" => Self::Default,
            "on" => Self::On,
            "off" => Self::Off,
            _ => return None,
        })
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
    pub communication: CommunicationSetting,
}

#[derive(Debug, Clone)]
pub struct NewThread {
    pub id: String,
    pub workspace_id: String,
    pub cwd: String,
    pub title: String,
    pub profile: String,
    pub now: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// The user or another external client.
    User,
    /// A ThreadSend message.
    Message,
}

impl InputKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Message => "message",
        }
    }
    fn parse(s: &str) -> StoreResult<Self> {
        match s {
            "user" => Ok(Self::User),
            "message" => Ok(Self::Message),
            other => Err(StoreError::Backend(format!("unknown input kind {other:?}"))),
        }
    }
}

/// Where a message came from, when a peer thread sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRef {
    /// Empty for this home.
    pub host_id: String,
    pub thread_id: String,
}

/// Input waiting for (or taken by) a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInput {
    pub id: String,
    pub kind: InputKind,
    pub content: String,
    pub message_id: Option<String>,
    pub source: Option<SourceRef>,
    pub now: Millis,
}

pub type InputRecord = NewInput;

/// What ThreadRead shows of one input item (its text is part of the turn's `input`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnItem {
    pub kind: InputKind,
    pub message_id: Option<String>,
    pub source: Option<SourceRef>,
}

/// A turn just started, with the full items it took (executors need their text).
#[derive(Debug, Clone)]
pub struct ClaimedTurn {
    pub turn: TurnRecord,
    pub inputs: Vec<InputRecord>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
    fn parse(s: &str) -> StoreResult<Self> {
        Ok(match s {
            "running" => Self::Running,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            other => return Err(StoreError::Backend(format!("unknown turn status {other:?}"))),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRecord {
    pub id: String,
    pub thread_id: String,
    /// 1, 2, … within the thread.
    pub seq: i64,
    pub status: TurnStatus,
    /// The input exactly as the executor received it.
    pub input: String,
    pub output: String,
    pub error: String,
    pub started_at: Millis,
    pub ended_at: Option<Millis>,
    /// The items the input was made of, in order.
    pub items: Vec<TurnItem>,
}

/// How a turn ended.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    pub turn_id: String,
    pub status: TurnStatus,
    pub output: String,
    pub error: String,
    pub now: Millis,
}

/// Renders the items a turn takes into the input its executor receives.
pub type RenderInput = fn(&[InputRecord]) -> String;

/// One page of threads, newest first.
#[derive(Debug, Clone, Default)]
pub struct ThreadQuery {
    pub workspace_id: Option<String>,
    /// Only threads created before this `seq` (the keyset cursor).
    pub before_seq: Option<i64>,
    pub limit: u32,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Where the data lives, with any secret removed (for `kiki status`).
    fn describe(&self) -> String;

    /// Creates a thread and, in the same transaction, its first input.
    async fn create_thread(
        &self,
        thread: &NewThread,
        first_input: Option<&NewInput>,
    ) -> StoreResult<ThreadRecord>;
    async fn thread(&self, id: &str) -> StoreResult<Option<ThreadRecord>>;
    /// Enabled, unarchived threads, newest first.
    async fn list_threads(&self, query: &ThreadQuery) -> StoreResult<Vec<ThreadRecord>>;
    async fn count_threads(&self) -> StoreResult<u64>;
    /// Sets `archived`; `None` if the thread does not exist. The bool says whether it changed.
    async fn set_archived(
        &self,
        id: &str,
        archived: bool,
        now: Millis,
    ) -> StoreResult<Option<(ThreadRecord, bool)>>;

    /// Queues input for the thread's next turn. `Ok(false)` if the thread does not exist.
    async fn enqueue_input(&self, thread_id: &str, input: &NewInput) -> StoreResult<bool>;
    /// If the thread has no running turn and has queued input, starts a turn with all of it
    /// (in order) and marks the thread running.
    async fn claim_turn(
        &self,
        thread_id: &str,
        turn_id: &str,
        render: RenderInput,
        now: Millis,
    ) -> StoreResult<Option<ClaimedTurn>>;
    /// Records how a running turn ended and marks its thread idle.
    async fn finish_turn(&self, outcome: &TurnOutcome) -> StoreResult<()>;
    /// Marks every turn still `running` as failed with `reason` (startup after a crash).
    /// Returns how many there were.
    async fn fail_interrupted_turns(&self, reason: &str, now: Millis) -> StoreResult<u64>;
    /// Threads with queued input and no running turn.
    async fn threads_with_queued_input(&self) -> StoreResult<Vec<String>>;
    async fn running_turns(&self) -> StoreResult<u64>;

    /// Ended turns with `seq > after_seq`, oldest first, at most `limit`.
    async fn ended_turns(&self, thread_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<TurnRecord>>;
    async fn turn(&self, thread_id: &str, turn_id: &str) -> StoreResult<Option<TurnRecord>>;
    /// The `seq` of the thread's turn that ended at `seq` exists (cursor validation).
    async fn ended_turn_exists(&self, thread_id: &str, seq: i64) -> StoreResult<bool>;

    /// Flushes and closes; later calls fail.
    async fn close(&self);
}
