//! What the session tools keep: each call in its thread's history, a thread's todo list and
//! notes, and its scheduled prompts (crons).

use async_trait::async_trait;

use super::*;

words! {
    /// How a session-tool call ended.
    ToolOutcome {
        Ok => "ok",
        /// The tool ran into an error (a missing file, a failed command).
        Error => "error",
        /// The owner denied it, or nobody answered in time.
        Denied => "denied",
    }
}

/// One session-tool call in its thread's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallRecord {
    /// 1, 2, … within the thread (assigned when recorded).
    pub seq: i64,
    pub thread_id: String,
    /// The turn whose agent made it; `None` for the owner's.
    pub turn_id: Option<String>,
    pub name: String,
    /// The arguments as given (JSON).
    pub arguments: String,
    pub outcome: ToolOutcome,
    /// The start of the result's text.
    pub result: String,
    pub duration_ms: i64,
    pub at: Millis,
}

/// A thread's todo list and notes (TodoList), as one JSON document and its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TodoRecord {
    /// 1 for the first write, then one more per write.
    pub revision: i64,
    pub body: String,
}

/// A prompt scheduled into a thread (Cron).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronRecord {
    pub id: String,
    pub thread_id: String,
    /// The 5-field cron expression.
    pub cron: String,
    pub prompt: String,
    pub recurring: bool,
    pub created_at: Millis,
    /// When it fires next (jitter applied).
    pub next_fire_at: Millis,
}

#[async_trait]
pub trait ToolStore: Send + Sync {
    /// Appends a call to its thread's history; its seq.
    async fn record_tool_call(&self, call: &ToolCallRecord) -> StoreResult<i64>;

    /// The thread's calls with `seq > after`, oldest first, at most `limit`.
    async fn tool_calls(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<ToolCallRecord>>;

    async fn todo(&self, thread_id: &str) -> StoreResult<Option<TodoRecord>>;

    /// Writes `body` as revision `expected + 1` if the stored revision is `expected` (0:
    /// none yet); `false`, writing nothing, if another write came first.
    async fn put_todo(&self, thread_id: &str, expected: i64, body: &str) -> StoreResult<bool>;

    /// Adds a cron unless its thread already has `max`; whether it was added.
    async fn add_cron(&self, cron: &CronRecord, max: u32) -> StoreResult<bool>;

    /// The crons of `thread_id` (every thread's when `None`), in the order they were added.
    async fn crons(&self, thread_id: Option<&str>) -> StoreResult<Vec<CronRecord>>;

    /// Deletes a thread's cron; whether there was one.
    async fn delete_cron(&self, thread_id: &str, id: &str) -> StoreResult<bool>;

    /// A fire of `cron`, in one transaction: its prompt queued for its thread as `input`, and
    /// the cron moved on to `next` (`None`: deleted). Only if it still stands as `cron` says
    /// (its `next_fire_at` unchanged): `false`, doing nothing, if it was deleted or another
    /// replica fired it first.
    async fn fire_cron(&self, cron: &CronRecord, input: &NewInput, next: Option<Millis>)
    -> StoreResult<bool>;
}
