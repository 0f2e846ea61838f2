//! Messages and their keys on PostgreSQL.

use std::sync::LazyLock;

use async_trait::async_trait;

use super::*;

#[async_trait]
impl MessageStore for PostgresStore {
    async fn accept_message(&self, message: &NewMessage) -> StoreResult<SendOutcome> {
        let mut tx = self.begin().await?;
        let outcome = accept_message(&mut tx, message).await?;
        self.commit(tx).await?;
        Ok(outcome)
    }

    async fn message(&self, id: &str) -> StoreResult<Option<MessageRecord>> {
        message_in(&mut *self.read().await?, id).await
    }

    async fn keyed_message(&self, scope: &str, key: &str) -> StoreResult<Option<(String, String)>> {
        stored_key(&mut *self.read().await?, scope, key).await
    }

    async fn follow_up(
        &self,
        keys: &[(String, String)],
        window_over: bool,
        now: Millis,
    ) -> StoreResult<Vec<Option<MessageRecord>>> {
        let mut tx = self.begin().await?;
        let mut messages = Vec::with_capacity(keys.len());
        // As the write runs: a claim queued meanwhile must not see a later deadline.
        let now = tx.time(now);
        for (scope, key) in keys {
            messages.push(match stored_key(tx.conn(), scope, key).await? {
                Some((_, message_id)) => follow_up_message(&mut tx, &message_id, window_over, now).await?,
                // Given up on before it arrived: should a call of it still come (QUIC
                // delivering an attempt given up earlier), the key refuses it.
                None if window_over => {
                    sqlx::query(
                        "INSERT INTO given_up_keys (scope, key, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    )
                    .bind(scope)
                    .bind(key)
                    .bind(now)
                    .execute(tx.conn())
                    .await?;
                    None
                }
                None => None,
            });
        }
        self.commit(tx).await?;
        Ok(messages)
    }

    async fn local_key_message(&self, scope: &str, key: &str) -> StoreResult<Option<String>> {
        Ok(self.keyed_message(scope, key).await?.map(|(_, message_id)| message_id))
    }

    async fn prune_keys(&self, before: Millis, limit: u32) -> StoreResult<u64> {
        let mut tx = self.begin().await?;
        // The oldest `limit` keys older than `before`, walked by age on their index: never a
        // scan beyond them, however many keys are young.
        let pruned = sqlx::query(
            "DELETE FROM idempotency_keys WHERE (scope, key) IN
                 (SELECT scope, key FROM idempotency_keys WHERE created_at < $1 ORDER BY created_at LIMIT $2)",
        )
        .bind(before)
        .bind(i64::from(limit))
        .execute(tx.conn())
        .await?
        .rows_affected();
        // Given-up keys are rare (a call that might still arrive as a window ended): their
        // whole table is walked.
        sqlx::query("DELETE FROM given_up_keys WHERE created_at < $1")
            .bind(before)
            .execute(tx.conn())
            .await?;
        self.commit(tx).await?;
        Ok(pruned)
    }

    async fn expire_overdue_messages(&self, now: Millis, limit: u32) -> StoreResult<u64> {
        // Read first: most sweeps find nothing, and then need no write.
        let any: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE status = $1 AND deadline IS NOT NULL AND deadline <= $2)",
        )
        .bind(MessageStatus::Pending)
        .bind(now)
        .fetch_one(&mut *self.read().await?)
        .await?;
        if !any {
            return Ok(0);
        }
        let mut tx = self.begin().await?;
        // As the write runs, as a claim reads it.
        let now = tx.time(now);
        let overdue: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM messages WHERE status = $1 AND deadline IS NOT NULL AND deadline <= $2
             ORDER BY deadline LIMIT $3",
        )
        .bind(MessageStatus::Pending)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(tx.conn())
        .await?;
        expire(&mut tx, &overdue, now).await?;
        self.commit(tx).await?;
        Ok(overdue.len() as u64)
    }
}

pub(super) async fn message_in(conn: &mut PgConnection, id: &str) -> StoreResult<Option<MessageRecord>> {
    sqlx::query(&format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = $1"))
        .bind(id)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(message_from)
        .transpose()
}

/// A kept key's request hash and message.
pub(super) async fn stored_key(
    conn: &mut PgConnection,
    scope: &str,
    key: &str,
) -> StoreResult<Option<(String, String)>> {
    Ok(sqlx::query_as("SELECT request_hash, message_id FROM idempotency_keys WHERE scope = $1 AND key = $2")
        .bind(scope)
        .bind(key)
        .fetch_optional(conn)
        .await?)
}

/// What a send's transaction reads before it decides: the facts the rules decide by (see
/// [`rules::SendFacts`]) and whether the writes that may follow have anything to do.
struct SendReads {
    facts: rules::SendFacts,
    /// The target is idle: a claim may start its turn (else the claim finds it busy).
    target_idle: bool,
    /// The target has wakes between agents counted (else the owner's message resets none).
    wakes_counted: bool,
}

/// Reads a send's facts in the transaction that would store it, in one statement (one
/// round trip). The key decides before anything else does.
async fn send_reads(conn: &mut PgConnection, m: &NewMessage) -> StoreResult<SendReads> {
    let peer = rules::bridged_from(m);
    let row = sqlx::query(
        "SELECT (SELECT request_hash FROM idempotency_keys WHERE scope = $1 AND key = $2) AS request_hash,
                (SELECT message_id FROM idempotency_keys WHERE scope = $1 AND key = $2) AS message_id,
                (SELECT id FROM outbox WHERE key_scope = $1 AND key = $2 LIMIT 1) AS key_sent_away,
                $3 AND EXISTS (SELECT 1 FROM given_up_keys WHERE scope = $1 AND key = $2) AS key_given_up,
                EXISTS (SELECT 1 FROM threads WHERE id = $4 AND NOT archived) AS target_live,
                $5::TEXT IS NULL
                    OR EXISTS (SELECT 1 FROM bridges WHERE direction = $6 AND peer_home_id = $5 AND state = $7)
                    AS bridge_open,
                $5::TEXT IS NOT NULL
                    AND (EXISTS (SELECT 1 FROM messages WHERE id = $8) OR EXISTS (SELECT 1 FROM outbox WHERE id = $8))
                    AS id_taken,
                EXISTS (SELECT 1 FROM threads WHERE id = $4 AND NOT archived AND NOT running) AS target_idle,
                EXISTS (SELECT 1 FROM agent_wakes WHERE thread_a = $4 OR thread_b = $4) AS wakes_counted",
    )
    .bind(&m.key_scope)
    .bind(&m.key)
    .bind(rules::may_be_given_up(m))
    .bind(&m.target_thread)
    .bind(peer)
    .bind(Direction::Inbound)
    .bind(BridgeState::Active)
    .bind(&m.id)
    .fetch_one(&mut *conn)
    .await?;
    let request_hash: Option<String> = row.try_get("request_hash")?;
    let message_id: Option<String> = row.try_get("message_id")?;
    let key = request_hash
        .zip(message_id)
        .map(|(request_hash, message_id)| rules::KeptKey { request_hash, message_id });
    Ok(SendReads {
        facts: rules::SendFacts {
            key,
            key_sent_away: row.try_get("key_sent_away")?,
            key_given_up: row.try_get("key_given_up")?,
            target_live: row.try_get("target_live")?,
            bridge_open: row.try_get("bridge_open")?,
            id_taken: row.try_get("id_taken")?,
        },
        target_idle: row.try_get("target_idle")?,
        wakes_counted: row.try_get("wakes_counted")?,
    })
}

/// A message, its key and its input, written in one statement (one round trip); the key's
/// and the input's references to the message are checked at the statement's end.
static INSERT_SENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH message AS (
             INSERT INTO messages (id, target_thread, source_host, source_thread, source_workspace, content,
                                   status, created_at, delivered_at, turn_id, deadline, via_home)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)),
         key AS (
             INSERT INTO idempotency_keys (scope, key, request_hash, message_id, created_at)
             VALUES ($13, $14, $15, $1, $8))
         INSERT INTO inputs ({}) VALUES {}",
        turns::INPUT_INSERT_COLUMNS,
        turns::placeholders(16, 14)
    )
});

/// Decides a send by the rules (see [`rules::refuse_send`]) and, if accepted, writes its
/// message, key and input (queued, or taken by the turn the send starts).
/// Writes hold the home's write lock one after another, so of two sends with one key the
/// second sees the first and replays it.
pub(super) async fn accept_message(tx: &mut Tx, m: &NewMessage) -> StoreResult<SendOutcome> {
    let SendReads { facts, target_idle, wakes_counted } = send_reads(tx.conn(), m).await?;
    if let Some(refused) = rules::refuse_send(m, &facts) {
        return Ok(refused);
    }
    let rules::Acceptance { input, owner_spoke: owner } = rules::accept(m);
    if owner && wakes_counted {
        owner_spoke(tx, &m.target_thread).await?;
    }
    let wake = m.wake && !agent_wakes_spent(tx, m).await?;
    // A message that starts its turn is written delivered, its input taken: it never enters
    // the indexes of pending messages and queued input only to leave them in this commit.
    let turn = match &m.claim {
        Some(claim) if wake && target_idle => {
            let arriving = InputRecord { content: m.content.clone(), ..input.clone() };
            turns::claim_turn(tx, &m.target_thread, claim, m.now, Some(arriving)).await?
        }
        _ => None,
    };
    let arrived = rules::arrival(m, &input.id, turn.as_ref());
    let insert = sqlx::query(&INSERT_SENT)
        .bind(&m.id)
        .bind(&m.target_thread)
        .bind(m.source.as_ref().map(|s| &s.host_id))
        .bind(m.source.as_ref().map(|s| &s.thread_id))
        .bind(m.source.as_ref().map_or("", |s| &s.workspace_id))
        .bind(&m.content)
        .bind(arrived.status)
        .bind(m.now)
        .bind(arrived.delivered_at)
        .bind(&arrived.turn_id)
        .bind(arrived.deadline)
        .bind(&input.via)
        .bind(&m.key_scope)
        .bind(&m.key)
        .bind(&m.request_hash);
    turns::bind_input(tx, insert, &m.target_thread, &input, wake, arrived.turn_id.as_deref())
        .execute(tx.conn())
        .await?;
    if let Some(receipt) = &m.receipt {
        let receipt = ReceiptRecord { message_id: m.id.clone(), status: arrived.receipt, ..receipt.clone() };
        receipts::insert_receipt(tx, &receipt).await?;
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
async fn agent_wakes_spent(tx: &mut Tx, m: &NewMessage) -> StoreResult<bool> {
    let (Some(limit), Some(source), None, true) = (m.max_agent_wakes, &m.source, &m.room, m.wake) else {
        return Ok(false);
    };
    let Some((a, b)) = rules::agent_pair(source, &m.target_thread) else { return Ok(false) };
    let count: i64 = sqlx::query_scalar(
        "INSERT INTO agent_wakes (thread_a, thread_b, count) VALUES ($1, $2, 1)
         ON CONFLICT (thread_a, thread_b) DO UPDATE SET count = agent_wakes.count + 1 RETURNING count",
    )
    .bind(&a)
    .bind(&b)
    .fetch_one(tx.conn())
    .await?;
    match rules::agent_wake(count, limit) {
        rules::AgentWake::Wakes => Ok(false),
        rules::AgentWake::Held { first } => {
            if first {
                let mut held = event(&m.target_thread, EventKind::Attention, m.now);
                held.reason = rules::loop_guard_notice(&a, &b, limit);
                events::insert_event(tx, &held).await?;
            }
            Ok(true)
        }
    }
}

/// The owner gave the thread input: the loop guard starts over for its pairs.
pub(super) async fn owner_spoke(tx: &mut Tx, thread_id: &str) -> StoreResult<()> {
    sqlx::query("DELETE FROM agent_wakes WHERE thread_a = $1 OR thread_b = $1")
        .bind(thread_id)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// A bridged message that became undeliverable here gets a receipt saying so (`rejected`
/// with `reason`, or `expired`), copied from its receipt of acceptance (found by message
/// id); a local message has no receipt and gets none.
pub(super) async fn receipt_follows(
    tx: &mut Tx,
    message_id: &str,
    reason: &str,
    now: Millis,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
         SELECT peer_home_id, key, message_id, target, $1, $2, $3 FROM bridge_receipts
         WHERE message_id = $4 ORDER BY seq LIMIT 1",
    )
    .bind(rules::undelivered_receipt(reason))
    .bind(reason)
    .bind(now)
    .bind(message_id)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Makes a pending message undeliverable with `reason`: its queued input goes and a bridged
/// one gets a receipt.
pub(super) async fn undeliver(tx: &mut Tx, message_id: &str, reason: &str, now: Millis) -> StoreResult<()> {
    sqlx::query("UPDATE messages SET status = $1, reason = $2, deadline = NULL WHERE id = $3")
        .bind(MessageStatus::Undeliverable)
        .bind(reason)
        .bind(message_id)
        .execute(tx.conn())
        .await?;
    sqlx::query("DELETE FROM inputs WHERE id = $1 AND turn_id IS NULL")
        .bind(message_input_id(message_id))
        .execute(tx.conn())
        .await?;
    receipt_follows(tx, message_id, reason, now).await
}

/// Expires a thread's bridged messages whose deadline passed before they were delivered or
/// confirmed: they are never delivered, as their sources declare them expired.
pub(super) async fn expire_overdue_in_thread(tx: &mut Tx, thread_id: &str, now: Millis) -> StoreResult<()> {
    let overdue: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM messages WHERE target_thread = $1 AND status = $2 AND deadline <= $3",
    )
    .bind(thread_id)
    .bind(MessageStatus::Pending)
    .bind(now)
    .fetch_all(tx.conn())
    .await?;
    expire(tx, &overdue, now).await
}

/// Expires the overdue messages `ids`.
async fn expire(tx: &mut Tx, ids: &[String], now: Millis) -> StoreResult<()> {
    for id in ids {
        undeliver(tx, id, EXPIRED, now).await?;
    }
    Ok(())
}

/// A source's follow-up of its bridged message `message_id` (see [`MessageStore::follow_up`]):
/// confirmed (its deadline dropped) unless `window_over`, expired if its deadline passed or
/// `window_over` found it unconfirmed; the message as it then stands.
async fn follow_up_message(
    tx: &mut Tx,
    message_id: &str,
    window_over: bool,
    now: Millis,
) -> StoreResult<Option<MessageRecord>> {
    let Some(message) = message_in(tx.conn(), message_id).await? else {
        return Ok(None);
    };
    let follow_up = rules::follow_up(message.status, message.deadline, window_over, now);
    match follow_up {
        rules::FollowUp::Expire => undeliver(tx, message_id, EXPIRED, now).await?,
        rules::FollowUp::Confirm => {
            sqlx::query("UPDATE messages SET deadline = NULL WHERE id = $1")
                .bind(message_id)
                .execute(tx.conn())
                .await?;
        }
        rules::FollowUp::Keep => {}
    }
    Ok(Some(follow_up.applied(message)))
}
