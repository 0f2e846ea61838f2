//! Thread event logs on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl EventStore for PostgresStore {
    async fn add_event(&self, e: &EventRecord) -> StoreResult<i64> {
        let mut tx = self.begin().await?;
        let seq = insert_event(&mut tx, e).await?;
        self.commit(tx).await?;
        Ok(seq)
    }

    async fn events_after(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        ))
        .bind(thread_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.read().await?)
        .await?;
        rows.iter().map(event_from).collect()
    }

    async fn event_positions(&self, thread_id: &str) -> StoreResult<EventPositions> {
        // One statement, one snapshot: a turn starting between two reads would misplace the start.
        let (last, latest_turn): (Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT (SELECT MAX(seq) FROM events WHERE thread_id = $1),
                    (SELECT events_before FROM turns WHERE thread_id = $1 ORDER BY seq DESC LIMIT 1)",
        )
        .bind(thread_id)
        .fetch_one(&mut *self.read().await?)
        .await?;
        let last = last.unwrap_or(0);
        // No turn yet: from now on.
        let latest_turn = latest_turn.unwrap_or(last).min(last);
        Ok(EventPositions { last, latest_turn })
    }

    async fn open_attention(&self, limit: u32) -> StoreResult<Vec<EventRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM events e
             WHERE e.kind = $1
               AND EXISTS (SELECT 1 FROM threads t WHERE t.id = e.thread_id AND NOT t.archived)
               AND CASE WHEN e.request_id IS NOT NULL
                     THEN EXISTS (SELECT 1 FROM permission_requests p
                                  WHERE p.id = e.request_id AND p.status = $2)
                     ELSE NOT EXISTS (SELECT 1 FROM inputs i
                                      WHERE i.thread_id = e.thread_id AND i.kind = $3
                                        AND i.created_at >= e.at)
                   END
             ORDER BY e.seq LIMIT $4"
        ))
        .bind(EventKind::Attention)
        .bind(PermissionStatus::Pending)
        .bind(InputKind::User)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.read().await?)
        .await?;
        rows.iter().map(event_from).collect()
    }
}

/// Logs an event in the write under way (noting the thread's change); its seq.
pub(super) async fn insert_event(tx: &mut Tx, e: &EventRecord) -> StoreResult<i64> {
    tx.note(Change::Thread(e.thread_id.clone()));
    let seq = sqlx::query_scalar(
        "INSERT INTO events (thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, request_id, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq",
    )
    .bind(&e.thread_id)
    .bind(e.kind)
    .bind(&e.turn_id)
    .bind(e.turn_status)
    .bind(&e.reason)
    .bind(e.lifecycle.map_or("", Lifecycle::as_str))
    .bind(&e.message_id)
    .bind(&e.request_id)
    .bind(e.at)
    .fetch_one(tx.conn())
    .await?;
    Ok(seq)
}
