//! Threads on PostgreSQL.

use async_trait::async_trait;

use super::events::insert_event;
use super::messages::receipt_follows;
use super::turns::{insert_input, save_agent_session};
use super::*;

#[async_trait]
impl ThreadStore for PostgresStore {
    async fn create_thread(
        &self,
        thread: &NewThread,
        first_input: Option<&NewInput>,
    ) -> StoreResult<ThreadRecord> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO threads (id, workspace_id, cwd, title, profile, communication, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
        )
        .bind(&thread.id)
        .bind(&thread.workspace_id)
        .bind(&thread.cwd)
        .bind(&thread.title)
        .bind(&thread.profile)
        .bind(thread.communication)
        .bind(thread.now)
        .execute(tx.conn())
        .await?;
        if let Some(session) = &thread.agent_session {
            save_agent_session(&mut tx, &thread.id, session, thread.now).await?;
        }
        let mut created = event(&thread.id, EventKind::Lifecycle, thread.now);
        created.lifecycle = Some(Lifecycle::Created);
        insert_event(&mut tx, &created).await?;
        if let Some(input) = first_input {
            insert_input(&mut tx, &thread.id, input, true, None).await?;
        }
        let record = thread_in(tx.conn(), &thread.id)
            .await?
            .ok_or_else(|| StoreError::Backend("the created thread is missing".into()))?;
        self.commit(tx).await?;
        Ok(record)
    }

    async fn thread(&self, id: &str) -> StoreResult<Option<ThreadRecord>> {
        thread_in(&mut *self.read().await?, id).await
    }

    async fn list_threads(&self, query: &ThreadQuery) -> StoreResult<Vec<ThreadRecord>> {
        let (before, limit) = (query.before_seq.unwrap_or(i64::MAX), i64::from(query.limit));
        // Two statements, so that each plans onto its own partial index.
        let rows = match &query.workspace_id {
            Some(workspace) => {
                sqlx::query(&format!(
                    "SELECT {THREAD_COLUMNS} FROM threads
                     WHERE NOT archived AND enabled AND workspace_id = $1 AND seq < $2
                     ORDER BY seq DESC LIMIT $3"
                ))
                .bind(workspace)
                .bind(before)
                .bind(limit)
                .fetch_all(&mut *self.read().await?)
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {THREAD_COLUMNS} FROM threads
                     WHERE NOT archived AND enabled AND seq < $1
                     ORDER BY seq DESC LIMIT $2"
                ))
                .bind(before)
                .bind(limit)
                .fetch_all(&mut *self.read().await?)
                .await?
            }
        };
        rows.iter().map(thread_from).collect()
    }

    async fn count_threads(&self) -> StoreResult<u64> {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM threads").fetch_one(&mut *self.read().await?).await?;
        Ok(n as u64)
    }

    async fn set_archived(&self, id: &str, archived: bool, now: Millis) -> StoreResult<Option<Archived>> {
        let mut tx = self.begin().await?;
        let changed =
            sqlx::query("UPDATE threads SET archived = $1, updated_at = $2 WHERE id = $3 AND archived <> $1")
                .bind(archived)
                .bind(now)
                .bind(id)
                .execute(tx.conn())
                .await?
                .rows_affected()
                > 0;
        if changed {
            let mut lifecycle = event(id, EventKind::Lifecycle, now);
            lifecycle.lifecycle = Some(if archived { Lifecycle::Archived } else { Lifecycle::Unarchived });
            insert_event(&mut tx, &lifecycle).await?;
        }
        let mut notified = vec![id.to_string()];
        if changed && archived {
            let undeliverable: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(
                "UPDATE messages SET status = $1, reason = $2
                 WHERE target_thread = $3 AND status = $4 RETURNING id, source_thread, source_host",
            )
            .bind(MessageStatus::Undeliverable)
            .bind(Refusal::ThreadArchived.as_str())
            .bind(id)
            .bind(MessageStatus::Pending)
            .fetch_all(tx.conn())
            .await?;
            // Their queued inputs, all of the thread's queued messages.
            sqlx::query(
                "DELETE FROM inputs WHERE thread_id = $1 AND turn_id IS NULL AND message_id IS NOT NULL",
            )
            .bind(id)
            .execute(tx.conn())
            .await?;
            let reason = Refusal::ThreadArchived.as_str();
            for (message_id, source, source_host) in undeliverable {
                let told =
                    rules::undeliverable_events(&message_id, id, source, source_host.as_deref(), reason, now);
                for e in &told {
                    insert_event(&mut tx, e).await?;
                }
                notified.extend(told.into_iter().map(|e| e.thread_id));
                receipt_follows(&mut tx, &message_id, reason, now).await?;
            }
        }
        let thread = thread_in(tx.conn(), id).await?;
        self.commit(tx).await?;
        notified.dedup();
        Ok(thread.map(|thread| Archived { thread, changed, notified }))
    }

    async fn set_communication(
        &self,
        thread_id: &str,
        setting: CommunicationSetting,
        now: Millis,
    ) -> StoreResult<Option<ThreadRecord>> {
        let mut tx = self.begin().await?;
        // Messages held back while it was off may be taken by its running turn now.
        tx.note(Change::Inbox(thread_id.to_string()));
        let row = sqlx::query(&format!(
            "UPDATE threads SET communication = $1, updated_at = $2 WHERE id = $3 RETURNING {THREAD_COLUMNS}"
        ))
        .bind(setting)
        .bind(now)
        .bind(thread_id)
        .fetch_optional(tx.conn())
        .await?;
        let thread = row.as_ref().map(thread_from).transpose()?;
        self.commit(tx).await?;
        Ok(thread)
    }
}

pub(super) async fn thread_in(conn: &mut PgConnection, id: &str) -> StoreResult<Option<ThreadRecord>> {
    let row = sqlx::query(&format!("SELECT {THREAD_COLUMNS} FROM threads WHERE id = $1"))
        .bind(id)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(thread_from).transpose()
}
