//! A whole store copied to another backend (`kiki store migrate`): every table, row for
//! row, with the same ids and sequence numbers, in one transaction on the target, then the
//! rows counted on both sides. The schemas match column for column (SQLite's migrations and
//! Postgres' one schema); each column is read and written by the Postgres schema's type.

use rusqlite::types::Value;
use sqlx::{Connection as _, PgConnection};

use super::columns::{Cell, Columns as _};
use super::postgres::{TABLES, connect_options};
use super::{StoreError, StoreLocation, StoreResult};

/// Tables whose `seq` the database assigns: after a copy the next one follows the copied.
const SEQUENCED: &[&str] = &["threads", "inputs", "events", "bridge_receipts", "rooms"];

/// The rows copied, per table.
pub type Counts = Vec<(&'static str, u64)>;

/// Copies the store at `from` into the empty store at `to` (made and migrated here), and
/// checks that every table has as many rows on both sides. Nothing else may use either
/// store meanwhile (the home is stopped: its lock is held).
pub async fn copy_store(from: &StoreLocation, to: &StoreLocation) -> StoreResult<Counts> {
    // Both opened once: made if new, migrated to this kikid's schema, closed again.
    for location in [from, to] {
        location.open(&crate::time::Clock::system()).await?.close().await;
    }
    let mut source = Side::connect(from).await?;
    let mut target = Side::connect(to).await?;
    let present = target.counts().await?;
    if let Some((table, rows)) = present.iter().find(|(_, rows)| *rows > 0) {
        return Err(StoreError::Backend(format!(
            "the target store {} is not empty ({table} has {rows} rows): kiki copies into an empty store only",
            to.describe()
        )));
    }
    let columns = columns()?;
    target.begin().await?;
    for (table, columns) in &columns {
        let rows = source.rows(table, columns).await?;
        target.insert(table, columns, rows).await?;
    }
    target.commit().await?;
    let (copied, now) = (source.counts().await?, target.counts().await?);
    if copied != now {
        return Err(StoreError::Backend(format!(
            "the copy does not match its source: {copied:?} rows were read, {now:?} are in {}",
            to.describe()
        )));
    }
    Ok(copied)
}

/// A cell read from Postgres, as SQLite keeps it (a switch is 0 or 1).
fn value_of(cell: Cell<'_>) -> Value {
    match cell {
        Cell::Null => Value::Null,
        Cell::Int(n) => Value::Integer(n),
        Cell::Bool(b) => Value::Integer(b.into()),
        Cell::Real(x) => Value::Real(x),
        Cell::Text(text) => Value::Text(text.to_string()),
    }
}

/// A table's columns, named, with their kinds.
type Columns = Vec<(String, Kind)>;

/// A column's Postgres type, which says how its values are read and written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Int,
    Bool,
    Real,
    Text,
}

/// Every table's columns and their kinds, read from the Postgres schema's CREATE TABLEs
/// (one column per line, table constraints after them).
fn columns() -> StoreResult<Vec<(&'static str, Columns)>> {
    let schema = include_str!("postgres/migrations/0001_schema.sql");
    TABLES
        .iter()
        .map(|&table| {
            let start = schema
                .find(&format!("CREATE TABLE {table} ("))
                .ok_or_else(|| StoreError::Backend(format!("no table {table} in the schema")))?;
            let body = &schema[start..];
            let body = &body[body.find('(').unwrap_or(0) + 1..body.find("\n);").unwrap_or(body.len())];
            let columns = body
                .lines()
                .map(str::trim)
                .filter(|line| {
                    !line.is_empty()
                        && !line.starts_with("--")
                        && !line.starts_with("UNIQUE")
                        && !line.starts_with("PRIMARY KEY (")
                })
                .filter_map(|line| {
                    let mut words = line.split_whitespace();
                    let name = words.next()?.to_string();
                    let kind = match words.next()?.trim_end_matches(',') {
                        "BIGINT" => Kind::Int,
                        "BOOLEAN" => Kind::Bool,
                        "DOUBLE" => Kind::Real,
                        _ => Kind::Text,
                    };
                    Some((name, kind))
                })
                .collect();
            Ok((table, columns))
        })
        .collect()
}

/// One side of a copy, connected directly (no store around it).
enum Side {
    Sqlite(rusqlite::Connection),
    Postgres(PgConnection),
}

impl Side {
    async fn connect(location: &StoreLocation) -> StoreResult<Self> {
        Ok(match location {
            StoreLocation::Sqlite(path) => Self::Sqlite(rusqlite::Connection::open(path)?),
            StoreLocation::Postgres(options) => {
                Self::Postgres(PgConnection::connect_with(&connect_options(options)?).await?)
            }
        })
    }

    async fn counts(&mut self) -> StoreResult<Counts> {
        let mut counts = Vec::new();
        for &table in TABLES {
            let sql = format!("SELECT COUNT(*) FROM {table}");
            let n: i64 = match self {
                Self::Sqlite(conn) => conn.query_row(&sql, [], |row| row.get(0))?,
                Self::Postgres(conn) => sqlx::query_scalar(&sql).fetch_one(&mut *conn).await?,
            };
            counts.push((table, n as u64));
        }
        Ok(counts)
    }

    async fn begin(&mut self) -> StoreResult<()> {
        match self {
            Self::Sqlite(conn) => conn.execute_batch("BEGIN IMMEDIATE")?,
            Self::Postgres(conn) => {
                sqlx::raw_sql("BEGIN").execute(&mut *conn).await?;
            }
        }
        Ok(())
    }

    async fn commit(&mut self) -> StoreResult<()> {
        match self {
            Self::Sqlite(conn) => conn.execute_batch("COMMIT")?,
            Self::Postgres(conn) => {
                for table in SEQUENCED {
                    let sql = format!(
                        "SELECT setval(pg_get_serial_sequence('{table}', 'seq'), COALESCE(MAX(seq), 0) + 1, false) FROM {table}"
                    );
                    sqlx::query(&sql).execute(&mut *conn).await?;
                }
                sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
            }
        }
        Ok(())
    }

    /// Every row of `table`, its `columns` in order.
    async fn rows(&mut self, table: &str, columns: &[(String, Kind)]) -> StoreResult<Vec<Vec<Value>>> {
        let names: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
        let sql = format!("SELECT {} FROM {table}", names.join(", "));
        match self {
            Self::Sqlite(conn) => {
                let mut statement = conn.prepare(&sql)?;
                let rows = statement.query_map([], |row| {
                    (0..columns.len()).map(|i| row.get::<_, Value>(i)).collect::<rusqlite::Result<Vec<_>>>()
                })?;
                Ok(rows.collect::<rusqlite::Result<_>>()?)
            }
            Self::Postgres(conn) => {
                let rows = sqlx::query(&sql).fetch_all(&mut *conn).await?;
                rows.iter()
                    .map(|row| names.iter().map(|name| Ok(value_of(row.cell(name)?))).collect())
                    .collect()
            }
        }
    }

    async fn insert(
        &mut self,
        table: &str,
        columns: &[(String, Kind)],
        rows: Vec<Vec<Value>>,
    ) -> StoreResult<()> {
        let names: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
        match self {
            Self::Sqlite(conn) => {
                let marks = vec!["?"; columns.len()].join(", ");
                let mut statement =
                    conn.prepare(&format!("INSERT INTO {table} ({}) VALUES ({marks})", names.join(", ")))?;
                for row in rows {
                    statement.execute(rusqlite::params_from_iter(row))?;
                }
            }
            Self::Postgres(conn) => {
                let marks: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
                let sql = format!(
                    "INSERT INTO {table} ({}) OVERRIDING SYSTEM VALUE VALUES ({})",
                    names.join(", "),
                    marks.join(", ")
                );
                for row in rows {
                    let mut insert = sqlx::query(&sql);
                    for ((_, kind), value) in columns.iter().zip(row) {
                        insert = match (kind, value) {
                            (Kind::Int, Value::Null) => insert.bind(None::<i64>),
                            (Kind::Bool, Value::Null) => insert.bind(None::<bool>),
                            (Kind::Real, Value::Null) => insert.bind(None::<f64>),
                            (Kind::Text, Value::Null) => insert.bind(None::<String>),
                            (Kind::Int, Value::Integer(n)) => insert.bind(n),
                            (Kind::Bool, Value::Integer(n)) => insert.bind(n != 0),
                            (Kind::Real, Value::Real(x)) => insert.bind(x),
                            (Kind::Real, Value::Integer(n)) => insert.bind(n as f64),
                            (Kind::Text, Value::Text(text)) => insert.bind(text),
                            (kind, value) => {
                                return Err(StoreError::Backend(format!(
                                    "{table}: a {value:?} where the schema has a {kind:?} column"
                                )));
                            }
                        };
                    }
                    insert.execute(&mut *conn).await?;
                }
            }
        }
        Ok(())
    }
}
