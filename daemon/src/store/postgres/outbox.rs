//! The outbox on PostgreSQL.

use async_trait::async_trait;

use super::events::insert_event;
use super::*;

#[async_trait]
impl OutboxStore for PostgresStore {
    async fn outbox_insert(&self, entry: &OutboxRecord) -> StoreResult<Option<OutboxRecord>> {
        let mut tx = self.begin().await?;
        // Only a key already there costs a second statement, to read its entry.
        let existing = match insert_outbox(&mut tx, entry).await? {
            true => None,
            false => outbox_entry(tx.conn(), &entry.peer_home_id, &entry.key_scope, &entry.key).await?,
        };
        self.commit(tx).await?;
        Ok(existing)
    }

    async fn outbox_update(&self, outcomes: &[OutboxOutcome]) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        for (e, event) in outcomes {
            let standing: Option<(OutboxStatus, i64)> =
                match sqlx::query("SELECT status, next_attempt_at FROM outbox WHERE id = $1 FOR UPDATE")
                    .bind(&e.id)
                    .fetch_optional(tx.conn())
                    .await?
                {
                    Some(row) => {
                        Some((Columns::get(&row, "status")?, Columns::get(&row, "next_attempt_at")?))
                    }
                    None => None,
                };
            let changed = standing.is_some_and(|(status, due)| rules::outcome_applies(status, due));
            if changed {
                sqlx::query(
                    "UPDATE outbox SET status = $1, reason = $2, remote_message_id = $3, attempts = $4,
                         next_attempt_at = $5, updated_at = $6
                     WHERE id = $7",
                )
                .bind(e.status)
                .bind(&e.reason)
                .bind(&e.remote_message_id)
                .bind(e.attempts)
                .bind(e.next_attempt_at)
                .bind(e.updated_at)
                .bind(&e.id)
                .execute(tx.conn())
                .await?;
            }
            if changed && let Some(event) = event {
                insert_event(&mut tx, event).await?;
            }
        }
        self.commit(tx).await
    }

    async fn outbox_due(&self, peer: &str, now: Millis, limit: u32) -> StoreResult<Vec<OutboxRecord>> {
        let mut conn = self.read().await?;
        let due = format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox
             WHERE peer_home_id = $1 AND status IN ($2, $3) AND next_attempt_at <= $4
             ORDER BY next_attempt_at LIMIT $5"
        );
        let mut due: Vec<OutboxRecord> = sqlx::query(&due)
            .bind(peer)
            .bind(OutboxStatus::Pending)
            .bind(OutboxStatus::Accepted)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(outbox_from)
            .collect::<StoreResult<_>>()?;
        let left = limit.saturating_sub(due.len() as u32);
        if left > 0 {
            // Expired entries whose target is still to be asked about them.
            let unsettled = format!(
                "SELECT {OUTBOX_COLUMNS} FROM outbox
                 WHERE peer_home_id = $1 AND status = $2 AND next_attempt_at < $3 AND next_attempt_at <= $4
                 ORDER BY next_attempt_at LIMIT $5"
            );
            let rows = sqlx::query(&unsettled)
                .bind(peer)
                .bind(OutboxStatus::Expired)
                .bind(NEVER)
                .bind(now)
                .bind(i64::from(left))
                .fetch_all(&mut *conn)
                .await?;
            for row in &rows {
                due.push(outbox_from(row)?);
            }
        }
        Ok(due)
    }

    async fn outbox_next_due(&self, peer: &str, now: Millis) -> StoreResult<Option<Millis>> {
        // Each the first row of its index's walk (`outbox_due`, `outbox_unsettled`); LEAST
        // passes over a NULL.
        let next: Option<Millis> = sqlx::query_scalar(
            "SELECT LEAST(
                 (SELECT MIN(next_attempt_at) FROM outbox
                  WHERE peer_home_id = $1 AND status IN ($3, $4) AND next_attempt_at > $2),
                 (SELECT MIN(next_attempt_at) FROM outbox
                  WHERE peer_home_id = $1 AND status = $5 AND next_attempt_at < $6 AND next_attempt_at > $2))",
        )
        .bind(peer)
        .bind(now)
        .bind(OutboxStatus::Pending)
        .bind(OutboxStatus::Accepted)
        .bind(OutboxStatus::Expired)
        .bind(NEVER)
        .fetch_one(&mut *self.read().await?)
        .await?;
        Ok(next)
    }

    async fn outbox_page(
        &self,
        bridge_id: &str,
        from: Option<(Millis, String)>,
        limit: u32,
    ) -> StoreResult<Vec<OutboxRecord>> {
        let (created_at, id) = from.unwrap_or((Millis::MAX, String::new()));
        let sql = format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox
             WHERE bridge_id = $1 AND (created_at < $2 OR (created_at = $2 AND id <= $3))
             ORDER BY created_at DESC, id DESC LIMIT $4"
        );
        sqlx::query(&sql)
            .bind(bridge_id)
            .bind(created_at)
            .bind(id)
            .bind(i64::from(limit))
            .fetch_all(&mut *self.read().await?)
            .await?
            .iter()
            .map(outbox_from)
            .collect()
    }

    async fn outbox_pending(&self, peer: &str, bridge_id: &str, except: &[String]) -> StoreResult<u64> {
        // By the peer and the status: what lets the `outbox_due` index serve.
        let pending: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM outbox WHERE peer_home_id = $1 AND status = $2 AND bridge_id = $3 AND id <> ALL($4)",
        )
        .bind(peer)
        .bind(OutboxStatus::Pending)
        .bind(bridge_id)
        .bind(except)
        .fetch_one(&mut *self.read().await?)
        .await?;
        Ok(pending as u64)
    }

    async fn outbox_oldest_pending(&self, peer: &str) -> StoreResult<Option<Millis>> {
        Ok(sqlx::query_scalar("SELECT MIN(created_at) FROM outbox WHERE peer_home_id = $1 AND status = $2")
            .bind(peer)
            .bind(OutboxStatus::Pending)
            .fetch_one(&mut *self.read().await?)
            .await?)
    }

    async fn outbox_by_key(&self, peer: &str, scope: &str, key: &str) -> StoreResult<Option<OutboxRecord>> {
        let mut conn = self.read().await?;
        outbox_entry(&mut conn, peer, scope, key).await
    }

    async fn outbox_retry_now(&self, peer: &str, now: Millis) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        tx.note(Change::Outbox);
        // All but those no longer followed up.
        sqlx::query(
            "UPDATE outbox SET next_attempt_at = $1 WHERE peer_home_id = $2
             AND status IN ($3, $4) AND next_attempt_at > $1 AND next_attempt_at < $5",
        )
        .bind(now)
        .bind(peer)
        .bind(OutboxStatus::Pending)
        .bind(OutboxStatus::Accepted)
        .bind(NEVER)
        .execute(tx.conn())
        .await?;
        self.commit(tx).await
    }

    async fn outbox_defer(&self, peer: &str, except: &str, until: Millis, window: Millis) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        // To `until`, or only to the end of an entry's retry window when that comes first.
        sqlx::query(
            "UPDATE outbox SET next_attempt_at = LEAST($1, created_at + $4)
             WHERE peer_home_id = $2 AND id <> $3 AND status IN ($5, $6) AND next_attempt_at < $1",
        )
        .bind(until)
        .bind(peer)
        .bind(except)
        .bind(window)
        .bind(OutboxStatus::Pending)
        .bind(OutboxStatus::Accepted)
        .execute(tx.conn())
        .await?;
        self.commit(tx).await
    }
}

/// An expired entry no longer asked about waits until never.
const NEVER: i64 = i64::MAX;

/// The outbox entry holding a sender's key: the one for `peer` if there is one, else the
/// one for another peer (a key names one message, wherever it went).
pub(super) async fn outbox_entry(
    conn: &mut PgConnection,
    peer: &str,
    scope: &str,
    key: &str,
) -> StoreResult<Option<OutboxRecord>> {
    let sql = format!(
        "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE key_scope = $1 AND key = $2 ORDER BY peer_home_id <> $3 LIMIT 1"
    );
    let row = sqlx::query(&sql).bind(scope).bind(key).bind(peer).fetch_optional(conn).await?;
    row.as_ref().map(outbox_from).transpose()
}

/// Writes an outbox entry unless its (key scope, key, peer) has one: whether it did.
pub(super) async fn insert_outbox(tx: &mut Tx, e: &OutboxRecord) -> StoreResult<bool> {
    tx.note(Change::Outbox);
    let room = e.room.as_ref();
    let author = room.and_then(|r| r.author.as_ref());
    let sql = format!(
        "INSERT INTO outbox ({OUTBOX_COLUMNS})
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)
         ON CONFLICT (key_scope, key, peer_home_id) DO NOTHING"
    );
    let inserted = sqlx::query(&sql)
        .bind(&e.id)
        .bind(&e.bridge_id)
        .bind(&e.peer_home_id)
        .bind(&e.target_session)
        .bind(&e.source_thread)
        .bind(&e.content)
        .bind(&e.key_scope)
        .bind(&e.key)
        .bind(&e.request_hash)
        .bind(e.status)
        .bind(&e.reason)
        .bind(&e.remote_message_id)
        .bind(e.attempts)
        .bind(e.next_attempt_at)
        .bind(e.created_at)
        .bind(e.updated_at)
        .bind(&e.source_workspace)
        .bind(room.map(|r| &r.tag.room))
        .bind(room.map(|r| &r.tag.entry))
        .bind(author.map(|a| &a.host_id))
        .bind(author.map(|a| &a.thread_id))
        .bind(&e.trace)
        .execute(tx.conn())
        .await?
        .rows_affected();
    Ok(inserted > 0)
}
