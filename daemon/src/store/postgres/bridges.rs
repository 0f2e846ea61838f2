//! Bridges on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl BridgeStore for PostgresStore {
    #[allow(unused_variables)]
    async fn revoke_inbound(&self, bridge: &BridgeRecord, now: Millis) -> StoreResult<Vec<String>> {
        todo!("revoke_inbound")
    }

    #[allow(unused_variables)]
    async fn bridge_heard_from(&self, bridge_id: &str, now: Millis) -> StoreResult<()> {
        todo!("bridge_heard_from")
    }

    #[allow(unused_variables)]
    async fn save_bridge(&self, bridge: Option<&BridgeRecord>, requests: &[BridgeRequestRecord]) -> StoreResult<()> {
        todo!("save_bridge")
    }

    #[allow(unused_variables)]
    async fn bridges(&self) -> StoreResult<Vec<BridgeRecord>> {
        todo!("bridges")
    }

    #[allow(unused_variables)]
    async fn bridge_requests(&self) -> StoreResult<Vec<BridgeRequestRecord>> {
        todo!("bridge_requests")
    }

    #[allow(unused_variables)]
    async fn prune_bridge_requests(&self, decided_before: Millis) -> StoreResult<u64> {
        todo!("prune_bridge_requests")
    }

}

#[allow(unused_variables)]
pub(super) async fn upsert_bridge(tx: &mut Tx, b: &BridgeRecord) -> StoreResult<()> {
    todo!("upsert_bridge")
}
