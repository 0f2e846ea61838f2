//! Receipts on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl ReceiptStore for PostgresStore {
    async fn add_refusal(&self, r: &ReceiptRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at, named_id)
             SELECT $1, $2, '', $3, $4, $5, $6, $7 WHERE NOT EXISTS (
                 SELECT 1 FROM bridge_receipts WHERE peer_home_id = $1 AND key = $2
                     AND message_id = '' AND target = $3 AND status = $4 AND reason = $5)",
        )
        .bind(&r.peer_home_id)
        .bind(&r.key)
        .bind(&r.target)
        .bind(r.status)
        .bind(&r.reason)
        .bind(r.at)
        .bind(&r.message_id)
        .execute(tx.conn())
        .await?;
        self.commit(tx).await
    }

    async fn receipts_from(
        &self,
        peer: &str,
        from_seq: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<(i64, ReceiptRecord)>> {
        let rows = sqlx::query(
            "SELECT seq, peer_home_id, key,
                    CASE message_id WHEN '' THEN named_id ELSE message_id END AS message_id,
                    target, status, reason, at FROM bridge_receipts
             WHERE peer_home_id = $1 AND seq <= $2 ORDER BY seq DESC LIMIT $3",
        )
        .bind(peer)
        .bind(from_seq.unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&mut *self.read().await?)
        .await?;
        rows.iter().map(|row| Ok((row.try_get("seq")?, receipt_from(row)?))).collect()
    }

    async fn pending_messages_from(&self, peer: &str) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE via_home = $1 AND status = $2")
            .bind(peer)
            .bind(MessageStatus::Pending)
            .fetch_one(&mut *self.read().await?)
            .await?;
        Ok(n as u64)
    }
}

pub(super) async fn insert_receipt(tx: &mut Tx, r: &ReceiptRecord) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO bridge_receipts (peer_home_id, key, message_id, target, status, reason, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&r.peer_home_id)
    .bind(&r.key)
    .bind(&r.message_id)
    .bind(&r.target)
    .bind(r.status)
    .bind(&r.reason)
    .bind(r.at)
    .execute(tx.conn())
    .await?;
    Ok(())
}
