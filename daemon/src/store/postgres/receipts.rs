//! Receipts on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl ReceiptStore for PostgresStore {
    #[allow(unused_variables)]
    async fn add_refusal(&self, receipt: &ReceiptRecord) -> StoreResult<()> {
        todo!("add_refusal")
    }

    #[allow(unused_variables)]
    async fn receipts_from(&self, peer: &str, from_seq: Option<i64>, limit: u32) -> StoreResult<Vec<(i64, ReceiptRecord)>> {
        todo!("receipts_from")
    }

    #[allow(unused_variables)]
    async fn pending_messages_from(&self, peer: &str) -> StoreResult<u64> {
        todo!("pending_messages_from")
    }

}

#[allow(unused_variables)]
pub(super) async fn insert_receipt(tx: &mut Tx, r: &ReceiptRecord) -> StoreResult<()> {
    todo!("insert_receipt")
}
