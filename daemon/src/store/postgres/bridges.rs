//! Bridges and pairing requests on PostgreSQL.

use async_trait::async_trait;

use super::events::insert_event;
use super::messages::receipt_follows;
use super::*;

#[async_trait]
impl BridgeStore for PostgresStore {
    async fn revoke_inbound(&self, bridge: &BridgeRecord, now: Millis) -> StoreResult<Vec<String>> {
        let mut tx = self.begin().await?;
        upsert_bridge(&mut tx, bridge).await?;
        let rejected: Vec<(String, String)> = sqlx::query_as(
            "UPDATE messages SET status = $1, reason = $2
             WHERE via_home = $3 AND status = $4
             RETURNING id, target_thread",
        )
        .bind(MessageStatus::Undeliverable)
        .bind(Refusal::BridgeRevoked.as_str())
        .bind(&bridge.peer_home_id)
        .bind(MessageStatus::Pending)
        .fetch_all(tx.conn())
        .await?;
        // Their queued inputs, all the queued input the peer brought.
        sqlx::query("DELETE FROM inputs WHERE turn_id IS NULL AND via_home = $1")
            .bind(&bridge.peer_home_id)
            .execute(tx.conn())
            .await?;
        let mut notified = Vec::new();
        let reason = Refusal::BridgeRevoked.as_str();
        for (message_id, thread_id) in rejected {
            for e in rules::undeliverable_events(&message_id, &thread_id, None, None, reason, now) {
                insert_event(&mut tx, &e).await?;
            }
            receipt_follows(&mut tx, &message_id, reason, now).await?;
            if !notified.contains(&thread_id) {
                notified.push(thread_id);
            }
        }
        self.commit(tx).await?;
        Ok(notified)
    }

    async fn bridge_heard_from(&self, bridge_id: &str, now: Millis) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        tx.note(Change::Bridges);
        sqlx::query("UPDATE bridges SET last_success = $1 WHERE id = $2")
            .bind(now)
            .bind(bridge_id)
            .execute(tx.conn())
            .await?;
        self.commit(tx).await
    }

    async fn save_bridge(
        &self,
        bridge: Option<&BridgeRecord>,
        requests: &[BridgeRequestRecord],
    ) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        if let Some(b) = bridge {
            upsert_bridge(&mut tx, b).await?;
            // Its peer's messages held while its access was off may be taken now,
            // by running turns too.
            if b.direction == Direction::Inbound && b.state == BridgeState::Active {
                let held: Vec<String> = sqlx::query_scalar(
                    "SELECT DISTINCT thread_id FROM inputs WHERE via_home = $1 AND turn_id IS NULL",
                )
                .bind(&b.peer_home_id)
                .fetch_all(tx.conn())
                .await?;
                for thread in held {
                    tx.note(Change::Inbox(thread));
                }
            }
        }
        for r in requests {
            sqlx::query(
                "INSERT INTO bridge_requests (id, peer_home_id, name, want, status, created_at, decided_at, address)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (id) DO UPDATE SET
                     peer_home_id = EXCLUDED.peer_home_id, name = EXCLUDED.name, want = EXCLUDED.want,
                     status = EXCLUDED.status, created_at = EXCLUDED.created_at,
                     decided_at = EXCLUDED.decided_at, address = EXCLUDED.address",
            )
            .bind(&r.id)
            .bind(&r.peer_home_id)
            .bind(&r.name)
            .bind(r.want)
            .bind(r.status)
            .bind(r.created_at)
            .bind(r.decided_at)
            .bind(&r.address)
            .execute(tx.conn())
            .await?;
        }
        self.commit(tx).await
    }

    async fn bridges(&self) -> StoreResult<Vec<BridgeRecord>> {
        let rows = sqlx::query(&format!("SELECT {BRIDGE_COLUMNS} FROM bridges ORDER BY created_at, id"))
            .fetch_all(&mut *self.read().await?)
            .await?;
        rows.iter().map(bridge_from).collect()
    }

    async fn bridge_requests(&self) -> StoreResult<Vec<BridgeRequestRecord>> {
        let rows = sqlx::query(
            "SELECT id, peer_home_id, name, want, status, created_at, decided_at, address FROM bridge_requests
             ORDER BY created_at, id",
        )
        .fetch_all(&mut *self.read().await?)
        .await?;
        rows.iter().map(request_from).collect()
    }

    async fn prune_bridge_requests(&self, decided_before: Millis) -> StoreResult<u64> {
        let mut tx = self.begin().await?;
        let pruned = sqlx::query("DELETE FROM bridge_requests WHERE status <> $1 AND decided_at < $2")
            .bind(RequestStatus::Pending)
            .bind(decided_before)
            .execute(tx.conn())
            .await?
            .rows_affected();
        self.commit(tx).await?;
        Ok(pruned)
    }
}

pub(super) async fn upsert_bridge(tx: &mut Tx, b: &BridgeRecord) -> StoreResult<()> {
    tx.note(Change::Bridges);
    // As SQLite's INSERT OR REPLACE: the record replaces whichever row holds its id or its
    // direction and peer (both unique).
    sqlx::query("DELETE FROM bridges WHERE direction = $1 AND peer_home_id = $2 AND id <> $3")
        .bind(b.direction)
        .bind(&b.peer_home_id)
        .bind(&b.id)
        .execute(tx.conn())
        .await?;
    sqlx::query(&format!(
        "INSERT INTO bridges ({BRIDGE_COLUMNS})
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
         ON CONFLICT (id) DO UPDATE SET
             direction = EXCLUDED.direction, peer_home_id = EXCLUDED.peer_home_id, alias = EXCLUDED.alias,
             address = EXCLUDED.address, state = EXCLUDED.state, permissions = EXCLUDED.permissions,
             workspaces = EXCLUDED.workspaces, request_id = EXCLUDED.request_id,
             created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
             last_success = EXCLUDED.last_success, last_error = EXCLUDED.last_error,
             last_error_at = EXCLUDED.last_error_at, revoked_by_peer = EXCLUDED.revoked_by_peer,
             requested = EXCLUDED.requested"
    ))
    .bind(&b.id)
    .bind(b.direction)
    .bind(&b.peer_home_id)
    .bind(&b.alias)
    .bind(&b.address)
    .bind(b.state)
    .bind(b.permissions)
    .bind(b.workspaces.join(","))
    .bind(&b.request_id)
    .bind(b.created_at)
    .bind(b.updated_at)
    .bind(b.last_success)
    .bind(&b.last_error)
    .bind(b.last_error_at)
    .bind(b.revoked_by_peer)
    .bind(b.requested)
    .execute(tx.conn())
    .await?;
    Ok(())
}
