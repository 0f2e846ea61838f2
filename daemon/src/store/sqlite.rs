//! The embedded default store: one SQLite file in WAL mode.
//!
//! Writes go through a pool of exactly one connection, so they are serialised in the
//! process instead of fighting over SQLite's write lock; reads use a separate read-only
//! pool and never wait for a write. `synchronous = FULL`: a commit is on disk when it
//! returns.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool};

use super::*;

/// Schema migrations, applied in order, each once (recorded in `schema_migrations`).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "threads", include_str!("migrations/sqlite/0001_threads.sql")),
    (2, "mailbox", include_str!("migrations/sqlite/0002_mailbox.sql")),
    (3, "bridges", include_str!("migrations/sqlite/0003_bridges.sql")),
    (4, "outbox", include_str!("migrations/sqlite/0004_outbox.sql")),
];

/// Readers in parallel with the single writer; a home's reads are short.
const READ_CONNECTIONS: u32 = 4;

#[derive(Debug, Clone)]
pub struct SqliteStore {
    path: PathBuf,
    writer: SqlitePool,
    reader: SqlitePool,
}

fn backend(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(db.message().to_string())
        }
        _ => StoreError::Backend(e.to_string()),
    }
}

const THREAD_COLUMNS: &str = "seq, id, workspace_id, cwd, title, profile, created_at, updated_at, archived, enabled, running, communication";
const TURN_COLUMNS: &str = "id, thread_id, seq, status, input, output, error, started_at, ended_at";

fn thread_from(row: &SqliteRow) -> StoreResult<ThreadRecord> {
    let communication: String = row.try_get("communication").map_err(backend)?;
    Ok(ThreadRecord {
        seq: row.try_get("seq").map_err(backend)?,
        id: row.try_get("id").map_err(backend)?,
        workspace_id: row.try_get("workspace_id").map_err(backend)?,
        cwd: row.try_get("cwd").map_err(backend)?,
        title: row.try_get("title").map_err(backend)?,
        profile: row.try_get("profile").map_err(backend)?,
        created_at: row.try_get("created_at").map_err(backend)?,
        updated_at: row.try_get("updated_at").map_err(backend)?,
        archived: row.try_get("archived").map_err(backend)?,
        enabled: row.try_get("enabled").map_err(backend)?,
        running: row.try_get("running").map_err(backend)?,
        communication: CommunicationSetting::parse(&communication)
            .ok_or_else(|| StoreError::Backend(format!("unknown communication setting {communication:?}")))?,
    })
}

fn turn_from(row: &SqliteRow) -> StoreResult<TurnRecord> {
    let status: String = row.try_get("status").map_err(backend)?;
    Ok(TurnRecord {
        id: row.try_get("id").map_err(backend)?,
        thread_id: row.try_get("thread_id").map_err(backend)?,
        seq: row.try_get("seq").map_err(backend)?,
        status: TurnStatus::parse(&status)?,
        input: row.try_get("input").map_err(backend)?,
        output: row.try_get("output").map_err(backend)?,
        error: row.try_get("error").map_err(backend)?,
        started_at: row.try_get("started_at").map_err(backend)?,
        ended_at: row.try_get("ended_at").map_err(backend)?,
        items: Vec::new(),
    })
}

fn input_from(row: &SqliteRow) -> StoreResult<InputRecord> {
    let kind: String = row.try_get("kind").map_err(backend)?;
    let source_thread: Option<String> = row.try_get("source_thread").map_err(backend)?;
    let source_host: Option<String> = row.try_get("source_host").map_err(backend)?;
    Ok(InputRecord {
        id: row.try_get("id").map_err(backend)?,
        kind: InputKind::parse(&kind)?,
        content: row.try_get("content").map_err(backend)?,
        message_id: row.try_get("message_id").map_err(backend)?,
        source: source_thread
            .map(|thread_id| SourceRef { host_id: source_host.unwrap_or_default(), thread_id }),
        now: row.try_get("created_at").map_err(backend)?,
    })
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `url` — `sqlite://PATH` or a plain path —
    /// and applies pending migrations.
    pub async fn open(url: &str) -> StoreResult<Self> {
        let path = PathBuf::from(
            url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url),
        );
        if path.as_os_str().is_empty() || url.contains("://") && !url.starts_with("sqlite://") {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        }
        Self::open_path(&path).await
    }

    pub async fn open_path(path: &Path) -> StoreResult<Self> {
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(backend)?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .connect_with(options.clone())
            .await
            .map_err(backend)?;
        migrate(&writer).await?;
        owner_only(path);
        let reader = SqlitePoolOptions::new()
            .max_connections(READ_CONNECTIONS)
            .min_connections(0)
            .idle_timeout(Duration::from_secs(60))
            .connect_with(options.read_only(true))
            .await
            .map_err(backend)?;
        Ok(Self { path: path.to_path_buf(), writer, reader })
    }

    /// Fills in the input items of `turns` with one query (not one per turn).
    async fn attach_items(&self, turns: &mut [TurnRecord]) -> StoreResult<()> {
        if turns.is_empty() {
            return Ok(());
        }
        let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "SELECT turn_id, id, kind, '' AS content, message_id, source_host, source_thread, created_at
             FROM inputs WHERE turn_id IN (",
        );
        let mut ids = query.separated(", ");
        for turn in turns.iter() {
            ids.push_bind(&turn.id);
        }
        query.push(") ORDER BY seq");
        let rows = query.build().fetch_all(&self.reader).await.map_err(backend)?;
        for row in &rows {
            let turn_id: String = row.try_get("turn_id").map_err(backend)?;
            let input = input_from(row)?;
            if let Some(turn) = turns.iter_mut().find(|t| t.id == turn_id) {
                turn.items.push(TurnItem {
                    kind: input.kind,
                    message_id: input.message_id,
                    source: input.source,
                });
            }
        }
        Ok(())
    }
}

const OUTBOX_COLUMNS: &str = "id, bridge_id, peer_home_id, target_session, source_thread, content, key_scope, key, \
     request_hash, status, reason, remote_message_id, attempts, next_attempt_at, created_at, updated_at";

fn outbox_from(row: &SqliteRow) -> StoreResult<OutboxRecord> {
    Ok(OutboxRecord {
        id: row.try_get("id").map_err(backend)?,
        bridge_id: row.try_get("bridge_id").map_err(backend)?,
        peer_home_id: row.try_get("peer_home_id").map_err(backend)?,
        target_session: row.try_get("target_session").map_err(backend)?,
        source_thread: row.try_get("source_thread").map_err(backend)?,
        content: row.try_get("content").map_err(backend)?,
        key_scope: row.try_get("key_scope").map_err(backend)?,
        key: row.try_get("key").map_err(backend)?,
        request_hash: row.try_get("request_hash").map_err(backend)?,
        status: row.try_get("status").map_err(backend)?,
        reason: row.try_get("reason").map_err(backend)?,
        remote_message_id: row.try_get("remote_message_id").map_err(backend)?,
        attempts: row.try_get("attempts").map_err(backend)?,
        next_attempt_at: row.try_get("next_attempt_at").map_err(backend)?,
        created_at: row.try_get("created_at").map_err(backend)?,
        updated_at: row.try_get("updated_at").map_err(backend)?,
    })
}

/// `"a,b"` → `["a", "b"]`; `""` → `[]`.
fn split_list(text: &str) -> Vec<String> {
    text.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// The database and its WAL are the home's data: owner-only, like the home directory.
fn owner_only(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
    }
}

async fn migrate(pool: &SqlitePool) -> StoreResult<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )
    .execute(pool)
    .await
    .map_err(backend)?;
    for &(version, name, sql) in MIGRATIONS {
        let mut tx = pool.begin().await.map_err(backend)?;
        let applied: Option<i64> =
            sqlx::query_scalar("SELECT version FROM schema_migrations WHERE version = ?")
                .bind(version)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
        if applied.is_some() {
            continue;
        }
        let failed = |e: sqlx::Error| StoreError::Migration { version, name, message: e.to_string() };
        sqlx::raw_sql(sql).execute(&mut *tx).await.map_err(failed)?;
        sqlx::query(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, strftime('%s','now'))",
        )
        .bind(version)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
    }
    Ok(())
}

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

async fn insert_event(conn: &mut sqlx::SqliteConnection, e: &EventRecord) -> StoreResult<i64> {
    sqlx::query_scalar(
        "INSERT INTO events (thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
    )
    .bind(&e.thread_id)
    .bind(e.kind.as_str())
    .bind(&e.turn_id)
    .bind(e.turn_status.map(TurnStatus::as_str))
    .bind(&e.reason)
    .bind(&e.lifecycle)
    .bind(&e.message_id)
    .bind(e.at)
    .fetch_one(conn)
    .await
    .map_err(backend)
}

fn event_from(row: &SqliteRow) -> StoreResult<EventRecord> {
    let kind: String = row.try_get("kind").map_err(backend)?;
    let turn_status: Option<String> = row.try_get("turn_status").map_err(backend)?;
    Ok(EventRecord {
        seq: row.try_get("seq").map_err(backend)?,
        thread_id: row.try_get("thread_id").map_err(backend)?,
        kind: EventKind::parse(&kind)?,
        turn_id: row.try_get("turn_id").map_err(backend)?,
        turn_status: turn_status.as_deref().map(TurnStatus::parse).transpose()?,
        reason: row.try_get("reason").map_err(backend)?,
        lifecycle: row.try_get("lifecycle").map_err(backend)?,
        message_id: row.try_get("message_id").map_err(backend)?,
        at: row.try_get("at").map_err(backend)?,
    })
}

fn message_from(row: &SqliteRow) -> StoreResult<MessageRecord> {
    let status: String = row.try_get("status").map_err(backend)?;
    let source_thread: Option<String> = row.try_get("source_thread").map_err(backend)?;
    let source_host: Option<String> = row.try_get("source_host").map_err(backend)?;
    Ok(MessageRecord {
        id: row.try_get("id").map_err(backend)?,
        target_thread: row.try_get("target_thread").map_err(backend)?,
        source: source_thread
            .map(|thread_id| SourceRef { host_id: source_host.unwrap_or_default(), thread_id }),
        content: row.try_get("content").map_err(backend)?,
        status: MessageStatus::parse(&status)?,
        reason: row.try_get("reason").map_err(backend)?,
        created_at: row.try_get("created_at").map_err(backend)?,
        delivered_at: row.try_get("delivered_at").map_err(backend)?,
        turn_id: row.try_get("turn_id").map_err(backend)?,
    })
}

/// Decides every message of a batch, then writes the accepted ones with one multi-row
/// INSERT per table: a batch costs a handful of statements, not a few per message.
async fn accept_batch(
    conn: &mut sqlx::SqliteConnection,
    batch: &[NewMessage],
) -> StoreResult<Vec<SendOutcome>> {
    use std::collections::{HashMap, HashSet};

    // Keys already stored, for every (scope, key) of the batch.
    let mut stored: HashMap<(String, String), (String, String)> = HashMap::new();
    let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
        "SELECT scope, key, request_hash, message_id FROM idempotency_keys WHERE (scope, key) IN (",
    );
    let mut list = query.separated(", ");
    for m in batch {
        list.push("(").push_bind_unseparated(&m.key_scope).push_unseparated(", ");
        list.push_bind_unseparated(&m.key).push_unseparated(")");
    }
    query.push(")");
    let rows: Vec<(String, String, String, String)> =
        query.build_query_as().fetch_all(&mut *conn).await.map_err(backend)?;
    for (scope, key, hash, message_id) in rows {
        stored.insert((scope, key), (hash, message_id));
    }
    // Targets that can take input.
    let mut query =
        sqlx::QueryBuilder::<sqlx::Sqlite>::new("SELECT id FROM threads WHERE archived = 0 AND id IN (");
    let mut list = query.separated(", ");
    for m in batch {
        list.push_bind(&m.target_thread);
    }
    query.push(")");
    let live: HashSet<String> =
        query.build_query_scalar().fetch_all(&mut *conn).await.map_err(backend)?.into_iter().collect();

    let mut outcomes = Vec::with_capacity(batch.len());
    let mut accepted: Vec<&NewMessage> = Vec::new();
    for m in batch {
        let slot = (m.key_scope.clone(), m.key.clone());
        // A key seen before — stored, or earlier in this very batch — decides the outcome.
        if let Some((hash, message_id)) = stored.get(&slot) {
            let message_id = message_id.clone();
            outcomes.push(if *hash == m.request_hash {
                SendOutcome::Replayed { message_id }
            } else {
                SendOutcome::KeyConflict { message_id }
            });
        } else if !live.contains(&m.target_thread) {
            outcomes.push(SendOutcome::TargetGone);
        } else {
            stored.insert(slot, (m.request_hash.clone(), m.id.clone()));
            accepted.push(m);
            outcomes.push(SendOutcome::Accepted { message_id: m.id.clone() });
        }
    }
    if accepted.is_empty() {
        return Ok(outcomes);
    }
    let source_host = |m: &NewMessage| m.source.as_ref().map(|s| s.host_id.clone());
    let source_thread = |m: &NewMessage| m.source.as_ref().map(|s| s.thread_id.clone());
    sqlx::QueryBuilder::<sqlx::Sqlite>::new(
        "INSERT INTO messages (id, target_thread, source_host, source_thread, content, status, created_at) ",
    )
    .push_values(&accepted, |mut row, m| {
        row.push_bind(&m.id)
            .push_bind(&m.target_thread)
            .push_bind(source_host(m))
            .push_bind(source_thread(m))
            .push_bind(&m.content)
            .push_bind("pending")
            .push_bind(m.now);
    })
    .build()
    .execute(&mut *conn)
    .await
    .map_err(backend)?;
    sqlx::QueryBuilder::<sqlx::Sqlite>::new(
        "INSERT INTO idempotency_keys (scope, key, request_hash, message_id, created_at) ",
    )
    .push_values(&accepted, |mut row, m| {
        row.push_bind(&m.key_scope)
            .push_bind(&m.key)
            .push_bind(&m.request_hash)
            .push_bind(&m.id)
            .push_bind(m.now);
    })
    .build()
    .execute(&mut *conn)
    .await
    .map_err(backend)?;
    sqlx::QueryBuilder::<sqlx::Sqlite>::new(
        "INSERT INTO inputs (id, thread_id, kind, content, message_id, source_host, source_thread, created_at, wake) ",
    )
    .push_values(&accepted, |mut row, m| {
        row.push_bind(format!("in_{}", m.id))
            .push_bind(&m.target_thread)
            .push_bind(InputKind::Message.as_str())
            .push_bind(&m.content)
            .push_bind(&m.id)
            .push_bind(source_host(m))
            .push_bind(source_thread(m))
            .push_bind(m.now)
            .push_bind(m.wake);
    })
    .build()
    .execute(&mut *conn)
    .await
    .map_err(backend)?;
    Ok(outcomes)
}

async fn insert_input(
    conn: &mut sqlx::SqliteConnection,
    thread_id: &str,
    input: &NewInput,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO inputs (id, thread_id, kind, content, message_id, source_host, source_thread, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&input.id)
    .bind(thread_id)
    .bind(input.kind.as_str())
    .bind(&input.content)
    .bind(&input.message_id)
    .bind(input.source.as_ref().map(|s| s.host_id.clone()))
    .bind(input.source.as_ref().map(|s| s.thread_id.clone()))
    .bind(input.now)
    .execute(conn)
    .await
    .map_err(backend)?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    async fn create_thread(
        &self,
        thread: &NewThread,
        first_input: Option<&NewInput>,
    ) -> StoreResult<ThreadRecord> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let row = sqlx::query(&format!(
            "INSERT INTO threads (id, workspace_id, cwd, title, profile, created_at, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING {THREAD_COLUMNS}"
        ))
        .bind(&thread.id)
        .bind(&thread.workspace_id)
        .bind(&thread.cwd)
        .bind(&thread.title)
        .bind(&thread.profile)
        .bind(thread.now)
        .bind(thread.now)
        .fetch_one(&mut *tx)
        .await
        .map_err(backend)?;
        let record = thread_from(&row)?;
        let mut created = event(&thread.id, EventKind::Lifecycle, thread.now);
        created.lifecycle = "created".into();
        insert_event(&mut tx, &created).await?;
        if let Some(input) = first_input {
            insert_input(&mut tx, &thread.id, input).await?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(record)
    }

    async fn thread(&self, id: &str) -> StoreResult<Option<ThreadRecord>> {
        let row = sqlx::query(&format!("SELECT {THREAD_COLUMNS} FROM threads WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.reader)
            .await
            .map_err(backend)?;
        row.as_ref().map(thread_from).transpose()
    }

    async fn list_threads(&self, query: &ThreadQuery) -> StoreResult<Vec<ThreadRecord>> {
        let before = query.before_seq.unwrap_or(i64::MAX);
        let rows = match &query.workspace_id {
            Some(workspace) => {
                sqlx::query(&format!(
                    "SELECT {THREAD_COLUMNS} FROM threads INDEXED BY threads_listed_by_workspace
                 WHERE archived = 0 AND enabled = 1 AND workspace_id = ? AND seq < ?
                 ORDER BY seq DESC LIMIT ?"
                ))
                .bind(workspace)
                .bind(before)
                .bind(query.limit)
                .fetch_all(&self.reader)
                .await
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {THREAD_COLUMNS} FROM threads INDEXED BY threads_listed
                 WHERE archived = 0 AND enabled = 1 AND seq < ?
                 ORDER BY seq DESC LIMIT ?"
                ))
                .bind(before)
                .bind(query.limit)
                .fetch_all(&self.reader)
                .await
            }
        }
        .map_err(backend)?;
        rows.iter().map(thread_from).collect()
    }

    async fn count_threads(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM threads")
            .fetch_one(&self.reader)
            .await
            .map_err(backend)?;
        Ok(n as u64)
    }

    async fn set_archived(&self, id: &str, archived: bool, now: Millis) -> StoreResult<Option<Archived>> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let changed =
            sqlx::query("UPDATE threads SET archived = ?, updated_at = ? WHERE id = ? AND archived <> ?")
                .bind(archived)
                .bind(now)
                .bind(id)
                .bind(archived)
                .execute(&mut *tx)
                .await
                .map_err(backend)?
                .rows_affected()
                > 0;
        if changed {
            let mut lifecycle = event(id, EventKind::Lifecycle, now);
            lifecycle.lifecycle = if archived { "archived" } else { "unarchived" }.into();
            insert_event(&mut tx, &lifecycle).await?;
        }
        let mut notified = vec![id.to_string()];
        if changed && archived {
            let undeliverable: Vec<(String, Option<String>)> = sqlx::query_as(
                "UPDATE messages SET status = 'undeliverable', reason = 'thread_archived'
                 WHERE target_thread = ? AND status = 'pending' RETURNING id, source_thread",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
            for (message_id, source) in undeliverable {
                sqlx::query("DELETE FROM inputs WHERE message_id = ? AND turn_id IS NULL")
                    .bind(&message_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                notified.extend(source.clone());
                for thread in std::iter::once(id.to_string()).chain(source) {
                    let mut e = event(&thread, EventKind::Undeliverable, now);
                    e.reason = "thread_archived".into();
                    e.message_id = Some(message_id.clone());
                    insert_event(&mut tx, &e).await?;
                }
            }
        }
        let row = sqlx::query(&format!("SELECT {THREAD_COLUMNS} FROM threads WHERE id = ?"))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        notified.dedup();
        Ok(row.as_ref().map(thread_from).transpose()?.map(|thread| Archived { thread, changed, notified }))
    }

    async fn enqueue_input(&self, thread_id: &str, input: &NewInput) -> StoreResult<Option<bool>> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let running: Option<bool> = sqlx::query_scalar("SELECT running FROM threads WHERE id = ?")
            .bind(thread_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
        if running.is_none() {
            return Ok(None);
        }
        insert_input(&mut tx, thread_id, input).await?;
        tx.commit().await.map_err(backend)?;
        Ok(running)
    }

    async fn claim_turn(
        &self,
        thread_id: &str,
        turn_id: &str,
        take_messages: bool,
        render: RenderInput,
        now: Millis,
    ) -> StoreResult<Option<ClaimedTurn>> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let thread: Option<(bool, i64)> =
            sqlx::query_as("SELECT running, turn_count FROM threads WHERE id = ? AND archived = 0")
                .bind(thread_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
        let Some((false, turn_count)) = thread else {
            return Ok(None);
        };
        let rows = sqlx::query(
            "SELECT id, kind, content, message_id, source_host, source_thread, created_at, wake
             FROM inputs WHERE thread_id = ? AND turn_id IS NULL AND (? OR source_thread IS NULL) ORDER BY seq",
        )
        .bind(thread_id)
        .bind(take_messages)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
        let wakes: bool = rows.iter().any(|row| row.try_get::<bool, _>("wake").unwrap_or(true));
        if !wakes {
            // Nothing here may start a turn by itself; it waits for one that starts.
            return Ok(None);
        }
        let inputs = rows.iter().map(input_from).collect::<StoreResult<Vec<_>>>()?;
        let seq = turn_count + 1;
        let rendered = render(&inputs);
        sqlx::query("INSERT INTO turns (id, thread_id, seq, status, input, started_at) VALUES (?, ?, ?, 'running', ?, ?)")
            .bind(turn_id)
            .bind(thread_id)
            .bind(seq)
            .bind(&rendered)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        sqlx::query(
            "UPDATE inputs SET turn_id = ? WHERE thread_id = ? AND turn_id IS NULL AND (? OR source_thread IS NULL)",
        )
        .bind(turn_id)
        .bind(thread_id)
        .bind(take_messages)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        sqlx::query(
            "UPDATE messages SET status = 'delivered', delivered_at = ?, turn_id = ?
             WHERE status = 'pending'
               AND id IN (SELECT message_id FROM inputs WHERE turn_id = ? AND message_id IS NOT NULL)",
        )
        .bind(now)
        .bind(turn_id)
        .bind(turn_id)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        sqlx::query("UPDATE threads SET running = 1, turn_count = ?, updated_at = ? WHERE id = ?")
            .bind(seq)
            .bind(now)
            .bind(thread_id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        let items = inputs
            .iter()
            .map(|i| TurnItem { kind: i.kind, message_id: i.message_id.clone(), source: i.source.clone() })
            .collect();
        Ok(Some(ClaimedTurn {
            turn: TurnRecord {
                id: turn_id.to_string(),
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

    async fn finish_turn(&self, outcome: &TurnOutcome) -> StoreResult<()> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let thread_id: Option<String> = sqlx::query_scalar(
            "UPDATE turns SET status = ?, output = ?, error = ?, ended_at = ?
             WHERE id = ? AND status = 'running' RETURNING thread_id",
        )
        .bind(outcome.status.as_str())
        .bind(&outcome.output)
        .bind(&outcome.error)
        .bind(outcome.now)
        .bind(&outcome.turn_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?;
        if let Some(thread_id) = thread_id {
            sqlx::query("UPDATE threads SET running = 0, updated_at = ? WHERE id = ?")
                .bind(outcome.now)
                .bind(&thread_id)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            let mut terminal = event(&thread_id, EventKind::Terminal, outcome.now);
            terminal.turn_id = Some(outcome.turn_id.clone());
            terminal.turn_status = Some(outcome.status);
            terminal.reason = outcome.error.clone();
            insert_event(&mut tx, &terminal).await?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(())
    }

    async fn fail_interrupted_turns(&self, reason: &str, now: Millis) -> StoreResult<Vec<String>> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let failed: Vec<(String, String)> = sqlx::query_as(
            "UPDATE turns SET status = 'failed', error = ?, ended_at = ? WHERE status = 'running'
             RETURNING id, thread_id",
        )
        .bind(reason)
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
        sqlx::query("UPDATE threads SET running = 0, updated_at = ? WHERE running = 1")
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        for (turn_id, thread_id) in &failed {
            let mut terminal = event(thread_id, EventKind::Terminal, now);
            terminal.turn_id = Some(turn_id.clone());
            terminal.turn_status = Some(TurnStatus::Failed);
            terminal.reason = reason.to_string();
            insert_event(&mut tx, &terminal).await?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(failed.into_iter().map(|(_, thread_id)| thread_id).collect())
    }

    async fn threads_with_queued_input(&self) -> StoreResult<Vec<String>> {
        sqlx::query_scalar(
            "SELECT DISTINCT i.thread_id FROM inputs i JOIN threads t ON t.id = i.thread_id
             WHERE i.turn_id IS NULL AND i.wake = 1 AND t.running = 0",
        )
        .fetch_all(&self.reader)
        .await
        .map_err(backend)
    }

    async fn running_turns(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM turns WHERE status = 'running'")
            .fetch_one(&self.reader)
            .await
            .map_err(backend)?;
        Ok(n as u64)
    }

    async fn ended_turns(&self, thread_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<TurnRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TURN_COLUMNS} FROM turns
             WHERE thread_id = ? AND seq > ? AND status <> 'running' ORDER BY seq LIMIT ?"
        ))
        .bind(thread_id)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.reader)
        .await
        .map_err(backend)?;
        let mut turns = rows.iter().map(turn_from).collect::<StoreResult<Vec<_>>>()?;
        self.attach_items(&mut turns).await?;
        Ok(turns)
    }

    async fn turn(&self, thread_id: &str, turn_id: &str) -> StoreResult<Option<TurnRecord>> {
        let row = sqlx::query(&format!("SELECT {TURN_COLUMNS} FROM turns WHERE thread_id = ? AND id = ?"))
            .bind(thread_id)
            .bind(turn_id)
            .fetch_optional(&self.reader)
            .await
            .map_err(backend)?;
        let Some(row) = row else { return Ok(None) };
        let mut turns = [turn_from(&row)?];
        self.attach_items(&mut turns).await?;
        let [turn] = turns;
        Ok(Some(turn))
    }

    async fn ended_turn_exists(&self, thread_id: &str, seq: i64) -> StoreResult<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT seq FROM turns WHERE thread_id = ? AND seq = ? AND status <> 'running'",
        )
        .bind(thread_id)
        .bind(seq)
        .fetch_optional(&self.reader)
        .await
        .map_err(backend)?;
        Ok(found.is_some())
    }

    async fn undeliver_turn_messages(
        &self,
        turn_id: &str,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Vec<String>> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let undelivered: Vec<(String, String, Option<String>)> = sqlx::query_as(
            "UPDATE messages SET status = 'undeliverable', reason = ?
             WHERE turn_id = ? AND status = 'delivered' RETURNING id, target_thread, source_thread",
        )
        .bind(reason)
        .bind(turn_id)
        .fetch_all(&mut *tx)
        .await
        .map_err(backend)?;
        let mut notified = Vec::new();
        for (message_id, target, source) in undelivered {
            for thread in std::iter::once(target).chain(source) {
                let mut e = event(&thread, EventKind::Undeliverable, now);
                e.reason = reason.to_string();
                e.message_id = Some(message_id.clone());
                insert_event(&mut tx, &e).await?;
                if !notified.contains(&thread) {
                    notified.push(thread);
                }
            }
        }
        tx.commit().await.map_err(backend)?;
        Ok(notified)
    }

    async fn accept_messages(&self, batch: &[NewMessage]) -> StoreResult<Vec<SendOutcome>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let outcomes = accept_batch(&mut tx, batch).await?;
        tx.commit().await.map_err(backend)?;
        Ok(outcomes)
    }

    async fn find_key(&self, scope: &str, key: &str) -> StoreResult<Option<KeyRecord>> {
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT request_hash, message_id FROM idempotency_keys WHERE scope = ? AND key = ?",
        )
        .bind(scope)
        .bind(key)
        .fetch_optional(&self.reader)
        .await
        .map_err(backend)?;
        Ok(row.map(|(request_hash, message_id)| KeyRecord { request_hash, message_id }))
    }

    async fn message(&self, id: &str) -> StoreResult<Option<MessageRecord>> {
        let row = sqlx::query(
            "SELECT id, target_thread, source_host, source_thread, content, status, reason, created_at,
                    delivered_at, turn_id FROM messages WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.reader)
        .await
        .map_err(backend)?;
        row.as_ref().map(message_from).transpose()
    }

    async fn prune_keys(&self, before: Millis) -> StoreResult<u64> {
        let result = sqlx::query("DELETE FROM idempotency_keys WHERE created_at < ?")
            .bind(before)
            .execute(&self.writer)
            .await
            .map_err(backend)?;
        Ok(result.rows_affected())
    }

    async fn set_communication(
        &self,
        thread_id: &str,
        setting: CommunicationSetting,
        now: Millis,
    ) -> StoreResult<Option<ThreadRecord>> {
        let row = sqlx::query(&format!(
            "UPDATE threads SET communication = ?, updated_at = ? WHERE id = ? RETURNING {THREAD_COLUMNS}"
        ))
        .bind(setting.as_str())
        .bind(now)
        .bind(thread_id)
        .fetch_optional(&self.writer)
        .await
        .map_err(backend)?;
        row.as_ref().map(thread_from).transpose()
    }

    async fn add_event(&self, e: &EventRecord) -> StoreResult<i64> {
        let mut conn = self.writer.acquire().await.map_err(backend)?;
        insert_event(&mut conn, e).await
    }

    async fn events_after(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        let rows = sqlx::query(
            "SELECT seq, thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, at
             FROM events WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(thread_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.reader)
        .await
        .map_err(backend)?;
        rows.iter().map(event_from).collect()
    }

    async fn last_event_seq(&self, thread_id: &str) -> StoreResult<i64> {
        let seq: Option<i64> = sqlx::query_scalar("SELECT MAX(seq) FROM events WHERE thread_id = ?")
            .bind(thread_id)
            .fetch_one(&self.reader)
            .await
            .map_err(backend)?;
        Ok(seq.unwrap_or(0))
    }

    async fn save_bridge(
        &self,
        bridge: Option<&BridgeRecord>,
        request: Option<&BridgeRequestRecord>,
    ) -> StoreResult<()> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        if let Some(b) = bridge {
            sqlx::query(
                "INSERT OR REPLACE INTO bridges (id, direction, peer_home_id, alias, address, state, permissions,
                     workspaces, request_id, created_at, updated_at, last_success, last_error, last_error_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&b.id)
            .bind(&b.direction)
            .bind(&b.peer_home_id)
            .bind(&b.alias)
            .bind(&b.address)
            .bind(&b.state)
            .bind(b.permissions.join(","))
            .bind(b.workspaces.join(","))
            .bind(&b.request_id)
            .bind(b.created_at)
            .bind(b.updated_at)
            .bind(b.last_success)
            .bind(&b.last_error)
            .bind(b.last_error_at)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        if let Some(r) = request {
            sqlx::query(
                "INSERT OR REPLACE INTO bridge_requests (id, peer_home_id, name, want, status, created_at, decided_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&r.id)
            .bind(&r.peer_home_id)
            .bind(&r.name)
            .bind(r.want.join(","))
            .bind(&r.status)
            .bind(r.created_at)
            .bind(r.decided_at)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(())
    }

    async fn bridges(&self) -> StoreResult<Vec<BridgeRecord>> {
        let rows = sqlx::query(
            "SELECT id, direction, peer_home_id, alias, address, state, permissions, workspaces, request_id,
                    created_at, updated_at, last_success, last_error, last_error_at
             FROM bridges ORDER BY created_at, id",
        )
        .fetch_all(&self.reader)
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                Ok(BridgeRecord {
                    id: row.try_get("id").map_err(backend)?,
                    direction: row.try_get("direction").map_err(backend)?,
                    peer_home_id: row.try_get("peer_home_id").map_err(backend)?,
                    alias: row.try_get("alias").map_err(backend)?,
                    address: row.try_get("address").map_err(backend)?,
                    state: row.try_get("state").map_err(backend)?,
                    permissions: split_list(&row.try_get::<String, _>("permissions").map_err(backend)?),
                    workspaces: split_list(&row.try_get::<String, _>("workspaces").map_err(backend)?),
                    request_id: row.try_get("request_id").map_err(backend)?,
                    created_at: row.try_get("created_at").map_err(backend)?,
                    updated_at: row.try_get("updated_at").map_err(backend)?,
                    last_success: row.try_get("last_success").map_err(backend)?,
                    last_error: row.try_get("last_error").map_err(backend)?,
                    last_error_at: row.try_get("last_error_at").map_err(backend)?,
                })
            })
            .collect()
    }

    async fn bridge_requests(&self) -> StoreResult<Vec<BridgeRequestRecord>> {
        let rows = sqlx::query(
            "SELECT id, peer_home_id, name, want, status, created_at, decided_at FROM bridge_requests
             ORDER BY created_at, id",
        )
        .fetch_all(&self.reader)
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                Ok(BridgeRequestRecord {
                    id: row.try_get("id").map_err(backend)?,
                    peer_home_id: row.try_get("peer_home_id").map_err(backend)?,
                    name: row.try_get("name").map_err(backend)?,
                    want: split_list(&row.try_get::<String, _>("want").map_err(backend)?),
                    status: row.try_get("status").map_err(backend)?,
                    created_at: row.try_get("created_at").map_err(backend)?,
                    decided_at: row.try_get("decided_at").map_err(backend)?,
                })
            })
            .collect()
    }

    async fn outbox_insert(&self, entries: &[OutboxRecord]) -> StoreResult<Vec<Option<OutboxRecord>>> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        let mut answers = Vec::with_capacity(entries.len());
        let mut stored: Vec<&OutboxRecord> = Vec::new();
        for e in entries {
            let earlier = stored
                .iter()
                .find(|s| s.peer_home_id == e.peer_home_id && s.key_scope == e.key_scope && s.key == e.key);
            if let Some(earlier) = earlier {
                answers.push(Some((*earlier).clone()));
                continue;
            }
            let existing = sqlx::query(&format!(
                "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE peer_home_id = ? AND key_scope = ? AND key = ?"
            ))
            .bind(&e.peer_home_id)
            .bind(&e.key_scope)
            .bind(&e.key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
            if let Some(row) = existing {
                answers.push(Some(outbox_from(&row)?));
                continue;
            }
            sqlx::query(&format!(
                "INSERT INTO outbox ({OUTBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .bind(&e.id)
            .bind(&e.bridge_id)
            .bind(&e.peer_home_id)
            .bind(&e.target_session)
            .bind(&e.source_thread)
            .bind(&e.content)
            .bind(&e.key_scope)
            .bind(&e.key)
            .bind(&e.request_hash)
            .bind(&e.status)
            .bind(&e.reason)
            .bind(&e.remote_message_id)
            .bind(e.attempts)
            .bind(e.next_attempt_at)
            .bind(e.created_at)
            .bind(e.updated_at)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            stored.push(e);
            answers.push(None);
        }
        tx.commit().await.map_err(backend)?;
        Ok(answers)
    }

    async fn outbox_update(&self, updates: &[(OutboxRecord, Option<EventRecord>)]) -> StoreResult<()> {
        let mut tx = self.writer.begin().await.map_err(backend)?;
        for (e, event) in updates {
            sqlx::query(
                "UPDATE outbox SET status = ?, reason = ?, remote_message_id = ?, attempts = ?,
                     next_attempt_at = ?, updated_at = ? WHERE id = ?",
            )
            .bind(&e.status)
            .bind(&e.reason)
            .bind(&e.remote_message_id)
            .bind(e.attempts)
            .bind(e.next_attempt_at)
            .bind(e.updated_at)
            .bind(&e.id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            if let Some(event) = event {
                insert_event(&mut tx, event).await?;
            }
        }
        tx.commit().await.map_err(backend)?;
        Ok(())
    }

    async fn outbox_due(&self, now: Millis, limit: u32) -> StoreResult<Vec<OutboxRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE status = 'pending' AND next_attempt_at <= ?
             ORDER BY next_attempt_at LIMIT ?"
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(&self.reader)
        .await
        .map_err(backend)?;
        rows.iter().map(outbox_from).collect()
    }

    async fn outbox_for_bridge(&self, bridge_id: &str) -> StoreResult<Vec<OutboxRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE bridge_id = ? ORDER BY created_at, id"
        ))
        .bind(bridge_id)
        .fetch_all(&self.reader)
        .await
        .map_err(backend)?;
        rows.iter().map(outbox_from).collect()
    }

    async fn outbox_retry_now(&self, peer: &str, now: Millis) -> StoreResult<()> {
        sqlx::query("UPDATE outbox SET next_attempt_at = ? WHERE peer_home_id = ? AND status = 'pending' AND next_attempt_at > ?")
            .bind(now)
            .bind(peer)
            .bind(now)
            .execute(&self.writer)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn add_receipts(&self, receipts: &[ReceiptRecord]) -> StoreResult<()> {
        if receipts.is_empty() {
            return Ok(());
        }
        sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at) ",
        )
        .push_values(receipts, |mut row, r| {
            row.push_bind(&r.peer_home_id)
                .push_bind(&r.key)
                .push_bind(&r.message_id)
                .push_bind(&r.target)
                .push_bind(&r.status)
                .push_bind(&r.reason)
                .push_bind(r.at);
        })
        .build()
        .execute(&self.writer)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn receipts_from(&self, peer: &str) -> StoreResult<Vec<ReceiptRecord>> {
        let rows: Vec<(String, String, String, String, String, String, i64)> = sqlx::query_as(
            "SELECT peer_home_id, key, message_id, target, status, reason, at FROM bridge_receipts
             WHERE peer_home_id = ? ORDER BY seq",
        )
        .bind(peer)
        .fetch_all(&self.reader)
        .await
        .map_err(backend)?;
        Ok(rows
            .into_iter()
            .map(|(peer_home_id, key, message_id, target, status, reason, at)| ReceiptRecord {
                peer_home_id,
                key,
                message_id,
                target,
                status,
                reason,
                at,
            })
            .collect())
    }

    async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}
