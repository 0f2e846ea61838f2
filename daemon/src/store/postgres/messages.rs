//! Messages on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl MessageStore for PostgresStore {
    #[allow(unused_variables)]
    async fn accept_message(&self, message: &NewMessage) -> StoreResult<SendOutcome> {
        todo!("accept_message")
    }

    #[allow(unused_variables)]
    async fn message(&self, id: &str) -> StoreResult<Option<MessageRecord>> {
        todo!("message")
    }

    #[allow(unused_variables)]
    async fn keyed_message(&self, scope: &str, key: &str) -> StoreResult<Option<(String, String)>> {
        todo!("keyed_message")
    }

    #[allow(unused_variables)]
    async fn follow_up(&self, keys: &[(String, String)], window_over: bool, now: Millis) -> StoreResult<Vec<Option<MessageRecord>>> {
        todo!("follow_up")
    }

    #[allow(unused_variables)]
    async fn local_key_message(&self, scope: &str, key: &str) -> StoreResult<Option<String>> {
        todo!("local_key_message")
    }

    #[allow(unused_variables)]
    async fn prune_keys(&self, before: Millis, limit: u32) -> StoreResult<u64> {
        todo!("prune_keys")
    }

    #[allow(unused_variables)]
    async fn expire_overdue_messages(&self, now: Millis, limit: u32) -> StoreResult<u64> {
        todo!("expire_overdue_messages")
    }

}

#[allow(unused_variables)]
pub(super) async fn message_in(conn: &mut PgConnection, id: &str) -> StoreResult<Option<MessageRecord>> {
    todo!("message_in")
}

#[allow(unused_variables)]
/// A kept key's request hash and message.
pub(super) async fn stored_key(conn: &mut PgConnection, scope: &str, key: &str) -> StoreResult<Option<(String, String)>> {
    todo!("stored_key")
}

#[allow(unused_variables)]
pub(super) async fn accept_message(tx: &mut Tx, m: &NewMessage) -> StoreResult<SendOutcome> {
    todo!("accept_message")
}

#[allow(unused_variables)]
pub(super) async fn owner_spoke(tx: &mut Tx, thread_id: &str) -> StoreResult<()> {
    todo!("owner_spoke")
}

#[allow(unused_variables)]
pub(super) async fn receipt_follows(tx: &mut Tx, message_id: &str, reason: &str, now: Millis) -> StoreResult<()> {
    todo!("receipt_follows")
}

#[allow(unused_variables)]
pub(super) async fn undeliver(tx: &mut Tx, message_id: &str, reason: &str, now: Millis) -> StoreResult<()> {
    todo!("undeliver")
}
