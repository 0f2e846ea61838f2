//! Durable state behind one [`Store`] trait. Each backend has its own SQL and migrations
//! (`sqlite/migrations/` for SQLite); the conformance suite in `kiki-tests` runs against every one.
//!
//! Every method is atomic: when it returns `Ok`, its effect has been committed (SQLite:
//! `synchronous = FULL`, so it also survives power loss, not only `kill -9`); when it fails,
//! nothing of it was written.

mod bridges;
mod changes;
mod columns;
mod copy;
mod events;
mod location;
mod messages;
mod outbox;
mod permissions;
mod postgres;
mod receipts;
mod replicas;
mod rooms;
pub mod rules;
mod sqlite;
mod threads;
mod tools;
mod turns;
mod words;

use async_trait::async_trait;

pub use bridges::*;
pub use changes::{Change, Listener, Publisher};
pub use copy::{Counts, copy_store};
pub use events::*;
pub use location::{PASSWORD_ENV, StoreLocation};
pub use messages::*;
pub use outbox::*;
pub use permissions::*;
pub use postgres::{PostgresOptions, PostgresStore, is_postgres_url, redacted};
pub use receipts::*;
pub use replicas::*;
pub use rooms::*;
pub use sqlite::SqliteStore;
pub use threads::*;
pub use tools::*;
pub use turns::*;
pub use words::{BridgeState, Direction, OutboxStatus, Permission, Permissions, Refusal, RequestStatus};
pub(crate) use words::{row_words, words};

use crate::time::Clock;
pub use crate::time::Millis;

/// The time a write asked for at `asked` decides by (see [`rules::write_time`]), read from
/// `clock` as it runs.
fn write_time(clock: &Clock, asked: Millis) -> Millis {
    rules::write_time(asked, clock.now_ms())
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was hit (idempotency keys rest on this).
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("{0}")]
    Backend(String),
    /// The store's database cannot be reached now (a Postgres server down or restarting):
    /// nothing was done, and kikid reconnects by itself. Names the database where known.
    #[error(
        "the store's database {0} is unavailable; kikid reconnects by itself: retry (a send with the same idempotency key)"
    )]
    Unavailable(String),
    /// Too many writes are queued; the caller should retry (sends with the same key).
    #[error("the store is busy (too many writes queued); retry, with the same idempotency key for a send")]
    Busy,
    /// The home is stopping: its store takes no more work.
    #[error("the store is closed (kikid is stopping)")]
    Closed,
    #[error("unsupported store url {0:?} (expected sqlite://PATH or a file path)")]
    UnsupportedUrl(String),
    #[error("migration {version} ({name}) failed: {message}")]
    Migration { version: i64, name: &'static str, message: String },
    /// The file system holding the store has no space left: nothing of the operation was
    /// written, and it may be retried once space is freed. Names the store's file.
    #[error(
        "the disk holding {0} is full: nothing was written; free some space there, then retry \
         (a send with the same idempotency key)"
    )]
    DiskFull(String),
    /// The store's file is damaged. kikid does not serve such a store (see `kiki doctor`).
    #[error(
        "the store {path} is damaged ({detail}); kikid does not serve a damaged store: see \
         `kiki doctor`, then restore the store from a backup (`kiki backup`), or move it aside \
         to start with an empty one"
    )]
    Corrupt { path: String, detail: String },
}

impl StoreError {
    /// Names `path` in an error that names the store's file but was raised without it.
    pub fn at(self, path: &std::path::Path) -> Self {
        match self {
            StoreError::DiskFull(p) if p.is_empty() => StoreError::DiskFull(path.display().to_string()),
            StoreError::Corrupt { path: p, detail } if p.is_empty() => {
                StoreError::Corrupt { path: path.display().to_string(), detail }
            }
            other => other,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A whole store: every entity's operations, and the home's own (what it is, its checks,
/// backup, close). `Arc<dyn Store>` is what the daemon holds; callers bring the entity
/// traits they use into scope (`use crate::store::{OutboxStore, …}`).
#[async_trait]
pub trait Store:
    ThreadStore
    + TurnStore
    + MessageStore
    + EventStore
    + BridgeStore
    + OutboxStore
    + PermissionStore
    + ToolStore
    + ReceiptStore
    + RoomStore
    + ReplicaStore
    + 'static
{
    /// Where committed changes are published (see [`Change`]).
    fn changes(&self) -> &Publisher;

    /// Where the data lives, with any secret removed (for `kiki status`).
    fn describe(&self) -> String;

    /// Checks the stored data's integrity: every page and index when `full` (`kiki doctor`),
    /// else a quick check bounded in time (see the backend). The problems found, none when
    /// it is sound.
    async fn check(&self, full: bool) -> StoreResult<Vec<String>>;

    /// Writes a consistent copy of the whole store to the new file `dest` while the home
    /// runs (`kiki backup`).
    async fn backup(&self, dest: &std::path::Path) -> StoreResult<()>;

    /// Flushes and closes; later calls fail. A clean close leaves every committed write in
    /// the store's main file (SQLite: the WAL is checkpointed and emptied), so that file
    /// alone is a whole copy of the data.
    async fn close(&self);
}
