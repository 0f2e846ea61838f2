//! Events on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl EventStore for PostgresStore {
    #[allow(unused_variables)]
    async fn add_event(&self, event: &EventRecord) -> StoreResult<i64> {
        todo!("add_event")
    }

    #[allow(unused_variables)]
    async fn events_after(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        todo!("events_after")
    }

    #[allow(unused_variables)]
    async fn event_positions(&self, thread_id: &str) -> StoreResult<EventPositions> {
        todo!("event_positions")
    }

    #[allow(unused_variables)]
    async fn open_attention(&self, limit: u32) -> StoreResult<Vec<EventRecord>> {
        todo!("open_attention")
    }

}

#[allow(unused_variables)]
/// Logs an event in the write under way (noting the thread's change); its seq.
pub(super) async fn insert_event(tx: &mut Tx, e: &EventRecord) -> StoreResult<i64> {
    todo!("insert_event")
}
