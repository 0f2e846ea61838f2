//! The mailbox: durable, idempotent ThreadSend between threads of this home, ThreadWait on
//! their event logs, `attention`, and the communication switches.
//!
//! A send is validated, checked against its idempotency key (a replay is decided in the
//! writer's transaction but writes nothing: no WAL bytes, no fsync), then committed — message, key and queued input in one transaction,
//! grouped with concurrent sends by the store's writer. The target is kicked; the caller waits up to
//! `[mailbox] delivery_wait` for the message to enter a turn's input (`delivered`), else it
//! answers `pending` and delivery goes on. Waiters park on per-thread signals
//! ([`crate::threads::signals`]).

mod follow;

pub use follow::Progress;
mod desk;
mod permissions;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kiki_proto as pb;
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use crate::caller::Caller;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{
    Archived, CommunicationSetting, EXPIRED, EventRecord, InputRecord, MessageRecord, MessageStatus, Millis,
    NewMessage, ReceiptRecord, RoomTag, SendOutcome, SourceRef, Store, ThreadRecord,
};
use crate::sync::{KeyGuard, KeyLocks, uncancelled};
use crate::threads::runner::{TurnCaller, TurnRunner};
use crate::threads::signals::{self, Signals};
use crate::threads::switches;
use crate::threads::{Threads, cursor, new_id};
use crate::time::now_ms;
use kiki_proto::limits;

use limits::{WAIT_TARGETS_MAX, WAIT_TIMEOUT_DEFAULT_MS, WAIT_TIMEOUT_MAX_MS};
/// Message ids one ThreadInbox call may name as taken.
const INBOX_TAKEN_MAX: usize = 1_000;
/// Events returned per target per ThreadWait call; the cursor carries on from there.
const EVENTS_PER_TARGET: u32 = 100;

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

/// A ThreadWait's timeout in ms (the default if none), checked against its limit.
pub fn wait_timeout(timeout_ms: Option<u32>) -> Result<u32> {
    let timeout = timeout_ms.unwrap_or(WAIT_TIMEOUT_DEFAULT_MS);
    if timeout > WAIT_TIMEOUT_MAX_MS {
        return Err(Error::invalid(
            "timeout_ms",
            format!("must be between 0 and {WAIT_TIMEOUT_MAX_MS}, got {timeout}"),
        ));
    }
    Ok(timeout)
}

/// ThreadWait names 1 to [`WAIT_TARGETS_MAX`] threads (on any homes, in all).
pub fn wait_target_count(n: usize) -> Result<()> {
    if n == 0 || n > WAIT_TARGETS_MAX {
        return Err(Error::invalid(
            "targets",
            format!("must name between 1 and {WAIT_TARGETS_MAX} threads, got {n}"),
        ));
    }
    Ok(())
}

/// A ThreadWait target: the reference the caller gave, its thread, and the last event
/// already seen.
struct Watched {
    target: pb::ThreadRef,
    thread_id: String,
    after: i64,
}

/// One target's answer to ThreadWait.
#[derive(Debug)]
pub struct WaitResult {
    pub target: pb::ThreadRef,
    /// The id of the thread's home, however the caller named it.
    pub home_id: String,
    pub events: Vec<EventRecord>,
    pub cursor: String,
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

    /// Parks until one of the subscribed threads changes; `false` at the deadline or when
    /// the daemon stops.
    async fn park(&self, subscription: &signals::Subscription, deadline: Instant) -> bool {
        // Checked here, not left to the timer: tokio rounds a deadline up to its next
        // millisecond tick, so a passed deadline (a 0 ms wait, `delivery_wait = 0`) would
        // still cost up to a millisecond.
        if Instant::now() >= deadline {
            return false;
        }
        tokio::select! {
            changed = tokio::time::timeout_at(deadline, subscription.changed()) => changed.is_ok(),
            () = self.stopping.cancelled() => false,
        }
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
            now: now_ms(),
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
        let deadline = Instant::now() + self.config.mailbox.delivery_wait;
        // Not delivered by its own commit, and the subscription predates that commit, so a
        // delivery since then has signalled it: park first, look after each signal.
        while self.park(&subscription, deadline).await {
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
        Ok(replayed(message, now_ms()))
    }

    /// A source's follow-up of the messages it sent with `keys` (scope, key) over a bridge:
    /// each confirmed, or expired (see [`crate::store::MessageStore::follow_up`]); where each stands, `None` for
    /// an unknown key.
    pub async fn follow_up(&self, keys: &[(String, String)], window_over: bool) -> Result<Vec<Option<Sent>>> {
        let now = now_ms();
        let messages = self.store.follow_up(keys, window_over, now).await?;
        Ok(messages.into_iter().map(|m| m.map(|m| replayed(m, now))).collect())
    }

    /// ThreadWait on threads of this home.
    ///
    /// A parked wait holds only what it needs to answer (each target, its thread id and
    /// cursor position), no tracing span and no request: 10,000 parked calls are budgeted
    /// at < 50 MB.
    pub async fn wait(
        &self,
        targets: Vec<pb::ThreadRef>,
        timeout_ms: Option<u32>,
        cursors: HashMap<String, String>,
    ) -> Result<(Vec<WaitResult>, bool)> {
        wait_target_count(targets.len())?;
        let timeout = wait_timeout(timeout_ms)?;
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout));
        // Boxed: resolving the targets needs more state than parking does.
        let watched = Box::pin(self.watched(targets, cursors)).await?;
        let subscription = self.signals.subscribe(watched.iter().map(|w| w.thread_id.clone()).collect());
        loop {
            let (results, any) = self.events_of(&watched).await?;
            if any {
                return Ok((results, false));
            }
            drop(results);
            if !self.park(&subscription, deadline).await {
                // One last look: an event that landed at the deadline is not a timeout.
                let (results, any) = self.events_of(&watched).await?;
                return Ok((results, !any));
            }
        }
    }

    /// Resolves ThreadWait's targets and where each one's events start: after its cursor,
    /// or, without one, from the thread's latest turn on (from now on if it has none).
    async fn watched(
        &self,
        targets: Vec<pb::ThreadRef>,
        cursors: HashMap<String, String>,
    ) -> Result<Vec<Watched>> {
        let mut watched: Vec<Watched> = Vec::with_capacity(targets.len());
        let mut used_cursors = 0;
        for target in targets {
            let thread = self.threads.get(&target.host_id, &target.workspace_id, &target.session_id).await?;
            if watched.iter().any(|w| w.thread_id == thread.id) {
                return Err(Error::invalid(
                    "targets",
                    format!("must be distinct; {} appears twice", thread.id),
                ));
            }
            let text = pb::format_ref(&target);
            // A cursor may be keyed as the target was written, or by the bare or `local/` id.
            let given = cursors
                .get(&text)
                .or_else(|| cursors.get(&thread.id))
                .or_else(|| cursors.get(&format!("local/{}", thread.id)));
            let positions = self.store.event_positions(&thread.id).await?;
            let last = positions.last;
            let after = match given {
                Some(c) => {
                    used_cursors += 1;
                    // Named by its target: a wait may carry up to eight cursors.
                    let not_ours = |_| {
                        Error::invalid(
                            "cursors",
                            format!(
                                "the cursor for {text} is not one ThreadWait returned; restart without it"
                            ),
                        )
                    };
                    let parts = cursor::decode("cursors", "wait", c, 2).map_err(not_ours)?;
                    if parts[0] != thread.id {
                        return Err(Error::invalid(
                            "cursors",
                            format!("the cursor for {text} belongs to another thread"),
                        ));
                    }
                    let after = cursor::decode_number("cursors", "wait", &parts[1]).map_err(not_ours)?;
                    if after > last {
                        return Err(Error::invalid(
                            "cursors",
                            format!(
                                "the cursor for {text} is ahead of the thread's events; restart without a cursor"
                            ),
                        ));
                    }
                    after
                }
                // Without a cursor: from the thread's latest turn on, so the outcome of a
                // turn that a send (or the thread's creation) just started is not missed.
                None => positions.latest_turn,
            };
            watched.push(Watched { target, thread_id: thread.id, after });
        }
        if used_cursors < cursors.len() {
            return Err(Error::invalid("cursors", "has a key that is not one of the targets"));
        }
        Ok(watched)
    }

    /// Each watched thread's events after its position (and whether there are any).
    async fn events_of(&self, watched: &[Watched]) -> Result<(Vec<WaitResult>, bool)> {
        let mut results = Vec::with_capacity(watched.len());
        let mut any = false;
        for w in watched {
            let events = self.store.events_after(&w.thread_id, w.after, EVENTS_PER_TARGET).await?;
            let last = events.last().map(|e| e.seq).unwrap_or(w.after);
            any |= !events.is_empty();
            results.push(WaitResult {
                target: w.target.clone(),
                home_id: self.threads.home_id().to_string(),
                events,
                cursor: cursor::encode("wait", &[&w.thread_id, &last.to_string()]),
            });
        }
        Ok((results, any))
    }

    /// `kiki attention --reason`: the calling turn's agent asks for its user.
    pub async fn attention(&self, caller: &Caller, reason: &str) -> Result<()> {
        let caller = caller.turn_only("attention")?;
        limits::text("reason", reason, limits::REASON_MAX_CHARS)?;
        let event = EventRecord::attention(&caller.thread_id, &caller.turn_id, reason.to_string(), now_ms());
        let (store, signals) = (self.store.clone(), self.signals.clone());
        uncancelled(async move {
            store.add_event(&event).await?;
            signals.notify(&event.thread_id);
            Ok(())
        })
        .await
    }

    /// ThreadInbox: the calling turn's agent takes input mid-turn. The messages it names in
    /// `taken` are delivered into its turn; then it is given what else waits for its thread
    /// that would wake it, at once if there is some, else when some arrives (up to
    /// `timeout_ms`), or nothing once its turn ends.
    #[instrument(level = "debug", skip_all)]
    pub async fn inbox(
        &self,
        caller: &Caller,
        taken: Vec<String>,
        timeout_ms: Option<u32>,
    ) -> Result<(Vec<InputRecord>, Vec<String>)> {
        let caller = caller.turn_only("ThreadInbox")?;
        if taken.len() > INBOX_TAKEN_MAX {
            return Err(Error::invalid(
                "taken",
                format!("at most {INBOX_TAKEN_MAX} ids, got {}", taken.len()),
            ));
        }
        let timeout = wait_timeout(timeout_ms)?;
        let thread_id = caller.thread_id.clone();
        // Subscribed before the first look, so an arrival in between is not missed; the
        // thread's own signal says its turn ended.
        let subscription = self.signals.subscribe(vec![thread_id.clone(), signals::inbox(&thread_id)]);
        // Only a running turn takes (a turn that ended leaves them for the next one).
        if !self.runner.is_running(caller) {
            return Ok((Vec::new(), Vec::new()));
        }
        let take_messages = match self.store.thread(&thread_id).await? {
            Some(thread) => switches::communication(&self.config, &thread).is_ok(),
            None => return Ok((Vec::new(), Vec::new())),
        };
        let delivered = if taken.is_empty() {
            Vec::new()
        } else {
            let (store, signals, turn_id) =
                (self.store.clone(), self.signals.clone(), caller.turn_id.clone());
            let thread = thread_id.clone();
            uncancelled(async move {
                let delivered = store
                    .take_into_turn(
                        &thread,
                        &turn_id,
                        take_messages,
                        taken,
                        crate::executors::render,
                        now_ms(),
                    )
                    .await?;
                // Senders waiting for `delivered` are parked on this thread.
                signals.notify(&thread);
                Ok::<_, Error>(delivered)
            })
            .await?
        };
        let deadline = Instant::now() + Duration::from_millis(timeout.into());
        loop {
            if !self.runner.is_running(caller) {
                return Ok((Vec::new(), delivered));
            }
            let Some(thread) = self.store.thread(&thread_id).await? else {
                return Ok((Vec::new(), delivered));
            };
            let take_messages = switches::communication(&self.config, &thread).is_ok();
            let items = self.store.inbox(&thread_id, take_messages).await?;
            if !items.is_empty() || !self.park(&subscription, deadline).await {
                return Ok((items, delivered));
            }
        }
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
                .set_communication(&thread_id, setting, now_ms())
                .await?
                .ok_or_else(|| Error::NotFound(format!("no thread {thread_id} in this home")))?;
            // Messages held back while it was off may be deliverable now.
            runner.kick(&thread_id);
            Ok(updated)
        })
        .await
    }

    /// Wakes callers parked on `thread` (an event was logged for it elsewhere).
    pub fn notify(&self, thread: &str) {
        self.signals.notify(thread);
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
        let (threads, signals, runner) = (self.threads.clone(), self.signals.clone(), self.runner.clone());
        uncancelled(async move {
            let done = threads.set_archived(&thread_id, archived).await?;
            for thread in &done.notified {
                signals.notify(thread);
            }
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
    crate::hex::hex(&hash.finalize())
}
