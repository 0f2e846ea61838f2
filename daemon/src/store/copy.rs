//! A whole store copied to another backend (`kiki store migrate`): every table, row for
//! row, with the same ids and sequence numbers, in one transaction on the target, then the
//! rows counted on both sides.
//!
//! The tables and their columns are read from the two live schemas (SQLite's `sqlite_master`
//! and `table_info`, Postgres' catalog), never listed here: a migration that adds a table or
//! a column is copied without a change to this file. Both stores are migrated to this
//! kikid's schema first, so they must name the same tables and columns; where they do not,
//! nothing is copied and the difference is named (a copy that left a column behind would
//! lose it silently).

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::types::Value;
use sqlx::{Connection as _, PgConnection};

use super::columns::{Cell, Columns as _};
use super::postgres::{connect_options, tables_of};
use super::{StoreError, StoreLocation, StoreResult};

/// Tables that are not the home's data: the migrations each store applied (its own), and
/// the kikid processes serving the home now (none: it is stopped).
const NOT_COPIED: &[&str] = &["schema_migrations", "replicas"];

/// The rows copied, per table.
pub type Counts = Vec<(String, u64)>;

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
    let tables = plan(source.schema().await?, target.schema().await?)?;
    let present = target.counts(&tables).await?;
    if let Some((table, rows)) = present.iter().find(|(_, rows)| *rows > 0) {
        return Err(StoreError::Backend(format!(
            "the target store {} is not empty ({table} has {rows} rows): kiki copies into an empty store only",
            to.describe()
        )));
    }
    target.begin().await?;
    for table in &tables {
        let rows = source.rows(table).await?;
        target.insert(table, rows).await?;
    }
    target.commit(&tables).await?;
    let (copied, now) = (source.counts(&tables).await?, target.counts(&tables).await?);
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

/// How a column's values are written: by its type on the target (a Postgres column of
/// `BOOLEAN` takes a switch where SQLite kept 0 or 1).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Int,
    Bool,
    Real,
    Text,
}

/// A table as one live schema has it.
#[derive(Debug, Clone, Default, PartialEq)]
struct SchemaTable {
    /// Its columns in order, with their kinds.
    columns: Vec<(String, Kind)>,
    /// The tables its foreign keys refer to: their rows are copied first.
    references: BTreeSet<String>,
    /// Its columns whose values a sequence gives (Postgres' identity columns).
    sequenced: Vec<String>,
}

type Schema = BTreeMap<String, SchemaTable>;

/// A table to copy: its columns as the target has them.
#[derive(Debug, Clone, PartialEq)]
struct Table {
    name: String,
    columns: Vec<(String, Kind)>,
    /// The target's columns whose sequence must follow the copied values.
    sequenced: Vec<String>,
}

impl Table {
    fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|(name, _)| name.as_str()).collect()
    }
}

/// The tables to copy, each after those it refers to: every table of the two schemas but
/// [`NOT_COPIED`], which must be the same tables with the same columns on both sides.
fn plan(source: Schema, target: Schema) -> StoreResult<Vec<Table>> {
    let copied = |schema: Schema| -> Schema {
        schema.into_iter().filter(|(name, _)| !NOT_COPIED.contains(&name.as_str())).collect()
    };
    let (source, target) = (copied(source), copied(target));
    let mut differences = Vec::new();
    for (name, _) in source.iter().filter(|(name, _)| !target.contains_key(*name)) {
        differences.push(format!("table {name} is only in the source"));
    }
    for (name, table) in &target {
        let Some(from) = source.get(name) else {
            differences.push(format!("table {name} is only in the target"));
            continue;
        };
        let names = |table: &SchemaTable| -> BTreeSet<String> {
            table.columns.iter().map(|(column, _)| column.clone()).collect()
        };
        let (theirs, ours) = (names(from), names(table));
        for column in theirs.difference(&ours) {
            differences.push(format!("column {name}.{column} is only in the source"));
        }
        for column in ours.difference(&theirs) {
            differences.push(format!("column {name}.{column} is only in the target"));
        }
    }
    if !differences.is_empty() {
        return Err(StoreError::Backend(format!(
            "the two stores' schemas differ, so nothing was copied: {}",
            differences.join("; ")
        )));
    }
    let mut ordered: Vec<Table> = Vec::new();
    let mut left = target;
    while !left.is_empty() {
        let ready: Vec<String> = left
            .iter()
            .filter(|(name, table)| {
                let refers = source[*name].references.union(&table.references);
                refers.filter(|other| other != name).all(|other| !left.contains_key(other))
            })
            .map(|(name, _)| name.clone())
            .collect();
        if ready.is_empty() {
            let tables: Vec<&String> = left.keys().collect();
            return Err(StoreError::Backend(format!(
                "the tables {tables:?} refer to each other in a circle: kiki cannot order their copy"
            )));
        }
        for name in ready {
            if let Some(table) = left.remove(&name) {
                ordered.push(Table { name, columns: table.columns, sequenced: table.sequenced });
            }
        }
    }
    Ok(ordered)
}

/// A column's kind by its declared SQLite type (SQLite keeps a switch as an integer).
fn sqlite_kind(declared: &str) -> Kind {
    let declared = declared.to_ascii_uppercase();
    if declared.contains("INT") {
        Kind::Int
    } else if ["REAL", "FLOA", "DOUB"].iter().any(|real| declared.contains(real)) {
        Kind::Real
    } else {
        Kind::Text
    }
}

/// A column's kind by its Postgres type; a type kiki's schema does not use is refused, not
/// guessed at.
fn postgres_kind(table: &str, column: &str, data_type: &str) -> StoreResult<Kind> {
    Ok(match data_type {
        "bigint" | "integer" | "smallint" => Kind::Int,
        "boolean" => Kind::Bool,
        "double precision" | "real" => Kind::Real,
        "text" | "character varying" => Kind::Text,
        other => {
            return Err(StoreError::Backend(format!(
                "column {table}.{column} is a {other}, which kiki's copy does not know"
            )));
        }
    })
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

    /// Every table of the live schema, with its columns.
    async fn schema(&mut self) -> StoreResult<Schema> {
        let mut schema = Schema::new();
        match self {
            Self::Sqlite(conn) => {
                let names: Vec<String> = conn
                    .prepare(
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                    )?
                    .query_map([], |row| row.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                for name in names {
                    let columns = conn
                        .prepare("SELECT name, type FROM pragma_table_info(?1) ORDER BY cid")?
                        .query_map([&name], |row| {
                            Ok((row.get::<_, String>(0)?, sqlite_kind(&row.get::<_, String>(1)?)))
                        })?
                        .collect::<rusqlite::Result<_>>()?;
                    let references = conn
                        .prepare("SELECT \"table\" FROM pragma_foreign_key_list(?1)")?
                        .query_map([&name], |row| row.get(0))?
                        .collect::<rusqlite::Result<_>>()?;
                    // An AUTOINCREMENT's next value follows the largest inserted by itself.
                    let table = SchemaTable { columns, references, sequenced: Vec::new() };
                    schema.insert(name, table);
                }
            }
            Self::Postgres(conn) => {
                for name in tables_of(conn).await? {
                    let columns: Vec<(String, String, bool)> = sqlx::query_as(
                        "SELECT column_name::TEXT, data_type::TEXT,
                                is_identity = 'YES' OR COALESCE(column_default, '') LIKE 'nextval(%'
                         FROM information_schema.columns
                         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
                    )
                    .bind(&name)
                    .fetch_all(&mut *conn)
                    .await?;
                    let references: Vec<String> = sqlx::query_scalar(
                        "SELECT DISTINCT parent.relname::TEXT FROM pg_constraint c
                         JOIN pg_class child ON child.oid = c.conrelid
                         JOIN pg_class parent ON parent.oid = c.confrelid
                         WHERE c.contype = 'f' AND child.relname = $1
                           AND child.relnamespace = current_schema()::regnamespace",
                    )
                    .bind(&name)
                    .fetch_all(&mut *conn)
                    .await?;
                    let mut table =
                        SchemaTable { references: references.into_iter().collect(), ..Default::default() };
                    for (column, data_type, sequenced) in columns {
                        table.columns.push((column.clone(), postgres_kind(&name, &column, &data_type)?));
                        if sequenced {
                            table.sequenced.push(column);
                        }
                    }
                    schema.insert(name, table);
                }
            }
        }
        Ok(schema)
    }

    async fn counts(&mut self, tables: &[Table]) -> StoreResult<Counts> {
        let mut counts = Vec::new();
        for table in tables {
            let sql = format!("SELECT COUNT(*) FROM {}", table.name);
            let n: i64 = match self {
                Self::Sqlite(conn) => conn.query_row(&sql, [], |row| row.get(0))?,
                Self::Postgres(conn) => sqlx::query_scalar(&sql).fetch_one(&mut *conn).await?,
            };
            counts.push((table.name.clone(), n as u64));
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

    /// Commits the copy of `tables`, their sequences moved past the copied values first (the
    /// next row the database numbers follows them).
    async fn commit(&mut self, tables: &[Table]) -> StoreResult<()> {
        match self {
            Self::Sqlite(conn) => conn.execute_batch("COMMIT")?,
            Self::Postgres(conn) => {
                for table in tables {
                    for column in &table.sequenced {
                        let sql = format!(
                            "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), COALESCE(MAX({column}), 0) + 1, false) FROM {table}",
                            table = table.name
                        );
                        sqlx::query(&sql).execute(&mut *conn).await?;
                    }
                }
                sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
            }
        }
        Ok(())
    }

    /// Every row of `table`, its columns in order.
    async fn rows(&mut self, table: &Table) -> StoreResult<Vec<Vec<Value>>> {
        let names = table.names();
        let sql = format!("SELECT {} FROM {}", names.join(", "), table.name);
        match self {
            Self::Sqlite(conn) => {
                let mut statement = conn.prepare(&sql)?;
                let rows = statement.query_map([], |row| {
                    (0..names.len()).map(|i| row.get::<_, Value>(i)).collect::<rusqlite::Result<Vec<_>>>()
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

    async fn insert(&mut self, table: &Table, rows: Vec<Vec<Value>>) -> StoreResult<()> {
        let names = table.names();
        let name = &table.name;
        match self {
            Self::Sqlite(conn) => {
                let marks = vec!["?"; names.len()].join(", ");
                let mut statement =
                    conn.prepare(&format!("INSERT INTO {name} ({}) VALUES ({marks})", names.join(", ")))?;
                for row in rows {
                    statement.execute(rusqlite::params_from_iter(row))?;
                }
            }
            Self::Postgres(conn) => {
                let marks: Vec<String> = (1..=names.len()).map(|i| format!("${i}")).collect();
                let sql = format!(
                    "INSERT INTO {name} ({}) OVERRIDING SYSTEM VALUE VALUES ({})",
                    names.join(", "),
                    marks.join(", ")
                );
                for row in rows {
                    let mut insert = sqlx::query(&sql);
                    for ((column, kind), value) in table.columns.iter().zip(row) {
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
                                    "{name}.{column}: a {value:?} where the target has a {kind:?} column"
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

#[cfg(test)]
mod tests {
    use super::*;

    fn table(columns: &[&str], references: &[&str]) -> SchemaTable {
        SchemaTable {
            columns: columns.iter().map(|c| (c.to_string(), Kind::Text)).collect(),
            references: references.iter().map(|r| r.to_string()).collect(),
            sequenced: Vec::new(),
        }
    }

    fn schema(tables: &[(&str, SchemaTable)]) -> Schema {
        tables.iter().map(|(name, table)| (name.to_string(), table.clone())).collect()
    }

    #[test]
    fn every_table_is_copied_after_those_it_refers_to() {
        let both = schema(&[
            ("turns", table(&["id", "thread_id"], &["threads"])),
            ("inputs", table(&["id", "turn_id"], &["turns", "threads"])),
            ("threads", table(&["id"], &[])),
            ("crons", table(&["id"], &[])),
            ("replicas", table(&["id"], &[])),
            ("schema_migrations", table(&["version"], &[])),
        ]);
        let order: Vec<String> =
            plan(both.clone(), both).expect("plan").into_iter().map(|t| t.name).collect();
        assert_eq!(order, ["crons", "threads", "turns", "inputs"]);
    }

    #[test]
    fn schemas_that_differ_copy_nothing_and_say_how() {
        let source = schema(&[("outbox", table(&["id", "trace"], &[])), ("crons", table(&["id"], &[]))]);
        let target = schema(&[("outbox", table(&["id"], &[])), ("todo_lists", table(&["id"], &[]))]);
        let Err(StoreError::Backend(why)) = plan(source, target) else { panic!("refused") };
        assert!(why.contains("table crons is only in the source"), "{why}");
        assert!(why.contains("table todo_lists is only in the target"), "{why}");
        assert!(why.contains("column outbox.trace is only in the source"), "{why}");
    }
}
