//! Threads in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl ThreadStore for SqliteStore {
    async fn create_thread(
        &self,
        thread: &NewThread,
        first_input: Option<&NewInput>,
    ) -> StoreResult<ThreadRecord> {
        let (thread, first_input) = (thread.clone(), first_input.cloned());
        self.db
            .write(move |conn| {
                run(
                    conn,
                    "INSERT INTO threads (id, workspace_id, cwd, title, profile, communication, created_at, updated_at)
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    params![
                        thread.id,
                        thread.workspace_id,
                        thread.cwd,
                        thread.title,
                        thread.profile,
                        thread.communication.as_str(),
                        thread.now,
                        thread.now
                    ],
                )?;
                if let Some(session) = &thread.agent_session {
                    super::turns::save_agent_session(conn, &thread.id, session, thread.now)?;
                }
                let mut created = event(&thread.id, EventKind::Lifecycle, thread.now);
                created.lifecycle = Some(Lifecycle::Created);
                insert_event(conn, &created)?;
                if let Some(input) = &first_input {
                    insert_input(conn, &thread.id, input, true, None)?;
                }
                let record = thread_in(conn, &thread.id)?
                    .ok_or_else(|| StoreError::Backend("the created thread is missing".into()))?;
                Ok(record)
            })
            .await
    }

    async fn thread(&self, id: &str) -> StoreResult<Option<ThreadRecord>> {
        if let Some(record) = self.threads.get(id) {
            return Ok(Some(record));
        }
        let generation = self.threads.generation();
        let owned = id.to_string();
        let record = self.db.lookup(move |conn| thread_in(conn, &owned)).await?;
        if let Some(record) = &record {
            self.threads.fill(generation, record);
        }
        Ok(record)
    }

    async fn list_threads(&self, query: &ThreadQuery) -> StoreResult<Vec<ThreadRecord>> {
        let query = query.clone();
        self.db
            .read(move |conn| {
                let before = query.before_seq.unwrap_or(i64::MAX);
                match &query.workspace_id {
                    Some(workspace) => page(
                        conn,
                        &format!(
                            "SELECT {THREAD_COLUMNS} FROM threads INDEXED BY threads_listed_by_workspace
                             WHERE archived = 0 AND enabled = 1 AND workspace_id = ? AND seq < ?
                             ORDER BY seq DESC"
                        ),
                        params![workspace, before],
                        query.limit,
                        |row| thread_from(row),
                    ),
                    None => page(
                        conn,
                        &format!(
                            "SELECT {THREAD_COLUMNS} FROM threads INDEXED BY threads_listed
                             WHERE archived = 0 AND enabled = 1 AND seq < ?
                             ORDER BY seq DESC"
                        ),
                        params![before],
                        query.limit,
                        |row| thread_from(row),
                    ),
                }
            })
            .await
    }

    async fn count_threads(&self) -> StoreResult<u64> {
        self.db.read(|conn| count(conn, "SELECT COUNT(*) FROM threads", [])).await
    }

    async fn set_archived(&self, id: &str, archived: bool, now: Millis) -> StoreResult<Option<Archived>> {
        let id = id.to_string();
        self.db
            .write(move |conn| {
                let changed = run(
                    conn,
                    "UPDATE threads SET archived = ?, updated_at = ? WHERE id = ? AND archived <> ?",
                    params![archived, now, id, archived],
                )? > 0;
                touched(Some(&id));
                if changed {
                    let mut lifecycle = event(&id, EventKind::Lifecycle, now);
                    lifecycle.lifecycle = Some(if archived { Lifecycle::Archived } else { Lifecycle::Unarchived });
                    insert_event(conn, &lifecycle)?;
                }
                let mut notified = vec![id.clone()];
                if changed && archived {
                    let undeliverable = all(
                        conn,
                        sql!(
                            "UPDATE messages SET status = '{undeliverable}', reason = '{archived}'
                             WHERE target_thread = ? AND status = '{pending}' RETURNING id, source_thread, source_host",
                            undeliverable = MessageStatus::Undeliverable,
                            archived = Refusal::ThreadArchived,
                            pending = MessageStatus::Pending,
                        ),
                        [&id],
                        |row| Ok((row.get::<_, String>(0)?, row.get(1)?, row.get::<_, Option<String>>(2)?)),
                    )?;
                    // Their queued inputs, all of the thread's queued messages.
                    run(conn, UNQUEUE_THREAD_MESSAGES, [&id])?;
                    let reason = Refusal::ThreadArchived.as_str();
                    for (message_id, source, source_host) in undeliverable {
                        let told = rules::undeliverable_events(&message_id, &id, source, source_host.as_deref(), reason, now);
                        for e in &told {
                            insert_event(conn, e)?;
                        }
                        notified.extend(told.into_iter().map(|e| e.thread_id));
                        receipt_follows(conn, &message_id, reason, now)?;
                    }
                }
                let thread = thread_in(conn, &id)?;
                notified.dedup();
                Ok(thread.map(|thread| Archived { thread, changed, notified }))
            })
            .await
    }

    async fn set_communication(
        &self,
        thread_id: &str,
        setting: CommunicationSetting,
        now: Millis,
    ) -> StoreResult<Option<ThreadRecord>> {
        let thread_id = thread_id.to_string();
        self.db
            .write(move |conn| {
                touched(Some(&thread_id));
                // Messages held back while it was off may be taken by its running turn now.
                note(Change::Inbox(thread_id.clone()));
                first(
                    conn,
                    &format!(
                        "UPDATE threads SET communication = ?, updated_at = ? WHERE id = ? RETURNING {THREAD_COLUMNS}"
                    ),
                    params![setting.as_str(), now, thread_id],
                    |row| thread_from(row),
                )
            })
            .await
    }
}

pub(super) fn thread_in(conn: &Connection, id: &str) -> StoreResult<Option<ThreadRecord>> {
    first(conn, &format!("SELECT {THREAD_COLUMNS} FROM threads WHERE id = ?"), [id], |row| thread_from(row))
}
