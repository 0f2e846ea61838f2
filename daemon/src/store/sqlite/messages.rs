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
        let (message, clock) = (message.clone(), self.clock.clone());
        self.db.write(move |conn| accept_message(conn, &message, &clock)).await
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
        let (keys, clock) = (keys.to_vec(), self.clock.clone());
        self.db
            .write(move |conn| {
                let mut messages = Vec::with_capacity(keys.len());
                // As the write runs: a claim queued meanwhile must not see a later deadline.
                let now = write_time(&clock, now);
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
            .lookup(move |conn| first(conn, overdue_messages_sql(), params![now, 1], |_| Ok(())))
            .await?
            .is_none()
        {
            return Ok(0);
        }
        let clock = self.clock.clone();
        self.db
            .write(move |conn| {
                // As the write runs, as a claim reads it.
                let now = write_time(&clock, now);
                Ok(expire_overdue(conn, overdue_messages_sql(), params![now, limit], now)? as u64)
            })
            .await
    }
}

pub(super) fn message_in(conn: &Connection, id: &str) -> StoreResult<Option<MessageRecord>> {
    first(conn, &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?"), [id], |row| {
        message_from(row)
    })
}

/// A kept key's request hash and message.
pub(super) fn stored_key(conn: &Connection, scope: &str, key: &str) -> StoreResult<Option<(String, String)>> {
    first(
        conn,
        "SELECT request_hash, message_id FROM idempotency_keys WHERE scope = ? AND key = ?",
        params![scope, key],
        |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
    )
}

/// The facts a send is decided by (see [`rules::SendFacts`]), read in the transaction that
/// would store it. The key decides before anything else does: when it is kept, nothing
/// else is read.
pub(super) fn send_facts(conn: &Connection, m: &NewMessage) -> StoreResult<SendFacts> {
    let key = stored_key(conn, &m.key_scope, &m.key)?
        .map(|(request_hash, message_id)| KeptKey { request_hash, message_id });
    if key.is_some() {
        return Ok(SendFacts { key, ..SendFacts::default() });
    }
    let key_sent_away = first(
        conn,
        "SELECT id FROM outbox WHERE key_scope = ? AND key = ? LIMIT 1",
        params![m.key_scope, m.key],
        |row| Ok(row.get::<_, String>(0)?),
    )?;
    let key_given_up = rules::may_be_given_up(m)
        && first(
            conn,
            "SELECT 1 FROM given_up_keys WHERE scope = ? AND key = ?",
            params![m.key_scope, m.key],
            |_| Ok(()),
        )?
        .is_some();
    let target_live =
        first(conn, "SELECT 1 FROM threads WHERE id = ? AND archived = 0", [&m.target_thread], |_| Ok(()))?
            .is_some();
    let (bridge_open, id_taken) = match rules::bridged_from(m) {
        None => (true, false),
        Some(peer) => {
            let open = first(
                conn,
                sql!(
                    "SELECT 1 FROM bridges WHERE direction = '{inbound}' AND peer_home_id = ? AND state = '{active}'",
                    inbound = Direction::Inbound,
                    active = BridgeState::Active
                ),
                [peer],
                |_| Ok(()),
            )?;
            let taken = "SELECT 1 FROM messages WHERE id = ?1 UNION ALL SELECT 1 FROM outbox WHERE id = ?1";
            (open.is_some(), first(conn, taken, [&m.id], |_| Ok(()))?.is_some())
        }
    };
    Ok(SendFacts { key, key_sent_away, key_given_up, target_live, bridge_open, id_taken })
}

/// Decides a send by the rules (see [`rules::refuse_send`]) and, if accepted, writes its
/// message, key and input (queued, or taken by the turn the send starts).
/// Writes run one after another on the writer, so of two sends with one key the second
/// sees the first (even within one group commit) and replays it.
pub(super) fn accept_message(conn: &Connection, m: &NewMessage, clock: &Clock) -> StoreResult<SendOutcome> {
    if let Some(refused) = rules::refuse_send(m, &send_facts(conn, m)?) {
        return Ok(refused);
    }
    let rules::Acceptance { input, owner_spoke: owner } = rules::accept(m);
    if owner {
        owner_spoke(conn, &m.target_thread)?;
    }
    let wake = m.wake && !agent_wakes_spent(conn, m)?;
    // A message that starts its turn is written delivered, its input taken: it never enters
    // the indexes of pending messages and queued input only to leave them in this commit.
    let turn = match &m.claim {
        Some(claim) if wake => {
            let arriving = InputRecord { content: m.content.clone(), ..input.clone() };
            claim_turn(conn, &m.target_thread, claim, m.now, Some(arriving), clock)?
        }
        _ => None,
    };
    let arrived = rules::arrival(m, &input.id, turn.as_ref());
    run(
        conn,
        "INSERT INTO messages (id, target_thread, source_host, source_thread, source_workspace, content,
                               status, created_at, delivered_at, turn_id, deadline, via_home)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        params![
            m.id,
            m.target_thread,
            m.source.as_ref().map(|s| &s.host_id),
            m.source.as_ref().map(|s| &s.thread_id),
            m.source.as_ref().map_or("", |s| &s.workspace_id),
            m.content,
            arrived.status,
            m.now,
            arrived.delivered_at,
            arrived.turn_id,
            arrived.deadline,
            input.via
        ],
    )?;
    run(
        conn,
        "INSERT INTO idempotency_keys (scope, key, request_hash, message_id, created_at) VALUES (?, ?, ?, ?, ?)",
        params![m.key_scope, m.key, m.request_hash, m.id, m.now],
    )?;
    insert_input(conn, &m.target_thread, &input, wake, arrived.turn_id.as_deref())?;
    if let Some(receipt) = &m.receipt {
        insert_receipt(
            conn,
            &ReceiptRecord { message_id: m.id.clone(), status: arrived.receipt, ..receipt.clone() },
        )?;
    }
    Ok(SendOutcome::Accepted {
        message_id: m.id.clone(),
        delivered: arrived.turn_id.is_some(),
        turn: turn.map(Box::new),
        held: m.wake && !wake,
    })
}

/// Counts a wake between two threads' agents (see [`rules::agent_wake`]): whether the
/// message is past the pair's cap, telling its target's owner when it is the first.
fn agent_wakes_spent(conn: &Connection, m: &NewMessage) -> StoreResult<bool> {
    let (Some(limit), Some(source), None, true) = (m.max_agent_wakes, &m.source, &m.room, m.wake) else {
        return Ok(false);
    };
    let Some((a, b)) = rules::agent_pair(source, &m.target_thread) else { return Ok(false) };
    let count = first(
        conn,
        "INSERT INTO agent_wakes (thread_a, thread_b, count) VALUES (?, ?, 1)
         ON CONFLICT (thread_a, thread_b) DO UPDATE SET count = count + 1 RETURNING count",
        params![a, b],
        |row| Ok(row.get::<_, i64>(0)?),
    )?
    .unwrap_or(1);
    match rules::agent_wake(count, limit) {
        rules::AgentWake::Wakes => Ok(false),
        rules::AgentWake::Held { first } => {
            if first {
                let mut held = event(&m.target_thread, EventKind::Attention, m.now);
                held.reason = rules::loop_guard_notice(&a, &b, limit);
                insert_event(conn, &held)?;
            }
            Ok(true)
        }
    }
}

/// The owner gave the thread input: the loop guard starts over for its pairs.
pub(super) fn owner_spoke(conn: &Connection, thread_id: &str) -> StoreResult<()> {
    run(conn, "DELETE FROM agent_wakes WHERE thread_a = ?1 OR thread_b = ?1", [thread_id]).map(drop)
}

/// A bridged message that became undeliverable here gets a receipt saying so (`rejected`
/// with `reason`, or `expired`), copied from its receipt of acceptance (found by message
/// id); a local message has no receipt and gets none.
pub(super) fn receipt_follows(
    conn: &Connection,
    message_id: &str,
    reason: &str,
    now: Millis,
) -> StoreResult<()> {
    let status = rules::undelivered_receipt(reason);
    run(
        conn,
        "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
         SELECT peer_home_id, key, message_id, target, ?, ?, ? FROM bridge_receipts
         WHERE message_id = ? LIMIT 1",
        params![status, reason, now, message_id],
    )?;
    Ok(())
}

/// A thread's bridged messages whose deadline passed before they were delivered or
/// confirmed (`?` = thread, now). Walks the thread's pending messages only.
pub(super) fn overdue_thread_messages_sql() -> &'static str {
    sql!(
        "SELECT id FROM messages WHERE target_thread = ? AND status = '{pending}' AND deadline <= ?",
        pending = MessageStatus::Pending
    )
}

/// Bridged messages of any thread whose deadline passed before they were delivered or
/// confirmed, earliest first (`?` = now, limit). Walks `messages_by_deadline`.
pub(super) fn overdue_messages_sql() -> &'static str {
    sql!(
        "SELECT id FROM messages WHERE status = '{pending}' AND deadline IS NOT NULL
         AND deadline <= ? ORDER BY deadline LIMIT ?",
        pending = MessageStatus::Pending
    )
}

/// Makes a pending message undeliverable with `reason`: its queued input goes and a bridged
/// one gets a receipt.
pub(super) fn undeliver(conn: &Connection, message_id: &str, reason: &str, now: Millis) -> StoreResult<()> {
    run(
        conn,
        "UPDATE messages SET status = ?, reason = ?, deadline = NULL WHERE id = ?",
        params![MessageStatus::Undeliverable, reason, message_id],
    )?;
    run(conn, "DELETE FROM inputs WHERE id = ? AND turn_id IS NULL", [message_input_id(message_id)])?;
    receipt_follows(conn, message_id, reason, now)
}

/// Expires the bridged messages an `OVERDUE_*` statement lists (their deadline passed):
/// they are never delivered, as their sources declare them expired. How many.
pub(super) fn expire_overdue(
    conn: &Connection,
    overdue: &str,
    params: impl rusqlite::Params,
    now: Millis,
) -> StoreResult<usize> {
    let ids = all(conn, overdue, params, |row| Ok(row.get::<_, String>(0)?))?;
    for id in &ids {
        undeliver(conn, id, EXPIRED, now)?;
    }
    Ok(ids.len())
}

/// A source's follow-up of its bridged message `message_id` (see [`MessageStore::follow_up`]):
/// confirmed (its deadline dropped) unless `window_over`, expired if its deadline passed or
/// `window_over` found it unconfirmed; the message as it then stands.
pub(super) fn follow_up_message(
    conn: &Connection,
    message_id: &str,
    window_over: bool,
    now: Millis,
) -> StoreResult<Option<MessageRecord>> {
    let Some(message) = message_in(conn, message_id)? else {
        return Ok(None);
    };
    let follow_up = rules::follow_up(message.status, message.deadline, window_over, now);
    match follow_up {
        rules::FollowUp::Expire => undeliver(conn, message_id, EXPIRED, now)?,
        rules::FollowUp::Confirm => {
            run(conn, "UPDATE messages SET deadline = NULL WHERE id = ?", [message_id])?;
        }
        rules::FollowUp::Keep => {}
    }
    Ok(Some(follow_up.applied(message)))
}

/// A turn's messages become undeliverable (`?` = reason, turn), found through the turn's
/// inputs: `messages` has no index by turn, and scanning it would take the writer for as
/// long as the home has history.
pub(super) fn undeliver_turn_messages_sql() -> &'static str {
    sql!(
        "UPDATE messages SET status = '{undeliverable}', reason = ?
         WHERE status = '{delivered}'
           AND id IN (SELECT message_id FROM inputs WHERE turn_id = ? AND message_id IS NOT NULL)
         RETURNING id, target_thread, source_thread, source_host",
        undeliverable = MessageStatus::Undeliverable,
        delivered = MessageStatus::Delivered
    )
}

/// Drops the queued inputs of a thread's messages (`?` = thread), once they are
/// undeliverable: one pass over the thread's queue, not one per message. These three rely on
/// what `accept_message` and `claim_turn` keep true: a message has one input (same thread,
/// same `via_home`), queued exactly while the message is pending, and taken by the turn
/// recorded as the message's `turn_id`.
pub(super) const UNQUEUE_THREAD_MESSAGES: &str =
    "DELETE FROM inputs WHERE thread_id = ? AND turn_id IS NULL AND message_id IS NOT NULL";

/// Drops the queued inputs a peer's bridge brought (`?` = peer home id), once their
/// messages are undeliverable: one pass over the queued input, not one per message.
pub(super) const UNQUEUE_PEER_MESSAGES: &str = "DELETE FROM inputs WHERE turn_id IS NULL AND via_home = ?";
