//! The target's receipts of bridged messages.

use async_trait::async_trait;

use super::*;

/// A bridged send as the target recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRecord {
    pub peer_home_id: String,
    pub key: String,
    pub message_id: String,
    pub target: String,
    /// The word the source uses too (`accepted`, `delivered`, `rejected`, `expired`).
    pub status: OutboxStatus,
    pub reason: String,
    pub at: Millis,
}

#[async_trait]
pub trait ReceiptStore: Send + Sync {
    /// Writes the receipt of a send refused for good from `peer` (no message was made),
    /// unless one with its key, target and reason is written already: a source asks again
    /// when the answer was lost. (Receipts do not name the source thread: two of the peer's
    /// threads refused alike for one key and target share one.)
    async fn add_refusal(&self, receipt: &ReceiptRecord) -> StoreResult<()>;

    /// Receipts of sends from the peer home `peer`, newest first with their seq: at most
    /// `limit`, from `from_seq` back (included) when given.
    async fn receipts_from(
        &self,
        peer: &str,
        from_seq: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<(i64, ReceiptRecord)>>;

    /// How many messages from the peer home `peer` wait at this home's threads.
    async fn pending_messages_from(&self, peer: &str) -> StoreResult<u64>;
}
