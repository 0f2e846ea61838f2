//! Thread event logs in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl EventStore for SqliteStore {
    async fn add_event(&self, e: &EventRecord) -> StoreResult<i64> {
        let e = e.clone();
        self.db.write(move |conn| insert_event(conn, &e)).await
    }

    async fn events_after(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        let thread_id = thread_id.to_string();
        // A lookup: a bounded walk of one thread's index from a position, usually a row or
        // two (a ThreadWait that wakes reads here; a hop to a reader would delay its answer).
        self.db
            .lookup(move |conn| {
                page(
                    conn,
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM events WHERE thread_id = ? AND seq > ? ORDER BY seq"
                    ),
                    params![thread_id, after],
                    limit,
                    |row| event_from(row),
                )
            })
            .await
    }

    async fn open_attention(&self, limit: u32) -> StoreResult<Vec<EventRecord>> {
        self.db
            .read(move |conn| {
                page(
                    conn,
                    sql!(
                        "SELECT {EVENT_COLUMNS} FROM events e
                         WHERE e.kind = '{attention}'
                           AND EXISTS (SELECT 1 FROM threads t WHERE t.id = e.thread_id AND t.archived = 0)
                           AND CASE WHEN e.request_id IS NOT NULL
                                 THEN EXISTS (SELECT 1 FROM permission_requests p
                                              WHERE p.id = e.request_id AND p.status = '{pending}')
                                 ELSE NOT EXISTS (SELECT 1 FROM inputs i
                                                  WHERE i.thread_id = e.thread_id AND i.kind = '{user}'
                                                    AND i.created_at >= e.at)
                               END
                         ORDER BY e.seq",
                        attention = EventKind::Attention,
                        pending = PermissionStatus::Pending,
                        user = InputKind::User,
                    ),
                    [],
                    limit,
                    |row| event_from(row),
                )
            })
            .await
    }

    async fn event_positions(&self, thread_id: &str) -> StoreResult<EventPositions> {
        let thread_id = thread_id.to_string();
        self.db
            .lookup(move |conn| {
                // One snapshot: a turn starting between the two reads would misplace the start.
                let conn = conn.transaction()?;
                let last =
                    first(&conn, "SELECT MAX(seq) FROM events WHERE thread_id = ?", [&thread_id], |row| {
                        Ok(row.get::<_, Option<i64>>(0)?)
                    })?;
                let last = last.flatten().unwrap_or(0);
                let latest_turn = first(
                    &conn,
                    "SELECT events_before FROM turns WHERE thread_id = ? ORDER BY seq DESC LIMIT 1",
                    [&thread_id],
                    |row| Ok(row.get::<_, Option<i64>>(0)?),
                )?;
                // No turn yet: from now on.
                let latest_turn = latest_turn.flatten().unwrap_or(last).min(last);
                Ok(EventPositions { last, latest_turn })
            })
            .await
    }
}

pub(super) fn insert_event(conn: &Connection, e: &EventRecord) -> StoreResult<i64> {
    note(Change::Thread(e.thread_id.clone()));
    let seq = first(
        conn,
        "INSERT INTO events (thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, request_id, at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
        params![
            e.thread_id,
            e.kind.as_str(),
            e.turn_id,
            e.turn_status.map(TurnStatus::as_str),
            e.reason,
            e.lifecycle.map_or("", Lifecycle::as_str),
            e.message_id,
            e.request_id,
            e.at
        ],
        |row| Ok(row.get::<_, i64>(0)?),
    )?;
    seq.ok_or_else(|| StoreError::Backend("the event insert returned no seq".into()))
}
