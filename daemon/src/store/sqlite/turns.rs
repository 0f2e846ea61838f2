//! Turns and their input in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl TurnStore for SqliteStore {
    async fn enqueue_input(&self, thread_id: &str, input: &NewInput) -> StoreResult<Option<bool>> {
        let (thread_id, input) = (thread_id.to_string(), input.clone());
        self.db
            .write(move |conn| {
                let running = first(conn, "SELECT running FROM threads WHERE id = ?", [&thread_id], |row| {
                    Ok(row.get::<_, bool>(0)?)
                })?;
                if running.is_none() {
                    return Ok(None);
                }
                if input.kind == InputKind::User {
                    super::messages::owner_spoke(conn, &thread_id)?;
                }
                insert_input(conn, &thread_id, &input, true, None)?;
                Ok(running)
            })
            .await
    }

    async fn claim_turn(
        &self,
        thread_id: &str,
        claim: TurnClaim,
        now: Millis,
    ) -> StoreResult<Option<ClaimedTurn>> {
        let (thread_id, clock) = (thread_id.to_string(), self.clock.clone());
        self.db.write(move |conn| claim_turn(conn, &thread_id, &claim, now, None, &clock)).await
    }

    async fn inbox(&self, thread_id: &str, take_messages: bool) -> StoreResult<Vec<InputRecord>> {
        let thread_id = thread_id.to_string();
        self.db
            .read(move |conn| {
                let queued = queued_inputs(conn, &thread_id)?;
                Ok(rules::plan_inbox(queued, take_messages, &disabled_peers(conn)?))
            })
            .await
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
        let (thread_id, turn_id, clock) = (thread_id.to_string(), turn_id.to_string(), self.clock.clone());
        self.db
            .write(move |conn| {
                let now = write_time(&clock, now);
                take_into_turn(conn, &thread_id, &turn_id, take_messages, &ids, render, now)
            })
            .await
    }

    async fn add_turn_part(&self, turn_id: &str, kind: PartKind, text: &str, now: Millis) -> StoreResult<()> {
        let (turn_id, text) = (turn_id.to_string(), text.to_string());
        self.db
            .write(move |conn| {
                run(
                    conn,
                    "INSERT INTO turn_parts (turn_id, seq, kind, text, at)
                     VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM turn_parts WHERE turn_id = ?1), ?2, ?3, ?4)",
                    params![turn_id, kind, text, now],
                )?;
                let thread = first(conn, "SELECT thread_id FROM turns WHERE id = ?", [&turn_id], |row| {
                    Ok(row.get::<_, String>(0)?)
                })?;
                thread.into_iter().for_each(|thread| note(Change::Parts(thread)));
                Ok(())
            })
            .await
    }

    async fn turn_parts(&self, turn_id: &str, after: i64, limit: u32) -> StoreResult<Vec<TurnPart>> {
        let turn_id = turn_id.to_string();
        self.db
            .read(move |conn| {
                all(
                    conn,
                    &format!("SELECT {PART_COLUMNS} FROM turn_parts WHERE turn_id = ? AND seq > ? ORDER BY seq LIMIT ?"),
                    params![turn_id, after, limit],
                    |row| part_from(row),
                )
            })
            .await
    }

    async fn latest_turn(&self, thread_id: &str) -> StoreResult<Option<(String, TurnStatus)>> {
        let thread_id = thread_id.to_string();
        self.db
            .read(move |conn| {
                first(
                    conn,
                    "SELECT id, status FROM turns WHERE thread_id = ? ORDER BY seq DESC LIMIT 1",
                    [&thread_id],
                    |row| turn_status_from(row),
                )
            })
            .await
    }

    async fn agent_session(&self, thread_id: &str) -> StoreResult<Option<String>> {
        let thread_id = thread_id.to_string();
        self.db
            .read(move |conn| {
                first(
                    conn,
                    "SELECT session_id FROM agent_sessions WHERE thread_id = ?",
                    [&thread_id],
                    |row| Ok(row.get::<_, String>(0)?),
                )
            })
            .await
    }

    async fn set_agent_session(&self, thread_id: &str, session: &str, now: Millis) -> StoreResult<()> {
        let (thread_id, session) = (thread_id.to_string(), session.to_string());
        self.db
            .write(move |conn| {
                // Followers of its running turn show it.
                note(Change::Parts(thread_id.clone()));
                save_agent_session(conn, &thread_id, &session, now)
            })
            .await
    }

    async fn cost(&self, thread_id: Option<&str>) -> StoreResult<f64> {
        let thread_id = thread_id.map(str::to_string);
        self.db
            .read(move |conn| match &thread_id {
                Some(thread_id) => thread_cost(conn, thread_id),
                None => {
                    Ok(first(conn, "SELECT TOTAL(cost_usd) FROM turns", [], |row| Ok(row.get::<_, f64>(0)?))?
                        .unwrap_or(0.0))
                }
            })
            .await
    }

    async fn finish_turn(&self, outcome: &TurnOutcome) -> StoreResult<()> {
        let outcome = outcome.clone();
        self.db
            .write(move |conn| {
                let usage = outcome.usage;
                let thread_id = first(
                    conn,
                    sql!(
                        "UPDATE turns SET status = ?, output = ?, error = ?, ended_at = ?,
                                          input_tokens = ?, output_tokens = ?, cost_usd = ?
                         WHERE id = ? AND status = '{running}' RETURNING thread_id",
                        running = TurnStatus::Running
                    ),
                    params![
                        outcome.status.as_str(),
                        outcome.output,
                        outcome.error,
                        outcome.now,
                        usage.map(|u| u.input_tokens as i64),
                        usage.map(|u| u.output_tokens as i64),
                        usage.map(|u| u.cost_usd),
                        outcome.turn_id
                    ],
                    |row| Ok(row.get::<_, String>(0)?),
                )?;
                if let Some(thread_id) = thread_id {
                    end_turn(conn, &rules::finish_turn(&thread_id, &outcome))?;
                }
                Ok(())
            })
            .await
    }

    async fn record_agent(&self, turn_id: &str, agent: &str) -> StoreResult<()> {
        let sql = sql!(
            "UPDATE turns SET agent = ? WHERE id = ? AND status = '{running}'",
            running = TurnStatus::Running
        );
        self.write_statement(sql, (agent.to_string(), turn_id.to_string())).await
    }

    async fn interrupted_turns(&self, live_since: Millis) -> StoreResult<Vec<InterruptedTurn>> {
        self.db
            .read(move |conn| {
                let sql = sql!(
                    "SELECT id, agent FROM turns WHERE status = '{running}'
                     AND replica_id NOT IN (SELECT id FROM replicas WHERE heartbeat_at >= ?)",
                    running = TurnStatus::Running
                );
                all(conn, sql, [live_since], |row| {
                    Ok(InterruptedTurn { turn_id: row.get(0)?, agent: row.get(1)? })
                })
            })
            .await
    }

    async fn fail_interrupted_turns(
        &self,
        reason: &str,
        now: Millis,
        live_since: Millis,
    ) -> StoreResult<Vec<String>> {
        let reason = reason.to_string();
        self.db
            .write(move |conn| {
                let failed = all(
                    conn,
                    sql!(
                        "UPDATE turns SET status = '{failed}', error = ?, ended_at = ? WHERE status = '{running}'
                         AND replica_id NOT IN (SELECT id FROM replicas WHERE heartbeat_at >= ?)
                         RETURNING id, thread_id",
                        failed = TurnStatus::Failed,
                        running = TurnStatus::Running
                    ),
                    params![reason, now, live_since],
                    |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
                )?;
                for (turn_id, thread_id) in &failed {
                    end_turn(conn, &rules::fail_interrupted_turn(thread_id, turn_id, &reason, now))?;
                }
                Ok(failed.into_iter().map(|(_, thread_id)| thread_id).collect())
            })
            .await
    }

    async fn turn_of_token(&self, token_hash: &str) -> StoreResult<Option<(String, String)>> {
        let token_hash = token_hash.to_string();
        self.db
            .lookup(move |conn| {
                let sql = sql!(
                    "SELECT thread_id, id FROM turns WHERE token_hash = ? AND status = '{running}'",
                    running = TurnStatus::Running
                );
                first(conn, sql, [&token_hash], |row| Ok((row.get(0)?, row.get(1)?)))
            })
            .await
    }

    async fn threads_with_queued_input(&self) -> StoreResult<Vec<String>> {
        self.db
            .read(|conn| {
                all(
                    conn,
                    "SELECT DISTINCT i.thread_id FROM inputs i JOIN threads t ON t.id = i.thread_id
                     WHERE i.turn_id IS NULL AND i.wake = 1 AND t.running = 0",
                    [],
                    |row| Ok(row.get::<_, String>(0)?),
                )
            })
            .await
    }

    async fn running_turns(&self) -> StoreResult<u64> {
        let sql =
            sql!("SELECT COUNT(*) FROM turns WHERE status = '{running}'", running = TurnStatus::Running);
        self.db.read(move |conn| count(conn, sql, [])).await
    }

    async fn ended_turns(&self, thread_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<TurnRecord>> {
        let thread_id = thread_id.to_string();
        self.db
            .read(move |conn| {
                let mut turns = page(
                    conn,
                    sql!(
                        "SELECT {TURN_COLUMNS} FROM turns
                         WHERE thread_id = ? AND seq > ? AND status <> '{running}' ORDER BY seq",
                        running = TurnStatus::Running
                    ),
                    params![thread_id, after_seq],
                    limit,
                    |row| turn_from(row),
                )?;
                attach_items(conn, &mut turns)?;
                Ok(turns)
            })
            .await
    }

    async fn last_ended_turns(&self, thread_id: &str, limit: u32) -> StoreResult<Vec<TurnRecord>> {
        let thread_id = thread_id.to_string();
        self.db
            .read(move |conn| {
                // Walks the (thread_id, seq) index backwards from the newest turn.
                let mut turns = page(
                    conn,
                    sql!(
                        "SELECT {TURN_COLUMNS} FROM turns
                         WHERE thread_id = ? AND status <> '{running}' ORDER BY seq DESC",
                        running = TurnStatus::Running
                    ),
                    params![thread_id],
                    limit,
                    |row| turn_from(row),
                )?;
                turns.reverse();
                attach_items(conn, &mut turns)?;
                Ok(turns)
            })
            .await
    }

    async fn turn(&self, thread_id: &str, turn_id: &str) -> StoreResult<Option<TurnRecord>> {
        let (thread_id, turn_id) = (thread_id.to_string(), turn_id.to_string());
        self.db
            .lookup(move |conn| {
                let turn = first(
                    conn,
                    &format!("SELECT {TURN_COLUMNS} FROM turns WHERE thread_id = ? AND id = ?"),
                    params![thread_id, turn_id],
                    |row| turn_from(row),
                )?;
                let Some(turn) = turn else { return Ok(None) };
                let mut turns = [turn];
                attach_items(conn, &mut turns)?;
                let [turn] = turns;
                Ok(Some(turn))
            })
            .await
    }

    async fn ended_turn_exists(&self, thread_id: &str, seq: i64) -> StoreResult<bool> {
        let thread_id = thread_id.to_string();
        self.db
            .lookup(move |conn| {
                let found = first(
                    conn,
                    sql!(
                        "SELECT 1 FROM turns WHERE thread_id = ? AND seq = ? AND status <> '{running}'",
                        running = TurnStatus::Running
                    ),
                    params![thread_id, seq],
                    |_| Ok(()),
                )?;
                Ok(found.is_some())
            })
            .await
    }

    async fn undeliver_turn_messages(
        &self,
        turn_id: &str,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Vec<String>> {
        let (turn_id, reason) = (turn_id.to_string(), reason.to_string());
        self.db
            .write(move |conn| {
                let undelivered =
                    all(conn, undeliver_turn_messages_sql(), params![reason, turn_id], |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, Option<String>>(2)?,
                            row.get::<_, Option<String>>(3)?,
                        ))
                    })?;
                let mut notified = Vec::new();
                for (message_id, target, source, source_host) in undelivered {
                    for e in rules::undeliverable_events(
                        &message_id,
                        &target,
                        source,
                        source_host.as_deref(),
                        &reason,
                        now,
                    ) {
                        insert_event(conn, &e)?;
                        if !notified.contains(&e.thread_id) {
                            notified.push(e.thread_id);
                        }
                    }
                    receipt_follows(conn, &message_id, &reason, now)?;
                }
                Ok(notified)
            })
            .await
    }
}

/// Starts the thread's next turn with its queued input, if it is idle (see
/// [`TurnStore::claim_turn`]). `arriving` is the input of a send that wakes the thread, not yet
/// written: the turn takes it last, if the rules let it (see [`rules::takeable`]), and its
/// writer records it taken.
pub(super) fn claim_turn(
    conn: &Connection,
    thread_id: &str,
    claim: &TurnClaim,
    now: Millis,
    arriving: Option<InputRecord>,
    clock: &Clock,
) -> StoreResult<Option<ClaimedTurn>> {
    let TurnClaim { turn_id, take_messages, render, exec, budget, replica, token_hash } = claim;
    let idle = first(
        conn,
        "SELECT turn_count, (SELECT ended_at FROM turns WHERE thread_id = ?1 ORDER BY seq DESC LIMIT 1)
         FROM threads WHERE id = ?1 AND archived = 0 AND running = 0",
        [thread_id],
        |row| Ok((row.get::<_, i64>(0)?, row.get::<_, Option<Millis>>(1)?)),
    )?;
    let Some((turns, last_ended)) = idle else {
        return Ok(None);
    };
    let idle_turns = Some(turns);
    let now = rules::turn_start(now, last_ended);
    // What its source gave up on never enters a prompt: checked against the clock as the
    // write runs (a replay may have answered `expired` while this claim was queued).
    let at = write_time(clock, now);
    expire_overdue(conn, overdue_thread_messages_sql(), params![thread_id, at], at)?;
    let facts = rules::ClaimFacts {
        idle_turns,
        cost: if budget.is_some() { thread_cost(conn, thread_id)? } else { 0.0 },
        queued: queued_inputs(conn, thread_id)?,
        disabled_peers: disabled_peers(conn)?,
    };
    let Some(rules::ClaimPlan { seq, inputs, taken }) =
        rules::plan_claim(facts, arriving, *take_messages, *budget)
    else {
        return Ok(None);
    };
    let rendered = render(&inputs);
    run(
        conn,
        "INSERT INTO turns (id, thread_id, seq, status, input, started_at, agent, events_before, replica_id,
                            token_hash)
         VALUES (?1, ?2, ?3, ?7, ?4, ?5, ?6,
                 (SELECT COALESCE(MAX(seq), 0) FROM events WHERE thread_id = ?2), ?8, NULLIF(?9, ''))",
        params![
            turn_id,
            thread_id,
            seq,
            rendered,
            now,
            exec.then_some(""),
            TurnStatus::Running,
            replica,
            token_hash
        ],
    )?;
    take(conn, turn_id, &taken, now)?;
    note(Change::Thread(thread_id.to_string()));
    run(
        conn,
        "UPDATE threads SET running = 1, turn_count = ?, updated_at = ? WHERE id = ?",
        params![seq, now, thread_id],
    )?;
    touched(Some(thread_id));
    Ok(Some(ClaimedTurn::started(thread_id, turn_id, seq, rendered, now, inputs)))
}

/// Writes what a turn's end does besides its own row (see [`rules::TurnEnd`]).
fn end_turn(conn: &Connection, end: &rules::TurnEnd) -> StoreResult<()> {
    run(
        conn,
        "UPDATE permission_requests SET status = ?, decided_at = ?, reason = ? WHERE turn_id = ? AND status = ?",
        params![
            PermissionStatus::Expired,
            end.now,
            end.permissions_expired,
            end.turn_id,
            PermissionStatus::Pending
        ],
    )?;
    if let Some(session) = &end.agent_session {
        save_agent_session(conn, &end.thread_id, session, end.now)?;
    }
    run(
        conn,
        "UPDATE threads SET running = 0, updated_at = ? WHERE id = ?",
        params![end.now, end.thread_id],
    )?;
    touched(Some(&end.thread_id));
    insert_event(conn, &end.terminal).map(drop)
}

/// What the thread's turns have cost, in dollars.
fn thread_cost(conn: &Connection, thread_id: &str) -> StoreResult<f64> {
    let total = first(conn, "SELECT TOTAL(cost_usd) FROM turns WHERE thread_id = ?", [thread_id], |row| {
        Ok(row.get::<_, f64>(0)?)
    })?;
    Ok(total.unwrap_or(0.0))
}

pub(super) fn save_agent_session(
    conn: &Connection,
    thread_id: &str,
    session: &str,
    now: Millis,
) -> StoreResult<()> {
    run(
        conn,
        "INSERT INTO agent_sessions (thread_id, session_id, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (thread_id) DO UPDATE SET session_id = ?2, updated_at = ?3",
        params![thread_id, session, now],
    )
    .map(drop)
}

/// The thread's input not taken by a turn yet, oldest first, with its content.
fn queued_inputs(conn: &Connection, thread_id: &str) -> StoreResult<Vec<rules::Queued>> {
    all(
        conn,
        "SELECT id, kind, message_id, source_host, source_thread, source_workspace, room_id, room_entry, via_home,
                created_at, wake,
                COALESCE(NULLIF(content, ''),
                         (SELECT m.content FROM messages m WHERE m.id = inputs.message_id),
                         (SELECT e.content FROM room_entries e WHERE e.id = inputs.room_entry), '') AS content
         FROM inputs WHERE thread_id = ? AND turn_id IS NULL ORDER BY seq",
        [thread_id],
        |row| Ok(rules::Queued { input: input_from(row)?, wake: row.get::<_, bool>("wake")? }),
    )
}

/// The peers whose inbound bridge's access is off: their messages wait.
fn disabled_peers(conn: &Connection) -> StoreResult<Vec<String>> {
    all(
        conn,
        sql!(
            "SELECT peer_home_id FROM bridges WHERE direction = '{inbound}' AND state = '{disabled}'",
            inbound = Direction::Inbound,
            disabled = BridgeState::Disabled
        ),
        [],
        |row| Ok(row.get::<_, String>(0)?),
    )
}

/// Puts the queued messages `ids` of `thread_id` into its running turn `turn_id` (see
/// [`TurnStore::take_into_turn`]).
fn take_into_turn(
    conn: &Connection,
    thread_id: &str,
    turn_id: &str,
    take_messages: bool,
    ids: &[String],
    render: RenderInput,
    // The time as the write runs.
    now: Millis,
) -> StoreResult<Vec<String>> {
    let running = first(
        conn,
        sql!(
            "SELECT 1 FROM turns WHERE id = ? AND thread_id = ? AND status = '{running}'",
            running = TurnStatus::Running
        ),
        params![turn_id, thread_id],
        |_| Ok(()),
    )?;
    if running.is_none() {
        return Ok(Vec::new());
    }
    // As a claim does: what its source gave up on never enters a prompt, and only what
    // the inbox may give is taken.
    expire_overdue(conn, overdue_thread_messages_sql(), params![thread_id, now], now)?;
    let queued = queued_inputs(conn, thread_id)?;
    let (inputs, taken) = rules::plan_take(queued, take_messages, &disabled_peers(conn)?, ids);
    take(conn, turn_id, &taken, now)?;
    if !inputs.is_empty() {
        run(
            conn,
            "UPDATE turns SET input = input || char(10) || char(10) || ? WHERE id = ?",
            params![render(&inputs), turn_id],
        )?;
        touched(Some(thread_id));
        // Senders waiting for `delivered` are parked on the thread.
        note(Change::Thread(thread_id.to_string()));
    }
    Ok(inputs.iter().filter_map(|i| inbox_id(i).map(str::to_string)).collect())
}

/// Writes what a turn takes of the queued input (see [`rules::Taken`]).
fn take(conn: &Connection, turn_id: &str, taken: &rules::Taken, now: Millis) -> StoreResult<()> {
    for id in &taken.inputs {
        run(conn, "UPDATE inputs SET turn_id = ? WHERE id = ?", params![turn_id, id])?;
    }
    for id in &taken.messages {
        run(
            conn,
            sql!(
                "UPDATE messages SET status = '{delivered}', delivered_at = ?, turn_id = ? WHERE id = ? AND status = '{pending}'",
                delivered = MessageStatus::Delivered,
                pending = MessageStatus::Pending
            ),
            params![now, turn_id, id],
        )?;
    }
    // A bridged message that waited here (its receipt says `accepted`) is delivered now.
    for id in &taken.bridged {
        run(
            conn,
            "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
             SELECT peer_home_id, key, message_id, target, ?, '', ? FROM bridge_receipts
             WHERE status = ? AND message_id = ?",
            params![OutboxStatus::Delivered, now, OutboxStatus::Accepted, id],
        )?;
    }
    Ok(())
}

/// Fills in the input items of `turns`. One small indexed query per turn: in-process
/// SQLite answers each in microseconds, so there is no round trip to save.
pub(super) fn attach_items(conn: &Connection, turns: &mut [TurnRecord]) -> StoreResult<()> {
    for turn in turns {
        turn.items = all(
            conn,
            "SELECT id, kind, '' AS content, message_id, source_host, source_thread, source_workspace,
                    room_id, room_entry, via_home, created_at
             FROM inputs WHERE turn_id = ? ORDER BY seq",
            [&turn.id],
            |row| {
                let input = input_from(row)?;
                Ok(TurnItem {
                    kind: input.kind,
                    message_id: input.message_id,
                    source: input.source,
                    room: input.room,
                })
            },
        )?;
    }
    Ok(())
}

/// Writes an input: queued (`turn` = `None`) or already taken by the turn it starts.
pub(super) fn insert_input(
    conn: &Connection,
    thread_id: &str,
    input: &NewInput,
    wake: bool,
    turn: Option<&str>,
) -> StoreResult<()> {
    if wake && turn.is_none() {
        // A running turn's agent may take it now.
        note(Change::Inbox(thread_id.to_string()));
    }
    run(
        conn,
        "INSERT INTO inputs (id, thread_id, kind, content, message_id, source_host, source_thread,
                             source_workspace, room_id, room_entry, created_at, wake, turn_id, via_home)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        params![
            input.id,
            thread_id,
            input.kind.as_str(),
            input.content,
            input.message_id,
            input.source.as_ref().map(|s| &s.host_id),
            input.source.as_ref().map(|s| &s.thread_id),
            input.source.as_ref().map_or("", |s| &s.workspace_id),
            input.room.as_ref().map(|r| &r.room),
            input.room.as_ref().map(|r| &r.entry),
            input.now,
            wake,
            turn,
            input.via
        ],
    )?;
    Ok(())
}
