//! Outbox on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl OutboxStore for PostgresStore {
    #[allow(unused_variables)]
    async fn outbox_insert(&self, entry: &OutboxRecord) -> StoreResult<Option<OutboxRecord>> {
        todo!("outbox_insert")
    }

    #[allow(unused_variables)]
    async fn outbox_update(&self, outcomes: &[OutboxOutcome]) -> StoreResult<()> {
        todo!("outbox_update")
    }

    #[allow(unused_variables)]
    async fn outbox_due(&self, peer: &str, now: Millis, limit: u32) -> StoreResult<Vec<OutboxRecord>> {
        todo!("outbox_due")
    }

    #[allow(unused_variables)]
    async fn outbox_next_due(&self, peer: &str, now: Millis) -> StoreResult<Option<Millis>> {
        todo!("outbox_next_due")
    }

    #[allow(unused_variables)]
    async fn outbox_page(&self, bridge_id: &str, from: Option<(Millis, String)>, limit: u32) -> StoreResult<Vec<OutboxRecord>> {
        todo!("outbox_page")
    }

    #[allow(unused_variables)]
    async fn outbox_pending(&self, peer: &str, bridge_id: &str, except: &[String]) -> StoreResult<u64> {
        todo!("outbox_pending")
    }

    #[allow(unused_variables)]
    async fn outbox_by_key(&self, peer: &str, scope: &str, key: &str) -> StoreResult<Option<OutboxRecord>> {
        todo!("outbox_by_key")
    }

    #[allow(unused_variables)]
    async fn outbox_retry_now(&self, peer: &str, now: Millis) -> StoreResult<()> {
        todo!("outbox_retry_now")
    }

    #[allow(unused_variables)]
    async fn outbox_defer(&self, peer: &str, except: &str, until: Millis, window: Millis) -> StoreResult<()> {
        todo!("outbox_defer")
    }

}

#[allow(unused_variables)]
pub(super) async fn outbox_entry(conn: &mut PgConnection, peer: &str, scope: &str, key: &str) -> StoreResult<Option<OutboxRecord>> {
    todo!("outbox_entry")
}

#[allow(unused_variables)]
/// Whether the entry was new (false: its key was there already).
pub(super) async fn insert_outbox(tx: &mut Tx, e: &OutboxRecord) -> StoreResult<bool> {
    todo!("insert_outbox")
}
