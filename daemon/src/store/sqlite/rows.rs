//! Rows and statements: words bound as their one spelling, a SQLite row read by the record
//! mappers of `store/columns.rs`, and the helpers every statement goes through (the
//! statement cache, pages cut in Rust).

use super::*;

pub(super) use crate::store::columns::*;

/// Each word type bound as its one spelling (read back through [`Columns`]).
macro_rules! word_columns {
    ($($word:ty),*) => {$(
        impl rusqlite::ToSql for $word {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }
    )*};
}

row_words!(word_columns);

/// A permission set as its comma-separated words (`read,send`).
impl rusqlite::ToSql for Permissions {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.joined().into())
    }
}

/// A row read by the record mappers (`store/columns.rs`).
impl Columns for Row<'_> {
    fn cell(&self, name: &str) -> StoreResult<Cell<'_>> {
        use rusqlite::types::ValueRef;
        Ok(match self.get_ref(name)? {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(n) => Cell::Int(n),
            ValueRef::Real(x) => Cell::Real(x),
            ValueRef::Text(text) => Cell::Text(
                std::str::from_utf8(text).map_err(|e| StoreError::Backend(format!("column {name}: {e}")))?,
            ),
            ValueRef::Blob(_) => {
                return Err(StoreError::Backend(format!("column {name}: a blob, not a value")));
            }
        })
    }
}

/// Every row of a cached statement, mapped.
pub(super) fn all<T>(
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
pub(super) fn page<T>(
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
pub(super) fn first<T>(
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
pub(super) fn count(conn: &Connection, sql: &str, params: impl Params) -> StoreResult<u64> {
    let n = first(conn, sql, params, |row| Ok(row.get::<_, i64>(0)?))?;
    Ok(n.unwrap_or(0) as u64)
}

/// Runs a cached statement; the number of rows changed.
pub(super) fn run(conn: &Connection, sql: &str, params: impl Params) -> StoreResult<usize> {
    Ok(conn.prepare_cached(sql)?.execute(params)?)
}
