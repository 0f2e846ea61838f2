//! Bridges and the pairing requests filed with this home.

use async_trait::async_trait;

use super::*;

/// One side of a bridge (see `kiki.v1.Bridge`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeRecord {
    pub id: String,
    pub direction: Direction,
    pub peer_home_id: String,
    pub alias: String,
    pub address: String,
    pub state: BridgeState,
    pub permissions: Permissions,
    pub workspaces: Vec<String>,
    pub request_id: String,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub last_success: Option<Millis>,
    pub last_error: String,
    pub last_error_at: Option<Millis>,
    /// Outbound: a ping found it revoked by the target's owner (not by this home's). Its
    /// messages still accepted there end `rejected` (`bridge_revoked`), as a follow-up would
    /// have heard, instead of staying `accepted` unasked.
    pub revoked_by_peer: bool,
    /// Outbound: what this home asked the target for (the grant may be less); inbound: none.
    pub requested: Permissions,
}

impl BridgeRecord {
    /// Whether a user naming a bridge by `name` (its id, alias or peer home id) means this one.
    pub fn answers_to(&self, name: &str) -> bool {
        // A home id is base32: either case names it.
        self.id == name || self.alias == name || self.peer_home_id.eq_ignore_ascii_case(name)
    }

    /// Whether this home revoked the bridge: no call goes over it any more. An outbound
    /// bridge its target revoked is still asked about the messages it carried (the target
    /// answers for those, and refuses anything new).
    pub fn revoked_here(&self) -> bool {
        self.state == BridgeState::Revoked && !self.revoked_by_peer
    }
}

/// A pairing request a peer filed with this home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeRequestRecord {
    pub id: String,
    pub peer_home_id: String,
    pub name: String,
    pub want: Permissions,
    pub status: RequestStatus,
    pub created_at: Millis,
    pub decided_at: Option<Millis>,
    /// The IP address the request came from ("" for requests filed before it was kept).
    pub address: String,
}

#[async_trait]
pub trait BridgeStore: Send + Sync {
    /// Saves a revoked inbound bridge and, in the same transaction, makes every message its
    /// peer brought that still waits at a thread undeliverable (`bridge_revoked`): its queued
    /// input is removed, its target thread gets an `undeliverable` event and the peer a
    /// `rejected` receipt. Returns the threads to wake.
    async fn revoke_inbound(&self, bridge: &BridgeRecord, now: Millis) -> StoreResult<Vec<String>>;

    /// Sets a bridge's `last_success` (its peer reached it), leaving the rest as it is.
    async fn bridge_heard_from(&self, bridge_id: &str, now: Millis) -> StoreResult<()>;

    /// Saves (inserts or replaces by id) a bridge and/or requests, in one transaction.
    async fn save_bridge(
        &self,
        bridge: Option<&BridgeRecord>,
        requests: &[BridgeRequestRecord],
    ) -> StoreResult<()>;

    async fn bridges(&self) -> StoreResult<Vec<BridgeRecord>>;

    async fn bridge_requests(&self) -> StoreResult<Vec<BridgeRequestRecord>>;

    /// Forgets the pairing requests decided (or expired) before `decided_before`; how many.
    async fn prune_bridge_requests(&self, decided_before: Millis) -> StoreResult<u64>;
}
