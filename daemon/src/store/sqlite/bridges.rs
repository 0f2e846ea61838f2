//! Bridges and pairing requests in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl BridgeStore for SqliteStore {
    async fn revoke_inbound(&self, bridge: &BridgeRecord, now: Millis) -> StoreResult<Vec<String>> {
        let bridge = bridge.clone();
        self.db
            .write(move |conn| {
                upsert_bridge(conn, &bridge)?;
                let rejected = all(
                    conn,
                    sql!(
                        "UPDATE messages SET status = '{undeliverable}', reason = '{revoked}'
                         WHERE via_home = ? AND status = '{pending}'
                         RETURNING id, target_thread",
                        undeliverable = MessageStatus::Undeliverable,
                        revoked = Refusal::BridgeRevoked,
                        pending = MessageStatus::Pending,
                    ),
                    [&bridge.peer_home_id],
                    |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
                )?;
                // Their queued inputs, all the queued input the peer brought.
                run(conn, UNQUEUE_PEER_MESSAGES, [&bridge.peer_home_id])?;
                let mut notified = Vec::new();
                let reason = Refusal::BridgeRevoked.as_str();
                for (message_id, thread_id) in rejected {
                    for e in rules::undeliverable_events(&message_id, &thread_id, None, None, reason, now) {
                        insert_event(conn, &e)?;
                    }
                    receipt_follows(conn, &message_id, reason, now)?;
                    if !notified.contains(&thread_id) {
                        notified.push(thread_id);
                    }
                }
                Ok(notified)
            })
            .await
    }

    async fn bridge_heard_from(&self, bridge_id: &str, now: Millis) -> StoreResult<()> {
        let bridge_id = bridge_id.to_string();
        self.db
            .write(move |conn| {
                note(Change::Bridges);
                run(conn, "UPDATE bridges SET last_success = ? WHERE id = ?", params![now, bridge_id])
                    .map(drop)
            })
            .await
    }

    async fn save_bridge(
        &self,
        bridge: Option<&BridgeRecord>,
        requests: &[BridgeRequestRecord],
    ) -> StoreResult<()> {
        let (bridge, requests) = (bridge.cloned(), requests.to_vec());
        self.db
            .write(move |conn| {
                if let Some(b) = &bridge {
                    upsert_bridge(conn, b)?;
                    // Its peer's messages held while its access was off may be taken now,
                    // by running turns too.
                    if b.direction == Direction::Inbound && b.state == BridgeState::Active {
                        let held =
                            "SELECT DISTINCT thread_id FROM inputs WHERE via_home = ? AND turn_id IS NULL";
                        for thread in all(conn, held, [&b.peer_home_id], |row| Ok(row.get::<_, String>(0)?))?
                        {
                            note(Change::Inbox(thread));
                        }
                    }
                }
                for r in &requests {
                    run(
                        conn,
                        "INSERT OR REPLACE INTO bridge_requests
                             (id, peer_home_id, name, want, status, created_at, decided_at, address)
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        params![
                            r.id,
                            r.peer_home_id,
                            r.name,
                            r.want,
                            r.status,
                            r.created_at,
                            r.decided_at,
                            r.address
                        ],
                    )?;
                }
                Ok(())
            })
            .await
    }

    async fn bridges(&self) -> StoreResult<Vec<BridgeRecord>> {
        self.db
            .read(|conn| {
                all(
                    conn,
                    &format!("SELECT {BRIDGE_COLUMNS} FROM bridges ORDER BY created_at, id"),
                    [],
                    |row| bridge_from(row),
                )
            })
            .await
    }

    async fn bridge_requests(&self) -> StoreResult<Vec<BridgeRequestRecord>> {
        self.db
            .read(|conn| {
                all(
                    conn,
                    "SELECT id, peer_home_id, name, want, status, created_at, decided_at, address FROM bridge_requests
                     ORDER BY created_at, id",
                    [],
                    |row| request_from(row),
                )
            })
            .await
    }

    async fn prune_bridge_requests(&self, decided_before: Millis) -> StoreResult<u64> {
        let sql = sql!(
            "DELETE FROM bridge_requests WHERE status <> '{pending}' AND decided_at < ?",
            pending = RequestStatus::Pending
        );
        self.db.write(move |conn| Ok(run(conn, sql, [decided_before])? as u64)).await
    }
}

pub(super) fn upsert_bridge(conn: &Connection, b: &BridgeRecord) -> StoreResult<()> {
    note(Change::Bridges);
    run(
        conn,
        &format!(
            "INSERT OR REPLACE INTO bridges ({BRIDGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        params![
            b.id,
            b.direction,
            b.peer_home_id,
            b.alias,
            b.address,
            b.state,
            b.permissions,
            b.workspaces.join(","),
            b.request_id,
            b.created_at,
            b.updated_at,
            b.last_success,
            b.last_error,
            b.last_error_at,
            b.revoked_by_peer,
            b.requested
        ],
    )?;
    Ok(())
}
