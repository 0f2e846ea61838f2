//! Agents' requests to use a tool, waiting for the owner's answer (`kiki approve` / `deny`).

use async_trait::async_trait;

use super::*;

words! {
    PermissionStatus {
        Pending => "pending",
        Allowed => "allowed",
        Denied => "denied",
        /// Nobody answered in time: denied.
        Expired => "expired",
    }
}

/// A turn's agent asking to use a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRecord {
    pub id: String,
    pub thread_id: String,
    pub turn_id: String,
    pub tool: String,
    /// The tool's input, as the agent gave it (JSON).
    pub input: String,
    pub status: PermissionStatus,
    /// The owner's reason for a denial, or why it expired.
    pub reason: String,
    pub created_at: Millis,
    pub decided_at: Option<Millis>,
}

#[async_trait]
pub trait PermissionStore: Send + Sync {
    /// Files a pending request and, in the same transaction, an `attention` event on its
    /// thread that names it (`reason`, and the request's id).
    async fn ask_permission(&self, request: &PermissionRecord, reason: &str) -> StoreResult<()>;

    /// Answers a pending request (`status` allowed, denied or expired); one already answered
    /// stays as it is. Returns the request as it stands, `None` if there is none.
    async fn decide_permission(
        &self,
        id: &str,
        status: PermissionStatus,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Option<PermissionRecord>>;

    async fn permission(&self, id: &str) -> StoreResult<Option<PermissionRecord>>;
}
