//! The team store: PostgreSQL through sqlx's async driver.
//!
//! Every write is one transaction that first takes the home's write lock (a transaction-level
//! advisory lock), so writes are serialised as on SQLite's single writer — also between
//! processes sharing the database — and every statement in a write sees what the writes
//! before it committed (READ COMMITTED takes a fresh snapshot per statement). Reads run on
//! the pool without the lock. Idempotency rests on unique constraints, as on SQLite: a
//! unique violation is [`StoreError::Conflict`].
//!
//! Committed changes are published here after commit (see [`Change`]) and reach the other
//! processes on the same database through `LISTEN/NOTIFY` ([`notify`]): never a `NOTIFY`
//! inside a write's transaction (that takes a global lock at commit and serialises every
//! notifying commit), but one payload per batch of commits, sent after them by one task.

mod batch;
mod bridges;
mod events;
mod messages;
mod notify;
mod outbox;
mod permissions;
mod receipts;
mod replicas;
mod rooms;
mod rows;
mod threads;
mod tools;
mod turns;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
pub(super) use sqlx::{PgConnection, PgPool, Postgres, Row};

use super::*;

use batch::Tx;
use rows::*;

/// Schema migrations, applied in order, each once (recorded in `schema_migrations`).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "schema", include_str!("migrations/0001_schema.sql")),
    (2, "replicas", include_str!("migrations/0002_replicas.sql")),
    (3, "home", include_str!("migrations/0003_home.sql")),
    (4, "outbox_trace", include_str!("migrations/0004_outbox_trace.sql")),
    (5, "session tools", include_str!("migrations/0005_session_tools.sql")),
];

/// How long a call waits for a connection to the database before it is told the database
/// is unavailable.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// The schema version this kikid makes and reads: its last migration's.
const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The advisory lock migrations run under, so that two kikids starting at once on one
/// database migrate it once.
const MIGRATION_LOCK: i64 = 0x6b696b6a;

/// How a Postgres store is reached.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://[user[:password]@]host[:port]/database[?…]`.
    pub url: String,
    /// The password when the URL has none (`[store] password_file`, `KIKI_STORE_PASSWORD`).
    pub password: Option<String>,
    /// The most connections kept open to the server.
    pub pool_size: u32,
}

impl std::fmt::Debug for PostgresOptions {
    /// Never the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &redacted(&self.url))
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

/// The connections a home keeps to its database by default: writes are serialised by the
/// write lock, so a few more than one serve the reads beside them.
pub const DEFAULT_POOL_SIZE: u32 = 8;

/// `url` without its password (`postgres://kiki:secret@db/kiki` → `postgres://kiki@db/kiki`),
/// for status lines, logs and errors.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, path) = rest.find(['/', '?']).map_or((rest, ""), |at| rest.split_at(at));
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split_once(':').map_or(user_info, |(user, _)| user);
            format!("{scheme}://{user}@{host}{path}")
        }
        None => url.to_string(),
    }
}

/// Whether `url` names a Postgres store.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// The URL without its password.
    described: String,
    changes: Arc<Publisher>,
    /// Tells the other processes on this database what commits here changed.
    notifier: Arc<notify::Notifier>,
    /// The writes under way, committed together (see [`batch`]).
    writes: Arc<batch::Writes>,
    closed: Arc<AtomicBool>,
    /// The home's clock, read as a write runs (see [`PostgresStore::on_clock`]).
    clock: Clock,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("url", &self.described).finish()
    }
}

impl From<sqlx::Error> for StoreError {
    /// A unique violation is the typed conflict idempotency rests on; a database that cannot
    /// be reached says so.
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict(db.message().to_string())
            }
            sqlx::Error::Database(db) if db.code().as_deref() == Some("53100") => {
                StoreError::DiskFull(String::new())
            }
            sqlx::Error::PoolClosed => StoreError::Closed,
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => {
                StoreError::Unavailable(format!("({e})"))
            }
            _ => StoreError::Backend(e.to_string()),
        }
    }
}

impl PostgresStore {
    /// Connects to the database `options` name and applies pending migrations.
    pub async fn open(options: &PostgresOptions) -> StoreResult<Self> {
        let described = redacted(&options.url);
        let unusable = |e: StoreError| StoreError::Backend(format!("cannot use the store {described}: {e}"));
        let connect = connect_options(options).map_err(unusable)?;
        let unusable = |e: sqlx::Error| unusable(e.into());
        let pool = PgPoolOptions::new()
            .max_connections(options.pool_size.max(2))
            // Under the client's own bound (5 s): a call meets a database that is down with
            // an answer that says so, not with silence.
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(connect)
            .await
            .map_err(unusable)?;
        migrate(&pool).await?;
        let changes = Arc::new(Publisher::default());
        let notifier = notify::Notifier::start(pool.clone(), changes.clone()).await?;
        let writes = batch::Writes::new(changes.clone(), notifier.clone());
        Ok(Self {
            pool,
            described,
            changes,
            notifier,
            writes,
            closed: Default::default(),
            clock: Clock::system(),
        })
    }

    /// The store with its writes reading `clock` (the system's by default), as
    /// [`SqliteStore::on_clock`] describes.
    pub fn on_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Starts a write: its turn in a transaction holding the home's write lock, shared with
    /// the writes that come meanwhile (see [`batch`]).
    async fn begin(&self) -> StoreResult<Tx> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        self.writes.begin(self).await
    }

    /// A connection for reads (no write lock: a read sees what had committed as it began).
    pub(super) async fn read(&self) -> StoreResult<sqlx::pool::PoolConnection<Postgres>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        self.pool.acquire().await.map_err(|e| self.unreachable(e))
    }

    /// A connection that could not be had: the database is unavailable, named.
    fn unreachable(&self, e: sqlx::Error) -> StoreError {
        match StoreError::from(e) {
            StoreError::Closed => StoreError::Closed,
            e => StoreError::Unavailable(format!("{} ({e})", self.described)),
        }
    }

    /// Commits a write (with its batch), then publishes what it changed: here at once, to
    /// the other processes on the database by the notifier.
    async fn commit(&self, tx: Tx) -> StoreResult<()> {
        batch::Writes::commit(tx).await
    }
}

impl PostgresStore {
    /// [`Store::check`] for a home no daemon serves (`kikid --check`): connects, never
    /// creates or migrates anything.
    pub async fn check_database(options: &PostgresOptions) -> StoreResult<Vec<String>> {
        let mut conn = <PgConnection as sqlx::Connection>::connect_with(&connect_options(options)?).await?;
        schema_problems(&mut conn).await
    }
}

/// How to connect to the database `options` name, with the password given apart.
pub(super) fn connect_options(options: &PostgresOptions) -> StoreResult<PgConnectOptions> {
    // A statement's plan is made once per connection, not at every call: kiki's statements
    // look rows up by keys and indexed words, which a generic plan serves as well as a
    // custom one, and planning a send's facts anew cost more than running them.
    let connect =
        PgConnectOptions::from_str(&options.url)?.options([("plan_cache_mode", "force_generic_plan")]);
    Ok(match &options.password {
        Some(password) => connect.password(password),
        None => connect,
    })
}

/// What keeps the database from being this kikid's store: migrations missing or newer, a
/// table that cannot be read.
async fn schema_problems(conn: &mut PgConnection) -> StoreResult<Vec<String>> {
    let mut problems = Vec::new();
    let newest: Option<i64> =
        match sqlx::query_scalar("SELECT MAX(version) FROM schema_migrations").fetch_one(&mut *conn).await {
            Ok(newest) => newest,
            Err(e) => return Ok(vec![format!("no kiki schema ({e}): kikid makes it at its first start")]),
        };
    let known = SCHEMA_VERSION;
    if newest != Some(known) {
        problems.push(format!("the schema is at version {}, this kikid's is {known}", newest.unwrap_or(0)));
    }
    for table in tables_of(&mut *conn).await? {
        if let Err(e) = sqlx::query(&format!("SELECT 1 FROM {table} LIMIT 1")).execute(&mut *conn).await {
            problems.push(format!("table {table}: {e}"));
        }
    }
    Ok(problems)
}

async fn migrate(pool: &PgPool) -> StoreResult<()> {
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT pg_advisory_lock($1)").bind(MIGRATION_LOCK).execute(&mut *conn).await?;
    let migrated = migrate_locked(&mut conn).await;
    sqlx::query("SELECT pg_advisory_unlock($1)").bind(MIGRATION_LOCK).execute(&mut *conn).await?;
    migrated
}

async fn migrate_locked(conn: &mut PgConnection) -> StoreResult<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .execute(&mut *conn)
    .await?;
    // A database a newer kikid migrated may hold data in a form this one misreads.
    let newest: Option<i64> =
        sqlx::query_scalar("SELECT MAX(version) FROM schema_migrations").fetch_one(&mut *conn).await?;
    let known = SCHEMA_VERSION;
    if let Some(newest) = newest.filter(|&v| v > known) {
        return Err(StoreError::Backend(format!(
            "the database is at schema version {newest}, written by a newer kikid (this one knows \
             versions up to {known}); run that kikid, or restore a backup made for this one"
        )));
    }
    for &(version, name, sql) in MIGRATIONS {
        if newest.is_some_and(|newest| version <= newest) {
            continue;
        }
        let failed = |e: sqlx::Error| StoreError::Migration { version, name, message: e.to_string() };
        let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(failed)?;
        sqlx::raw_sql(sql).execute(&mut *tx).await.map_err(failed)?;
        sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)")
            .bind(version)
            .bind(name)
            .bind(crate::time::now_ms())
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
    }
    Ok(())
}

#[async_trait]
impl Store for PostgresStore {
    fn changes(&self) -> &Publisher {
        &self.changes
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    /// The server keeps its own pages sound; what kiki checks is that its schema is whole:
    /// every migration applied and every table readable. `pg_amcheck` checks pages and
    /// indexes (see `kiki doctor`).
    async fn check(&self, _full: bool) -> StoreResult<Vec<String>> {
        schema_problems(&mut *self.read().await?).await
    }

    async fn backup(&self, _dest: &std::path::Path) -> StoreResult<()> {
        Err(StoreError::Backend(format!(
            "`kiki backup` copies a SQLite store; this home's store is on PostgreSQL: back it up with \
             `pg_dump --format=custom --file=FILE '{}'`",
            self.described
        )))
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notifier.stop().await;
        self.pool.close().await;
    }
}

/// Every table of the schema the connection uses, as the database has it now (for checks
/// and `kiki store migrate`, so that a migration's new table needs no list kept by hand).
pub(super) async fn tables_of(conn: &mut PgConnection) -> StoreResult<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT tablename::TEXT FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename",
    )
    .fetch_all(conn)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            redacted("postgres://kiki:s3cr@t@db:5432/kiki?sslmode=require"),
            "postgres://kiki@db:5432/kiki?sslmode=require"
        );
        assert_eq!(redacted("postgres://kiki@db/kiki"), "postgres://kiki@db/kiki");
        assert_eq!(redacted("postgres://db/kiki"), "postgres://db/kiki");
        assert_eq!(redacted("postgresql://u:p@[::1]/k"), "postgresql://u@[::1]/k");
    }
}
