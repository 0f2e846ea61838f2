//! The embedded default store: one SQLite file in WAL mode, `synchronous = FULL` (a commit
//! is on disk when it returns).
//!
//! Each operation runs whole on a connection thread ([`connections`]): writes on the single
//! writer — atomically, grouped with the writes queued beside it into one commit (a write
//! that fails is rolled back alone: see [`connections`]) — and reads on read-only
//! connections that never wait for a write. Statements are prepared once per connection and
//! cached; inside a thread a statement costs microseconds, so operations loop over rows
//! with single-row statements instead of building SQL.

mod bridges;
mod connections;
mod events;
mod key_filter;
mod messages;
mod outbox;
mod receipts;
mod thread_cache;
mod threads;
mod turns;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Params, Row, TransactionBehavior, params};

use super::rules::{self, KeptKey, SendFacts};
use super::*;
use connections::Connections;
use key_filter::KeyFilter;
use thread_cache::{ThreadCache, touched};

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
    (
        10,
        "message inputs by reference",
        include_str!("migrations/0010_message_inputs_by_reference.sql"),
    ),
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
];

/// Readers in parallel with the single writer; a home's reads are short.
const READ_CONNECTIONS: usize = 4;

#[derive(Clone)]
pub struct SqliteStore {
    path: PathBuf,
    db: Arc<Connections>,
    threads: Arc<ThreadCache>,
    /// The keys of the outbox (cross-home sends).
    outbox_keys: Arc<KeyFilter>,
    /// The keys of this home's senders' messages to its own threads.
    local_keys: Arc<KeyFilter>,
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

// ----- the bridges' words in rows ---------------------------------------------------------

/// Each word type as its one spelling in a TEXT column.
macro_rules! word_columns {
    ($($word:ty),*) => {$(
        impl rusqlite::ToSql for $word {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }

        impl rusqlite::types::FromSql for $word {
            fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                let text = value.as_str()?;
                <$word>::parse(text).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(format!("{text:?} is not a {}", stringify!($word)).into())
                })
            }
        }
    )*};
}

word_columns!(Direction, BridgeState, RequestStatus, OutboxStatus);

/// A permission set as its comma-separated words (`read,send`).
impl rusqlite::ToSql for Permissions {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.joined().into())
    }
}

impl rusqlite::types::FromSql for Permissions {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        Permissions::parse(text.split(',').filter(|w| !w.is_empty())).map_err(|word| {
            rusqlite::types::FromSqlError::Other(format!("{word:?} is not a permission").into())
        })
    }
}

// ----- statement helpers ---------------------------------------------------------------

/// Every row of a cached statement, mapped.
fn all<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    map: impl Fn(&Row) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    page(conn, sql, params, u32::MAX, map)
}

/// The first `limit` rows of a cached statement, mapped. Pages are cut here rather than by
/// `LIMIT ?`: a bound LIMIT makes SQLite re-prepare (re-parse and re-plan) the statement at
/// every execution, and every paged query walks an index in its ORDER BY, so stepping stops
/// after the same rows LIMIT would have read.
fn page<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    limit: u32,
    map: impl Fn(&Row) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let mut statement = conn.prepare_cached(sql)?;
    let mut rows = statement.query(params)?;
    let mut out = Vec::new();
    while out.len() < limit as usize
        && let Some(row) = rows.next()?
    {
        out.push(map(row)?);
    }
    Ok(out)
}

/// The first row of a cached statement, mapped.
fn first<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    map: impl Fn(&Row) -> StoreResult<T>,
) -> StoreResult<Option<T>> {
    let mut statement = conn.prepare_cached(sql)?;
    let mut rows = statement.query(params)?;
    rows.next()?.map(map).transpose()
}

/// The number a `SELECT COUNT(*) …` statement answers.
fn count(conn: &Connection, sql: &str, params: impl Params) -> StoreResult<u64> {
    let n = first(conn, sql, params, |row| Ok(row.get::<_, i64>(0)?))?;
    Ok(n.unwrap_or(0) as u64)
}

/// Runs a cached statement; the number of rows changed.
fn run(conn: &Connection, sql: &str, params: impl Params) -> StoreResult<usize> {
    Ok(conn.prepare_cached(sql)?.execute(params)?)
}

// ----- rows ----------------------------------------------------------------------------

const THREAD_COLUMNS: &str = "seq, id, workspace_id, cwd, title, profile, created_at, updated_at, archived, enabled, running, turn_count, communication";
const TURN_COLUMNS: &str = "id, thread_id, seq, status, input, output, error, started_at, ended_at";
const OUTBOX_COLUMNS: &str = "id, bridge_id, peer_home_id, target_session, source_thread, content, key_scope, key, \
     request_hash, status, reason, remote_message_id, attempts, next_attempt_at, created_at, updated_at";
const MESSAGE_COLUMNS: &str = "id, target_thread, source_host, source_thread, content, status, reason, created_at, delivered_at, turn_id, deadline";
const EVENT_COLUMNS: &str = "seq, thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, at";
const BRIDGE_COLUMNS: &str = "id, direction, peer_home_id, alias, address, state, permissions, workspaces, \
     request_id, created_at, updated_at, last_success, last_error, last_error_at, revoked_by_peer";

fn thread_from(row: &Row) -> StoreResult<ThreadRecord> {
    let communication: String = row.get("communication")?;
    Ok(ThreadRecord {
        seq: row.get("seq")?,
        id: row.get("id")?,
        workspace_id: row.get("workspace_id")?,
        cwd: row.get("cwd")?,
        title: row.get("title")?,
        profile: row.get("profile")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        archived: row.get("archived")?,
        enabled: row.get("enabled")?,
        running: row.get("running")?,
        turn_count: row.get("turn_count")?,
        communication: CommunicationSetting::parse(&communication)
            .ok_or_else(|| StoreError::Backend(format!("unknown communication setting {communication:?}")))?,
    })
}

fn turn_from(row: &Row) -> StoreResult<TurnRecord> {
    let status: String = row.get("status")?;
    Ok(TurnRecord {
        id: row.get("id")?,
        thread_id: row.get("thread_id")?,
        seq: row.get("seq")?,
        status: TurnStatus::parse(&status)?,
        input: row.get("input")?,
        output: row.get("output")?,
        error: row.get("error")?,
        started_at: row.get("started_at")?,
        ended_at: row.get("ended_at")?,
        items: Vec::new(),
    })
}

fn source_from(row: &Row) -> StoreResult<Option<SourceRef>> {
    let thread: Option<String> = row.get("source_thread")?;
    let host: Option<String> = row.get("source_host")?;
    Ok(thread.map(|thread_id| SourceRef { host_id: host.unwrap_or_default(), thread_id }))
}

fn input_from(row: &Row) -> StoreResult<InputRecord> {
    let kind: String = row.get("kind")?;
    Ok(InputRecord {
        id: row.get("id")?,
        kind: InputKind::parse(&kind)?,
        content: row.get("content")?,
        message_id: row.get("message_id")?,
        source: source_from(row)?,
        now: row.get("created_at")?,
    })
}

fn outbox_from(row: &Row) -> StoreResult<OutboxRecord> {
    Ok(OutboxRecord {
        id: row.get("id")?,
        bridge_id: row.get("bridge_id")?,
        peer_home_id: row.get("peer_home_id")?,
        target_session: row.get("target_session")?,
        source_thread: row.get("source_thread")?,
        content: row.get("content")?,
        key_scope: row.get("key_scope")?,
        key: row.get("key")?,
        request_hash: row.get("request_hash")?,
        status: row.get("status")?,
        reason: row.get("reason")?,
        remote_message_id: row.get("remote_message_id")?,
        attempts: row.get("attempts")?,
        next_attempt_at: row.get("next_attempt_at")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
    })
}

fn event_from(row: &Row) -> StoreResult<EventRecord> {
    let kind: String = row.get("kind")?;
    let turn_status: Option<String> = row.get("turn_status")?;
    Ok(EventRecord {
        seq: row.get("seq")?,
        thread_id: row.get("thread_id")?,
        kind: EventKind::parse(&kind)?,
        turn_id: row.get("turn_id")?,
        turn_status: turn_status.as_deref().map(TurnStatus::parse).transpose()?,
        reason: row.get("reason")?,
        lifecycle: row.get("lifecycle")?,
        message_id: row.get("message_id")?,
        at: row.get("at")?,
    })
}

fn message_from(row: &Row) -> StoreResult<MessageRecord> {
    let status: String = row.get("status")?;
    Ok(MessageRecord {
        id: row.get("id")?,
        target_thread: row.get("target_thread")?,
        source: source_from(row)?,
        content: row.get("content")?,
        status: MessageStatus::parse(&status)?,
        reason: row.get("reason")?,
        created_at: row.get("created_at")?,
        delivered_at: row.get("delivered_at")?,
        turn_id: row.get("turn_id")?,
        deadline: row.get("deadline")?,
    })
}

fn bridge_from(row: &Row) -> StoreResult<BridgeRecord> {
    Ok(BridgeRecord {
        id: row.get("id")?,
        direction: row.get("direction")?,
        peer_home_id: row.get("peer_home_id")?,
        alias: row.get("alias")?,
        address: row.get("address")?,
        state: row.get("state")?,
        permissions: row.get("permissions")?,
        workspaces: split_list(&row.get::<_, String>("workspaces")?),
        request_id: row.get("request_id")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        last_success: row.get("last_success")?,
        last_error: row.get("last_error")?,
        last_error_at: row.get("last_error_at")?,
        revoked_by_peer: row.get("revoked_by_peer")?,
    })
}

fn request_from(row: &Row) -> StoreResult<BridgeRequestRecord> {
    Ok(BridgeRequestRecord {
        id: row.get("id")?,
        peer_home_id: row.get("peer_home_id")?,
        name: row.get("name")?,
        want: row.get("want")?,
        status: row.get("status")?,
        created_at: row.get("created_at")?,
        decided_at: row.get("decided_at")?,
        address: row.get("address")?,
    })
}

fn receipt_from(row: &Row) -> StoreResult<ReceiptRecord> {
    Ok(ReceiptRecord {
        peer_home_id: row.get("peer_home_id")?,
        key: row.get("key")?,
        message_id: row.get("message_id")?,
        target: row.get("target")?,
        status: row.get("status")?,
        reason: row.get("reason")?,
        at: row.get("at")?,
    })
}

/// `"a,b"` → `["a", "b"]`; `""` → `[]`.
fn split_list(text: &str) -> Vec<String> {
    text.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()
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
        let cache = threads.clone();
        let db = tokio::task::spawn_blocking(move || {
            let setup = |conn: &mut Connection| {
                if let Some(problem) = integrity(conn, Some(QUICK_CHECK_WITHIN))?.into_iter().next() {
                    return Err(StoreError::Corrupt { path: String::new(), detail: problem });
                }
                migrate(conn)?;
                owner_only(&owned);
                Ok(())
            };
            Connections::open(&owned, READ_CONNECTIONS, setup, move || cache.committed())
        })
        .await
        .map_err(|e| StoreError::Backend(format!("opening the store failed: {e}")))?
        .map_err(|e| e.at(path))?;
        let store = Self {
            path: path.to_path_buf(),
            db: Arc::new(db),
            threads,
            outbox_keys: Default::default(),
            local_keys: Default::default(),
        };
        tokio::spawn(fill_keys(
            store.db.clone(),
            store.outbox_keys.clone(),
            "SELECT key_scope, key FROM outbox",
        ));
        tokio::spawn(fill_keys(
            store.db.clone(),
            store.local_keys.clone(),
            "SELECT scope, key FROM idempotency_keys WHERE instr(scope, '/') = 0",
        ));
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

// ----- shared statements ---------------------------------------------------------------

/// An event about to be logged (its seq is assigned by the insert).
fn event(thread_id: &str, kind: EventKind, now: Millis) -> EventRecord {
    EventRecord {
        seq: 0,
        thread_id: thread_id.to_string(),
        kind,
        turn_id: None,
        turn_status: None,
        reason: String::new(),
        lifecycle: String::new(),
        message_id: None,
        at: now,
    }
}

fn insert_event(conn: &Connection, e: &EventRecord) -> StoreResult<i64> {
    let seq = first(
        conn,
        "INSERT INTO events (thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
        params![
            e.thread_id,
            e.kind.as_str(),
            e.turn_id,
            e.turn_status.map(TurnStatus::as_str),
            e.reason,
            e.lifecycle,
            e.message_id,
            e.at
        ],
        |row| Ok(row.get::<_, i64>(0)?),
    )?;
    seq.ok_or_else(|| StoreError::Backend("the event insert returned no seq".into()))
}

/// Writes an input: queued (`turn` = `None`) or already taken by the turn it starts.
fn insert_input(
    conn: &Connection,
    thread_id: &str,
    input: &NewInput,
    wake: bool,
    turn: Option<&str>,
) -> StoreResult<()> {
    run(
        conn,
        "INSERT INTO inputs (id, thread_id, kind, content, message_id, source_host, source_thread, created_at, wake, turn_id)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        params![
            input.id,
            thread_id,
            input.kind.as_str(),
            input.content,
            input.message_id,
            input.source.as_ref().map(|s| &s.host_id),
            input.source.as_ref().map(|s| &s.thread_id),
            input.now,
            wake,
            turn
        ],
    )?;
    Ok(())
}

/// The outbox entry of a sender's key for a peer.
/// The outbox entry holding a sender's key: the one for `peer` if there is one, else the
/// one for another peer (a key names one message, wherever it went).
fn outbox_entry(conn: &Connection, peer: &str, scope: &str, key: &str) -> StoreResult<Option<OutboxRecord>> {
    first(
        conn,
        &format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE key_scope = ? AND key = ? ORDER BY peer_home_id <> ? LIMIT 1"
        ),
        params![scope, key, peer],
        outbox_from,
    )
}

fn upsert_bridge(conn: &Connection, b: &BridgeRecord) -> StoreResult<()> {
    run(
        conn,
        &format!(
            "INSERT OR REPLACE INTO bridges ({BRIDGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        params![
            b.id,
            b.direction,
            b.peer_home_id,
            b.alias,
            b.address,
            b.state,
            b.permissions,
            b.workspaces.join(","),
            b.request_id,
            b.created_at,
            b.updated_at,
            b.last_success,
            b.last_error,
            b.last_error_at,
            b.revoked_by_peer
        ],
    )?;
    Ok(())
}

fn insert_receipt(conn: &Connection, r: &ReceiptRecord) -> StoreResult<()> {
    run(
        conn,
        "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
         VALUES (?, ?, ?, ?, ?, ?, ?)",
        params![r.peer_home_id, r.key, r.message_id, r.target, r.status, r.reason, r.at],
    )?;
    Ok(())
}

fn message_in(conn: &Connection, id: &str) -> StoreResult<Option<MessageRecord>> {
    first(conn, &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?"), [id], message_from)
}

/// The id of a message's one input (see `accept_message`).
fn message_input_id(message_id: &str) -> String {
    format!("in_{message_id}")
}

fn thread_in(conn: &Connection, id: &str) -> StoreResult<Option<ThreadRecord>> {
    first(conn, &format!("SELECT {THREAD_COLUMNS} FROM threads WHERE id = ?"), [id], thread_from)
}

/// Fills in the input items of `turns`. One small indexed query per turn: in-process
/// SQLite answers each in microseconds, so there is no round trip to save.
fn attach_items(conn: &Connection, turns: &mut [TurnRecord]) -> StoreResult<()> {
    for turn in turns {
        turn.items = all(
            conn,
            "SELECT id, kind, '' AS content, message_id, source_host, source_thread, created_at
             FROM inputs WHERE turn_id = ? ORDER BY seq",
            [&turn.id],
            |row| {
                let input = input_from(row)?;
                Ok(TurnItem { kind: input.kind, message_id: input.message_id, source: input.source })
            },
        )?;
    }
    Ok(())
}

/// A kept key's request hash and message.
fn stored_key(conn: &Connection, scope: &str, key: &str) -> StoreResult<Option<(String, String)>> {
    first(
        conn,
        "SELECT request_hash, message_id FROM idempotency_keys WHERE scope = ? AND key = ?",
        params![scope, key],
        |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
    )
}

/// The facts a send is decided by (see [`rules::SendFacts`]), read in the transaction that
/// would store it. The key decides before anything else does: when it is kept, nothing
/// else is read.
fn send_facts(conn: &Connection, m: &NewMessage) -> StoreResult<SendFacts> {
    let key = stored_key(conn, &m.key_scope, &m.key)?
        .map(|(request_hash, message_id)| KeptKey { request_hash, message_id });
    if key.is_some() {
        return Ok(SendFacts { key, ..SendFacts::default() });
    }
    let key_sent_away = first(
        conn,
        "SELECT id FROM outbox WHERE key_scope = ? AND key = ? LIMIT 1",
        params![m.key_scope, m.key],
        |row| Ok(row.get::<_, String>(0)?),
    )?;
    let key_given_up = rules::may_be_given_up(m)
        && first(
            conn,
            "SELECT 1 FROM given_up_keys WHERE scope = ? AND key = ?",
            params![m.key_scope, m.key],
            |_| Ok(()),
        )?
        .is_some();
    let target_live =
        first(conn, "SELECT 1 FROM threads WHERE id = ? AND archived = 0", [&m.target_thread], |_| Ok(()))?
            .is_some();
    let (bridge_open, id_taken) = match rules::bridged_from(m) {
        None => (true, false),
        Some(peer) => {
            let open = first(
                conn,
                "SELECT 1 FROM bridges WHERE direction = 'inbound' AND peer_home_id = ? AND state = 'active'",
                [peer],
                |_| Ok(()),
            )?;
            let taken = "SELECT 1 FROM messages WHERE id = ?1 UNION ALL SELECT 1 FROM outbox WHERE id = ?1";
            (open.is_some(), first(conn, taken, [&m.id], |_| Ok(()))?.is_some())
        }
    };
    Ok(SendFacts { key, key_sent_away, key_given_up, target_live, bridge_open, id_taken })
}

/// Decides a send by the rules (see [`rules::refuse_send`]) and, if accepted, writes its
/// message, key and input (queued, or taken by the turn the send starts).
/// Writes run one after another on the writer, so of two sends with one key the second
/// sees the first (even within one group commit) and replays it.
fn accept_message(conn: &Connection, m: &NewMessage) -> StoreResult<SendOutcome> {
    if let Some(refused) = rules::refuse_send(m, &send_facts(conn, m)?) {
        return Ok(refused);
    }
    // The input refers to the message for its content (see `claim_turn`): a message of up
    // to 100,000 characters is not copied into its queued input.
    let input = NewInput {
        id: message_input_id(&m.id),
        kind: InputKind::Message,
        content: String::new(),
        message_id: Some(m.id.clone()),
        source: m.source.clone(),
        now: m.now,
    };
    // A message that starts its turn is written delivered, its input taken: it never enters
    // the indexes of pending messages and queued input only to leave them in this commit.
    let turn = match &m.claim {
        Some(claim) if m.wake => {
            let arriving = InputRecord { content: m.content.clone(), ..input.clone() };
            claim_turn(conn, &m.target_thread, claim, m.now, Some(arriving))?
        }
        _ => None,
    };
    // The turn may have started for other queued input without taking this one.
    let taken_by =
        turn.as_ref().filter(|t| t.inputs.iter().any(|i| i.id == input.id)).map(|t| t.turn.id.as_str());
    let delivered = taken_by.is_some();
    let status = if delivered { "delivered" } else { "pending" };
    run(
        conn,
        "INSERT INTO messages (id, target_thread, source_host, source_thread, content, status, created_at,
                               delivered_at, turn_id, deadline)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        params![
            m.id,
            m.target_thread,
            m.source.as_ref().map(|s| &s.host_id),
            m.source.as_ref().map(|s| &s.thread_id),
            m.content,
            status,
            m.now,
            taken_by.map(|_| m.now),
            taken_by,
            m.deadline.filter(|_| !delivered)
        ],
    )?;
    run(
        conn,
        "INSERT INTO idempotency_keys (scope, key, request_hash, message_id, created_at) VALUES (?, ?, ?, ?, ?)",
        params![m.key_scope, m.key, m.request_hash, m.id, m.now],
    )?;
    insert_input(conn, &m.target_thread, &input, m.wake, taken_by)?;
    if let Some(receipt) = &m.receipt {
        insert_receipt(
            conn,
            &ReceiptRecord { message_id: m.id.clone(), status: status.into(), ..receipt.clone() },
        )?;
    }
    Ok(SendOutcome::Accepted { message_id: m.id.clone(), delivered, turn: turn.map(Box::new) })
}

/// A bridged message that became undeliverable here gets a receipt saying so (`rejected`
/// with `reason`, or `expired`), copied from its receipt of acceptance (found by message
/// id); a local message has no receipt and gets none.
fn receipt_follows(conn: &Connection, message_id: &str, reason: &str, now: Millis) -> StoreResult<()> {
    let status = if reason == EXPIRED { EXPIRED } else { "rejected" };
    run(
        conn,
        "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
         SELECT peer_home_id, key, message_id, target, ?, ?, ? FROM bridge_receipts
         WHERE message_id = ? LIMIT 1",
        params![status, reason, now, message_id],
    )?;
    Ok(())
}

/// A thread's bridged messages whose deadline passed before they were delivered or
/// confirmed (`?` = thread, now). Walks the thread's pending messages only.
const OVERDUE_THREAD_MESSAGES: &str =
    "SELECT id FROM messages WHERE target_thread = ? AND status = 'pending' AND deadline <= ?";

/// Bridged messages of any thread whose deadline passed before they were delivered or
/// confirmed, earliest first (`?` = now, limit). Walks `messages_by_deadline`.
const OVERDUE_MESSAGES: &str = "SELECT id FROM messages WHERE status = 'pending' AND deadline IS NOT NULL
     AND deadline <= ? ORDER BY deadline LIMIT ?";

/// Makes a pending message undeliverable with `reason`: its queued input goes and a bridged
/// one gets a receipt.
fn undeliver(conn: &Connection, message_id: &str, reason: &str, now: Millis) -> StoreResult<()> {
    run(
        conn,
        "UPDATE messages SET status = 'undeliverable', reason = ?, deadline = NULL WHERE id = ?",
        params![reason, message_id],
    )?;
    run(conn, "DELETE FROM inputs WHERE id = ? AND turn_id IS NULL", [message_input_id(message_id)])?;
    receipt_follows(conn, message_id, reason, now)
}

/// Expires the bridged messages an `OVERDUE_*` statement lists (their deadline passed):
/// they are never delivered, as their sources declare them expired. How many.
fn expire_overdue(
    conn: &Connection,
    overdue: &str,
    params: impl rusqlite::Params,
    now: Millis,
) -> StoreResult<usize> {
    let ids = all(conn, overdue, params, |row| Ok(row.get::<_, String>(0)?))?;
    for id in &ids {
        undeliver(conn, id, EXPIRED, now)?;
    }
    Ok(ids.len())
}

/// A source's follow-up of its bridged message `message_id` (see [`Store::follow_up`]):
/// confirmed (its deadline dropped) unless `window_over`, expired if its deadline passed or
/// `window_over` found it unconfirmed; the message as it then stands.
fn follow_up_message(
    conn: &Connection,
    message_id: &str,
    window_over: bool,
    now: Millis,
) -> StoreResult<Option<MessageRecord>> {
    let Some(message) = message_in(conn, message_id)? else {
        return Ok(None);
    };
    match message.deadline {
        Some(deadline) if message.status == MessageStatus::Pending => {
            if window_over || deadline <= now {
                undeliver(conn, message_id, EXPIRED, now)?;
                return Ok(Some(MessageRecord {
                    status: MessageStatus::Undeliverable,
                    reason: EXPIRED.into(),
                    deadline: None,
                    ..message
                }));
            }
            run(conn, "UPDATE messages SET deadline = NULL WHERE id = ?", [message_id])?;
            Ok(Some(MessageRecord { deadline: None, ..message }))
        }
        _ => Ok(Some(message)),
    }
}

/// The thread to tell that its message became undeliverable: the sending thread, if it is
/// one of this home's (a bridged message's source thread lives at its source home, which
/// learns from its follow-ups or not at all once the message was delivered).
fn local_sender(source_thread: Option<String>, source_host: Option<&str>) -> Option<String> {
    source_thread.filter(|t| !t.is_empty() && source_host.is_none_or(str::is_empty))
}

/// A turn's messages become undeliverable (`?` = reason, turn), found through the turn's
/// inputs: `messages` has no index by turn, and scanning it would take the writer for as
/// long as the home has history.
const UNDELIVER_TURN_MESSAGES: &str = "UPDATE messages SET status = 'undeliverable', reason = ?
     WHERE status = 'delivered'
       AND id IN (SELECT message_id FROM inputs WHERE turn_id = ? AND message_id IS NOT NULL)
     RETURNING id, target_thread, source_thread, source_host";
/// Drops the queued inputs of a thread's messages (`?` = thread), once they are
/// undeliverable: one pass over the thread's queue, not one per message. These three rely on
/// what `accept_message` and `claim_turn` keep true: a message has one input (same thread,
/// same `source_host`), queued exactly while the message is pending, and taken by the turn
/// recorded as the message's `turn_id`.
const UNQUEUE_THREAD_MESSAGES: &str =
    "DELETE FROM inputs WHERE thread_id = ? AND turn_id IS NULL AND message_id IS NOT NULL";
/// Drops the queued inputs a peer's bridge brought (`?` = peer home id), once their
/// messages are undeliverable: one pass over the queued input, not one per message.
const UNQUEUE_PEER_MESSAGES: &str = "DELETE FROM inputs WHERE turn_id IS NULL AND source_host = ?";

// The outbox statements by peer walk `outbox_due` (entries in flight, by peer and due time)
// or `outbox_unsettled` (expiries to ask about), never a peer's whole history nor the other
// peers' due entries.
/// A peer's due entries, oldest first (after `SELECT` and the columns).
const OUTBOX_DUE: &str = "FROM outbox WHERE peer_home_id = ? AND status IN ('pending', 'accepted')
     AND next_attempt_at <= ? ORDER BY next_attempt_at";
/// A peer's expired entries whose target is still to be asked about them, oldest first
/// (after `SELECT` and the columns): they walk `outbox_unsettled`.
const OUTBOX_UNSETTLED: &str = "FROM outbox WHERE peer_home_id = ? AND status = 'expired'
     AND next_attempt_at < 9223372036854775807 AND next_attempt_at <= ? ORDER BY next_attempt_at";
/// The first time after `?` one of a peer's [`OUTBOX_DUE`] entries is due.
const OUTBOX_NEXT_DUE: &str = "SELECT MIN(next_attempt_at) FROM outbox
     WHERE peer_home_id = ? AND status IN ('pending', 'accepted') AND next_attempt_at > ?";
/// The first time after `?` one of a peer's [`OUTBOX_UNSETTLED`] entries is due.
const OUTBOX_NEXT_UNSETTLED: &str = "SELECT MIN(next_attempt_at) FROM outbox
     WHERE peer_home_id = ? AND status = 'expired' AND next_attempt_at < 9223372036854775807
     AND next_attempt_at > ?";
/// A bridge's unacknowledged entries but those in a JSON list of ids. `status IN` is what lets
/// the index serve (its condition); the bridge's peer, its first column.
const OUTBOX_PENDING: &str = "SELECT COUNT(*) FROM outbox INDEXED BY outbox_due
     WHERE peer_home_id = ? AND status IN ('pending', 'accepted') AND status = 'pending' AND bridge_id = ?
       AND id NOT IN (SELECT value FROM json_each(?))";
/// Makes a peer's entries due now (?1 = now), except those no longer followed up.
const OUTBOX_RETRY_NOW: &str = "UPDATE outbox SET next_attempt_at = ?1 WHERE peer_home_id = ?2
     AND status IN ('pending', 'accepted') AND next_attempt_at > ?1
     AND next_attempt_at < 9223372036854775807";
/// Puts off a peer's entries due before ?1 to ?1, but entry ?3 — or only to the end of
/// their retry window (?4 after they were sent), when that comes first.
const OUTBOX_DEFER: &str = "UPDATE outbox SET next_attempt_at = MIN(?1, created_at + ?4)
     WHERE peer_home_id = ?2 AND id <> ?3 AND status IN ('pending', 'accepted') AND next_attempt_at < ?1";

/// Queued input a turn may take: all of it, except peer messages while the thread's
/// communication is off (`?` = take_messages) and messages brought by a bridge whose
/// inbound access is off.
const TAKEABLE: &str = "thread_id = ? AND turn_id IS NULL AND (? OR source_thread IS NULL)
     AND (source_host IS NULL OR source_host NOT IN
          (SELECT peer_home_id FROM bridges WHERE direction = 'inbound' AND state = 'disabled'))";

/// Starts the thread's next turn with its queued input, if it is idle (see
/// [`Store::claim_turn`]). `arriving` is the input of a send that wakes the thread, not yet
/// written: the turn takes it last, if the thread may take it as [`TAKEABLE`] says, and its
/// writer records it taken.
fn claim_turn(
    conn: &Connection,
    thread_id: &str,
    claim: &TurnClaim,
    now: Millis,
    arriving: Option<InputRecord>,
) -> StoreResult<Option<ClaimedTurn>> {
    let TurnClaim { turn_id, take_messages, render, exec } = claim;
    let thread = first(
        conn,
        "SELECT running, turn_count FROM threads WHERE id = ? AND archived = 0",
        [thread_id],
        |row| Ok((row.get::<_, bool>(0)?, row.get::<_, i64>(1)?)),
    )?;
    let Some((false, turn_count)) = thread else {
        return Ok(None);
    };
    // What its source gave up on never enters a prompt: checked against the clock as the
    // write runs (a replay may have answered `expired` while this claim was queued).
    let clock = now.max(crate::time::now_ms());
    expire_overdue(conn, OVERDUE_THREAD_MESSAGES, params![thread_id, clock], clock)?;
    let queued = all(
        conn,
        &format!(
            "SELECT id, kind, message_id, source_host, source_thread, created_at, wake,
                    COALESCE(NULLIF(content, ''),
                             (SELECT m.content FROM messages m WHERE m.id = inputs.message_id), '') AS content
             FROM inputs WHERE {TAKEABLE} ORDER BY seq"
        ),
        params![thread_id, take_messages],
        |row| Ok((input_from(row)?, row.get::<_, bool>("wake")?)),
    )?;
    // TAKEABLE's conditions for an input not yet written: a peer message only while the
    // thread's communication is on. (A bridged one comes over an active bridge: its caller
    // checked that in this transaction.)
    let arriving = arriving.filter(|input| *take_messages || input.source.is_none());
    if arriving.is_none() && !queued.iter().any(|(_, wake)| *wake) {
        // Nothing here may start a turn by itself; it waits for one that starts.
        return Ok(None);
    }
    let took_queued = !queued.is_empty();
    let inputs: Vec<InputRecord> = queued.into_iter().map(|(input, _)| input).chain(arriving).collect();
    let seq = turn_count + 1;
    let rendered = render(&inputs);
    run(
        conn,
        "INSERT INTO turns (id, thread_id, seq, status, input, started_at, agent, events_before)
         VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6,
                 (SELECT COALESCE(MAX(seq), 0) FROM events WHERE thread_id = ?2))",
        params![turn_id, thread_id, seq, rendered, now, exec.then_some("")],
    )?;
    if took_queued {
        run(
            conn,
            &format!("UPDATE inputs SET turn_id = ? WHERE {TAKEABLE}"),
            params![turn_id, thread_id, take_messages],
        )?;
        run(
            conn,
            "UPDATE messages SET status = 'delivered', delivered_at = ?, turn_id = ?
             WHERE status = 'pending'
               AND id IN (SELECT message_id FROM inputs WHERE turn_id = ? AND message_id IS NOT NULL)",
            params![now, turn_id, turn_id],
        )?;
        // Bridged messages that waited here (their receipt says `pending`) are delivered
        // now. An arriving message has no receipt yet: its own says `delivered` from the start.
        run(
            conn,
            "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
             SELECT peer_home_id, key, message_id, target, 'delivered', '', ? FROM bridge_receipts
             WHERE status = 'pending' AND message_id IN
                   (SELECT message_id FROM inputs WHERE turn_id = ? AND source_host IS NOT NULL)",
            params![now, turn_id],
        )?;
    }
    run(
        conn,
        "UPDATE threads SET running = 1, turn_count = ?, updated_at = ? WHERE id = ?",
        params![seq, now, thread_id],
    )?;
    touched(Some(thread_id));
    let items = inputs
        .iter()
        .map(|i| TurnItem { kind: i.kind, message_id: i.message_id.clone(), source: i.source.clone() })
        .collect();
    Ok(Some(ClaimedTurn {
        turn: TurnRecord {
            id: turn_id.clone(),
            thread_id: thread_id.to_string(),
            seq,
            status: TurnStatus::Running,
            input: rendered,
            output: String::new(),
            error: String::new(),
            started_at: now,
            ended_at: None,
            items,
        },
        inputs,
    }))
}

// ----- the store -----------------------------------------------------------------------

#[async_trait]
impl Store for SqliteStore {
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
        self.db.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    #[test]
    fn a_page_is_cut_in_order_without_re_preparing_its_statement() {
        let mut conn = Connection::open_in_memory().expect("open");
        migrate(&mut conn).expect("migrate");
        for _ in 0..5 {
            conn.execute("INSERT INTO events (thread_id, kind, at) VALUES ('t', 'lifecycle', 0)", [])
                .expect("event");
        }
        let sql = "SELECT seq FROM events WHERE thread_id = ? AND seq > ? ORDER BY seq";
        for (after, limit, expected) in [(0, 2, vec![1, 2]), (1, 3, vec![2, 3, 4]), (3, 10, vec![4, 5])] {
            let seqs =
                page(&conn, sql, params!["t", after], limit, |row| Ok(row.get::<_, i64>(0)?)).expect("page");
            assert_eq!(seqs, expected, "after {after}, limit {limit}");
        }
        let statement = conn.prepare_cached(sql).expect("cached");
        assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
        // What `page` avoids: a bound LIMIT re-prepares at every execution.
        let mut limited = conn.prepare_cached(&format!("{sql} LIMIT ?")).expect("limited");
        for limit in [1, 2] {
            limited.query_map(params!["t", 0, limit], |_| Ok(())).expect("query").for_each(drop);
        }
        assert!(limited.get_status(StatementStatus::RePrepare) > 0);
    }

    /// `EXPLAIN QUERY PLAN` of `sql`, its steps joined by "; ".
    fn query_plan(conn: &Connection, sql: &str) -> String {
        let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).expect("plan");
        let n = statement.parameter_count();
        let rows = statement
            .query_map(rusqlite::params_from_iter(std::iter::repeat_n("x", n)), |row| row.get::<_, String>(3))
            .expect("rows");
        rows.collect::<Result<Vec<_>, _>>().expect("plan rows").join("; ")
    }

    #[test]
    fn undelivering_and_unqueueing_messages_search_indexes_instead_of_scanning_history() {
        let mut conn = Connection::open_in_memory().expect("open");
        migrate(&mut conn).expect("migrate");
        let plan = |sql: &str| query_plan(&conn, sql);
        let undeliver = plan(UNDELIVER_TURN_MESSAGES);
        assert!(!undeliver.contains("SCAN"), "{undeliver}");
        assert!(undeliver.contains("inputs_by_turn"), "{undeliver}");
        let thread = plan(UNQUEUE_THREAD_MESSAGES);
        assert!(thread.contains("inputs_queued (thread_id=?)"), "{thread}");
        // One pass over the queued input, whichever index it walks.
        let peer = plan(UNQUEUE_PEER_MESSAGES);
        assert!(peer.contains("turn_id=?") || peer.contains("inputs_queued"), "{peer}");
        // Overdue messages: a thread's among its pending ones, all of them by deadline.
        let thread_overdue = plan(OVERDUE_THREAD_MESSAGES);
        assert!(thread_overdue.contains("messages_pending_by_target (target_thread=?)"), "{thread_overdue}");
        let overdue = plan(OVERDUE_MESSAGES);
        assert!(overdue.starts_with("SEARCH messages USING INDEX messages_by_deadline"), "{overdue}");
    }

    #[test]
    fn the_outbox_statements_by_peer_walk_its_entries_in_flight() {
        let mut conn = Connection::open_in_memory().expect("open");
        migrate(&mut conn).expect("migrate");
        for (sql, walk) in [
            (format!("SELECT * {OUTBOX_DUE}"), "outbox_due (peer_home_id=? AND next_attempt_at<?)"),
            (
                format!("SELECT * {OUTBOX_UNSETTLED}"),
                "outbox_unsettled (peer_home_id=? AND next_attempt_at<?)",
            ),
            (OUTBOX_PENDING.to_string(), "outbox_due (peer_home_id=?)"),
            // Not the entries no longer followed up (due at i64::MAX), however many there are.
            (
                OUTBOX_RETRY_NOW.to_string(),
                "outbox_due (peer_home_id=? AND next_attempt_at>? AND next_attempt_at<?)",
            ),
            (OUTBOX_DEFER.to_string(), "outbox_due (peer_home_id=? AND next_attempt_at<?)"),
            (OUTBOX_NEXT_DUE.to_string(), "outbox_due (peer_home_id=? AND next_attempt_at>?)"),
            (OUTBOX_NEXT_UNSETTLED.to_string(), "outbox_unsettled (peer_home_id=? AND next_attempt_at>?"),
        ] {
            let plan = query_plan(&conn, &sql);
            // (A covering index serves a MIN from the index alone.)
            assert!(plan.contains(&format!("INDEX {walk}")), "{sql}: {plan}");
        }
    }

    #[test]
    fn a_message_is_not_copied_into_its_input_and_its_turn_still_gets_its_content() {
        let mut conn = Connection::open_in_memory().expect("open");
        migrate(&mut conn).expect("migrate");
        conn.execute_batch(
            "INSERT INTO threads (id, workspace_id, cwd, title, profile, created_at, updated_at)
             VALUES ('th_a', 'w', '/', 't', 'p', 0, 0)",
        )
        .expect("thread");
        let content = "a long message ".repeat(1_000);
        let message = NewMessage {
            id: "msg_1".into(),
            target_thread: "th_a".into(),
            source: None,
            content: content.clone(),
            key_scope: String::new(),
            key: "k".into(),
            request_hash: "h".into(),
            wake: true,
            claim: None,
            receipt: None,
            deadline: None,
            now: 1,
        };
        accept_message(&conn, &message).expect("accept");
        let copies: i64 = conn
            .query_row("SELECT COUNT(*) FROM inputs WHERE content <> ''", [], |row| row.get(0))
            .expect("inputs");
        assert_eq!(copies, 0, "the queued input refers to the message");
        let claim =
            TurnClaim { turn_id: "tu_1".into(), take_messages: true, render: |_| String::new(), exec: false };
        let claimed = claim_turn(&conn, "th_a", &claim, 2, None).expect("claim").expect("a turn");
        assert_eq!(claimed.inputs.len(), 1);
        assert_eq!(claimed.inputs[0].content, content, "the turn gets the message's content");
    }

    #[test]
    fn a_send_that_starts_its_turn_is_written_taken_and_one_that_may_not_be_taken_waits_queued() {
        let mut conn = Connection::open_in_memory().expect("open");
        migrate(&mut conn).expect("migrate");
        conn.execute_batch(
            "INSERT INTO threads (id, workspace_id, cwd, title, profile, created_at, updated_at)
             VALUES ('th_a', 'w', '/', 't', 'p', 0, 0)",
        )
        .expect("thread");
        let send = |id: &str, from: Option<&str>, take_messages: bool| NewMessage {
            id: id.into(),
            target_thread: "th_a".into(),
            source: from.map(|t| SourceRef { host_id: String::new(), thread_id: t.into() }),
            content: format!("content of {id}"),
            key_scope: String::new(),
            key: id.into(),
            request_hash: "h".into(),
            wake: true,
            claim: Some(TurnClaim {
                turn_id: format!("tu_{id}"),
                take_messages,
                render: |items| items.iter().map(|i| i.content.as_str()).collect::<Vec<_>>().join("|"),
                exec: false,
            }),
            receipt: None,
            deadline: None,
            now: 1,
        };
        let state = |conn: &Connection, id: &str| -> (String, Option<String>, Option<String>) {
            conn.query_row(
                "SELECT m.status, m.turn_id, i.turn_id FROM messages m JOIN inputs i ON i.message_id = m.id
                 WHERE m.id = ?",
                [id],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .expect("message")
        };
        // A peer message while the thread's communication is off: queued, no turn.
        let SendOutcome::Accepted { turn: None, .. } =
            accept_message(&conn, &send("msg_1", Some("th_peer"), false)).expect("accept")
        else {
            panic!("a peer message started a turn with communication off")
        };
        assert_eq!(state(&conn, "msg_1"), ("pending".into(), None, None));
        // An external send starts the turn and takes the queued one first (communication on
        // now), in one transaction: both delivered by that turn.
        let SendOutcome::Accepted { turn: Some(claimed), .. } =
            accept_message(&conn, &send("msg_2", None, true)).expect("accept")
        else {
            panic!("an idle thread did not start a turn")
        };
        assert_eq!(claimed.turn.input, "content of msg_1|content of msg_2");
        let taken = Some("tu_msg_2".to_string());
        assert_eq!(state(&conn, "msg_1"), ("delivered".into(), taken.clone(), taken.clone()));
        assert_eq!(state(&conn, "msg_2"), ("delivered".into(), taken.clone(), taken));
        // The thread runs now: the next send waits queued.
        let SendOutcome::Accepted { turn: None, .. } =
            accept_message(&conn, &send("msg_3", None, true)).expect("accept")
        else {
            panic!("a running thread started another turn")
        };
        assert_eq!(state(&conn, "msg_3"), ("pending".into(), None, None));
        // Idle again, with msg_3 queued: a peer message while communication is off starts
        // the turn for msg_3 alone, and waits queued itself (its sender hears `pending`).
        conn.execute_batch("UPDATE threads SET running = 0").expect("turn ended");
        let SendOutcome::Accepted { delivered: false, turn: Some(claimed), .. } =
            accept_message(&conn, &send("msg_4", Some("th_peer"), false)).expect("accept")
        else {
            panic!("the queued send did not start its turn, or the peer message was taken")
        };
        assert_eq!(claimed.turn.input, "content of msg_3");
        let taken = Some("tu_msg_4".to_string());
        assert_eq!(state(&conn, "msg_3"), ("delivered".into(), taken.clone(), taken));
        assert_eq!(state(&conn, "msg_4"), ("pending".into(), None, None));
    }

    #[tokio::test]
    async fn the_outbox_keys_filter_holds_what_the_outbox_held_at_open_and_every_key_since() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("kiki.db");
        let entry = |id: &str, key: &str| OutboxRecord {
            id: id.into(),
            bridge_id: "br_1".into(),
            peer_home_id: "PEER".into(),
            target_session: "th_far".into(),
            source_thread: None,
            content: "hello".into(),
            key_scope: String::new(),
            key: key.into(),
            request_hash: "h".into(),
            status: OutboxStatus::Pending,
            reason: String::new(),
            remote_message_id: String::new(),
            attempts: 1,
            next_attempt_at: 1,
            created_at: 1,
            updated_at: 1,
        };
        let first = SqliteStore::open_path(&path).await.expect("open");
        assert_eq!(first.outbox_insert(&entry("msg_1", "old")).await.expect("insert"), None);
        // A second store on the file finds the entry written before it opened, from its
        // filter once filled (a probe reads the outbox until then).
        let store = SqliteStore::open_path(&path).await.expect("open again");
        for _ in 0..500 {
            if !store.outbox_keys.may_hold("", "never used") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!store.outbox_keys.may_hold("", "never used"), "filled");
        let found = store.outbox_by_key("PEER", "", "old").await.expect("probe");
        assert_eq!(found.map(|e| e.id).as_deref(), Some("msg_1"));
        assert_eq!(store.outbox_insert(&entry("msg_2", "new")).await.expect("insert"), None);
        let found = store.outbox_by_key("PEER", "", "new").await.expect("probe");
        assert_eq!(found.map(|e| e.id).as_deref(), Some("msg_2"), "a key written since");
        assert_eq!(store.outbox_by_key("PEER", "", "never used").await.expect("probe"), None);
    }

    #[test]
    fn a_failed_migration_says_why_in_one_line() {
        let mut conn = Connection::open_in_memory().expect("open");
        migrate(&mut conn).expect("migrate");
        conn.execute("DELETE FROM schema_migrations WHERE version = 16", []).expect("forget 16");
        conn.execute("CREATE TABLE outbox_new (x)", []).expect("in the way");
        let err = migrate(&mut conn).expect_err("fails").to_string();
        assert!(err.starts_with("migration 16") && err.contains("already exists"), "{err}");
        assert!(!err.contains('\n') && !err.contains("CREATE"), "{err}");
    }

    #[test]
    fn a_database_from_a_newer_kikid_is_refused_untouched() {
        let mut conn = Connection::open_in_memory().expect("open");
        migrate(&mut conn).expect("migrate");
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)",
            [],
        )
        .expect("a newer version");
        let refused = migrate(&mut conn).expect_err("refused");
        assert!(refused.to_string().contains("schema version 99"), "{refused}");
        let versions: i64 =
            conn.query_row("SELECT COUNT(*) FROM schema_migrations", [], |row| row.get(0)).expect("count");
        assert_eq!(versions as usize, MIGRATIONS.len() + 1, "nothing applied or removed");
    }

    #[test]
    fn migration_9_places_each_threads_latest_turn_in_its_event_log() {
        let conn = Connection::open_in_memory().expect("open");
        let (before, nine): (Vec<_>, Vec<_>) = MIGRATIONS.iter().partition(|(version, _, _)| *version < 9);
        for (_, _, sql) in before {
            conn.execute_batch(sql).expect("migration");
        }
        conn.execute_batch(
            "INSERT INTO threads (id, workspace_id, cwd, title, profile, created_at, updated_at)
                 VALUES ('a', 'w', '/', 't', 'p', 0, 0), ('b', 'w', '/', 't', 'p', 0, 0);
             INSERT INTO events (thread_id, kind, lifecycle, at) VALUES ('a', 'lifecycle', 'created', 0);  -- 1
             INSERT INTO events (thread_id, kind, lifecycle, at) VALUES ('b', 'lifecycle', 'created', 0);  -- 2
             INSERT INTO turns (id, thread_id, seq, status, input, started_at) VALUES
                 ('a1', 'a', 1, 'completed', '', 0), ('a2', 'a', 2, 'running', '', 0),
                 ('b1', 'b', 1, 'completed', '', 0);
             INSERT INTO events (thread_id, kind, turn_id, at) VALUES ('a', 'terminal', 'a1', 0);  -- 3
             INSERT INTO events (thread_id, kind, turn_id, at) VALUES ('b', 'terminal', 'b1', 0);  -- 4
             INSERT INTO events (thread_id, kind, lifecycle, at) VALUES ('a', 'lifecycle', 'archived', 0);  -- 5",
        )
        .expect("history");
        for (_, _, sql) in nine {
            conn.execute_batch(sql).expect("migration 9");
        }
        let placed: Vec<(String, Option<i64>)> = conn
            .prepare("SELECT id, events_before FROM turns ORDER BY id")
            .expect("query")
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("turns");
        let expected = [("a1", None), ("a2", Some(3)), ("b1", Some(2))];
        assert_eq!(placed, expected.map(|(id, at)| (id.to_string(), at)));
    }
}
