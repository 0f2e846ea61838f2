//! Receipts in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl ReceiptStore for SqliteStore {
    async fn add_refusal(&self, r: &ReceiptRecord) -> StoreResult<()> {
        let r = r.clone();
        self.db
            .write(move |conn| {
                run(
                    conn,
                    "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at, named_id)
                     SELECT ?1, ?2, '', ?3, ?4, ?5, ?6, ?7 WHERE NOT EXISTS (
                         SELECT 1 FROM bridge_receipts WHERE peer_home_id = ?1 AND key = ?2
                             AND message_id = '' AND target = ?3 AND status = ?4 AND reason = ?5)",
                    params![r.peer_home_id, r.key, r.target, r.status, r.reason, r.at, r.message_id],
                )?;
                Ok(())
            })
            .await
    }

    async fn receipts_from(
        &self,
        peer: &str,
        from_seq: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<(i64, ReceiptRecord)>> {
        let peer = peer.to_string();
        let from = from_seq.unwrap_or(i64::MAX);
        self.db
            .read(move |conn| {
                page(
                    conn,
                    "SELECT seq, peer_home_id, key,
                            CASE message_id WHEN '' THEN named_id ELSE message_id END AS message_id,
                            target, status, reason, at FROM bridge_receipts
                     WHERE peer_home_id = ? AND seq <= ? ORDER BY seq DESC",
                    params![peer, from],
                    limit,
                    |row| Ok((row.get::<_, i64>("seq")?, receipt_from(row)?)),
                )
            })
            .await
    }

    async fn pending_messages_from(&self, peer: &str) -> StoreResult<u64> {
        let peer = peer.to_string();
        self.db
            .read(move |conn| {
                count(
                    conn,
                    sql!(
                        "SELECT COUNT(*) FROM messages WHERE via_home = ? AND status = '{pending}'",
                        pending = MessageStatus::Pending
                    ),
                    [&peer],
                )
            })
            .await
    }
}

pub(super) fn insert_receipt(conn: &Connection, r: &ReceiptRecord) -> StoreResult<()> {
    run(
        conn,
        "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
         VALUES (?, ?, ?, ?, ?, ?, ?)",
        params![r.peer_home_id, r.key, r.message_id, r.target, r.status, r.reason, r.at],
    )?;
    Ok(())
}
