//! Turns and their input on PostgreSQL.

use std::sync::LazyLock;

use async_trait::async_trait;

use super::*;

#[async_trait]
impl TurnStore for PostgresStore {
    async fn enqueue_input(&self, thread_id: &str, input: &NewInput) -> StoreResult<Option<bool>> {
        let mut tx = self.begin().await?;
        let running: Option<bool> = sqlx::query_scalar("SELECT running FROM threads WHERE id = $1")
            .bind(thread_id)
            .fetch_optional(tx.conn())
            .await?;
        if running.is_none() {
            return Ok(None);
        }
        if input.kind == InputKind::User {
            messages::owner_spoke(&mut tx, thread_id).await?;
        }
        insert_input(&mut tx, thread_id, input, true, None).await?;
        self.commit(tx).await?;
        Ok(running)
    }

    async fn claim_turn(
        &self,
        thread_id: &str,
        claim: TurnClaim,
        now: Millis,
    ) -> StoreResult<Option<ClaimedTurn>> {
        let mut tx = self.begin().await?;
        let claimed = claim_turn(&mut tx, thread_id, &claim, now, None).await?;
        self.commit(tx).await?;
        Ok(claimed)
    }

    async fn inbox(&self, thread_id: &str, take_messages: bool) -> StoreResult<Vec<InputRecord>> {
        let mut conn = self.read().await?;
        let queued = queued_inputs(&mut conn, thread_id).await?;
        Ok(rules::plan_inbox(queued, take_messages, &disabled_peers(&mut conn).await?))
    }

    async fn take_into_turn(
        &self,
        thread_id: &str,
        turn_id: &str,
        take_messages: bool,
        ids: Vec<String>,
        render: RenderInput,
        now: Millis,
    ) -> StoreResult<Vec<String>> {
        let mut tx = self.begin().await?;
        let taken = take_into_turn(&mut tx, thread_id, turn_id, take_messages, &ids, render, now).await?;
        self.commit(tx).await?;
        Ok(taken)
    }

    async fn add_turn_part(&self, turn_id: &str, kind: PartKind, text: &str, now: Millis) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO turn_parts (turn_id, seq, kind, text, at)
             VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM turn_parts WHERE turn_id = $1), $2, $3, $4)",
        )
        .bind(turn_id)
        .bind(kind)
        .bind(text)
        .bind(now)
        .execute(tx.conn())
        .await?;
        let thread: Option<String> = sqlx::query_scalar("SELECT thread_id FROM turns WHERE id = $1")
            .bind(turn_id)
            .fetch_optional(tx.conn())
            .await?;
        thread.into_iter().for_each(|thread| tx.note(Change::Parts(thread)));
        self.commit(tx).await
    }

    async fn turn_parts(&self, turn_id: &str, after: i64, limit: u32) -> StoreResult<Vec<TurnPart>> {
        let rows = sqlx::query(&format!(
            "SELECT {PART_COLUMNS} FROM turn_parts WHERE turn_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        ))
        .bind(turn_id)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.read().await?)
        .await?;
        rows.iter().map(part_from).collect()
    }

    async fn latest_turn(&self, thread_id: &str) -> StoreResult<Option<(String, TurnStatus)>> {
        let row = sqlx::query("SELECT id, status FROM turns WHERE thread_id = $1 ORDER BY seq DESC LIMIT 1")
            .bind(thread_id)
            .fetch_optional(&mut *self.read().await?)
            .await?;
        row.as_ref().map(turn_status_from).transpose()
    }

    async fn agent_session(&self, thread_id: &str) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar("SELECT session_id FROM agent_sessions WHERE thread_id = $1")
            .bind(thread_id)
            .fetch_optional(&mut *self.read().await?)
            .await?)
    }

    async fn set_agent_session(&self, thread_id: &str, session: &str, now: Millis) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        // Followers of its running turn show it.
        tx.note(Change::Parts(thread_id.to_string()));
        save_agent_session(&mut tx, thread_id, session, now).await?;
        self.commit(tx).await
    }

    async fn cost(&self, thread_id: Option<&str>) -> StoreResult<f64> {
        let mut conn = self.read().await?;
        match thread_id {
            Some(thread_id) => thread_cost(&mut conn, thread_id).await,
            None => Ok(sqlx::query_scalar("SELECT COALESCE(SUM(cost_usd), 0) FROM turns")
                .fetch_one(&mut *conn)
                .await?),
        }
    }

    async fn finish_turn(&self, outcome: &TurnOutcome) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let usage = outcome.usage;
        let thread_id: Option<String> = sqlx::query_scalar(
            "UPDATE turns SET status = $1, output = $2, error = $3, ended_at = $4,
                              input_tokens = $5, output_tokens = $6, cost_usd = $7
             WHERE id = $8 AND status = $9 RETURNING thread_id",
        )
        .bind(outcome.status)
        .bind(&outcome.output)
        .bind(&outcome.error)
        .bind(outcome.now)
        .bind(usage.map(|u| u.input_tokens as i64))
        .bind(usage.map(|u| u.output_tokens as i64))
        .bind(usage.map(|u| u.cost_usd))
        .bind(&outcome.turn_id)
        .bind(TurnStatus::Running)
        .fetch_optional(tx.conn())
        .await?;
        if let Some(thread_id) = thread_id {
            end_turn(&mut tx, &rules::finish_turn(&thread_id, outcome)).await?;
        }
        self.commit(tx).await
    }

    async fn record_agent(&self, turn_id: &str, agent: &str) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE turns SET agent = $1 WHERE id = $2 AND status = $3")
            .bind(agent)
            .bind(turn_id)
            .bind(TurnStatus::Running)
            .execute(tx.conn())
            .await?;
        self.commit(tx).await
    }

    async fn interrupted_turns(&self, live_since: Millis) -> StoreResult<Vec<InterruptedTurn>> {
        let turns: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT id, agent FROM turns WHERE status = $1
             AND replica_id NOT IN (SELECT id FROM replicas WHERE heartbeat_at >= $2)",
        )
        .bind(TurnStatus::Running)
        .bind(live_since)
        .fetch_all(&mut *self.read().await?)
        .await?;
        Ok(turns.into_iter().map(|(turn_id, agent)| InterruptedTurn { turn_id, agent }).collect())
    }

    async fn fail_interrupted_turns(
        &self,
        reason: &str,
        now: Millis,
        live_since: Millis,
    ) -> StoreResult<Vec<String>> {
        let mut tx = self.begin().await?;
        let failed: Vec<(String, String)> = sqlx::query_as(
            "UPDATE turns SET status = $1, error = $2, ended_at = $3 WHERE status = $4
             AND replica_id NOT IN (SELECT id FROM replicas WHERE heartbeat_at >= $5)
             RETURNING id, thread_id",
        )
        .bind(TurnStatus::Failed)
        .bind(reason)
        .bind(now)
        .bind(TurnStatus::Running)
        .bind(live_since)
        .fetch_all(tx.conn())
        .await?;
        for (turn_id, thread_id) in &failed {
            end_turn(&mut tx, &rules::fail_interrupted_turn(thread_id, turn_id, reason, now)).await?;
        }
        self.commit(tx).await?;
        Ok(failed.into_iter().map(|(_, thread_id)| thread_id).collect())
    }

    async fn turn_of_token(&self, token_hash: &str) -> StoreResult<Option<(String, String)>> {
        Ok(sqlx::query_as("SELECT thread_id, id FROM turns WHERE token_hash = $1 AND status = $2")
            .bind(token_hash)
            .bind(TurnStatus::Running)
            .fetch_optional(&mut *self.read().await?)
            .await?)
    }

    async fn threads_with_queued_input(&self) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT i.thread_id FROM inputs i JOIN threads t ON t.id = i.thread_id
             WHERE i.turn_id IS NULL AND i.wake AND NOT t.running",
        )
        .fetch_all(&mut *self.read().await?)
        .await?)
    }

    async fn running_turns(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM turns WHERE status = $1")
            .bind(TurnStatus::Running)
            .fetch_one(&mut *self.read().await?)
            .await?;
        Ok(n as u64)
    }

    async fn ended_turns(&self, thread_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<TurnRecord>> {
        let mut conn = self.read().await?;
        let rows = sqlx::query(&format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE thread_id = $1 AND seq > $2 AND status <> $3 ORDER BY seq LIMIT $4"
        ))
        .bind(thread_id)
        .bind(after_seq)
        .bind(TurnStatus::Running)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?;
        let mut turns = rows.iter().map(turn_from).collect::<StoreResult<Vec<_>>>()?;
        attach_items(&mut conn, &mut turns).await?;
        Ok(turns)
    }

    async fn last_ended_turns(&self, thread_id: &str, limit: u32) -> StoreResult<Vec<TurnRecord>> {
        let mut conn = self.read().await?;
        let rows = sqlx::query(&format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE thread_id = $1 AND status <> $2 ORDER BY seq DESC LIMIT $3"
        ))
        .bind(thread_id)
        .bind(TurnStatus::Running)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?;
        let mut turns = rows.iter().rev().map(turn_from).collect::<StoreResult<Vec<_>>>()?;
        attach_items(&mut conn, &mut turns).await?;
        Ok(turns)
    }

    async fn turn(&self, thread_id: &str, turn_id: &str) -> StoreResult<Option<TurnRecord>> {
        let mut conn = self.read().await?;
        let row = sqlx::query(&format!("SELECT {TURN_COLUMNS} FROM turns WHERE thread_id = $1 AND id = $2"))
            .bind(thread_id)
            .bind(turn_id)
            .fetch_optional(&mut *conn)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let mut turns = [turn_from(&row)?];
        attach_items(&mut conn, &mut turns).await?;
        let [turn] = turns;
        Ok(Some(turn))
    }

    async fn ended_turn_exists(&self, thread_id: &str, seq: i64) -> StoreResult<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM turns WHERE thread_id = $1 AND seq = $2 AND status <> $3)",
        )
        .bind(thread_id)
        .bind(seq)
        .bind(TurnStatus::Running)
        .fetch_one(&mut *self.read().await?)
        .await?)
    }

    async fn undeliver_turn_messages(
        &self,
        turn_id: &str,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Vec<String>> {
        let mut tx = self.begin().await?;
        // Found through the turn's inputs: `messages` has no index by turn.
        let undelivered: Vec<(String, String, Option<String>, Option<String>)> = sqlx::query_as(
            "UPDATE messages SET status = $1, reason = $2
             WHERE status = $3
               AND id IN (SELECT message_id FROM inputs WHERE turn_id = $4 AND message_id IS NOT NULL)
             RETURNING id, target_thread, source_thread, source_host",
        )
        .bind(MessageStatus::Undeliverable)
        .bind(reason)
        .bind(MessageStatus::Delivered)
        .bind(turn_id)
        .fetch_all(tx.conn())
        .await?;
        let mut notified = Vec::new();
        for (message_id, target, source, source_host) in undelivered {
            for e in
                rules::undeliverable_events(&message_id, &target, source, source_host.as_deref(), reason, now)
            {
                events::insert_event(&mut tx, &e).await?;
                if !notified.contains(&e.thread_id) {
                    notified.push(e.thread_id);
                }
            }
            messages::receipt_follows(&mut tx, &message_id, reason, now).await?;
        }
        self.commit(tx).await?;
        Ok(notified)
    }
}

/// Starts the thread's next turn with its queued input, if it is idle (see
/// [`TurnStore::claim_turn`]). `arriving` is the input of a send that wakes the thread, not yet
/// written: the turn takes it last, if the rules let it (see [`rules::takeable`]), and its
/// writer records it taken.
pub(super) async fn claim_turn(
    tx: &mut Tx,
    thread_id: &str,
    claim: &TurnClaim,
    now: Millis,
    arriving: Option<InputRecord>,
) -> StoreResult<Option<ClaimedTurn>> {
    let TurnClaim { turn_id, take_messages, render, exec, budget, replica, token_hash } = claim;
    let idle: Option<(i64, Option<Millis>)> = sqlx::query_as(
        "SELECT turn_count, (SELECT ended_at FROM turns WHERE thread_id = $1 ORDER BY seq DESC LIMIT 1)
         FROM threads WHERE id = $1 AND NOT archived AND NOT running",
    )
    .bind(thread_id)
    .fetch_optional(tx.conn())
    .await?;
    let Some((turns, last_ended)) = idle else {
        return Ok(None);
    };
    let idle_turns = Some(turns);
    let now = rules::turn_start(now, last_ended);
    // What its source gave up on never enters a prompt: checked against the clock as the
    // write runs (a replay may have answered `expired` while this claim was queued).
    let at = tx.time(now);
    messages::expire_overdue_in_thread(tx, thread_id, at).await?;
    let facts = rules::ClaimFacts {
        idle_turns,
        cost: if budget.is_some() { thread_cost(tx.conn(), thread_id).await? } else { 0.0 },
        queued: queued_inputs(tx.conn(), thread_id).await?,
        disabled_peers: disabled_peers(tx.conn()).await?,
    };
    let Some(rules::ClaimPlan { seq, inputs, taken }) =
        rules::plan_claim(facts, arriving, *take_messages, *budget)
    else {
        return Ok(None);
    };
    let rendered = render(&inputs);
    sqlx::query(
        "INSERT INTO turns (id, thread_id, seq, status, input, started_at, agent, events_before, replica_id,
                            token_hash)
         VALUES ($1, $2, $3, $4, $5, $6, $7, (SELECT COALESCE(MAX(seq), 0) FROM events WHERE thread_id = $2), $8,
                 NULLIF($9, ''))",
    )
    .bind(turn_id)
    .bind(thread_id)
    .bind(seq)
    .bind(TurnStatus::Running)
    .bind(&rendered)
    .bind(now)
    .bind(exec.then_some(""))
    .bind(replica)
    .bind(token_hash)
    .execute(tx.conn())
    .await?;
    take(tx, turn_id, &taken, now).await?;
    tx.note(Change::Thread(thread_id.to_string()));
    sqlx::query("UPDATE threads SET running = true, turn_count = $1, updated_at = $2 WHERE id = $3")
        .bind(seq)
        .bind(now)
        .bind(thread_id)
        .execute(tx.conn())
        .await?;
    Ok(Some(ClaimedTurn::started(thread_id, turn_id, seq, rendered, now, inputs)))
}

/// What the thread's turns have cost, in dollars.
async fn thread_cost(conn: &mut PgConnection, thread_id: &str) -> StoreResult<f64> {
    Ok(sqlx::query_scalar("SELECT COALESCE(SUM(cost_usd), 0) FROM turns WHERE thread_id = $1")
        .bind(thread_id)
        .fetch_one(conn)
        .await?)
}

/// Writes what a turn's end does besides its own row (see [`rules::TurnEnd`]).
async fn end_turn(tx: &mut Tx, end: &rules::TurnEnd) -> StoreResult<()> {
    sqlx::query(
        "UPDATE permission_requests SET status = $1, decided_at = $2, reason = $3 WHERE turn_id = $4 AND status = $5",
    )
    .bind(PermissionStatus::Expired)
    .bind(end.now)
    .bind(end.permissions_expired)
    .bind(&end.turn_id)
    .bind(PermissionStatus::Pending)
    .execute(tx.conn())
    .await?;
    if let Some(session) = &end.agent_session {
        save_agent_session(tx, &end.thread_id, session, end.now).await?;
    }
    sqlx::query("UPDATE threads SET running = false, updated_at = $1 WHERE id = $2")
        .bind(end.now)
        .bind(&end.thread_id)
        .execute(tx.conn())
        .await?;
    events::insert_event(tx, &end.terminal).await.map(drop)
}

pub(super) async fn save_agent_session(
    tx: &mut Tx,
    thread_id: &str,
    session: &str,
    now: Millis,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO agent_sessions (thread_id, session_id, updated_at) VALUES ($1, $2, $3)
         ON CONFLICT (thread_id) DO UPDATE SET session_id = $2, updated_at = $3",
    )
    .bind(thread_id)
    .bind(session)
    .bind(now)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The thread's input not taken by a turn yet, oldest first, with its content.
async fn queued_inputs(conn: &mut PgConnection, thread_id: &str) -> StoreResult<Vec<rules::Queued>> {
    let rows = sqlx::query(
        "SELECT id, kind, message_id, source_host, source_thread, source_workspace, room_id, room_entry, via_home,
                created_at, wake,
                COALESCE(NULLIF(content, ''),
                         (SELECT m.content FROM messages m WHERE m.id = inputs.message_id),
                         (SELECT e.content FROM room_entries e WHERE e.id = inputs.room_entry), '') AS content
         FROM inputs WHERE thread_id = $1 AND turn_id IS NULL ORDER BY seq",
    )
    .bind(thread_id)
    .fetch_all(conn)
    .await?;
    rows.iter().map(|row| Ok(rules::Queued { input: input_from(row)?, wake: row.try_get("wake")? })).collect()
}

/// The peers whose inbound bridge's access is off: their messages wait.
async fn disabled_peers(conn: &mut PgConnection) -> StoreResult<Vec<String>> {
    Ok(sqlx::query_scalar("SELECT peer_home_id FROM bridges WHERE direction = $1 AND state = $2")
        .bind(Direction::Inbound)
        .bind(BridgeState::Disabled)
        .fetch_all(conn)
        .await?)
}

/// Puts the queued messages `ids` of `thread_id` into its running turn `turn_id` (see
/// [`TurnStore::take_into_turn`]).
async fn take_into_turn(
    tx: &mut Tx,
    thread_id: &str,
    turn_id: &str,
    take_messages: bool,
    ids: &[String],
    render: RenderInput,
    now: Millis,
) -> StoreResult<Vec<String>> {
    let running: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM turns WHERE id = $1 AND thread_id = $2 AND status = $3)",
    )
    .bind(turn_id)
    .bind(thread_id)
    .bind(TurnStatus::Running)
    .fetch_one(tx.conn())
    .await?;
    if !running {
        return Ok(Vec::new());
    }
    // As a claim does: what its source gave up on never enters a prompt, and only what
    // the inbox may give is taken.
    let now = tx.time(now);
    messages::expire_overdue_in_thread(tx, thread_id, now).await?;
    let queued = queued_inputs(tx.conn(), thread_id).await?;
    let (inputs, taken) = rules::plan_take(queued, take_messages, &disabled_peers(tx.conn()).await?, ids);
    take(tx, turn_id, &taken, now).await?;
    if !inputs.is_empty() {
        sqlx::query("UPDATE turns SET input = input || chr(10) || chr(10) || $1 WHERE id = $2")
            .bind(render(&inputs))
            .bind(turn_id)
            .execute(tx.conn())
            .await?;
        // Senders waiting for `delivered` are parked on the thread.
        tx.note(Change::Thread(thread_id.to_string()));
    }
    Ok(inputs.iter().filter_map(|i| inbox_id(i).map(str::to_string)).collect())
}

/// Writes what a turn takes of the queued input (see [`rules::Taken`]).
async fn take(tx: &mut Tx, turn_id: &str, taken: &rules::Taken, now: Millis) -> StoreResult<()> {
    for id in &taken.inputs {
        sqlx::query("UPDATE inputs SET turn_id = $1 WHERE id = $2")
            .bind(turn_id)
            .bind(id)
            .execute(tx.conn())
            .await?;
    }
    for id in &taken.messages {
        sqlx::query(
            "UPDATE messages SET status = $1, delivered_at = $2, turn_id = $3 WHERE id = $4 AND status = $5",
        )
        .bind(MessageStatus::Delivered)
        .bind(now)
        .bind(turn_id)
        .bind(id)
        .bind(MessageStatus::Pending)
        .execute(tx.conn())
        .await?;
    }
    // A bridged message that waited here (its receipt says `accepted`) is delivered now.
    for id in &taken.bridged {
        sqlx::query(
            "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
             SELECT peer_home_id, key, message_id, target, $1, '', $2 FROM bridge_receipts
             WHERE status = $3 AND message_id = $4",
        )
        .bind(OutboxStatus::Delivered)
        .bind(now)
        .bind(OutboxStatus::Accepted)
        .bind(id)
        .execute(tx.conn())
        .await?;
    }
    Ok(())
}

/// Fills in the input items of `turns`: one query for them all (each is a round trip to
/// the server).
pub(super) async fn attach_items(conn: &mut PgConnection, turns: &mut [TurnRecord]) -> StoreResult<()> {
    if turns.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = turns.iter().map(|t| t.id.as_str()).collect();
    let rows = sqlx::query(
        "SELECT turn_id, id, kind, '' AS content, message_id, source_host, source_thread, source_workspace,
                room_id, room_entry, via_home, created_at
         FROM inputs WHERE turn_id = ANY($1) ORDER BY seq",
    )
    .bind(&ids)
    .fetch_all(conn)
    .await?;
    for row in &rows {
        let turn_id: String = row.try_get("turn_id")?;
        let input = input_from(row)?;
        if let Some(turn) = turns.iter_mut().find(|t| t.id == turn_id) {
            turn.items.push(TurnItem {
                kind: input.kind,
                message_id: input.message_id,
                source: input.source,
                room: input.room,
            });
        }
    }
    Ok(())
}

/// Writes an input: queued (`turn` = `None`) or already taken by the turn it starts.
pub(super) async fn insert_input(
    tx: &mut Tx,
    thread_id: &str,
    input: &NewInput,
    wake: bool,
    turn: Option<&str>,
) -> StoreResult<()> {
    static INSERT: LazyLock<String> = LazyLock::new(|| {
        format!("INSERT INTO inputs ({INPUT_INSERT_COLUMNS}) VALUES {}", placeholders(1, 14))
    });
    bind_input(tx, sqlx::query(&INSERT), thread_id, input, wake, turn).execute(tx.conn()).await?;
    Ok(())
}

/// The columns an input is written with, in [`bind_input`]'s order.
pub(super) const INPUT_INSERT_COLUMNS: &str =
    "id, thread_id, kind, content, message_id, source_host, source_thread,
     source_workspace, room_id, room_entry, created_at, wake, turn_id, via_home";

/// Binds an input's [`INPUT_INSERT_COLUMNS`] to `query` (its next 14 parameters) and notes
/// that it arrived.
pub(super) fn bind_input<'q>(
    tx: &mut Tx,
    query: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    thread_id: &'q str,
    input: &'q NewInput,
    wake: bool,
    turn: Option<&'q str>,
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    if wake && turn.is_none() {
        // A running turn's agent may take it now.
        tx.note(Change::Inbox(thread_id.to_string()));
    }
    query
        .bind(&input.id)
        .bind(thread_id)
        .bind(input.kind)
        .bind(&input.content)
        .bind(&input.message_id)
        .bind(input.source.as_ref().map(|s| &s.host_id))
        .bind(input.source.as_ref().map(|s| &s.thread_id))
        .bind(input.source.as_ref().map_or("", |s| &s.workspace_id))
        .bind(input.room.as_ref().map(|r| &r.room))
        .bind(input.room.as_ref().map(|r| &r.entry))
        .bind(input.now)
        .bind(wake)
        .bind(turn)
        .bind(&input.via)
}

/// `($first, …, $last)` of `count` parameters.
pub(super) fn placeholders(first: usize, count: usize) -> String {
    let list: Vec<String> = (first..first + count).map(|n| format!("${n}")).collect();
    format!("({})", list.join(", "))
}
