//! The session tools' records in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl ToolStore for SqliteStore {
    async fn record_tool_call(&self, call: &ToolCallRecord) -> StoreResult<i64> {
        let c = call.clone();
        self.db
            .write(move |conn| {
                let seq = count(
                    conn,
                    "SELECT COALESCE(MAX(seq), 0) FROM tool_calls WHERE thread_id = ?",
                    [&c.thread_id],
                )? as i64
                    + 1;
                run(
                    conn,
                    &format!(
                        "INSERT INTO tool_calls ({TOOL_CALL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    ),
                    params![
                        seq,
                        c.thread_id,
                        c.turn_id,
                        c.name,
                        c.arguments,
                        c.outcome.as_str(),
                        c.result,
                        c.duration_ms,
                        c.at
                    ],
                )?;
                Ok(seq)
            })
            .await
    }

    async fn tool_calls(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<ToolCallRecord>> {
        let thread_id = thread_id.to_string();
        self.db
            .read(move |conn| {
                page(
                    conn,
                    &format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = ? AND seq > ? ORDER BY seq"),
                    params![thread_id, after],
                    limit,
                    |row| tool_call_from(row),
                )
            })
            .await
    }

    async fn todo(&self, thread_id: &str) -> StoreResult<Option<TodoRecord>> {
        let thread_id = thread_id.to_string();
        self.db
            .read(move |conn| {
                first(
                    conn,
                    "SELECT revision, body FROM todo_lists WHERE thread_id = ?",
                    [&thread_id],
                    |row| Ok(TodoRecord { revision: row.get(0)?, body: row.get(1)? }),
                )
            })
            .await
    }

    async fn put_todo(&self, thread_id: &str, expected: i64, body: &str) -> StoreResult<bool> {
        let (thread_id, body) = (thread_id.to_string(), body.to_string());
        self.db
            .write(move |conn| {
                let changed = if expected == 0 {
                    run(
                        conn,
                        "INSERT INTO todo_lists (thread_id, revision, body) VALUES (?, 1, ?) ON CONFLICT DO NOTHING",
                        params![thread_id, body],
                    )?
                } else {
                    run(
                        conn,
                        "UPDATE todo_lists SET revision = revision + 1, body = ? WHERE thread_id = ? AND revision = ?",
                        params![body, thread_id, expected],
                    )?
                };
                Ok(changed == 1)
            })
            .await
    }

    async fn add_cron(&self, cron: &CronRecord, max: u32) -> StoreResult<bool> {
        let c = cron.clone();
        self.db
            .write(move |conn| {
                if count(conn, "SELECT COUNT(*) FROM crons WHERE thread_id = ?", [&c.thread_id])?
                    >= u64::from(max)
                {
                    return Ok(false);
                }
                let added = count(conn, "SELECT COALESCE(MAX(added), 0) FROM crons", [])? as i64 + 1;
                run(
                    conn,
                    &format!("INSERT INTO crons ({CRON_COLUMNS}, added) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                    params![
                        c.id,
                        c.thread_id,
                        c.cron,
                        c.prompt,
                        c.recurring,
                        c.created_at,
                        c.next_fire_at,
                        added
                    ],
                )?;
                note(Change::Crons);
                Ok(true)
            })
            .await
    }

    async fn crons(&self, thread_id: Option<&str>) -> StoreResult<Vec<CronRecord>> {
        let thread_id = thread_id.map(str::to_string);
        self.db
            .read(move |conn| match &thread_id {
                Some(thread_id) => all(
                    conn,
                    &format!("SELECT {CRON_COLUMNS} FROM crons WHERE thread_id = ? ORDER BY added"),
                    [thread_id],
                    |row| cron_from(row),
                ),
                None => all(conn, &format!("SELECT {CRON_COLUMNS} FROM crons ORDER BY added"), [], |row| {
                    cron_from(row)
                }),
            })
            .await
    }

    async fn delete_cron(&self, thread_id: &str, id: &str) -> StoreResult<bool> {
        let (thread_id, id) = (thread_id.to_string(), id.to_string());
        self.db
            .write(move |conn| {
                let deleted =
                    run(conn, "DELETE FROM crons WHERE id = ? AND thread_id = ?", params![id, thread_id])?
                        == 1;
                if deleted {
                    note(Change::Crons);
                }
                Ok(deleted)
            })
            .await
    }

    async fn fire_cron(
        &self,
        cron: &CronRecord,
        input: &NewInput,
        next: Option<Millis>,
    ) -> StoreResult<bool> {
        let (c, input) = (cron.clone(), input.clone());
        self.db
            .write(move |conn| {
                if first(conn, "SELECT 1 FROM threads WHERE id = ?", [&c.thread_id], |_| Ok(()))?.is_none() {
                    // Its thread is gone: so is it.
                    run(conn, "DELETE FROM crons WHERE id = ?", [&c.id])?;
                    note(Change::Crons);
                    return Ok(false);
                }
                let moved = match next {
                    Some(next) => run(
                        conn,
                        "UPDATE crons SET next_fire_at = ? WHERE id = ? AND next_fire_at = ?",
                        params![next, c.id, c.next_fire_at],
                    )?,
                    None => run(
                        conn,
                        "DELETE FROM crons WHERE id = ? AND next_fire_at = ?",
                        params![c.id, c.next_fire_at],
                    )?,
                };
                if moved == 0 {
                    return Ok(false);
                }
                note(Change::Crons);
                insert_input(conn, &c.thread_id, &input, true, None)?;
                Ok(true)
            })
            .await
    }
}
