//! Cross-home ThreadSend at the source: its transactional outbox (the target's side is in
//! `inbox.rs`).
//!
//! The source commits the send to its outbox before answering (so it survives `kill -9`)
//! and makes the first attempt meanwhile: the commit and the call to the target overlap,
//! and the answer waits for both. Otherwise a worker retries it with the original key —
//! jittered exponential backoff capped at 30 s, reset as soon as the peer answers — until
//! `[bridge] retry_window` runs out (`expired`). The target deduplicates by (source home,
//! source thread, key), so any number of retries delivers the message once. A final
//! refusal (`permission_denied`, `bridge_revoked`, `thread_not_found`, `too_large`,
//! `communication_disabled`, …) stops the retries, and every final failure gives the
//! sending thread an `undeliverable` event. Both sides keep receipts. A message the target
//! accepted without delivering it (no `wake`) is followed up: a follow-up call asks the
//! target where a peer's due messages stand, many keys at once, and the target answers from
//! its dedup, until each is delivered or refused there, or a day after it was sent (then
//! the receipt stays `accepted`). Both ends agree on `expired`: the target keeps the end of
//! the window as the message's deadline, and a message the source expired without the
//! target's word (it was unreachable) is asked about until the target answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::*;
use crate::mailbox::{Sent, key_conflict};
use crate::store::{EXPIRED, EventKind, MessageStatus, OutboxOutcome as Outcome, StoreError};
use crate::sync::{SendKey, lock};
use crate::threads::limits;

/// The longest pause between two attempts.
const BACKOFF_CAP: Duration = Duration::from_secs(30);
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// The first and the longest pause between follow-ups of an accepted entry.
const FOLLOW_UP_FIRST: Duration = Duration::from_secs(1);
const FOLLOW_UP_CAP: Duration = Duration::from_secs(60);
/// How often the worker looks for due entries.
const TICK: Duration = Duration::from_millis(100);
/// The worker's attempts under way at most (a follow-up call counts as one).
const MAX_ATTEMPTS_IN_FLIGHT: usize = 256;
/// The worker's attempts under way to one peer at most: a peer that went silent while it
/// still counted as answering (its attempts hang until they time out) leaves the other
/// half of the slots to the other peers.
const MAX_ATTEMPTS_PER_PEER: usize = MAX_ATTEMPTS_IN_FLIGHT / 2;
/// The most keys one follow-up call asks about; the target refuses more.
pub(super) const MAX_FOLLOW_UP_KEYS: usize = 256;
// A peer's follow-ups go out together, and a listing holds at most a peer's share.
const _: () = assert!(MAX_ATTEMPTS_PER_PEER <= MAX_FOLLOW_UP_KEYS);
/// How long one delivery attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answered send's outcome waits for others before they are written together:
/// at 64 concurrent senders one write then carries hundreds of outcomes, whose rows share
/// pages, instead of a write (and its pages) each.
const RECORD_LINGER: Duration = Duration::from_millis(50);
/// As many answered sends' outcomes waiting for the recorder are written at once, without
/// waiting out the linger (more may queue while that write is under way).
const MAX_QUEUED_OUTCOMES: usize = 1024;
/// The reason an entry that expired here gives once its target says it delivered the
/// message after all: before the window ended, every answer saying so lost, or from a late
/// call before the target was asked at the window's end.
const FOUND_DELIVERED: &str = "found_delivered";
/// Wire codes after which retrying cannot help.
pub(super) const FINAL: &[&str] = &[
    "permission_denied",
    "bridge_revoked",
    "thread_not_found",
    "thread_archived",
    "too_large",
    "communication_disabled",
    "invalid_argument",
    "failed_precondition",
    // A follow-up's key the target does not know (a database restored from before it?).
    "unknown_key",
];

/// The refusals of a whole follow-up call that end each message it asked about: another
/// (say, from a target that cannot read the call) says nothing about the messages.
const WHOLE_CALL_FINAL: &[&str] = &["bridge_revoked", "permission_denied"];

/// What a peer's answer to a ThreadSend or follow-up call says about a message.
#[derive(Clone)]
enum Verdict {
    Delivered,
    /// The target holds it; no turn has taken it yet.
    Waiting,
    /// Refused for good (the reason), or the message became undeliverable there.
    Refused(String),
    /// The peer answered but not with an outcome (e.g. `bridge_disabled`): try again later.
    NotNow(String),
    /// No answer (the link failed or timed out).
    Unanswered(String),
}

/// The pause before the next attempt at a peer that has been `silent` that long (since its
/// last answer, or since the message if that is later): as long again, from 250 ms up to
/// 30 s — so the pauses double while the peer stays silent and start over as soon as it
/// answers — with jitter (−20 %…+20 %, and only downwards at the cap) so many sources do not
/// retry in lockstep.
pub fn backoff(silent: Duration) -> Duration {
    let base = silent.clamp(BACKOFF_FIRST, BACKOFF_CAP);
    if base >= BACKOFF_CAP {
        return BACKOFF_CAP.mul_f64(rand::rng().random_range(0.8..1.0));
    }
    base.mul_f64(rand::rng().random_range(0.8..1.2)).min(BACKOFF_CAP)
}

fn outbox_hash(peer: &str, target: &str, content: &str) -> String {
    let mut hash = Sha256::new();
    for part in [peer, target, content] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    crate::hex::hex(&hash.finalize())
}

/// An entry's final state, due never (unless the caller makes it due: an `accepted` entry's
/// follow-up, an expiry to ask the target about); a failure gives the sending thread an
/// `undeliverable` event.
fn finish(mut entry: OutboxRecord, status: &str, reason: &str) -> Outcome {
    let now = now_ms();
    entry.status = status.to_string();
    entry.reason = reason.to_string();
    entry.next_attempt_at = i64::MAX;
    entry.updated_at = now;
    let failed = matches!(status, "rejected" | "expired");
    let event = entry.source_thread.clone().filter(|_| failed).map(|thread| EventRecord {
        seq: 0,
        thread_id: thread,
        kind: EventKind::Undeliverable,
        turn_id: None,
        turn_status: None,
        reason: reason.to_string(),
        lifecycle: String::new(),
        message_id: Some(entry.id.clone()),
        at: now,
    });
    (entry, event)
}

/// How a finished outbox entry answers its sender.
fn sent_of(entry: &OutboxRecord, replayed: bool) -> Sent {
    let status = match entry.status.as_str() {
        "delivered" => MessageStatus::Delivered,
        "pending" | "accepted" => MessageStatus::Pending,
        _ => MessageStatus::Undeliverable,
    };
    Sent { message_id: entry.id.clone(), status, replayed, reason: entry.reason.clone() }
}

/// The answer to a send whose key is in the outbox (`stored`, or its outcome `in_flight`):
/// where the message stands (`undeliverable` and the reason if it was refused), as a local
/// replay reports it — or a conflict if the request differs.
fn replay(in_flight: Option<OutboxRecord>, stored: OutboxRecord, request_hash: &str) -> Result<Sent> {
    let entry = in_flight.filter(|e| e.id == stored.id).unwrap_or(stored);
    if entry.request_hash != request_hash {
        return Err(key_conflict(&entry.id));
    }
    Ok(sent_of(&entry, true))
}

/// A send's first answer for its outbox entry: its status, or, if the target refused the
/// message, that refusal as an error (a first answer is `delivered` or `pending`).
fn first_answer(host: &str, entry: &OutboxRecord) -> Result<Sent> {
    if entry.status == "rejected" {
        let why = match entry.reason.as_str() {
            // A send needs `send` (without `wake` it is taken in, to wait).
            "permission_denied" => "this bridge does not grant \"send\" there, or is not approved (yet)",
            "bridge_revoked" => "this bridge was revoked",
            "thread_not_found" => "no such thread there, or not in the workspaces this bridge may reach",
            "thread_archived" => "the thread is archived there",
            "communication_disabled" => {
                "the thread takes no peer messages (its communication switch, or its home's [thread_communication], is off)"
            }
            "too_large" => "the content is over the target's limit",
            _ => "the target refused it",
        };
        let message = format!("{why}; message {} — `kiki bridge receipts {host}` keeps it", entry.id);
        return Err(from_wire(host, pb::WireError { code: entry.reason.clone(), message }));
    }
    Ok(sent_of(entry, false))
}

/// A pending entry's state for another attempt after `delay`.
fn retry_after(mut entry: OutboxRecord, why: &str, delay: Duration) -> Outcome {
    entry.attempts += 1;
    debug!(message_id = %entry.id, attempts = entry.attempts, why, ?delay, "bridged send will be retried");
    let now = now_ms();
    entry.status = "pending".into();
    entry.reason = why.chars().take(200).collect();
    entry.next_attempt_at = now + delay.as_millis() as i64;
    entry.updated_at = now;
    (entry, None)
}

/// How long ago the entry's message was sent.
fn age(entry: &OutboxRecord) -> Duration {
    Duration::from_millis((now_ms() - entry.created_at).max(0) as u64)
}

/// A pending entry's state for another attempt after the peer answered but refused it for
/// now (say, the bridge's inbound access is off): the link is fine, so the pause grows with
/// the message's age instead of the peer's silence, from 250 ms to 30 s.
fn retry_refused(entry: OutboxRecord, why: &str) -> Outcome {
    let delay = backoff(age(&entry));
    retry_after(entry, why, delay)
}

/// An accepted entry's state for its next follow-up: after as long as the message has
/// existed (so the pauses double), from 1 s up to a minute — about 20 follow-ups in a
/// 15-minute window. `attempts` still counts the sends only.
fn follow_up_later(mut entry: OutboxRecord) -> Outcome {
    entry.next_attempt_at = next_follow_up_at(&entry);
    (entry, None)
}

/// When an entry's next follow-up is due (see [`follow_up_later`]).
fn next_follow_up_at(entry: &OutboxRecord) -> i64 {
    let delay = age(entry).clamp(FOLLOW_UP_FIRST, FOLLOW_UP_CAP).mul_f64(rand::rng().random_range(0.8..1.2));
    now_ms() + delay.as_millis() as i64
}

/// A follow-up due at `due`, brought forward to within half of what is left of a retry
/// window ending at `expires_at` while that is open (but not closer than 250 ms).
fn within_the_window(due: i64, now: i64, expires_at: i64) -> i64 {
    let left = expires_at - now;
    if left <= 0 { due } else { due.min(now + (left / 2).max(250)) }
}

/// The bridge call that ships an entry (again: the target answers a known key from its
/// dedup), with what is `left` of its retry window: the target's deadline for it.
fn send_call(entry: &OutboxRecord, left: Duration) -> pb::BridgeCall {
    pb::BridgeCall {
        call: Some(Call::ThreadSend(pb::BridgeSendCall {
            target_session: entry.target_session.clone(),
            content: entry.content.clone(),
            idempotency_key: entry.key.clone(),
            source_thread: entry.source_thread.clone().unwrap_or_default(),
            window_left_ms: (left.as_millis() as u64).max(1),
            message_id: entry.id.clone(),
        })),
    }
}

/// The bridge call that asks where the entries' messages stand (their keys only), which
/// confirms those waiting there — or, with `window_over`, expires those not confirmed.
fn follow_up_call(entries: &[OutboxRecord], window_over: bool) -> pb::BridgeCall {
    let keys = entries
        .iter()
        .map(|e| pb::FollowUpKey {
            source_thread: e.source_thread.clone().unwrap_or_default(),
            idempotency_key: e.key.clone(),
        })
        .collect();
    pb::BridgeCall { call: Some(Call::FollowUp(pb::FollowUpCall { keys, window_over })) }
}

/// An entry the target refused for good (or expired: its deadline passed there first).
fn refused(entry: OutboxRecord, reason: &str) -> Outcome {
    match reason {
        EXPIRED => finish(entry, EXPIRED, reason),
        _ => finish(entry, "rejected", reason),
    }
}

/// What the target's answer for one message says; the target's message id is kept.
fn verdict(answer: &pb::ThreadSendResponse, entry: &mut OutboxRecord) -> Verdict {
    if !answer.message_id.is_empty() {
        entry.remote_message_id = answer.message_id.clone();
    }
    match answer.status() {
        pb::SendStatus::Delivered => Verdict::Delivered,
        pb::SendStatus::Pending => Verdict::Waiting,
        _ => {
            let reason = if answer.reason.is_empty() { "undeliverable" } else { answer.reason.as_str() };
            // With a message id, the message itself became undeliverable there.
            if FINAL.contains(&reason) || !answer.message_id.is_empty() {
                Verdict::Refused(reason.to_string())
            } else {
                Verdict::NotNow(reason.to_string())
            }
        }
    }
}

/// A claim on an outbox entry's attempt, or on a silent peer's probe; dropped, it may be
/// taken again. It does not keep the bridges alive: an answered send's claim waits in
/// `Inner::recording`.
struct Claim {
    inner: std::sync::Weak<Inner>,
    on: Claimed,
    name: String,
}

#[derive(Clone, Copy)]
enum Claimed {
    /// An entry's attempt, by entry id (`Inner::attempting`).
    Attempt,
    /// A silent peer's one attempt at a time, by peer home id (`Inner::probing`).
    Probe,
}

impl Claim {
    fn set(inner: &Inner, on: Claimed) -> &std::sync::Mutex<HashSet<String>> {
        match on {
            Claimed::Attempt => &inner.attempting,
            Claimed::Probe => &inner.probing,
        }
    }

    /// The claim, unless it is held.
    fn try_take(inner: &Arc<Inner>, on: Claimed, name: &str) -> Option<Self> {
        lock(Self::set(inner, on)).insert(name.to_string()).then(|| Self {
            inner: Arc::downgrade(inner),
            on,
            name: name.to_string(),
        })
    }

    /// The attempt of an entry not yet written: nobody else can know its id.
    fn new_entry(inner: &Arc<Inner>, id: &str) -> Self {
        lock(&inner.attempting).insert(id.to_string());
        Self { inner: Arc::downgrade(inner), on: Claimed::Attempt, name: id.to_string() }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            lock(Self::set(&inner, self.on)).remove(&self.name);
        }
    }
}

/// One of the worker's attempts under way to a peer (`Inner::shipping`).
struct PeerSlot {
    inner: Arc<Inner>,
    peer: String,
}

impl PeerSlot {
    /// A slot, unless the peer holds its share of them already, or all are taken.
    fn try_take(inner: &Arc<Inner>, peer: &str) -> Option<Self> {
        let mut shipping = lock(&inner.shipping);
        if Self::all_taken(&shipping) {
            return None;
        }
        let taken = shipping.entry(peer.to_string()).or_default();
        if *taken >= MAX_ATTEMPTS_PER_PEER {
            return None;
        }
        *taken += 1;
        Some(Self { inner: inner.clone(), peer: peer.to_string() })
    }

    /// Whether the worker's attempts under way, all peers together, use every slot.
    fn all_taken(shipping: &HashMap<String, usize>) -> bool {
        shipping.values().sum::<usize>() >= MAX_ATTEMPTS_IN_FLIGHT
    }

    /// Whether the peer holds its whole share: the worker does not list its entries.
    fn is_full(inner: &Inner, peer: &str) -> bool {
        lock(&inner.shipping).get(peer).is_some_and(|n| *n >= MAX_ATTEMPTS_PER_PEER)
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut shipping = lock(&self.inner.shipping);
        if let Some(taken) = shipping.get_mut(&self.peer) {
            *taken -= 1;
            if *taken == 0 {
                shipping.remove(&self.peer);
            }
        }
    }
}

/// Answered sends whose outcomes are on their way to the store (see
/// [`Bridges::run_recorder`]). Until the store has an outcome, a send with its key, the
/// receipts and the pending count read it here.
#[derive(Default)]
pub(super) struct Recording {
    answered: HashMap<SendKey, Answered>,
    /// The keys of the outcomes not yet being written, oldest first.
    queued: Vec<SendKey>,
    /// The home is stopping and the recorder is done: a send answered now writes its own
    /// outcome (one still under way when the shutdown grace ran out).
    closed: bool,
}

/// An answered send's outcome, with its peer's resets as it was decided (see
/// [`Bridges::record`]) and the claim on its entry: the worker leaves the entry alone until
/// the outcome is written.
struct Answered {
    outcome: Outcome,
    resets: u64,
    _claim: Claim,
}

impl Recording {
    /// The outbox entries as their outcomes will be written.
    pub(super) fn entries(&self) -> impl Iterator<Item = &OutboxRecord> {
        self.answered.values().map(|a| &a.outcome.0)
    }
}

impl Bridges {
    /// ThreadSend to `target_session` behind `host`, from `source_thread` (or an external
    /// client): durable in the outbox before it answers, shipped at once if the link allows.
    pub async fn send_remote(
        &self,
        source_thread: Option<String>,
        host: &str,
        target_session: &str,
        content: &str,
        key: &str,
    ) -> Result<Sent> {
        limits::text("content", content, limits::CONTENT_MAX_CHARS)?;
        limits::text("idempotency_key", key, limits::KEY_MAX_CHARS)?;
        limits::text("target.session_id", target_session, limits::REMOTE_ID_MAX_CHARS)?;
        let bridge = self.outbound(host).await?;
        let now = now_ms();
        let wait = self.inner.config.mailbox.delivery_wait;
        let entry = OutboxRecord {
            id: new_id("msg"),
            bridge_id: bridge.id.clone(),
            peer_home_id: bridge.peer_home_id.clone(),
            target_session: target_session.to_string(),
            source_thread: source_thread.clone(),
            content: content.to_string(),
            key_scope: source_thread.unwrap_or_default(),
            key: key.to_string(),
            request_hash: outbox_hash(&bridge.peer_home_id, target_session, content),
            status: "pending".into(),
            reason: String::new(),
            remote_message_id: String::new(),
            // The first attempt is made right here; the worker takes over afterwards.
            attempts: 1,
            next_attempt_at: now + wait.as_millis() as i64,
            created_at: now,
            updated_at: now,
        };
        let key = (entry.key_scope.clone(), entry.key.clone());
        // Held until the outcome is in the store or in `recording`, where a send with this
        // key looks first.
        let _key_lock = self.inner.send_keys.take(key.clone()).await;
        // The key decides first: a key in the outbox is answered from there and sends nothing.
        let in_flight = self.in_flight(&key);
        let stored =
            self.inner.store.outbox_by_key(&entry.peer_home_id, &entry.key_scope, &entry.key).await?;
        if let Some(existing) = stored {
            return replay(in_flight, existing, &entry.request_hash);
        }
        // Nor may the key name a message the sender sent to a thread of this home (a local
        // send holds this key's lock until its commit, so none lands after this check).
        if let Some(message_id) = self.inner.store.local_key_message(&entry.key_scope, &entry.key).await? {
            return Err(key_conflict(&message_id));
        }
        // A new key: a revoked bridge takes no more (a retry of an earlier send is answered
        // above, even after this home revoked its side).
        if bridge.state == "revoked" {
            return Err(Error::PermissionDenied(format!("{host}: bridge_revoked")));
        }
        // The worker leaves the entry alone while this attempt is under way
        // (whatever ends it: an answer, the bounded wait, the caller going away).
        let claim = Claim::new_entry(&self.inner, &entry.id);
        // The entry's commit and the first attempt overlap; the answer waits for both. The
        // commit is queued first (so it is written even if the caller goes away), and a
        // commit refused at once (the store is busy) stops the attempt before it ships
        // anything. A commit that fails later, after the target took the message, leaves the
        // message there and not here: the caller hears the failure, and its retry with the
        // key is a replay at the target (with other content, a conflict).
        let attempted = AtomicBool::new(false);
        let insert = async {
            self.inner.store.outbox_insert(&entry).await.map_err(|e| match e {
                // Kept as they are: the caller acts on them (and a retry with the key is
                // what a full disk's answer asks for anyway).
                e @ (StoreError::DiskFull(_) | StoreError::Corrupt { .. }) => Error::Store(e),
                e if attempted.load(Ordering::Relaxed) => Error::Store(StoreError::Backend(format!(
                    "{e}; the message may have reached {host} already: retry with the same key"
                ))),
                // Refused before the attempt started (the store is busy or closed).
                e => Error::Store(e),
            })
        };
        let attempt = async {
            attempted.store(true, Ordering::Relaxed);
            let outcome = tokio::time::timeout(wait, self.attempt(entry.clone(), Some(&bridge))).await;
            Ok((outcome, self.resets(&entry.peer_home_id)))
        };
        let (inserted, (attempt, resets)) = tokio::try_join!(biased; insert, attempt)?;
        if let Some(existing) = inserted {
            // Unreachable while this home holds the key's lock; answered from the store.
            return replay(None, existing, &entry.request_hash);
        }
        match attempt {
            Ok(Ok((shipped, event))) => {
                let answer = first_answer(host, &shipped);
                if shipped.status == "rejected" {
                    // A refusal is answered once recorded: after a crash the entry must not
                    // be pending again, to be retried and perhaps delivered after all.
                    self.record(&[(shipped, event)], |_| resets).await?;
                    return answer;
                }
                // Otherwise the answer does not wait for the outcome's write: until it lands
                // the entry stays pending, and a retry after a crash is answered by the
                // target's dedup. Meanwhile receipts read the outcome from memory, so what
                // the sender sees next agrees with the answer it got.
                let late = {
                    let mut recording = lock(&self.inner.recording);
                    if recording.closed {
                        Some((shipped, event))
                    } else {
                        let outcome = (shipped, event);
                        recording.answered.insert(key.clone(), Answered { outcome, resets, _claim: claim });
                        recording.queued.push(key);
                        if matches!(recording.queued.len(), 1 | MAX_QUEUED_OUTCOMES) {
                            self.inner.outcomes_queued.notify_one();
                        }
                        None
                    }
                };
                if let Some(outcome) = late
                    && let Err(e) = self.record(&[outcome], |_| resets).await
                {
                    warn!(error = %e, "cannot record a bridged send's outcome");
                }
                answer
            }
            // Durable in the outbox: the worker keeps trying.
            _ => Ok(sent_of(&entry, false)),
        }
    }

    /// The answer for a cross-home send's key already in the outbox (`None` if new), for a
    /// retry that would be refused now (the sender's switch turned off since).
    pub async fn replay_remote(
        &self,
        source_thread: &str,
        host: &str,
        target_session: &str,
        content: &str,
        key: &str,
    ) -> Result<Option<Sent>> {
        let bridge = self.outbound(host).await?;
        let in_flight = self.in_flight(&(source_thread.to_string(), key.to_string()));
        let Some(stored) = self.inner.store.outbox_by_key(&bridge.peer_home_id, source_thread, key).await?
        else {
            return Ok(None);
        };
        replay(in_flight, stored, &outbox_hash(&bridge.peer_home_id, target_session, content)).map(Some)
    }

    /// The outcome of the send with this key still on its way to the store, if any. Taken
    /// before the store is read, it cannot be missed (see `Bridges::receipts`).
    fn in_flight(&self, key: &SendKey) -> Option<OutboxRecord> {
        lock(&self.inner.recording).answered.get(key).map(|a| a.outcome.0.clone())
    }

    /// The recorder: writes answered sends' outcomes until `stop` (then `Bridges::close`
    /// writes what is left). A write waits [`RECORD_LINGER`] after the first outcome queued,
    /// or until [`MAX_QUEUED_OUTCOMES`] are, and carries all of them.
    pub(super) async fn run_recorder(self, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.inner.outcomes_queued.notified() => {}
            }
            let linger = tokio::time::sleep(RECORD_LINGER);
            tokio::pin!(linger);
            while lock(&self.inner.recording).queued.len() < MAX_QUEUED_OUTCOMES {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = &mut linger => break,
                    () = self.inner.outcomes_queued.notified() => {}
                }
            }
            self.record_answered(false).await;
        }
    }

    /// Writes the queued outcomes of answered sends, in one write. Should it fail, their
    /// entries stay pending in the store: the worker sends them again, and the target answers
    /// from its dedup. With `last`, sends answered from now on write their own (the home is
    /// stopping).
    pub(super) async fn record_answered(&self, last: bool) {
        let (keys, (outcomes, resets)): (_, (Vec<Outcome>, Vec<u64>)) = {
            let mut recording = lock(&self.inner.recording);
            recording.closed |= last;
            let keys = std::mem::take(&mut recording.queued);
            let queued = keys.iter().filter_map(|k| recording.answered.get(k));
            let outcomes = queued.map(|a| (a.outcome.clone(), a.resets)).unzip();
            (keys, outcomes)
        };
        if keys.is_empty() {
            return;
        }
        if let Err(e) = self.record(&outcomes, |i| resets[i]).await {
            warn!(error = %e, outcomes = outcomes.len(), "cannot record bridged sends' outcomes");
        }
        let mut recording = lock(&self.inner.recording);
        for key in &keys {
            recording.answered.remove(key);
        }
    }

    /// One delivery attempt: the entry's new state, and the event a final failure gives its
    /// sending thread. Nothing is recorded here (see [`Bridges::record`]).
    async fn attempt(&self, mut entry: OutboxRecord, bridge: Option<&BridgeRecord>) -> Result<Outcome> {
        let now = now_ms();
        let bridge = match bridge {
            Some(b) => b.clone(),
            None => match self.bridge(|b| b.id == entry.bridge_id).await? {
                Some(b) => b,
                None => return Ok(finish(entry, "rejected", "bridge_removed")),
            },
        };
        if bridge.revoked_here() {
            return Ok(finish(entry, "rejected", "bridge_revoked"));
        }
        if self.window_over(&entry) {
            return Ok(self.expire(entry, &bridge).await);
        }
        // An attempt under way as the window ends runs its course (up to ATTEMPT_TIMEOUT):
        // its call may have reached the target, which may still take the message.
        let expires_at = self.expires_at(&entry);
        let mut outcome = match self.ship(&bridge, &mut entry).await {
            Verdict::Delivered => finish(entry, "delivered", ""),
            // Followed up soon, before the target's deadline: that confirms it arrived.
            Verdict::Waiting => {
                let (mut accepted, _) = finish(entry, "accepted", "");
                let now = now_ms();
                let first = now + FOLLOW_UP_FIRST.as_millis() as i64;
                accepted.next_attempt_at = within_the_window(first, now, expires_at);
                (accepted, None)
            }
            Verdict::Refused(reason) => refused(entry, &reason),
            Verdict::NotNow(why) => retry_refused(entry, &why),
            // Unreached: unless the peer answered another call meanwhile (the link is back
            // and this attempt rode a stale connection), back off.
            Verdict::Unanswered(why) if self.answered_since(&entry.peer_home_id, now) => {
                self.retry_soon(entry, &why)
            }
            Verdict::Unanswered(why) => self.retry_later(entry, &why),
        };
        // Never retried after its window: it expires then, not a backoff step later.
        if outcome.0.status == "pending" {
            outcome.0.next_attempt_at = outcome.0.next_attempt_at.min(expires_at);
        }
        Ok(outcome)
    }

    /// A pending entry at the end of its window. Unless the last call to its peer went
    /// unanswered (then it expires at once: the peer is unreachable now), the peer is asked
    /// whether it has the message — an attempt's answer may have been lost, or this home
    /// stopped before recording it — with a follow-up, which creates no message, so nothing
    /// arrives late. Delivered or accepted there, the entry says so (and is not asked about
    /// again); otherwise it expires. Expired without the target's word, it is asked about
    /// again until the target answers (see [`Bridges::rechecked`]): the target may have
    /// delivered it after all.
    async fn expire(&self, mut entry: OutboxRecord, bridge: &BridgeRecord) -> Outcome {
        let peer = entry.peer_home_id.clone();
        let last_answer = lock(&self.inner.answered).get(&peer).copied().unwrap_or(i64::MIN);
        if lock(&self.inner.unreached).get(&peer).is_none_or(|at| *at < last_answer) {
            let asked = self
                .ask(bridge, &follow_up_call(std::slice::from_ref(&entry), true), WHOLE_CALL_FINAL, None)
                .await;
            match asked {
                Ok(Reply::FollowUp(reply)) if reply.answers.len() == 1 => {
                    match verdict(&reply.answers[0], &mut entry) {
                        Verdict::Delivered => return finish(entry, "delivered", ""),
                        Verdict::Waiting => return finish(entry, "accepted", ""),
                        Verdict::Refused(reason) if reason != "unknown_key" => {
                            return refused(entry, &reason);
                        }
                        // Unknown there: the target now refuses the key (given up on).
                        Verdict::Refused(_) => return finish(entry, EXPIRED, EXPIRED),
                        Verdict::NotNow(_) | Verdict::Unanswered(_) => {}
                    }
                }
                Err(Verdict::Unanswered(_)) => self.unreached(&peer),
                _ => {}
            }
        }
        let (mut expired, event) = finish(entry, EXPIRED, EXPIRED);
        expired.next_attempt_at = self.next_recheck(&expired);
        (expired, event)
    }

    /// When to ask the target about an entry that expired without its word: at the pace of
    /// an accepted entry's follow-ups (see [`follow_up_later`]: a minute apart after a
    /// default window), so a peer gone for good costs no more than its accepted messages;
    /// never once the target may have forgotten the key.
    fn next_recheck(&self, entry: &OutboxRecord) -> i64 {
        if age(entry) > crate::config::MAX_RETRY_WINDOW {
            return i64::MAX;
        }
        next_follow_up_at(entry)
    }

    /// An entry that expired here without its target's word, after the target was asked
    /// again (with `window_over`: a message it still holds unconfirmed expires there). The
    /// target delivered it: the entry says `delivered` (see [`FOUND_DELIVERED`]; the
    /// `undeliverable` event its sender got stays in its log). Confirmed there, waiting for
    /// a turn: `accepted`, not asked about again (as in [`Bridges::expire`]: a later refusal
    /// must not give the sender a second event). Expired, refused or unknown there: expired
    /// for good. No answer: asked again later.
    fn rechecked(&self, entry: OutboxRecord, verdict: Verdict) -> Outcome {
        match verdict {
            // Neither gives an event (see `finish`).
            Verdict::Delivered => finish(entry, "delivered", FOUND_DELIVERED),
            Verdict::Waiting => finish(entry, "accepted", ""),
            Verdict::Refused(_) => (OutboxRecord { next_attempt_at: i64::MAX, ..entry }, None),
            Verdict::NotNow(_) | Verdict::Unanswered(_) => {
                let next_attempt_at = self.next_recheck(&entry);
                (OutboxRecord { next_attempt_at, ..entry }, None)
            }
        }
    }

    /// A call to `peer` went unanswered: the peer is silent (see [`Bridges::probe`]), and
    /// until it answers again entries whose window ends expire without asking it (see
    /// [`Bridges::expire`]).
    fn unreached(&self, peer: &str) {
        lock(&self.inner.settled).remove(peer);
        lock(&self.inner.unreached).insert(peer.to_string(), now_ms());
    }

    /// One ThreadSend call for `entry`, and what the answer says.
    async fn ship(&self, bridge: &BridgeRecord, entry: &mut OutboxRecord) -> Verdict {
        // Given up after the entry's window, the call is withdrawn: the message expires then,
        // and must not reach the target later through QUIC's retransmissions.
        let left = Duration::from_millis((self.expires_at(entry) - now_ms()).max(0) as u64);
        match self.ask(bridge, &send_call(entry, left), FINAL, Some(Instant::now() + left)).await {
            Ok(Reply::ThreadSend(answer)) => verdict(&answer, entry),
            Ok(other) => Verdict::NotNow(format!("unexpected answer: {other:?}")),
            Err(verdict) => verdict,
        }
    }

    /// One call to the bridge's peer: its reply, or, when it brought no answer about the
    /// messages it carried, the verdict for each of them — refused for good if the whole
    /// call was refused with one of `final_codes`. An answer from the peer counts as contact
    /// (see [`Bridges::link_up`]); a refusal for now does not.
    async fn ask(
        &self,
        bridge: &BridgeRecord,
        call: &pb::BridgeCall,
        final_codes: &[&str],
        withdraw_after: Option<Instant>,
    ) -> std::result::Result<Reply, Verdict> {
        match tokio::time::timeout(ATTEMPT_TIMEOUT, self.call(bridge, call, withdraw_after)).await {
            Ok(Ok(pb::BridgeReply { reply: Some(Reply::Error(e)) }))
                if final_codes.contains(&e.code.as_str()) =>
            {
                self.link_up(bridge).await;
                Err(Verdict::Refused(e.code))
            }
            Ok(Ok(pb::BridgeReply { reply: Some(Reply::Error(e)) })) => {
                Err(Verdict::NotNow(format!("{}: {}", e.code, e.message)))
            }
            Ok(Ok(pb::BridgeReply { reply: Some(reply) })) => {
                self.link_up(bridge).await;
                Ok(reply)
            }
            Ok(Ok(pb::BridgeReply { reply: None })) => Err(Verdict::NotNow("an empty answer".into())),
            Ok(Err(e)) => Err(Verdict::Unanswered(e.to_string())),
            Err(_) => Err(Verdict::Unanswered(format!("no answer within {ATTEMPT_TIMEOUT:?}"))),
        }
    }

    /// The peer answered: entries for it that are backing off need not wait any longer.
    /// Written only when some may be (a failed attempt since the last contact, or the first
    /// contact since the start), not on every answer.
    async fn link_up(&self, bridge: &BridgeRecord) {
        let peer = &bridge.peer_home_id;
        lock(&self.inner.answered).insert(peer.clone(), now_ms());
        if lock(&self.inner.settled).contains(peer) {
            return;
        }
        // Counted before the write: an outcome recorded after this point is seen to have
        // raced it (see `Bridges::record`).
        *lock(&self.inner.resets).entry(peer.clone()).or_default() += 1;
        if self.inner.store.outbox_retry_now(peer, now_ms()).await.is_ok() {
            lock(&self.inner.settled).insert(peer.clone());
        }
    }

    fn resets(&self, peer: &str) -> u64 {
        lock(&self.inner.resets).get(peer).copied().unwrap_or(0)
    }

    /// Whether `peer` answered a call since `since` (see [`Bridges::link_up`]).
    fn answered_since(&self, peer: &str, since: i64) -> bool {
        lock(&self.inner.answered).get(peer).is_some_and(|at| *at >= since)
    }

    /// The entry's state for another attempt after a jittered backoff, as long as the peer
    /// has been silent for this entry.
    fn retry_later(&self, entry: OutboxRecord, why: &str) -> Outcome {
        self.unreached(&entry.peer_home_id);
        let last_answer = lock(&self.inner.answered).get(&entry.peer_home_id).copied().unwrap_or(0);
        let silent = now_ms() - entry.created_at.max(last_answer);
        let delay = backoff(Duration::from_millis(silent.max(0) as u64));
        retry_after(entry, why, delay)
    }

    /// The entry's state for another attempt after the first backoff step only: its attempt
    /// failed, but the link answered meanwhile, so the reset `link_up` made (or skipped, the
    /// peer being settled) must not be undone by this late failure.
    fn retry_soon(&self, entry: OutboxRecord, why: &str) -> Outcome {
        retry_after(entry, why, backoff(Duration::ZERO))
    }

    /// The follow-up of entries the target accepted without delivering them (and the
    /// question again about those that expired without its word, see
    /// [`Bridges::rechecked`]): one call asks where all of them stand, and the target
    /// answers each from its dedup (creating no message), also after it revoked the bridge. Delivered or refused there ends an entry;
    /// still waiting, or no answer, asks again later. A follow-up confirms at the target that
    /// the message arrived, so it waits there past its deadline; one after the retry window
    /// is over says so (`window_over`: expired there unless confirmed before). A day after
    /// it was sent (when the target may forget its key), or once this home revoked the
    /// bridge, an entry stays `accepted` and is not asked about again.
    async fn follow_up(&self, entries: Vec<OutboxRecord>) -> Result<Vec<Outcome>> {
        let mut outcomes = Vec::with_capacity(entries.len());
        // By the bridge to call (one, in practice: a peer has one outbound bridge) and
        // whether the entries' window is over.
        let mut asked: Vec<((BridgeRecord, bool), Vec<OutboxRecord>)> = Vec::new();
        for mut entry in entries {
            let bridge = self.bridge(|b| b.id == entry.bridge_id && !b.revoked_here()).await?;
            // Past the least time any home keeps keys, the target may have forgotten it.
            let forgotten = age(&entry) > crate::config::MAX_RETRY_WINDOW;
            match bridge.filter(|_| !forgotten) {
                None => {
                    entry.next_attempt_at = i64::MAX;
                    outcomes.push((entry, None));
                }
                Some(bridge) => {
                    let over = self.window_over(&entry);
                    match asked.iter_mut().find(|((b, o), _)| b.id == bridge.id && *o == over) {
                        Some((_, group)) => group.push(entry),
                        None => asked.push(((bridge, over), vec![entry])),
                    }
                }
            }
        }
        for ((bridge, window_over), mut group) in asked {
            let now = now_ms();
            let call = follow_up_call(&group, window_over);
            let verdicts: Vec<Verdict> = match self.ask(&bridge, &call, WHOLE_CALL_FINAL, None).await {
                Ok(Reply::FollowUp(reply)) if reply.answers.len() == group.len() => {
                    reply.answers.iter().zip(group.iter_mut()).map(|(a, e)| verdict(a, e)).collect()
                }
                Ok(other) => vec![Verdict::NotNow(format!("unexpected answer: {other:?}")); group.len()],
                Err(verdict) => vec![verdict; group.len()],
            };
            for (entry, verdict) in group.into_iter().zip(verdicts) {
                if matches!(verdict, Verdict::Unanswered(_)) && !self.answered_since(&entry.peer_home_id, now)
                {
                    self.unreached(&entry.peer_home_id);
                }
                if entry.status == EXPIRED {
                    outcomes.push(self.rechecked(entry, verdict));
                    continue;
                }
                outcomes.push(match verdict {
                    Verdict::Delivered => finish(entry, "delivered", ""),
                    Verdict::Refused(reason) => refused(entry, &reason),
                    Verdict::Waiting | Verdict::NotNow(_) | Verdict::Unanswered(_) => {
                        self.next_follow_up(entry)
                    }
                });
            }
        }
        Ok(outcomes)
    }

    /// An accepted entry's next follow-up (see [`follow_up_later`]), within half of what is
    /// left of its retry window while that is open: one follow-up answered before the window
    /// ends confirms the message at the target, so a lost one must not leave it unconfirmed
    /// (the source does not know which of its answered follow-ups confirmed it).
    fn next_follow_up(&self, entry: OutboxRecord) -> Outcome {
        let expires_at = self.expires_at(&entry);
        let (mut entry, event) = follow_up_later(entry);
        entry.next_attempt_at = within_the_window(entry.next_attempt_at, now_ms(), expires_at);
        (entry, event)
    }

    /// Whether the entry's retry window is over: also for one that expired here, whatever
    /// the window is now (raised since?).
    fn window_over(&self, entry: &OutboxRecord) -> bool {
        entry.status == EXPIRED || now_ms() >= self.expires_at(entry)
    }

    /// The first moment the entry's retry window is over.
    fn expires_at(&self, entry: &OutboxRecord) -> i64 {
        entry.created_at + self.lifetime()
    }

    /// How long after it was sent an entry's retry window is over (just past the window).
    fn lifetime(&self) -> i64 {
        self.inner.config.bridge.retry_window.as_millis() as i64 + 1
    }

    /// The bridge to call about the entry; none once its window is over (it then expires,
    /// and the target is asked with `window_over`, see [`Bridges::expire`]) or the bridge is
    /// revoked here or gone (its fate then needs no call). Such entries do not wait for a
    /// silent peer's probe.
    async fn bridge_to_call(&self, entry: &OutboxRecord) -> Result<Option<BridgeRecord>> {
        if self.window_over(entry) {
            return Ok(None);
        }
        self.bridge(|b| b.id == entry.bridge_id && !b.revoked_here()).await
    }

    /// The entry as it stands now, if still due: an earlier attempt may have recorded an
    /// outcome after the worker's tick listed it.
    async fn still_due(&self, listed: &OutboxRecord) -> Result<Option<OutboxRecord>> {
        let current =
            self.inner.store.outbox_by_key(&listed.peer_home_id, &listed.key_scope, &listed.key).await?;
        Ok(current.filter(|e| {
            e.next_attempt_at <= now_ms() && matches!(e.status.as_str(), "pending" | "accepted" | EXPIRED)
        }))
    }

    /// The worker's attempt of a due entry (a send again, or the follow-up of an accepted
    /// one), read again once claimed. The outcome recorded, if it was attempted.
    async fn attempt_due(&self, listed: OutboxRecord) -> Result<Option<OutboxRecord>> {
        let Some(entry) = self.still_due(&listed).await? else {
            return Ok(None);
        };
        let peer = entry.peer_home_id.clone();
        let outcomes = match entry.status.as_str() {
            "pending" => vec![self.attempt(entry, None).await?],
            _ => self.follow_up(vec![entry]).await?,
        };
        let resets = self.resets(&peer);
        self.record(&outcomes, |_| resets).await?;
        Ok(outcomes.into_iter().next().map(|(entry, _)| entry))
    }

    /// The worker's follow-up of one peer's due accepted entries (and expired ones to ask
    /// about again), each read again once claimed: one call asks about all of them.
    async fn follow_up_due(&self, listed: Vec<OutboxRecord>) -> Result<()> {
        let mut due = Vec::with_capacity(listed.len());
        for entry in &listed {
            due.extend(self.still_due(entry).await?.filter(|e| e.status != "pending"));
        }
        let Some(peer) = due.first().map(|e| e.peer_home_id.clone()) else {
            return Ok(());
        };
        let outcomes = self.follow_up(due).await?;
        let resets = self.resets(&peer);
        self.record(&outcomes, |_| resets).await
    }

    /// A due entry shipped as the probe of its silent peer: the peer's other entries wait
    /// for its outcome (and the worker does not list them meanwhile). An answer makes them
    /// due again at once (see [`Bridges::link_up`]); silence puts them off until the probe's
    /// next attempt, so a peer that does not answer holds one attempt at a time, not a slot
    /// per entry for [`ATTEMPT_TIMEOUT`] each.
    async fn probe(&self, entry: OutboxRecord) -> Result<()> {
        let (peer, started) = (entry.peer_home_id.clone(), now_ms());
        self.put_off(&peer, &entry.id, started + (ATTEMPT_TIMEOUT + TICK).as_millis() as i64, started).await;
        let outcome = self.attempt_due(entry).await?;
        // Unless the probe is over for good (then another entry becomes the next probe).
        if let Some(probe) = outcome
            .filter(|e| matches!(e.status.as_str(), "pending" | "accepted") && e.next_attempt_at != i64::MAX)
            && self.silent(&peer)
        {
            let until = probe.next_attempt_at.min(now_ms() + BACKOFF_CAP.as_millis() as i64);
            self.put_off(&peer, &probe.id, until, started).await;
        }
        Ok(())
    }

    /// Puts off `peer`'s entries but `except` until `until`. Best effort: should the write
    /// fail, they stay due and wait for the probe anyway. An answer from the peer since
    /// `since`, or one that settled it just before, may have made them due (`link_up`)
    /// just before this write undid it, as may a revocation: then they are made due again.
    async fn put_off(&self, peer: &str, except: &str, until: i64, since: i64) {
        if let Err(e) = self.inner.store.outbox_defer(peer, except, until, self.lifetime()).await {
            warn!(error = %e, peer, "cannot put off a silent peer's outbox entries");
        } else if (self.answered_since(peer, since) || !self.silent(peer) || !self.calls_go_to(peer).await)
            && let Err(e) = self.inner.store.outbox_retry_now(peer, now_ms()).await
        {
            warn!(error = %e, peer, "cannot make a peer's outbox entries due again");
        }
    }

    /// Whether `peer` has not answered since an attempt that found it silent, or since
    /// this home started (see [`Bridges::link_up`]).
    fn silent(&self, peer: &str) -> bool {
        !lock(&self.inner.settled).contains(peer)
    }

    /// Saves the outcomes of attempts, in one write; a final failure's event wakes the
    /// sending thread's waiters. `resets(i)` gives the `i`th outcome's peer's resets as read
    /// when it was decided: should the peer have answered after a silence since (another
    /// call's `link_up` made its entries due), a backoff decided before that must not put its
    /// entry off again.
    async fn record(&self, outcomes: &[Outcome], resets: impl Fn(usize) -> u64) -> Result<()> {
        self.inner.store.outbox_update(outcomes).await?;
        for (entry, event) in outcomes {
            if let Some(event) = event {
                warn!(message_id = %entry.id, status = %entry.status, reason = %entry.reason, "bridged send undeliverable");
                if let Some(mailbox) = self.inner.mailbox.get() {
                    mailbox.notify(&event.thread_id);
                }
            }
        }
        let mut put_off_again: Vec<&str> = outcomes
            .iter()
            .enumerate()
            .filter(|(i, (e, _))| {
                matches!(e.status.as_str(), "pending" | "accepted")
                    && self.resets(&e.peer_home_id) != resets(*i)
            })
            .map(|(_, (e, _))| e.peer_home_id.as_str())
            .collect();
        put_off_again.sort_unstable();
        put_off_again.dedup();
        for peer in put_off_again {
            // The outcomes are written; at worst these entries wait out their backoff.
            if let Err(e) = self.inner.store.outbox_retry_now(peer, now_ms()).await {
                warn!(error = %e, peer, "cannot make a peer's outbox entries due again");
            }
        }
        Ok(())
    }

    /// The outbox worker: ships due entries until `stop`. Each peer's are listed on their
    /// own, at most its share of attempts at a time, so no peer's backlog hides another's and
    /// a listing costs the same however many entries wait. Each attempt runs on its own
    /// task, so a peer that does not answer (up to [`ATTEMPT_TIMEOUT`] per attempt) holds
    /// up no other; an entry already being attempted (inline by its send, or by an
    /// earlier tick) is skipped until its outcome is recorded. A silent peer gets one
    /// attempt at a time (see [`Bridges::probe`]), except for entries whose retry window is
    /// over (they expire, see [`Bridges::expire`]) or whose bridge this home revoked. No peer
    /// gets more than [`MAX_ATTEMPTS_PER_PEER`] at once.
    pub(super) async fn run_outbox(self, stop: CancellationToken) {
        for tick in 0usize.. {
            // Whatever their state: a revoked bridge's entries still have to end.
            let bridges = match self.all().await {
                Ok(bridges) => bridges,
                Err(e) => {
                    warn!(error = %e, "cannot read the bridges");
                    Default::default()
                }
            };
            let outbound: Vec<&BridgeRecord> = bridges.iter().filter(|b| b.direction == "outbound").collect();
            // Another peer goes first at each tick, so none always gets the last free slots.
            let first = tick % outbound.len().max(1);
            for bridge in outbound[first..].iter().chain(&outbound[..first]) {
                let peer = &bridge.peer_home_id;
                // A silent peer's entries wait for its probe: put off until it ends, and passed
                // over by `ship_due` if due anyway. Those whose window is over, or whose
                // bridge is revoked here, are listed and ended meanwhile.
                if PeerSlot::is_full(&self.inner, peer) {
                    continue;
                }
                // Its attempts under way are listed too (still due until their outcome is
                // recorded): the rest of the listing fills its free slots.
                match self.inner.store.outbox_due(peer, now_ms(), MAX_ATTEMPTS_PER_PEER as u32).await {
                    Ok(due) => {
                        if !self.ship_due(due).await {
                            break;
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot read the outbox");
                        break;
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }

    /// Starts an attempt for each of a peer's listed entries that may have one now; its
    /// accepted entries are followed up together, in one call (unless the peer is silent:
    /// then one of them may be its probe). `false` once the worker's slots are all taken.
    async fn ship_due(&self, due: Vec<OutboxRecord>) -> bool {
        let mut follow_ups = Vec::new();
        let mut slots_left = true;
        for entry in due {
            if PeerSlot::all_taken(&lock(&self.inner.shipping)) {
                slots_left = false;
                break;
            }
            let Some(claim) = Claim::try_take(&self.inner, Claimed::Attempt, &entry.id) else {
                continue;
            };
            // A silent peer's entries wait for one of them, the first listed (not those
            // that end now: window over, or bridge revoked here).
            let probed = matches!(self.bridge_to_call(&entry).await, Ok(Some(_)));
            let silent = probed && self.silent(&entry.peer_home_id);
            // Followed up (or, expired, asked about again) together.
            if entry.status != "pending" && !silent {
                follow_ups.push((entry, claim));
                continue;
            }
            let Some(slot) = PeerSlot::try_take(&self.inner, &entry.peer_home_id) else {
                continue;
            };
            let probe =
                match silent.then(|| Claim::try_take(&self.inner, Claimed::Probe, &entry.peer_home_id)) {
                    Some(None) => continue,
                    taken => taken.flatten(),
                };
            let bridges = self.clone();
            tokio::spawn(async move {
                let age = age(&entry);
                let done = match probe {
                    Some(_) => bridges.probe(entry).await,
                    None => bridges.attempt_due(entry).await.map(drop),
                };
                if let Err(e) = done {
                    warn!(error = %e, "outbox attempt failed to record");
                    // Not again at once: the claims are held through a backoff.
                    tokio::time::sleep(backoff(age)).await;
                }
                drop((claim, probe, slot));
            });
        }
        let slot = follow_ups.first().and_then(|(e, _)| PeerSlot::try_take(&self.inner, &e.peer_home_id));
        if let Some(slot) = slot {
            let (entries, claims): (Vec<_>, Vec<_>) = follow_ups.into_iter().unzip();
            let bridges = self.clone();
            tokio::spawn(async move {
                let age = entries.first().map(age).unwrap_or_default();
                if let Err(e) = bridges.follow_up_due(entries).await {
                    warn!(error = %e, "outbox follow-up failed to record");
                    tokio::time::sleep(backoff(age)).await;
                }
                drop((claims, slot));
            });
        }
        slots_left
    }

    /// Whether calls still go to `peer`: an outbound bridge to it is not revoked here.
    /// Otherwise its entries need no call (they end as `bridge_revoked` or `bridge_removed`).
    async fn calls_go_to(&self, peer: &str) -> bool {
        let Ok(bridges) = self.all().await else { return true };
        bridges.iter().any(|b| b.direction == "outbound" && !b.revoked_here() && b.peer_home_id == peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_ups_come_twice_within_what_is_left_of_the_window() {
        // An old message's next follow-up (a minute away) while 20 s of its window are left:
        // in 10 s, so a lost one still leaves time to confirm it before the window ends.
        assert_eq!(within_the_window(60_000, 0, 20_000), 10_000);
        assert_eq!(within_the_window(5_000, 0, 20_000), 5_000, "sooner already");
        assert_eq!(within_the_window(60_000, 0, 300), 250, "never closer than 250 ms");
        assert_eq!(within_the_window(60_000, 30_000, 20_000), 60_000, "the window is over");
    }

    #[test]
    fn backoff_is_the_silence_so_far_with_jitter_from_250_ms_to_30_s() {
        for ms in [0, 100, 250, 1_000, 7_000, 29_000, 30_000, 600_000] {
            let silent = Duration::from_millis(ms);
            let d = backoff(silent);
            let base = silent.clamp(BACKOFF_FIRST, BACKOFF_CAP);
            assert!(d <= BACKOFF_CAP, "{ms}: {d:?}");
            assert!(d >= base.mul_f64(0.8) && d <= base.mul_f64(1.2), "{ms}: {d:?} around {base:?}");
        }
        // Each pause as long as the silence before it: attempts at 0.25, 0.5, 1, 2, 4 s …
        let (mut at, mut pauses) = (Duration::ZERO, Vec::new());
        while at < Duration::from_secs(60) {
            let pause = backoff(at);
            pauses.push(pause);
            at += pause;
        }
        assert!(pauses.len() < 12, "doubling reaches the cap quickly: {pauses:?}");
        assert!(pauses.last().is_some_and(|p| *p >= BACKOFF_CAP.mul_f64(0.8)), "{pauses:?}");
    }
}
