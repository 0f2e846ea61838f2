//! Permissions on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl PermissionStore for PostgresStore {
    #[allow(unused_variables)]
    async fn ask_permission(&self, request: &PermissionRecord, reason: &str) -> StoreResult<()> {
        todo!("ask_permission")
    }

    #[allow(unused_variables)]
    async fn decide_permission(&self, id: &str, status: PermissionStatus, reason: &str, now: Millis) -> StoreResult<Option<PermissionRecord>> {
        todo!("decide_permission")
    }

    #[allow(unused_variables)]
    async fn permission(&self, id: &str) -> StoreResult<Option<PermissionRecord>> {
        todo!("permission")
    }

}
