//! Durable state behind one [`Store`] trait. Each backend has its own SQL and migrations
//! (`migrations/<backend>/`); the conformance suite in `kiki-tests` runs against every one.
//!
//! Every method is atomic: when it returns `Ok`, its effect has been committed (SQLite:
//! `synchronous = FULL`, so it also survives power loss, not only `kill -9`); when it fails,
//! nothing of it was written.

mod sqlite;
mod words;

use async_trait::async_trait;

pub use sqlite::SqliteStore;
pub use words::{BridgeState, Direction, OutboxStatus, Permission, Permissions, Refusal, RequestStatus};

/// The reason (and target receipt status) of a bridged message whose deadline passed before
/// it was delivered or confirmed, or whose key its source gave up on (see
/// [`Store::follow_up`]).
pub const EXPIRED: &str = "expired";

pub use crate::time::Millis;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was hit (idempotency keys rest on this).
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("{0}")]
    Backend(String),
    /// Too many writes are queued; the caller should retry (sends with the same key).
    #[error("the store is busy (too many writes queued); retry, with the same idempotency key for a send")]
    Busy,
    /// The home is stopping: its store takes no more work.
    #[error("the store is closed (kikid is stopping)")]
    Closed,
    #[error("unsupported store url {0:?} (expected sqlite://PATH or a file path)")]
    UnsupportedUrl(String),
    #[error("migration {version} ({name}) failed: {message}")]
    Migration { version: i64, name: &'static str, message: String },
    /// The file system holding the store has no space left: nothing of the operation was
    /// written, and it may be retried once space is freed. Names the store's file.
    #[error(
        "the disk holding {0} is full: nothing was written; free some space there, then retry \
         (a send with the same idempotency key)"
    )]
    DiskFull(String),
    /// The store's file is damaged. kikid does not serve such a store (see `kiki doctor`).
    #[error(
        "the store {path} is damaged ({detail}); kikid does not serve a damaged store: see \
         `kiki doctor`, then restore the store from a backup (`kiki backup`), or move it aside \
         to start with an empty one"
    )]
    Corrupt { path: String, detail: String },
}

impl StoreError {
    /// Names `path` in an error that names the store's file but was raised without it.
    pub fn at(self, path: &std::path::Path) -> Self {
        match self {
            StoreError::DiskFull(p) if p.is_empty() => StoreError::DiskFull(path.display().to_string()),
            StoreError::Corrupt { path: p, detail } if p.is_empty() => {
                StoreError::Corrupt { path: path.display().to_string(), detail }
            }
            other => other,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The per-thread communication switch as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommunicationSetting {
    Default,
    On,
    Off,
}

impl CommunicationSetting {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::On => "on",
            Self::Off => "off",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "default" => Self::Default,
            "on" => Self::On,
            "off" => Self::Off,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRecord {
    /// Creation order; ThreadList pages by it (keyset, newest first).
    pub seq: i64,
    pub id: String,
    pub workspace_id: String,
    pub cwd: String,
    pub title: String,
    pub profile: String,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub archived: bool,
    pub enabled: bool,
    /// A turn is in flight.
    pub running: bool,
    /// Turns started so far (the latest turn's seq).
    pub turn_count: i64,
    pub communication: CommunicationSetting,
}

/// A turn found `running` at startup: the last kikid stopped during it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptedTurn {
    pub turn_id: String,
    /// `None` for a turn without an `exec` agent; empty for an `exec` turn whose agent was not
    /// described yet (it never got its input); else the agent's record (see
    /// `executors::agent`).
    pub agent: Option<String>,
}

#[derive(Debug, Clone)]
pub struct NewThread {
    pub id: String,
    pub workspace_id: String,
    pub cwd: String,
    pub title: String,
    pub profile: String,
    /// The thread's own switch from the start.
    pub communication: CommunicationSetting,
    pub now: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// The user or another external client.
    User,
    /// A ThreadSend message.
    Message,
}

impl InputKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Message => "message",
        }
    }
    fn parse(s: &str) -> StoreResult<Self> {
        match s {
            "user" => Ok(Self::User),
            "message" => Ok(Self::Message),
            other => Err(StoreError::Backend(format!("unknown input kind {other:?}"))),
        }
    }
}

/// Where a message came from, when a peer thread sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRef {
    /// Empty for this home.
    pub host_id: String,
    pub thread_id: String,
}

/// Input waiting for (or taken by) a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInput {
    pub id: String,
    pub kind: InputKind,
    pub content: String,
    pub message_id: Option<String>,
    pub source: Option<SourceRef>,
    pub now: Millis,
}

pub type InputRecord = NewInput;

/// What ThreadRead shows of one input item (its text is part of the turn's `input`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnItem {
    pub kind: InputKind,
    pub message_id: Option<String>,
    pub source: Option<SourceRef>,
}

/// A turn just started, with the full items it took (executors need their text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedTurn {
    pub turn: TurnRecord,
    pub inputs: Vec<InputRecord>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
    pub(crate) fn parse(s: &str) -> StoreResult<Self> {
        Ok(match s {
            "running" => Self::Running,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            other => return Err(StoreError::Backend(format!("unknown turn status {other:?}"))),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRecord {
    pub id: String,
    pub thread_id: String,
    /// 1, 2, … within the thread.
    pub seq: i64,
    pub status: TurnStatus,
    /// The input exactly as the executor received it.
    pub input: String,
    pub output: String,
    pub error: String,
    pub started_at: Millis,
    pub ended_at: Option<Millis>,
    /// The items the input was made of, in order.
    pub items: Vec<TurnItem>,
}

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
    /// then, nor confirmed by a follow-up (see [`Store::follow_up`]), it expires instead.
    pub deadline: Option<Millis>,
    pub now: Millis,
}

/// How to start a turn (see [`Store::claim_turn`]); the runner makes one per thread.
#[derive(Debug, Clone)]
pub struct TurnClaim {
    pub turn_id: String,
    /// Whether peer messages may be taken (the thread's communication is on).
    pub take_messages: bool,
    pub render: RenderInput,
    /// The turn runs an `exec` agent: its agent record starts empty until the agent is
    /// described, so a restart knows, without the config, that an empty record means the
    /// agent never got its input.
    pub exec: bool,
}

/// A cross-home send on the source side (see migration 0004).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRecord {
    pub id: String,
    pub bridge_id: String,
    pub peer_home_id: String,
    pub target_session: String,
    pub source_thread: Option<String>,
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
}

/// An outbox entry's new state after an attempt, and the event it gives its sending thread
/// (`undeliverable`, if it failed for good).
pub type OutboxOutcome = (OutboxRecord, Option<EventRecord>);

/// A bridged send as the target recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRecord {
    pub peer_home_id: String,
    pub key: String,
    pub message_id: String,
    pub target: String,
    pub status: String,
    pub reason: String,
    pub at: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageStatus {
    Pending,
    Delivered,
    Undeliverable,
}

impl MessageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Undeliverable => "undeliverable",
        }
    }
    fn parse(s: &str) -> StoreResult<Self> {
        Ok(match s {
            "pending" => Self::Pending,
            "delivered" => Self::Delivered,
            "undeliverable" => Self::Undeliverable,
            other => return Err(StoreError::Backend(format!("unknown message status {other:?}"))),
        })
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Newly stored and queued for the target's next turn — or, when a claim was asked and
    /// the thread was idle, taken by the turn started with it (`delivered`). A claim may
    /// start a turn for other queued input without taking the message (a peer message
    /// while the thread's communication is off): `turn` without `delivered`.
    Accepted { message_id: String, delivered: bool, turn: Option<Box<ClaimedTurn>> },
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Terminal,
    Attention,
    Lifecycle,
    Undeliverable,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Terminal => "terminal",
            Self::Attention => "attention",
            Self::Lifecycle => "lifecycle",
            Self::Undeliverable => "undeliverable",
        }
    }
    fn parse(s: &str) -> StoreResult<Self> {
        Ok(match s {
            "terminal" => Self::Terminal,
            "attention" => Self::Attention,
            "lifecycle" => Self::Lifecycle,
            "undeliverable" => Self::Undeliverable,
            other => return Err(StoreError::Backend(format!("unknown event kind {other:?}"))),
        })
    }
}

/// Two positions in a thread's event log, as ThreadWait cursors count (`seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventPositions {
    /// The newest event's seq (0 if none).
    pub last: i64,
    /// Where the log stood when the thread's latest turn started, so that turn's events
    /// and later ones follow it; `last` for a thread without turns.
    pub latest_turn: i64,
}

/// One entry of a thread's event log (ThreadWait).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    pub seq: i64,
    pub thread_id: String,
    pub kind: EventKind,
    pub turn_id: Option<String>,
    pub turn_status: Option<TurnStatus>,
    pub reason: String,
    pub lifecycle: String,
    pub message_id: Option<String>,
    pub at: Millis,
}

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

/// How a turn ended.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    pub turn_id: String,
    pub status: TurnStatus,
    pub output: String,
    pub error: String,
    pub now: Millis,
}

/// Renders the items a turn takes into the input its executor receives.
pub type RenderInput = fn(&[InputRecord]) -> String;

/// What archiving or unarchiving did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    pub thread: ThreadRecord,
    /// False if the thread already was in that state.
    pub changed: bool,
    /// Threads that got events (the thread, and sources of messages made undeliverable).
    pub notified: Vec<String>,
}

/// One page of threads, newest first.
#[derive(Debug, Clone, Default)]
pub struct ThreadQuery {
    pub workspace_id: Option<String>,
    /// Only threads created before this `seq` (the keyset cursor).
    pub before_seq: Option<i64>,
    pub limit: u32,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Where the data lives, with any secret removed (for `kiki status`).
    fn describe(&self) -> String;

    /// Creates a thread, its `created` lifecycle event and, in the same transaction, its
    /// first input.
    async fn create_thread(
        &self,
        thread: &NewThread,
        first_input: Option<&NewInput>,
    ) -> StoreResult<ThreadRecord>;
    async fn thread(&self, id: &str) -> StoreResult<Option<ThreadRecord>>;
    /// Enabled, unarchived threads, newest first.
    async fn list_threads(&self, query: &ThreadQuery) -> StoreResult<Vec<ThreadRecord>>;
    async fn count_threads(&self) -> StoreResult<u64>;
    /// Sets `archived` and logs a `lifecycle` event if it changed; `None` if the thread does
    /// not exist. Archiving makes the thread's pending messages undeliverable
    /// (`thread_archived`), with an `undeliverable` event on the target and on each source
    /// thread.
    async fn set_archived(&self, id: &str, archived: bool, now: Millis) -> StoreResult<Option<Archived>>;

    /// Queues input for the thread's next turn. `None` if the thread does not exist, else
    /// whether a turn was running when the input was queued.
    async fn enqueue_input(&self, thread_id: &str, input: &NewInput) -> StoreResult<Option<bool>>;
    /// If the thread is not archived, has no running turn and has queued input, starts the
    /// turn `claim.turn_id` with all of it (in order), marks the thread running and its
    /// messages delivered. Peer messages (with a source thread) are taken only if
    /// `claim.take_messages` (the thread's communication is on); otherwise they stay queued.
    /// Messages from a peer home whose inbound bridge is `disabled` stay queued too. User
    /// input and external messages are always taken.
    async fn claim_turn(
        &self,
        thread_id: &str,
        claim: TurnClaim,
        now: Millis,
    ) -> StoreResult<Option<ClaimedTurn>>;
    /// Records how a running turn ended, marks its thread idle and logs a `terminal` event.
    async fn finish_turn(&self, outcome: &TurnOutcome) -> StoreResult<()>;
    /// Records the process of a running turn's agent (an opaque record, see
    /// `executors::agent`); a turn that has ended is left alone.
    async fn record_agent(&self, turn_id: &str, agent: &str) -> StoreResult<()>;
    /// The turns still `running` (startup after a crash, before
    /// [`Store::fail_interrupted_turns`]), with their recorded agent.
    async fn interrupted_turns(&self) -> StoreResult<Vec<InterruptedTurn>>;
    /// Marks every turn still `running` as failed with `reason` (startup after a crash),
    /// with a `terminal` event each. Returns the threads concerned.
    async fn fail_interrupted_turns(&self, reason: &str, now: Millis) -> StoreResult<Vec<String>>;
    /// Threads with queued input and no running turn.
    async fn threads_with_queued_input(&self) -> StoreResult<Vec<String>>;
    async fn running_turns(&self) -> StoreResult<u64>;

    /// Ended turns with `seq > after_seq`, oldest first, at most `limit`.
    async fn ended_turns(&self, thread_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<TurnRecord>>;
    async fn turn(&self, thread_id: &str, turn_id: &str) -> StoreResult<Option<TurnRecord>>;
    /// The `seq` of the thread's turn that ended at `seq` exists (cursor validation).
    async fn ended_turn_exists(&self, thread_id: &str, seq: i64) -> StoreResult<bool>;

    /// The turn's agent never received its input: its messages become undeliverable with
    /// `reason`, with `undeliverable` events on the target and each source thread. Returns
    /// the threads that got events.
    async fn undeliver_turn_messages(
        &self,
        turn_id: &str,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Vec<String>>;
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
    async fn set_communication(
        &self,
        thread_id: &str,
        setting: CommunicationSetting,
        now: Millis,
    ) -> StoreResult<Option<ThreadRecord>>;
    /// Appends an event to a thread's log; returns its seq.
    async fn add_event(&self, event: &EventRecord) -> StoreResult<i64>;
    /// The thread's events with `seq > after`, oldest first.
    async fn events_after(&self, thread_id: &str, after: i64, limit: u32) -> StoreResult<Vec<EventRecord>>;
    /// Where the thread's event log stands (see [`EventPositions`]).
    async fn event_positions(&self, thread_id: &str) -> StoreResult<EventPositions>;

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
    /// When the first of the peer's entries that [`Store::outbox_due`] would list falls due
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

    /// Checks the stored data's integrity: every page and index when `full` (`kiki doctor`),
    /// else a quick check bounded in time (see the backend). The problems found, none when
    /// it is sound.
    async fn check(&self, full: bool) -> StoreResult<Vec<String>>;

    /// Writes a consistent copy of the whole store to the new file `dest` while the home
    /// runs (`kiki backup`).
    async fn backup(&self, dest: &std::path::Path) -> StoreResult<()>;

    /// Flushes and closes; later calls fail. A clean close leaves every committed write in
    /// the store's main file (SQLite: the WAL is checkpointed and emptied), so that file
    /// alone is a whole copy of the data.
    async fn close(&self);
}
