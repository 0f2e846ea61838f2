//! The session tools' records on PostgreSQL.

use async_trait::async_trait;

use super::turns::insert_input;
use super::*;

#[async_trait]
impl ToolStore for PostgresStore {
    async fn record_tool_call(&self, c: &ToolCallRecord) -> StoreResult<i64> {
        let mut tx = self.begin().await?;
        let seq: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) + 1 FROM tool_calls WHERE thread_id = $1")
                .bind(&c.thread_id)
                .fetch_one(tx.conn())
                .await?;
        sqlx::query(&format!(
            "INSERT INTO tool_calls ({TOOL_CALL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(seq)
        .bind(&c.thread_id)
        .bind(&c.turn_id)
        .bind(&c.name)
        .bind(&c.arguments)
        .bind(c.outcome)
        .bind(&c.result)
        .bind(c.duration_ms)
        .bind(c.at)
        .execute(tx.conn())
        .await?;
        self.commit(tx).await?;
        Ok(seq)
    }

    async fn tool_calls(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<ToolCallRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        ))
        .bind(thread_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.read().await?)
        .await?;
        rows.iter().map(tool_call_from).collect()
    }

    async fn todo(&self, thread_id: &str) -> StoreResult<Option<TodoRecord>> {
        let row: Option<(i64, String)> =
            sqlx::query_as("SELECT revision, body FROM todo_lists WHERE thread_id = $1")
                .bind(thread_id)
                .fetch_optional(&mut *self.read().await?)
                .await?;
        Ok(row.map(|(revision, body)| TodoRecord { revision, body }))
    }

    async fn put_todo(&self, thread_id: &str, expected: i64, body: &str) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let query = if expected == 0 {
            "INSERT INTO todo_lists (thread_id, revision, body) VALUES ($1, 1, $2) ON CONFLICT DO NOTHING"
        } else {
            "UPDATE todo_lists SET revision = revision + 1, body = $2 WHERE thread_id = $1 AND revision = $3"
        };
        let changed = sqlx::query(query).bind(thread_id).bind(body).bind(expected).execute(tx.conn()).await?;
        self.commit(tx).await?;
        Ok(changed.rows_affected() == 1)
    }

    async fn add_cron(&self, c: &CronRecord, max: u32) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let held: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM crons WHERE thread_id = $1")
            .bind(&c.thread_id)
            .fetch_one(tx.conn())
            .await?;
        if held >= i64::from(max) {
            return Ok(false);
        }
        sqlx::query(&format!("INSERT INTO crons ({CRON_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"))
            .bind(&c.id)
            .bind(&c.thread_id)
            .bind(&c.cron)
            .bind(&c.prompt)
            .bind(c.recurring)
            .bind(c.created_at)
            .bind(c.next_fire_at)
            .execute(tx.conn())
            .await?;
        tx.note(Change::Crons);
        self.commit(tx).await?;
        Ok(true)
    }

    async fn crons(&self, thread_id: Option<&str>) -> StoreResult<Vec<CronRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {CRON_COLUMNS} FROM crons WHERE $1::TEXT IS NULL OR thread_id = $1 ORDER BY added"
        ))
        .bind(thread_id)
        .fetch_all(&mut *self.read().await?)
        .await?;
        rows.iter().map(cron_from).collect()
    }

    async fn delete_cron(&self, thread_id: &str, id: &str) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let deleted = sqlx::query("DELETE FROM crons WHERE id = $1 AND thread_id = $2")
            .bind(id)
            .bind(thread_id)
            .execute(tx.conn())
            .await?;
        let deleted = deleted.rows_affected() == 1;
        if deleted {
            tx.note(Change::Crons);
        }
        self.commit(tx).await?;
        Ok(deleted)
    }

    async fn fire_cron(&self, c: &CronRecord, input: &NewInput, next: Option<Millis>) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let thread: Option<i32> = sqlx::query_scalar("SELECT 1 FROM threads WHERE id = $1")
            .bind(&c.thread_id)
            .fetch_optional(tx.conn())
            .await?;
        if thread.is_none() {
            // Its thread is gone: so is it.
            sqlx::query("DELETE FROM crons WHERE id = $1").bind(&c.id).execute(tx.conn()).await?;
            tx.note(Change::Crons);
            self.commit(tx).await?;
            return Ok(false);
        }
        let moved = match next {
            Some(next) => {
                sqlx::query("UPDATE crons SET next_fire_at = $1 WHERE id = $2 AND next_fire_at = $3")
                    .bind(next)
                    .bind(&c.id)
                    .bind(c.next_fire_at)
                    .execute(tx.conn())
                    .await?
            }
            None => {
                sqlx::query("DELETE FROM crons WHERE id = $1 AND next_fire_at = $2")
                    .bind(&c.id)
                    .bind(c.next_fire_at)
                    .execute(tx.conn())
                    .await?
            }
        };
        if moved.rows_affected() == 0 {
            return Ok(false);
        }
        tx.note(Change::Crons);
        insert_input(&mut tx, &c.thread_id, input, true, None).await?;
        self.commit(tx).await?;
        Ok(true)
    }
}
