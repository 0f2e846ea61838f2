//! Messages between threads and their idempotency keys: a send decided by its key and committed with its queued input (the rules are in [`super::rules`]), follow-ups of bridged messages, expiry.

use async_trait::async_trait;

use super::*;

/// The reason (and target receipt status) of a bridged message whose deadline passed before
/// it was delivered or confirmed, or whose key its source gave up on (see
/// [`MessageStore::follow_up`]).
pub const EXPIRED: &str = OutboxStatus::Expired.as_str();

/// A ThreadSend to a thread of this home, ready to commit.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub id: String,
    pub target_thread: String,
    pub source: Option<SourceRef>,
    pub content: String,
    /// Idempotency scope: the source thread id, or "" for external clients.
    pub key_scope: String,
    pub key: String,
    /// Hash of target and content; the same key with another hash is a conflict.
    pub request_hash: String,
    /// False for a bridge without `wake`: the message waits for a turn started by
    /// something else instead of starting one.
    pub wake: bool,
    /// Start the target's turn in the same transaction if the thread is idle, so delivery
    /// costs no second commit.
    pub claim: Option<TurnClaim>,
    /// A bridged send's receipt, committed with the message; the store fills in its
    /// message id and status (`delivered` if the turn its claim started took it, else
    /// `pending`).
    pub receipt: Option<ReceiptRecord>,
    /// A bridged message's deadline, the end of its source's retry window: not delivered by
    /// then, nor confirmed by a follow-up (see [`MessageStore::follow_up`]), it expires instead.
    pub deadline: Option<Millis>,
    /// A room entry brought over a bridge from the room's home (the receipt's peer, which
    /// the room is bound to here: see `RoomStore::bind_room`).
    pub room: Option<RoomTag>,
    /// The loop guard between the source thread and the target (`[threads]
    /// max_agent_wakes`): past it, the message waits without waking (see
    /// [`rules::agent_wake`]). `None`: not counted.
    pub max_agent_wakes: Option<u32>,
    pub now: Millis,
}

words! {
    MessageStatus {
        Pending => "pending",
        Delivered => "delivered",
        Undeliverable => "undeliverable",
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRecord {
    pub id: String,
    pub target_thread: String,
    pub source: Option<SourceRef>,
    pub content: String,
    pub status: MessageStatus,
    pub reason: String,
    pub created_at: Millis,
    pub delivered_at: Option<Millis>,
    pub turn_id: Option<String>,
    /// A bridged message's deadline while it is pending and unconfirmed (see `NewMessage`).
    pub deadline: Option<Millis>,
}

/// What committing a message came to.
#[derive(Debug, Clone, PartialEq)]
pub enum SendOutcome {
    /// Newly stored and queued for the target's next turn — or, when a claim was asked and
    /// the thread was idle, taken by the turn started with it (`delivered`). A claim may
    /// start a turn for other queued input without taking the message (a peer message
    /// while the thread's communication is off): `turn` without `delivered`.
    /// `held`: past the loop guard between its source and target, it waits without waking.
    Accepted { message_id: String, delivered: bool, turn: Option<Box<ClaimedTurn>>, held: bool },
    /// The key was used before for this same request: the original message.
    Replayed { message_id: String },
    /// The key was used before for another request.
    KeyConflict { message_id: String },
    /// The target does not exist or is archived.
    TargetGone,
    /// Brought by a bridge that is no longer active (revoked or turned off since its call
    /// was let in): nothing was stored.
    BridgeClosed,
    /// A bridged send whose source gave up on its key before this call arrived (the call
    /// was on its way as the retry window ended): nothing was stored; it is expired.
    GivenUp,
    /// A bridged send named by its source with an id this home already gave a message (see
    /// `BridgeSendCall::message_id`): nothing was stored.
    IdTaken,
}

#[async_trait]
pub trait MessageStore: Send + Sync {
    /// Decides a send by its key and, if accepted, stores the message with its key and its
    /// input: queued for the target, or taken by the turn its claim starts. Concurrent calls
    /// share commits (SQLite: the writer's group commit), so one fsync serves many sends.
    async fn accept_message(&self, message: &NewMessage) -> StoreResult<SendOutcome>;

    async fn message(&self, id: &str) -> StoreResult<Option<MessageRecord>>;

    /// The request hash and message of a key seen before, if it is still kept.
    async fn keyed_message(&self, scope: &str, key: &str) -> StoreResult<Option<(String, String)>>;

    /// A source's follow-up of the bridged messages it sent with these (scope, key) pairs, in
    /// one write: each pending one is confirmed — its deadline dropped, it waits for its
    /// turn however long — unless its deadline passed, or `window_over` (the source gave up
    /// without learning it arrived) finds it unconfirmed: then it expires (see
    /// [`NewMessage::deadline`]). Each message as it then stands; `None` for an unknown key,
    /// which `window_over` keeps as given up on (a send with it is refused, see
    /// [`SendOutcome::GivenUp`]).
    async fn follow_up(
        &self,
        keys: &[(String, String)],
        window_over: bool,
        now: Millis,
    ) -> StoreResult<Vec<Option<MessageRecord>>>;

    /// The message a sender of this home (`scope`: its thread, or `""`) sent to a thread of
    /// this home with `key`, if the key is still kept: a cross-home send with that key is a
    /// conflict.
    async fn local_key_message(&self, scope: &str, key: &str) -> StoreResult<Option<String>>;

    /// Forgets those of the `limit` oldest keys (in the order they were written) that were
    /// created before `before` (keys are kept far longer than any retry); how many it forgot
    /// — none once the oldest keys left are young. Bounded, so that a large backlog is
    /// forgotten in many short writes that sends can pass between, not in one long one.
    async fn prune_keys(&self, before: Millis, limit: u32) -> StoreResult<u64>;

    /// Expires up to `limit` bridged messages, of any thread, whose deadline passed before
    /// they entered a prompt or were confirmed (see [`NewMessage::deadline`]), earliest
    /// first, each with its receipt; how many. A claim expires its thread's first anyway:
    /// this brings the receipts of threads that run no turn up to date.
    async fn expire_overdue_messages(&self, now: Millis, limit: u32) -> StoreResult<u64>;
}

/// The id of a message's one input (see `accept_message`).
pub(crate) fn message_input_id(message_id: &str) -> String {
    format!("in_{message_id}")
}

/// The thread to tell that its message became undeliverable: the sending thread, if it is
/// one of this home's (a bridged message's source thread lives at its source home, which
/// learns from its follow-ups or not at all once the message was delivered).
pub(crate) fn local_sender(source_thread: Option<String>, source_host: Option<&str>) -> Option<String> {
    source_thread.filter(|t| !t.is_empty() && source_host.is_none_or(str::is_empty))
}
