//! Rows and statements: each record's columns and row mapper, the bridges' words as TEXT
//! columns (strings appear only here), and the helpers every statement goes through (the
//! statement cache, pages cut in Rust).

use super::*;

pub(super) use crate::store::columns::*;

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

word_columns!(
    Direction,
    BridgeState,
    RequestStatus,
    OutboxStatus,
    InputKind,
    TurnStatus,
    MessageStatus,
    MemberKind,
    CommunicationSetting,
    PermissionStatus,
    EventKind,
    PartKind
);

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

pub(super) fn thread_from(row: &Row) -> StoreResult<ThreadRecord> {
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
        communication: row.get("communication")?,
    })
}

pub(super) fn turn_from(row: &Row) -> StoreResult<TurnRecord> {
    Ok(TurnRecord {
        id: row.get("id")?,
        thread_id: row.get("thread_id")?,
        seq: row.get("seq")?,
        status: row.get("status")?,
        input: row.get("input")?,
        output: row.get("output")?,
        error: row.get("error")?,
        started_at: row.get("started_at")?,
        ended_at: row.get("ended_at")?,
        items: Vec::new(),
        usage: match row.get::<_, Option<f64>>("cost_usd")? {
            Some(cost_usd) => Some(TurnUsage {
                input_tokens: row.get::<_, Option<i64>>("input_tokens")?.unwrap_or(0) as u64,
                output_tokens: row.get::<_, Option<i64>>("output_tokens")?.unwrap_or(0) as u64,
                cost_usd,
            }),
            None => None,
        },
    })
}

pub(super) fn source_from(row: &Row) -> StoreResult<Option<SourceRef>> {
    let thread: Option<String> = row.get("source_thread")?;
    let host: Option<String> = row.get("source_host")?;
    let workspace_id: String = row.get("source_workspace")?;
    Ok(thread.map(|thread_id| SourceRef { host_id: host.unwrap_or_default(), thread_id, workspace_id }))
}

pub(super) fn input_from(row: &Row) -> StoreResult<InputRecord> {
    Ok(InputRecord {
        id: row.get("id")?,
        kind: row.get("kind")?,
        content: row.get("content")?,
        message_id: row.get("message_id")?,
        source: source_from(row)?,
        room: match (row.get::<_, Option<String>>("room_id")?, row.get::<_, Option<String>>("room_entry")?) {
            (Some(room), entry) => {
                let entry = entry.or_else(|| row.get("message_id").ok().flatten()).unwrap_or_default();
                Some(RoomTag { room, entry })
            }
            (None, _) => None,
        },
        via: row.get("via_home")?,
        now: row.get("created_at")?,
    })
}

pub(super) fn outbox_from(row: &Row) -> StoreResult<OutboxRecord> {
    Ok(OutboxRecord {
        id: row.get("id")?,
        bridge_id: row.get("bridge_id")?,
        peer_home_id: row.get("peer_home_id")?,
        target_session: row.get("target_session")?,
        source_thread: row.get("source_thread")?,
        source_workspace: row.get("source_workspace")?,
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
        room: match (row.get::<_, Option<String>>("room_id")?, row.get::<_, Option<String>>("room_entry")?) {
            (Some(room), Some(entry)) => {
                let author_host: String =
                    row.get::<_, Option<String>>("room_author_host")?.unwrap_or_default();
                let author: String = row.get::<_, Option<String>>("room_author")?.unwrap_or_default();
                Some(OutboundEntry {
                    tag: RoomTag { room, entry },
                    author: (!author.is_empty()).then(|| SourceRef {
                        host_id: author_host,
                        thread_id: author,
                        workspace_id: String::new(),
                    }),
                })
            }
            _ => None,
        },
    })
}

pub(super) fn event_from(row: &Row) -> StoreResult<EventRecord> {
    Ok(EventRecord {
        seq: row.get("seq")?,
        thread_id: row.get("thread_id")?,
        kind: row.get("kind")?,
        turn_id: row.get("turn_id")?,
        turn_status: row.get("turn_status")?,
        reason: row.get("reason")?,
        lifecycle: Lifecycle::parse(&row.get::<_, String>("lifecycle")?),
        message_id: row.get("message_id")?,
        request_id: row.get("request_id")?,
        at: row.get("at")?,
    })
}

pub(super) fn message_from(row: &Row) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        id: row.get("id")?,
        target_thread: row.get("target_thread")?,
        source: source_from(row)?,
        content: row.get("content")?,
        status: row.get("status")?,
        reason: row.get("reason")?,
        created_at: row.get("created_at")?,
        delivered_at: row.get("delivered_at")?,
        turn_id: row.get("turn_id")?,
        deadline: row.get("deadline")?,
    })
}

pub(super) fn bridge_from(row: &Row) -> StoreResult<BridgeRecord> {
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
        requested: row.get("requested")?,
    })
}

pub(super) fn request_from(row: &Row) -> StoreResult<BridgeRequestRecord> {
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

pub(super) fn receipt_from(row: &Row) -> StoreResult<ReceiptRecord> {
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
