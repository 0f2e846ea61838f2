//! The source's side of cross-home sends: the transactional outbox.

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::*;

/// A cross-home send on the source side (see migration 0004).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRecord {
    pub id: String,
    pub bridge_id: String,
    pub peer_home_id: String,
    pub target_session: String,
    pub source_thread: Option<String>,
    /// The source thread's workspace, sent along with the message.
    pub source_workspace: String,
    pub content: String,
    pub key_scope: String,
    pub key: String,
    pub request_hash: String,
    pub status: OutboxStatus,
    pub reason: String,
    pub remote_message_id: String,
    pub attempts: i64,
    /// When the worker takes the entry up next: another attempt (pending), a follow-up
    /// (accepted), asking the target again (expired without its word); `i64::MAX`: never.
    pub next_attempt_at: Millis,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// Set when the message is a room entry waking a member of the peer's home.
    pub room: Option<OutboundEntry>,
    /// The W3C trace context (`traceparent`) of the call that made it: its attempts,
    /// however late, are spans of that trace. Empty: not traced.
    pub trace: String,
}

/// A room entry of this home on its way to a member in another home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundEntry {
    pub tag: RoomTag,
    /// Its author: a thread of this home (`host_id` empty) or of another; `None`: the owner.
    pub author: Option<SourceRef>,
}

/// A room entry's delivery to a member in another home, as an ordinary outbox entry (the
/// rooms sit below the bridges, so they ask for it here): over the newest bridge to the
/// member's home that is not revoked here — whatever this home last heard of it, the worker
/// tries it, retries it within the window and expires it with a receipt, and the target
/// decides by its grant — under the key `room:ENTRY:SESSION`, one per entry and member, so
/// the target's dedup delivers it once however often it is retried. `None`: this home has
/// no bridge to the member's home.
pub fn room_delivery(
    bridges: &[BridgeRecord],
    member: (&str, &str),
    entry: OutboundEntry,
    content: &str,
    now: Millis,
    trace: String,
) -> Option<OutboxRecord> {
    let (home, session) = member;
    let bridge = bridges
        .iter()
        .filter(|b| b.direction == Direction::Outbound && b.peer_home_id == home)
        .filter(|b| b.state != BridgeState::Revoked)
        .max_by_key(|b| (b.state == BridgeState::Active, b.updated_at))?;
    let mut hash = Sha256::new();
    for part in [home, session, content] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    Some(OutboxRecord {
        id: crate::threads::new_id("msg"),
        bridge_id: bridge.id.clone(),
        peer_home_id: home.to_string(),
        target_session: session.to_string(),
        source_thread: None,
        source_workspace: String::new(),
        content: content.to_string(),
        key_scope: String::new(),
        key: format!("room:{}:{session}", entry.tag.entry),
        request_hash: data_encoding::HEXLOWER.encode(&hash.finalize()),
        status: OutboxStatus::Pending,
        reason: String::new(),
        remote_message_id: String::new(),
        attempts: 0,
        next_attempt_at: now,
        created_at: now,
        updated_at: now,
        room: Some(entry),
        trace,
    })
}

/// An outbox entry's new state after an attempt, and the event it gives its sending thread
/// (`undeliverable`, if it failed for good).
pub type OutboxOutcome = (OutboxRecord, Option<EventRecord>);

#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Stores a new outbox entry: `None` if it was stored, or the entry already holding its
    /// (peer, scope, key). (The caller holds the key's lock and has checked the sender's
    /// local messages: see `sync::KeyLocks`.)
    async fn outbox_insert(&self, entry: &OutboxRecord) -> StoreResult<Option<OutboxRecord>>;

    /// Saves pending or accepted entries' new states, each with an optional event (e.g.
    /// `undeliverable`), in one transaction; also those of expired entries whose target is
    /// still to be asked (due before `i64::MAX`). Any other entry that ended (delivered,
    /// rejected, expired) is left as it is, and its event is not added.
    async fn outbox_update(&self, outcomes: &[OutboxOutcome]) -> StoreResult<()>;

    /// The peer's pending entries (to ship) and accepted ones (to follow up) due at `now`,
    /// oldest first, at most `limit`; then, as the limit allows, its expired entries due to
    /// ask the target about again.
    async fn outbox_due(&self, peer: &str, now: Millis, limit: u32) -> StoreResult<Vec<OutboxRecord>>;

    /// When the first of the peer's entries that [`OutboxStore::outbox_due`] would list falls due
    /// after `now`, if any: the worker sleeps until then.
    async fn outbox_next_due(&self, peer: &str, now: Millis) -> StoreResult<Option<Millis>>;

    /// The bridge's entries newest first (by creation, then id), at most `limit`: from
    /// (created_at, id) back, that entry included, when given.
    async fn outbox_page(
        &self,
        bridge_id: &str,
        from: Option<(Millis, String)>,
        limit: u32,
    ) -> StoreResult<Vec<OutboxRecord>>;

    /// How many entries of the bridge to `peer` the target has not acknowledged (`pending`),
    /// those with an id in `except` left out.
    async fn outbox_pending(&self, peer: &str, bridge_id: &str, except: &[String]) -> StoreResult<u64>;

    /// When the oldest entry to `peer` the target has not acknowledged (`pending`) was
    /// written, if there is one (`kiki doctor`, the metrics).
    async fn outbox_oldest_pending(&self, peer: &str) -> StoreResult<Option<Millis>>;

    /// The outbox entry of a sender's key: the one for `peer`, or else one for another peer
    /// (a key names one message, wherever it went).
    async fn outbox_by_key(&self, peer: &str, scope: &str, key: &str) -> StoreResult<Option<OutboxRecord>>;

    /// Makes every pending or accepted entry for `peer` due now (the link answered again,
    /// after a silence that backed them off or put them off); one no longer followed up
    /// (`next_attempt_at` = `i64::MAX`) stays as it is.
    async fn outbox_retry_now(&self, peer: &str, now: Millis) -> StoreResult<()>;

    /// Puts off every pending or accepted entry for `peer` but `except` that is due before
    /// `until` to `until` (the peer is silent: they wait for one entry's attempt, a probe),
    /// or to `window` after it was sent (the end of its retry window) if that is sooner.
    async fn outbox_defer(&self, peer: &str, except: &str, until: Millis, window: Millis) -> StoreResult<()>;
}
