//! Threads on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl ThreadStore for PostgresStore {
    #[allow(unused_variables)]
    async fn create_thread(&self, thread: &NewThread, first_input: Option<&NewInput>) -> StoreResult<ThreadRecord> {
        todo!("create_thread")
    }

    #[allow(unused_variables)]
    async fn thread(&self, id: &str) -> StoreResult<Option<ThreadRecord>> {
        todo!("thread")
    }

    #[allow(unused_variables)]
    async fn list_threads(&self, query: &ThreadQuery) -> StoreResult<Vec<ThreadRecord>> {
        todo!("list_threads")
    }

    #[allow(unused_variables)]
    async fn count_threads(&self) -> StoreResult<u64> {
        todo!("count_threads")
    }

    #[allow(unused_variables)]
    async fn set_archived(&self, id: &str, archived: bool, now: Millis) -> StoreResult<Option<Archived>> {
        todo!("set_archived")
    }

    #[allow(unused_variables)]
    async fn set_communication(&self, thread_id: &str, setting: CommunicationSetting, now: Millis) -> StoreResult<Option<ThreadRecord>> {
        todo!("set_communication")
    }

}

#[allow(unused_variables)]
pub(super) async fn thread_in(conn: &mut PgConnection, id: &str) -> StoreResult<Option<ThreadRecord>> {
    todo!("thread_in")
}
