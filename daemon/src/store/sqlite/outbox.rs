//! The outbox in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl OutboxStore for SqliteStore {
    async fn outbox_insert(&self, entry: &OutboxRecord) -> StoreResult<Option<OutboxRecord>> {
        // Before the write: from now on a probe for the key reads the outbox.
        self.outbox_keys.add(&entry.key_scope, &entry.key);
        let e = entry.clone();
        self.db
            .write(move |conn| {
                // One probe of the key's index on the writer: the insert's own. Only a key
                // already there costs a second, to read its entry.
                if !insert_outbox(conn, &e)? {
                    return outbox_entry(conn, &e.peer_home_id, &e.key_scope, &e.key);
                }
                Ok(None)
            })
            .await
    }

    async fn outbox_update(&self, outcomes: &[OutboxOutcome]) -> StoreResult<()> {
        let outcomes = outcomes.to_vec();
        self.db
            .write(move |conn| {
                for (e, event) in &outcomes {
                    let standing = first(
                        conn,
                        "SELECT status, next_attempt_at FROM outbox WHERE id = ?",
                        [&e.id],
                        |row| {
                            Ok((
                                Columns::get::<OutboxStatus>(row, "status")?,
                                Columns::get::<i64>(row, "next_attempt_at")?,
                            ))
                        },
                    )?;
                    let changed = standing.is_some_and(|(status, due)| rules::outcome_applies(status, due));
                    if changed {
                        run(
                            conn,
                            "UPDATE outbox SET status = ?, reason = ?, remote_message_id = ?, attempts = ?,
                                 next_attempt_at = ?, updated_at = ?
                             WHERE id = ?",
                            params![
                                e.status,
                                e.reason,
                                e.remote_message_id,
                                e.attempts,
                                e.next_attempt_at,
                                e.updated_at,
                                e.id
                            ],
                        )?;
                    }
                    if changed && let Some(event) = event {
                        insert_event(conn, event)?;
                    }
                }
                Ok(())
            })
            .await
    }

    async fn outbox_due(&self, peer: &str, now: Millis, limit: u32) -> StoreResult<Vec<OutboxRecord>> {
        let peer = peer.to_string();
        self.db
            .read(move |conn| {
                let mut due = page(
                    conn,
                    sql!("SELECT {OUTBOX_COLUMNS} {}", outbox_due_sql()),
                    params![peer, now],
                    limit,
                    |row| outbox_from(row),
                )?;
                let left = limit.saturating_sub(due.len() as u32);
                if left > 0 {
                    let sql = sql!("SELECT {OUTBOX_COLUMNS} {}", outbox_unsettled_sql());
                    due.extend(page(conn, sql, params![peer, now], left, |row| outbox_from(row))?);
                }
                Ok(due)
            })
            .await
    }

    async fn outbox_next_due(&self, peer: &str, now: Millis) -> StoreResult<Option<Millis>> {
        let peer = peer.to_string();
        self.db
            .lookup(move |conn| {
                // Each the first row of its index's walk (`outbox_due`, `outbox_unsettled`).
                let first = |sql: &str| -> StoreResult<Option<Millis>> {
                    Ok(conn.prepare_cached(sql)?.query_row(params![peer, now], |row| row.get(0))?)
                };
                let due = first(outbox_next_due_sql())?;
                let unsettled = first(outbox_next_unsettled_sql())?;
                Ok(due.into_iter().chain(unsettled).min())
            })
            .await
    }

    async fn outbox_page(
        &self,
        bridge_id: &str,
        from: Option<(Millis, String)>,
        limit: u32,
    ) -> StoreResult<Vec<OutboxRecord>> {
        let bridge_id = bridge_id.to_string();
        let (created_at, id) = from.unwrap_or((Millis::MAX, String::new()));
        self.db
            .read(move |conn| {
                page(
                    conn,
                    &format!(
                        "SELECT {OUTBOX_COLUMNS} FROM outbox
                         WHERE bridge_id = ?1 AND (created_at < ?2 OR (created_at = ?2 AND id <= ?3))
                         ORDER BY created_at DESC, id DESC"
                    ),
                    params![bridge_id, created_at, id],
                    limit,
                    |row| outbox_from(row),
                )
            })
            .await
    }

    async fn outbox_pending(&self, peer: &str, bridge_id: &str, except: &[String]) -> StoreResult<u64> {
        let (peer, bridge_id) = (peer.to_string(), bridge_id.to_string());
        let except = serde_json::to_string(except).map_err(|e| StoreError::Backend(e.to_string()))?;
        self.db.read(move |conn| count(conn, outbox_pending_sql(), params![peer, bridge_id, except])).await
    }

    async fn outbox_oldest_pending(&self, peer: &str) -> StoreResult<Option<Millis>> {
        let peer = peer.to_string();
        let sql = sql!(
            "SELECT MIN(created_at) FROM outbox INDEXED BY outbox_due
             WHERE peer_home_id = ? AND {awaiting} AND status = '{pending}'",
            awaiting = awaiting(),
            pending = OutboxStatus::Pending
        );
        self.db.read(move |conn| Ok(conn.prepare_cached(sql)?.query_row([&peer], |row| row.get(0))?)).await
    }

    async fn outbox_by_key(&self, peer: &str, scope: &str, key: &str) -> StoreResult<Option<OutboxRecord>> {
        if !self.outbox_keys.may_hold(scope, key) {
            return Ok(None);
        }
        let (peer, scope, key) = (peer.to_string(), scope.to_string(), key.to_string());
        self.db.lookup(move |conn| outbox_entry(conn, &peer, &scope, &key)).await
    }

    async fn outbox_retry_now(&self, peer: &str, now: Millis) -> StoreResult<()> {
        let peer = peer.to_string();
        self.db
            .write(move |conn| {
                note(Change::Outbox);
                run(conn, outbox_retry_now_sql(), params![now, peer]).map(drop)
            })
            .await
    }

    async fn outbox_defer(&self, peer: &str, except: &str, until: Millis, window: Millis) -> StoreResult<()> {
        self.write_statement(outbox_defer_sql(), (until, peer.to_string(), except.to_string(), window)).await
    }
}

/// What a peer's entries waiting for an answer have as status: the condition of the
/// `outbox_due` index, repeated by the statements it serves.
fn awaiting() -> String {
    format!("status IN ('{}', '{}')", OutboxStatus::Pending, OutboxStatus::Accepted)
}

/// An expired entry no longer asked about waits until never.
const NEVER: i64 = i64::MAX;

/// A peer's due entries, oldest first (after `SELECT` and the columns).
pub(super) fn outbox_due_sql() -> &'static str {
    sql!(
        "FROM outbox WHERE peer_home_id = ? AND {awaiting} AND next_attempt_at <= ? ORDER BY next_attempt_at",
        awaiting = awaiting()
    )
}

/// A peer's expired entries whose target is still to be asked about them, oldest first
/// (after `SELECT` and the columns): they walk `outbox_unsettled`.
pub(super) fn outbox_unsettled_sql() -> &'static str {
    sql!(
        "FROM outbox WHERE peer_home_id = ? AND status = '{expired}'
         AND next_attempt_at < {NEVER} AND next_attempt_at <= ? ORDER BY next_attempt_at",
        expired = OutboxStatus::Expired
    )
}

/// The first time after `?` one of a peer's [`outbox_due_sql`] entries is due.
pub(super) fn outbox_next_due_sql() -> &'static str {
    sql!(
        "SELECT MIN(next_attempt_at) FROM outbox WHERE peer_home_id = ? AND {awaiting} AND next_attempt_at > ?",
        awaiting = awaiting()
    )
}

/// The first time after `?` one of a peer's [`outbox_unsettled_sql`] entries is due.
pub(super) fn outbox_next_unsettled_sql() -> &'static str {
    sql!(
        "SELECT MIN(next_attempt_at) FROM outbox
         WHERE peer_home_id = ? AND status = '{expired}' AND next_attempt_at < {NEVER} AND next_attempt_at > ?",
        expired = OutboxStatus::Expired
    )
}

/// A bridge's unacknowledged entries but those in a JSON list of ids. The `awaiting`
/// condition is what lets the index serve; the bridge's peer, its first column.
pub(super) fn outbox_pending_sql() -> &'static str {
    sql!(
        "SELECT COUNT(*) FROM outbox INDEXED BY outbox_due
         WHERE peer_home_id = ? AND {awaiting} AND status = '{pending}' AND bridge_id = ?
           AND id NOT IN (SELECT value FROM json_each(?))",
        awaiting = awaiting(),
        pending = OutboxStatus::Pending
    )
}

/// Makes a peer's entries due now (?1 = now), except those no longer followed up.
pub(super) fn outbox_retry_now_sql() -> &'static str {
    sql!(
        "UPDATE outbox SET next_attempt_at = ?1 WHERE peer_home_id = ?2
         AND {awaiting} AND next_attempt_at > ?1 AND next_attempt_at < {NEVER}",
        awaiting = awaiting()
    )
}

/// Puts off a peer's entries due before ?1 to ?1, but entry ?3 — or only to the end of
/// their retry window (?4 after they were sent), when that comes first.
pub(super) fn outbox_defer_sql() -> &'static str {
    sql!(
        "UPDATE outbox SET next_attempt_at = MIN(?1, created_at + ?4)
         WHERE peer_home_id = ?2 AND id <> ?3 AND {awaiting} AND next_attempt_at < ?1",
        awaiting = awaiting()
    )
}

/// The outbox entry of a sender's key for a peer.
/// The outbox entry holding a sender's key: the one for `peer` if there is one, else the
/// one for another peer (a key names one message, wherever it went).
pub(super) fn outbox_entry(
    conn: &Connection,
    peer: &str,
    scope: &str,
    key: &str,
) -> StoreResult<Option<OutboxRecord>> {
    first(
        conn,
        &format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE key_scope = ? AND key = ? ORDER BY peer_home_id <> ? LIMIT 1"
        ),
        params![scope, key, peer],
        |row| outbox_from(row),
    )
}

/// Writes an outbox entry unless its (key scope, key, peer) has one: whether it did.
pub(super) fn insert_outbox(conn: &Connection, e: &OutboxRecord) -> StoreResult<bool> {
    note(Change::Outbox);
    let room = e.room.as_ref();
    let author = room.and_then(|r| r.author.as_ref());
    let inserted = run(
        conn,
        &format!(
            "INSERT INTO outbox ({OUTBOX_COLUMNS})
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (key_scope, key, peer_home_id) DO NOTHING"
        ),
        params![
            e.id,
            e.bridge_id,
            e.peer_home_id,
            e.target_session,
            e.source_thread,
            e.content,
            e.key_scope,
            e.key,
            e.request_hash,
            e.status,
            e.reason,
            e.remote_message_id,
            e.attempts,
            e.next_attempt_at,
            e.created_at,
            e.updated_at,
            e.source_workspace,
            room.map(|r| &r.tag.room),
            room.map(|r| &r.tag.entry),
            author.map(|a| &a.host_id),
            author.map(|a| &a.thread_id),
            e.trace
        ],
    )?;
    Ok(inserted > 0)
}
