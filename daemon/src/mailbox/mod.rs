//! The mailbox, by job: [`Mailbox`] — durable, idempotent ThreadSend to threads of this home
//! and the switches that decide who may take what; [`Waits`] — ThreadWait, `attention` and
//! a running turn's inbox; [`PermissionRequests`] — agents' requests to use a tool and the
//! owner's answers; [`TurnDesk`] — the last two as an executor sees them during a turn.
//!
//! A send is validated, checked against its idempotency key (a replay is decided in the
//! writer's transaction but writes nothing: no WAL bytes, no fsync), then committed — message, key and queued input in one transaction,
//! grouped with concurrent sends by the store's writer. The target is kicked; the caller waits up to
//! `[mailbox] delivery_wait` for the message to enter a turn's input (`delivered`), else it
//! answers `pending` and delivery goes on. Waiters park on per-thread signals
//! ([`crate::threads::signals`]).

mod desk;
mod follow;
mod permissions;
mod waits;

pub use desk::TurnDesk;
pub use follow::Progress;
pub use permissions::{Decision, PermissionRequests};
pub use waits::{OpenAttention, WaitResult, Waits, wait_target_count, wait_timeout};

use std::sync::Arc;

use kiki_proto as pb;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use crate::caller::Caller;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{
    Archived, CommunicationSetting, EXPIRED, MessageRecord, MessageStatus, Millis, NewMessage, ReceiptRecord,
    RoomTag, SendOutcome, SourceRef, Store, ThreadRecord,
};
use crate::sync::{KeyGuard, KeyLocks, uncancelled};
use crate::threads::runner::{TurnCaller, TurnRunner};
use crate::threads::signals::{self, Signals};
use crate::threads::switches;
use crate::threads::{Threads, new_id};
use crate::time::{Clock, ms};
use kiki_proto::limits;

#[derive(Clone)]
pub struct Mailbox {
    threads: Threads,
    store: Arc<dyn Store>,
    config: Arc<Config>,
    runner: TurnRunner,
    signals: Signals,
    /// One send at a time per sender's key, shared with the bridges' cross-home sends.
    send_keys: Arc<KeyLocks>,
    /// Cancelled when the daemon stops: parked calls answer at once instead of holding the
    /// shutdown for up to a minute.
    stopping: CancellationToken,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub message_id: String,
    pub status: MessageStatus,
    pub replayed: bool,
    /// Why an undeliverable message was not delivered.
    pub reason: String,
}

impl Sent {
    fn new(message_id: String, status: MessageStatus) -> Self {
        Self { message_id, status, replayed: false, reason: String::new() }
    }

    /// A bridged send past its deadline, or whose key its source gave up on.
    fn expired(message_id: String, replayed: bool) -> Self {
        Self { message_id, status: MessageStatus::Undeliverable, replayed, reason: EXPIRED.into() }
    }
}

/// A send ready to commit: target resolved, limits and switches checked.
pub struct Delivery<'a> {
    pub thread: ThreadRecord,
    pub source: Option<SourceRef>,
    /// Idempotency scope: the source thread (prefixed by its home for bridged sends).
    pub scope: String,
    pub content: &'a str,
    pub key: &'a str,
    /// False for a bridge without `wake`.
    pub wake: bool,
    /// For a bridged send: its receipt, committed with the message.
    pub receipt: Option<ReceiptRecord>,
    /// For a bridged send: when its source's retry window ends (see `NewMessage::deadline`).
    pub deadline: Option<Millis>,
    /// For a bridged send: the id its source gave the message (see `BridgeSendCall`); a
    /// fresh one otherwise.
    pub message_id: Option<String>,
    /// The sender's key lock (a local send's), released once the send is committed (also if
    /// the caller goes away first): a send with the key waits for the commit, not for the
    /// delivery.
    pub key_lock: Option<KeyGuard>,
    /// For a bridged send: the room entry it carries, from a room of the source's home.
    pub room: Option<RoomTag>,
}

/// Parks until one of the subscribed threads changes; `false` at the deadline or when
/// the daemon stops (`stopping`).
async fn park(
    clock: &Clock,
    subscription: &signals::Subscription,
    deadline: Millis,
    stopping: &CancellationToken,
) -> bool {
    // Checked here, not left to the timer: tokio rounds a deadline up to its next
    // millisecond tick, so a passed deadline (a 0 ms wait, `delivery_wait = 0`) would
    // still cost up to a millisecond.
    if clock.now_ms() >= deadline {
        return false;
    }
    tokio::select! {
        changed = clock.timeout_at(deadline, subscription.changed()) => changed.is_ok(),
        () = stopping.cancelled() => false,
    }
}

/// How a stored message answers a replay of its send at `now`: a bridged message pending
/// past its deadline is expired, whether or not a claim has written that down yet.
fn replayed(message: MessageRecord, now: Millis) -> Sent {
    match message.deadline {
        Some(deadline) if message.status == MessageStatus::Pending && deadline <= now => {
            Sent::expired(message.id, true)
        }
        _ => Sent { message_id: message.id, status: message.status, replayed: true, reason: message.reason },
    }
}

impl Mailbox {
    pub fn new(
        threads: Threads,
        config: Arc<Config>,
        signals: Signals,
        send_keys: Arc<KeyLocks>,
        stopping: CancellationToken,
    ) -> Self {
        let store = threads.store().clone();
        let runner = threads.runner().clone();
        Self { threads, store, config, runner, signals, send_keys, stopping }
    }

    /// ThreadSend to a thread of this home.
    #[instrument(level = "debug", skip_all, fields(thread_id = %target.session_id))]
    pub async fn send(
        &self,
        caller: &Caller,
        target: &pb::ThreadRef,
        content: &str,
        key: &str,
    ) -> Result<Sent> {
        let answer = self.send_uncounted(caller, target, content, key).await;
        self.threads.observer().sent(&target.session_id, "", &answer);
        answer
    }

    /// [`Mailbox::send`], before its answer is counted.
    async fn send_uncounted(
        &self,
        caller: &Caller,
        target: &pb::ThreadRef,
        content: &str,
        key: &str,
    ) -> Result<Sent> {
        limits::text("content", content, limits::CONTENT_MAX_CHARS)?;
        limits::text("idempotency_key", key, limits::KEY_MAX_CHARS)?;
        let thread = self.threads.get(&target.host_id, &target.workspace_id, &target.session_id).await?;
        let scope = caller.turn().map(|c| c.thread_id.clone()).unwrap_or_default();
        let source = match self.allowed_source(caller, &thread).await {
            Ok(source) => source,
            // A switch turned off since the first send does not turn its retry away.
            Err(refusal) => return self.replay_of(&scope, key, &thread.id, content).await?.ok_or(refusal),
        };
        // A cross-home send with this key may be shipping right now, its outbox entry not
        // yet committed: this send waits for it (and then finds the key taken).
        let key_lock = Some(self.send_keys.take((scope.clone(), key.to_string())).await);
        let delivery = Delivery {
            thread,
            source,
            scope,
            content,
            key,
            wake: true,
            receipt: None,
            deadline: None,
            message_id: None,
            key_lock,
            room: None,
        };
        self.deliver(delivery).await
    }

    /// The verified source of a send to `thread`, if both switches let it through.
    async fn allowed_source(&self, caller: &Caller, thread: &ThreadRecord) -> Result<Option<SourceRef>> {
        let source = self.sender(caller).await?;
        if source.is_some() {
            switches::communication(&self.config, thread).map_err(|why| {
                Error::FailedPrecondition(format!("communication_disabled: the target cannot receive: {why}"))
            })?;
        }
        Ok(source)
    }

    /// The original answer for a key seen before (a conflict if the content differs), for a
    /// send that would be refused now: the same key and content always return the original
    /// result. `None` if the key is new.
    pub async fn replay_of(
        &self,
        scope: &str,
        key: &str,
        thread_id: &str,
        content: &str,
    ) -> Result<Option<Sent>> {
        match self.store.keyed_message(scope, key).await? {
            Some((hash, message_id)) => {
                self.replay(&message_id, hash == request_hash(thread_id, content)).await.map(Some)
            }
            None => Ok(None),
        }
    }

    /// The verified source of a send: the caller's thread, whose communication switch must
    /// be on; `None` for external clients.
    pub async fn sender(&self, caller: &Caller) -> Result<Option<SourceRef>> {
        let Some(turn) = caller.turn() else { return Ok(None) };
        let thread = self.peer_tool(turn, "ThreadSend").await?;
        Ok(Some(SourceRef {
            host_id: String::new(),
            thread_id: thread.id,
            workspace_id: thread.workspace_id,
        }))
    }

    /// An agent calling `tool` (ThreadList, ThreadRead, ThreadWait, ThreadSend: the thread
    /// tools but ThreadCreate): its thread's communication switch must be on, since off
    /// keeps peer tools closed for that thread. The owner's calls (no token) are not
    /// peer tools.
    pub async fn peer_tool(&self, caller: &TurnCaller, tool: &str) -> Result<ThreadRecord> {
        let thread = self.threads.get("", "", &caller.thread_id).await?;
        switches::communication(&self.config, &thread)
            .map_err(|why| Error::PermissionDenied(format!("{tool} refused: {why}")))?;
        Ok(thread)
    }

    /// Whether `thread` may receive peer messages (for bridged sends).
    pub fn may_receive(&self, thread: &ThreadRecord) -> Result<()> {
        switches::communication(&self.config, thread).map_err(Error::FailedPrecondition)
    }

    /// Commits a validated send (or finds the original one for its key) and waits, boundedly,
    /// for its delivery. Shared by local sends and sends arriving over bridges.
    pub async fn deliver(&self, d: Delivery<'_>) -> Result<Sent> {
        let thread = d.thread;
        let message = NewMessage {
            id: d.message_id.unwrap_or_else(|| new_id("msg")),
            target_thread: thread.id.clone(),
            source: d.source,
            content: d.content.to_string(),
            key_scope: d.scope,
            key: d.key.to_string(),
            request_hash: request_hash(&thread.id, d.content),
            wake: d.wake,
            // An idle target starts its turn in the same transaction: one commit delivers.
            claim: d.wake.then(|| self.runner.claim_for(&thread)),
            receipt: d.receipt,
            deadline: d.deadline,
            room: d.room,
            max_agent_wakes: Some(self.config.threads.max_agent_wakes),
            now: self.runner.clock().now_ms(),
        };
        // Subscribe before the message can be delivered, so the delivery is not missed —
        // only a send that wakes waits for its delivery.
        let subscription = d.wake.then(|| self.signals.subscribe(vec![thread.id.clone()]));
        // The key decides first: a replay answers with the original message (even if the
        // thread was archived since) and writes nothing, so it costs no fsync.
        let message_id = match self.accept(message, thread.clone(), d.wake, d.key_lock).await? {
            SendOutcome::Accepted { message_id, delivered: true, .. } => {
                return Ok(Sent::new(message_id, MessageStatus::Delivered));
            }
            // Held by the loop guard: nothing will wake the target for it.
            SendOutcome::Accepted { message_id, held: true, .. } => {
                self.threads.observer().metrics().held_by_loop_guard();
                return Ok(Sent::new(message_id, MessageStatus::Pending));
            }
            SendOutcome::Accepted { message_id, .. } => message_id,
            SendOutcome::Replayed { message_id } => return self.replay(&message_id, true).await,
            SendOutcome::KeyConflict { message_id } => return self.replay(&message_id, false).await,
            SendOutcome::TargetGone if thread.archived => {
                return Err(Error::FailedPrecondition(format!(
                    "thread {} is archived; unarchive it first",
                    thread.id
                )));
            }
            SendOutcome::BridgeClosed => {
                return Err(Error::PermissionDenied("bridge_closed: the bridge changed meanwhile".into()));
            }
            SendOutcome::GivenUp => return Ok(Sent::expired(String::new(), false)),
            SendOutcome::IdTaken => {
                return Err(Error::invalid("message_id", "already names another message at this home"));
            }
            SendOutcome::TargetGone => {
                return Err(Error::FailedPrecondition(format!(
                    "thread {} was archived or removed meanwhile",
                    thread.id
                )));
            }
        };
        let Some(subscription) = subscription else {
            // Nothing will start a turn for it: no point waiting for a delivery.
            return Ok(Sent::new(message_id, MessageStatus::Pending));
        };
        let deadline = self.runner.clock().now_ms() + ms(self.config.mailbox.delivery_wait);
        // Not delivered by its own commit, and the subscription predates that commit, so a
        // delivery since then has signalled it: park first, look after each signal.
        while park(self.runner.clock(), &subscription, deadline, &self.stopping).await {
            if self.is_delivered(&message_id).await? {
                return Ok(Sent::new(message_id, MessageStatus::Delivered));
            }
        }
        Ok(Sent::new(message_id, MessageStatus::Pending))
    }

    /// Commits the send, then starts the turn its transaction claimed or kicks the target
    /// (with `wake`), whether or not the caller is still there. The outcome's turn is taken.
    async fn accept(
        &self,
        message: NewMessage,
        thread: ThreadRecord,
        wake: bool,
        key_lock: Option<KeyGuard>,
    ) -> Result<SendOutcome> {
        let (store, runner) = (self.store.clone(), self.runner.clone());
        uncancelled(async move {
            let committed = store.accept_message(&message).await;
            // Held until the commit landed, even if the caller went away meanwhile.
            drop(key_lock);
            let mut outcome = committed?;
            if let SendOutcome::Accepted { turn, .. } = &mut outcome {
                match turn.take() {
                    Some(turn) => runner.start_claimed(thread, *turn),
                    None if wake => runner.kick(&thread.id),
                    None => {}
                }
            }
            Ok(outcome)
        })
        .await
    }

    async fn is_delivered(&self, message_id: &str) -> Result<bool> {
        Ok(self.store.message(message_id).await?.is_some_and(|m| m.status == MessageStatus::Delivered))
    }

    /// The answer to a key seen before: the original message, or a conflict.
    async fn replay(&self, message_id: &str, same_request: bool) -> Result<Sent> {
        if !same_request {
            return Err(key_conflict(message_id));
        }
        let message = self
            .store
            .message(message_id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("message {message_id} is gone")))?;
        Ok(replayed(message, self.runner.clock().now_ms()))
    }

    /// A source's follow-up of the messages it sent with `keys` (scope, key) over a bridge:
    /// each confirmed, or expired (see [`crate::store::MessageStore::follow_up`]); where each stands, `None` for
    /// an unknown key.
    pub async fn follow_up(&self, keys: &[(String, String)], window_over: bool) -> Result<Vec<Option<Sent>>> {
        let now = self.runner.clock().now_ms();
        let messages = self.store.follow_up(keys, window_over, now).await?;
        Ok(messages.into_iter().map(|m| m.map(|m| replayed(m, now))).collect())
    }

    /// `kiki thread set REF --communication on|off|default`.
    pub async fn set_communication(
        &self,
        caller: &Caller,
        target: &pb::ThreadRef,
        setting: CommunicationSetting,
    ) -> Result<ThreadRecord> {
        caller.owner_only("thread set")?;
        let thread = self.threads.named(target).await?;
        let (store, runner, thread_id) = (self.store.clone(), self.runner.clone(), thread.id.clone());
        uncancelled(async move {
            let updated = store
                .set_communication(&thread_id, setting, runner.clock().now_ms())
                .await?
                .ok_or_else(|| Error::NotFound(format!("no thread {thread_id} in this home")))?;
            // Messages held back while it was off may be deliverable now.
            runner.kick(&thread_id);
            Ok(updated)
        })
        .await
    }

    /// Archive/unarchive with the events and wake-ups they cause.
    pub async fn set_archived(
        &self,
        caller: &Caller,
        target: &pb::ThreadRef,
        archived: bool,
    ) -> Result<Archived> {
        caller.owner_only("thread archive")?;
        let thread_id = self.threads.named(target).await?.id;
        let (threads, runner) = (self.threads.clone(), self.runner.clone());
        uncancelled(async move {
            let done = threads.set_archived(&thread_id, archived).await?;
            // User input queued before the archiving (an archived thread starts no turn)
            // is taken now.
            if done.changed && !archived {
                runner.kick(&thread_id);
            }
            Ok(done)
        })
        .await
    }
}

/// A key used before with another target or content (local and cross-home sends).
pub fn key_conflict(message_id: &str) -> Error {
    Error::Conflict(format!(
        "idempotency_key: already used for a different message ({message_id}); \
         reuse a key only for the same target and content"
    ))
}

/// Identifies a request for idempotency: the same key must come with the same target and
/// content.
fn request_hash(target: &str, content: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(target.as_bytes());
    hash.update([0]);
    hash.update(content.as_bytes());
    data_encoding::HEXLOWER.encode(&hash.finalize())
}
