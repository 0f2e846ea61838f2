//! The embedded default store: one SQLite file in WAL mode, `synchronous = FULL` (a commit
//! is on disk when it returns).
//!
//! Each operation runs whole on a connection thread ([`connections`]): writes on the single
//! writer — atomically, grouped with the writes queued beside it into one commit (a write
//! that fails is rolled back alone: see [`connections`]) — and reads on read-only
//! connections that never wait for a write. Statements are prepared once per connection and
//! cached; inside a thread a statement costs microseconds, so operations loop over rows
//! with single-row statements instead of building SQL.

/// A statement naming words (states, kinds, statuses) spelled by their enums (see
/// `words!`), formatted once for the process. Words stay literals in the text, quoted
/// `'{word}'`, because SQLite uses a partial index only for a query that repeats its
/// literal term.
macro_rules! sql {
    ($($arg:tt)*) => {{
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!($($arg)*));
        SQL.as_str()
    }};
}

mod bridges;
mod connections;
mod events;
mod key_filter;
mod messages;
mod noted;
mod outbox;
mod permissions;
mod receipts;
mod replicas;
mod rooms;
mod rows;
mod thread_cache;
mod threads;
mod tools;
mod turns;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Params, Row, TransactionBehavior, params};

use super::rules::{self, KeptKey, SendFacts};
use super::*;

use events::*;
use messages::*;
#[cfg(test)]
use outbox::*;
use receipts::*;
use rows::*;

use connections::Connections;
use key_filter::KeyFilter;
use noted::note;
use thread_cache::{ThreadCache, touched};
use turns::*;

/// Schema migrations, applied in order, each once (recorded in `schema_migrations`).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "threads", include_str!("migrations/0001_threads.sql")),
    (2, "mailbox", include_str!("migrations/0002_mailbox.sql")),
    (3, "bridges", include_str!("migrations/0003_bridges.sql")),
    (4, "outbox", include_str!("migrations/0004_outbox.sql")),
    (5, "bridge inbound switch", include_str!("migrations/0005_bridge_inbound_switch.sql")),
    (6, "turn agents", include_str!("migrations/0006_turn_agents.sql")),
    (7, "receipts by message", include_str!("migrations/0007_receipts_by_message.sql")),
    (8, "outbox follow-up", include_str!("migrations/0008_outbox_follow_up.sql")),
    (9, "turn start events", include_str!("migrations/0009_turn_start_events.sql")),
    (10, "message inputs by reference", include_str!("migrations/0010_message_inputs_by_reference.sql")),
    (11, "outbox due by peer", include_str!("migrations/0011_outbox_due_by_peer.sql")),
    (12, "pairing requests expire", include_str!("migrations/0012_pairing_requests_expire.sql")),
    (13, "keys by insert order", include_str!("migrations/0013_keys_by_insert_order.sql")),
    (14, "bridges revoked by peer", include_str!("migrations/0014_bridges_revoked_by_peer.sql")),
    (15, "pairing requests replaced", include_str!("migrations/0015_pairing_requests_replaced.sql")),
    (16, "outbox keys across peers", include_str!("migrations/0016_outbox_keys_across_peers.sql")),
    (17, "refusals by key", include_str!("migrations/0017_refusals_by_key.sql")),
    (18, "pairing requests' address", include_str!("migrations/0018_pairing_requests_address.sql")),
    (19, "bridged message deadlines", include_str!("migrations/0019_bridged_message_deadlines.sql")),
    (20, "given up keys", include_str!("migrations/0020_given_up_keys.sql")),
    (21, "messages by deadline", include_str!("migrations/0021_messages_by_deadline.sql")),
    (22, "outbox unsettled", include_str!("migrations/0022_outbox_unsettled.sql")),
    (23, "pairing requests withdrawn", include_str!("migrations/0023_pairing_requests_withdrawn.sql")),
    (24, "bridges requested", include_str!("migrations/0024_bridges_requested.sql")),
    (25, "receipts' words", include_str!("migrations/0025_receipts_words.sql")),
    (26, "source workspaces", include_str!("migrations/0026_source_workspaces.sql")),
    (27, "rooms", include_str!("migrations/0027_rooms.sql")),
    (28, "rooms across homes", include_str!("migrations/0028_rooms_across_homes.sql")),
    (29, "rooms' last seq from the log", include_str!("migrations/0029_rooms_last_seq_from_the_log.sql")),
    (30, "agent sessions and usage", include_str!("migrations/0030_agent_sessions_and_usage.sql")),
    (31, "room members' join order", include_str!("migrations/0031_room_members_join_order.sql")),
    (32, "agent wakes", include_str!("migrations/0032_agent_wakes.sql")),
    (33, "permission requests", include_str!("migrations/0033_permission_requests.sql")),
    (34, "turn parts", include_str!("migrations/0034_turn_parts.sql")),
    (35, "carrying bridge", include_str!("migrations/0035_carrying_bridge.sql")),
    (36, "open attention", include_str!("migrations/0036_open_attention.sql")),
    (37, "replicas", include_str!("migrations/0037_replicas.sql")),
    (38, "home", include_str!("migrations/0038_home.sql")),
    (39, "outbox_trace", include_str!("migrations/0039_outbox_trace.sql")),
    (40, "session tools", include_str!("migrations/0040_session_tools.sql")),
];

/// Readers in parallel with the single writer; a home's reads are short.
const READ_CONNECTIONS: usize = 4;

#[derive(Clone)]
pub struct SqliteStore {
    path: PathBuf,
    db: Arc<Connections>,
    threads: Arc<ThreadCache>,
    changes: Arc<Publisher>,
    /// The keys of the outbox (cross-home sends).
    outbox_keys: Arc<KeyFilter>,
    /// The keys of this home's senders' messages to its own threads.
    local_keys: Arc<KeyFilter>,
    /// The reads that fill the key filters as the store opens; joined by `close`.
    filling: Arc<tokio_util::task::TaskTracker>,
    /// The home's clock, read as a write runs (see [`SqliteStore::on_clock`]).
    clock: Clock,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish()
    }
}

impl From<rusqlite::Error> for StoreError {
    /// Errors a caller acts on apart get their own variants; the store's file is named by
    /// [`StoreError::at`] where the error leaves the connection.
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        use rusqlite::ffi::{SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE};
        if let rusqlite::Error::SqliteFailure(failure, message) = &e {
            if matches!(failure.extended_code, SQLITE_CONSTRAINT_UNIQUE | SQLITE_CONSTRAINT_PRIMARYKEY) {
                return StoreError::Conflict(message.clone().unwrap_or_else(|| e.to_string()));
            }
            match failure.code {
                ErrorCode::DiskFull => return StoreError::DiskFull(String::new()),
                ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                    return StoreError::Corrupt { path: String::new(), detail: e.to_string() };
                }
                _ => {}
            }
        }
        StoreError::Backend(e.to_string())
    }
}

// ----- opening -------------------------------------------------------------------------

impl SqliteStore {
    /// One statement as a write of its own. The parameters are owned and cloned for each
    /// run: the writer may run a write twice (see `connections`).
    async fn write_statement<P: Params + Clone + Send + 'static>(
        &self,
        sql: &'static str,
        params: P,
    ) -> StoreResult<()> {
        self.db.write(move |conn| run(conn, sql, params.clone()).map(drop)).await
    }

    /// Opens (creating if needed) the database at `url` (see [`SqliteStore::path_of`]) and
    /// applies pending migrations.
    pub async fn open(url: &str, base: &Path) -> StoreResult<Self> {
        Self::open_path(&Self::path_of(url, base)?).await
    }

    /// The store with its writes reading `clock` (the system's by default): a write that
    /// may expire what is overdue or start a turn decides by the time as it runs, not as it
    /// was asked for — a write waits its turn meanwhile, and a replay answered in between
    /// may have declared a message expired.
    pub fn on_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The database file `url` names — `sqlite://PATH` or a plain path, a relative one taken
    /// from `base` (the home: never the directory kikid was started in).
    pub fn path_of(url: &str, base: &Path) -> StoreResult<PathBuf> {
        let path = PathBuf::from(
            url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url),
        );
        if path.as_os_str().is_empty() || url.contains("://") && !url.starts_with("sqlite://") {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        }
        Ok(base.join(path))
    }

    /// The files of the database at `path`: itself, its WAL and its shared-memory index.
    pub fn files(path: &Path) -> [PathBuf; 3] {
        ["", "-wal", "-shm"].map(|suffix| {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            PathBuf::from(file)
        })
    }

    /// The full integrity check of the database at `path` for a home no daemon serves
    /// (`kikid --check`): opened as it is, never created or migrated.
    pub async fn check_file(path: &Path) -> StoreResult<Vec<String>> {
        let owned = path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let conn = Connection::open_with_flags(&owned, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)?;
            integrity(&conn, None)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("checking the store failed: {e}")))?
        .map_err(|e| e.at(path))
    }

    /// Opens the database at `path`, refusing a damaged one (a quick check bounded in time,
    /// before any migration writes to it), and applies pending migrations.
    pub async fn open_path(path: &Path) -> StoreResult<Self> {
        let owned = path.to_path_buf();
        let threads = Arc::new(ThreadCache::default());
        let changes = Arc::new(Publisher::default());
        let (cache, publisher) = (threads.clone(), changes.clone());
        let db = tokio::task::spawn_blocking(move || {
            let setup = |conn: &mut Connection| {
                if let Some(problem) = integrity(conn, Some(QUICK_CHECK_WITHIN))?.into_iter().next() {
                    return Err(StoreError::Corrupt { path: String::new(), detail: problem });
                }
                migrate(conn)?;
                owner_only(&owned);
                Ok(())
            };
            let committed = move |writes, took| {
                cache.committed();
                publisher.committed(writes, took);
                publisher.publish(noted::take());
            };
            Connections::open(&owned, READ_CONNECTIONS, setup, committed)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("opening the store failed: {e}")))?
        .map_err(|e| e.at(path))?;
        let store = Self {
            path: path.to_path_buf(),
            db: Arc::new(db),
            threads,
            changes,
            outbox_keys: Default::default(),
            local_keys: Default::default(),
            filling: Default::default(),
            clock: Clock::system(),
        };
        store.filling.spawn(fill_keys(
            store.db.clone(),
            store.outbox_keys.clone(),
            "SELECT key_scope, key FROM outbox",
        ));
        store.filling.spawn(fill_keys(
            store.db.clone(),
            store.local_keys.clone(),
            "SELECT scope, key FROM idempotency_keys WHERE instr(scope, '/') = 0",
        ));
        store.filling.close();
        Ok(store)
    }
}

/// Whether a key scope is one of this home's senders (a thread, or `""` for external
/// clients), not a peer's (`PEER/THREAD`, the target side's dedup).
fn is_local_scope(scope: &str) -> bool {
    !scope.contains('/')
}

/// Adds the keys `sql` lists (scope, key) to `filter`, on a reader, beside the home's work.
async fn fill_keys(db: Arc<Connections>, filter: Arc<KeyFilter>, sql: &'static str) {
    let filled = db
        .read(move |conn| {
            let mut keys = conn.prepare(sql)?;
            let mut rows = keys.query([])?;
            while let Some(row) = rows.next()? {
                let (scope, key): (String, String) = (row.get(0)?, row.get(1)?);
                filter.add(&scope, &key);
            }
            filter.set_filled();
            Ok(())
        })
        .await;
    match filled {
        // The home stopped first: nothing more is sent.
        Ok(()) | Err(StoreError::Closed) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read a key filter's keys: probes read the store"),
    }
}

/// The database and its WAL are the home's data: owner-only, like the home directory.
fn owner_only(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for file in SqliteStore::files(path) {
        let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
    }
}

/// How long the check at start may take: a store of a few hundred MB is checked whole; a
/// larger one starts with part of it checked (the log says so) and `kiki doctor` checks it
/// all.
const QUICK_CHECK_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The database's problems: `PRAGMA quick_check` (page and b-tree structure) stopped after
/// `within`, or the full `PRAGMA integrity_check` (also every index against its table) with
/// no bound.
fn integrity(conn: &Connection, within: Option<std::time::Duration>) -> StoreResult<Vec<String>> {
    let pragma = if within.is_some() { "PRAGMA quick_check" } else { "PRAGMA integrity_check" };
    if let Some(within) = within {
        let started = std::time::Instant::now();
        // Called every few thousand virtual-machine steps; `true` interrupts the check.
        conn.progress_handler(10_000, Some(move || started.elapsed() > within));
    }
    let checked = (|| -> rusqlite::Result<Vec<String>> {
        let mut statement = conn.prepare(pragma)?;
        let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
        rows.collect()
    })();
    conn.progress_handler(0, None::<fn() -> bool>);
    match checked {
        // A problem may span lines ("*** in database main ***\nTree 28 page 28: …").
        Ok(rows) => {
            Ok(rows.into_iter().filter(|row| row != "ok").map(|row| row.replace('\n', " ")).collect())
        }
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::OperationInterrupted => {
            tracing::warn!(
                within = ?within,
                "the store's quick check did not finish in time; it starts checked in part \
                 (`kiki doctor` checks it whole)"
            );
            Ok(Vec::new())
        }
        Err(e) => Err(e.into()),
    }
}

fn migrate(conn: &mut Connection) -> StoreResult<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )?;
    // A database a newer kikid migrated may hold data in a form this one misreads.
    let newest: Option<i64> =
        conn.query_row("SELECT MAX(version) FROM schema_migrations", [], |row| row.get(0))?;
    let known = MIGRATIONS.last().map_or(0, |&(version, _, _)| version);
    if let Some(newest) = newest.filter(|&v| v > known) {
        return Err(StoreError::Backend(format!(
            "the database is at schema version {newest}, written by a newer kikid (this one knows \
             versions up to {known}); run that kikid, or restore a backup made for this one"
        )));
    }
    for &(version, name, sql) in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let applied = tx
            .query_row("SELECT version FROM schema_migrations WHERE version = ?", [version], |_| Ok(()))
            .optional()?;
        if applied.is_some() {
            continue;
        }
        // The cause alone, on one line: an error carrying the migration's whole SQL would
        // push it out of the log lines `kiki up` shows.
        let failed = |e: rusqlite::Error| {
            let message = match &e {
                rusqlite::Error::SqlInputError { msg, offset, .. } => format!("{msg} (at offset {offset})"),
                e => e.to_string(),
            };
            StoreError::Migration { version, name, message }
        };
        tx.execute_batch(sql).map_err(failed)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, strftime('%s','now'))",
            params![version, name],
        )
        .map_err(failed)?;
        tx.commit().map_err(failed)?;
    }
    Ok(())
}

// The outbox statements by peer walk `outbox_due` (entries in flight, by peer and due time)
// or `outbox_unsettled` (expiries to ask about), never a peer's whole history nor the other
// peers' due entries.

// ----- the store -----------------------------------------------------------------------

#[async_trait]
impl Store for SqliteStore {
    fn changes(&self) -> &Publisher {
        &self.changes
    }

    fn describe(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    async fn check(&self, full: bool) -> StoreResult<Vec<String>> {
        let within = (!full).then_some(QUICK_CHECK_WITHIN);
        self.db.read(move |conn| integrity(conn, within)).await
    }

    async fn backup(&self, dest: &Path) -> StoreResult<()> {
        let dest = dest.to_path_buf();
        self.db
            .read(move |conn| {
                // A new file only: a backup never writes over anything.
                if dest.exists() {
                    return Err(StoreError::Backend(format!("{} exists already", dest.display())));
                }
                let mut copy = Connection::open(&dest)?;
                // Every page in one step: one read transaction, so the copy is one moment
                // of the store, whatever commits meanwhile.
                rusqlite::backup::Backup::new(conn, &mut copy)?.run_to_completion(
                    i32::MAX,
                    std::time::Duration::ZERO,
                    None,
                )?;
                owner_only(&dest);
                Ok(())
            })
            .await
    }

    async fn close(&self) {
        // A fill still reading ends with the store's connections (`Closed`): wait for it.
        self.db.close().await;
        self.filling.wait().await;
    }
}

#[cfg(test)]
mod tests;
