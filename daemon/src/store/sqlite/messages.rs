//! Messages and their keys in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl MessageStore for SqliteStore {
    async fn accept_message(&self, message: &NewMessage) -> StoreResult<SendOutcome> {
        // Before the write: from now on a cross-home send's probe for the key reads it.
        if is_local_scope(&message.key_scope) {
            self.local_keys.add(&message.key_scope, &message.key);
        }
        let message = message.clone();
        self.db.write(move |conn| accept_message(conn, &message)).await
    }

    async fn message(&self, id: &str) -> StoreResult<Option<MessageRecord>> {
        let id = id.to_string();
        self.db.lookup(move |conn| message_in(conn, &id)).await
    }

    async fn keyed_message(&self, scope: &str, key: &str) -> StoreResult<Option<(String, String)>> {
        let (scope, key) = (scope.to_string(), key.to_string());
        self.db.lookup(move |conn| stored_key(conn, &scope, &key)).await
    }

    async fn follow_up(
        &self,
        keys: &[(String, String)],
        window_over: bool,
        now: Millis,
    ) -> StoreResult<Vec<Option<MessageRecord>>> {
        let keys = keys.to_vec();
        self.db
            .write(move |conn| {
                let mut messages = Vec::with_capacity(keys.len());
                // As the write runs: a claim queued meanwhile must not see a later deadline.
                let now = now.max(crate::time::now_ms());
                for (scope, key) in &keys {
                    messages.push(match stored_key(conn, scope, key)? {
                        Some((_, message_id)) => follow_up_message(conn, &message_id, window_over, now)?,
                        // Given up on before it arrived: should a call of it still come (QUIC
                        // delivering an attempt given up earlier), the key refuses it.
                        None if window_over => {
                            run(
                                conn,
                                "INSERT OR IGNORE INTO given_up_keys (scope, key, created_at) VALUES (?, ?, ?)",
                                params![scope, key, now],
                            )?;
                            None
                        }
                        None => None,
                    });
                }
                Ok(messages)
            })
            .await
    }

    async fn local_key_message(&self, scope: &str, key: &str) -> StoreResult<Option<String>> {
        if !self.local_keys.may_hold(scope, key) {
            return Ok(None);
        }
        let (scope, key) = (scope.to_string(), key.to_string());
        self.db
            .lookup(move |conn| Ok(stored_key(conn, &scope, &key)?.map(|(_, message_id)| message_id)))
            .await
    }

    async fn prune_keys(&self, before: Millis, limit: u32) -> StoreResult<u64> {
        // The oldest `limit` keys in insertion order (their age order: keys are written with
        // the time of their send), those of them older than `before`: never a scan beyond
        // them, however many keys are young.
        let sql = "DELETE FROM idempotency_keys
                   WHERE rowid IN (SELECT rowid FROM idempotency_keys ORDER BY rowid LIMIT ?2) AND created_at < ?1";
        // Given-up keys are rare (a call that might still arrive as a window ended): their
        // whole table is walked.
        let given_up = "DELETE FROM given_up_keys WHERE created_at < ?";
        self.db
            .write(move |conn| {
                let pruned = run(conn, sql, params![before, limit])? as u64;
                run(conn, given_up, [before])?;
                Ok(pruned)
            })
            .await
    }

    async fn expire_overdue_messages(&self, now: Millis, limit: u32) -> StoreResult<u64> {
        // Read first: most sweeps find nothing, and then need no write.
        if self
            .db
            .lookup(move |conn| first(conn, OVERDUE_MESSAGES, params![now, 1], |_| Ok(())))
            .await?
            .is_none()
        {
            return Ok(0);
        }
        self.db
            .write(move |conn| {
                // As the write runs, as a claim reads it.
                let now = now.max(crate::time::now_ms());
                Ok(expire_overdue(conn, OVERDUE_MESSAGES, params![now, limit], now)? as u64)
            })
            .await
    }
}
