//! Cross-home ThreadSend at the source: its transactional outbox (the target's side is
//! `inbound::sends`).
//!
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

mod backoff;
mod entry;
mod recorder;
mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kiki_proto::bridge::v1 as wire;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, warn};
use wire::bridge_reply::Reply;

pub(crate) use backoff::backoff;
use entry::*;
use recorder::{Answered, Recording};
use worker::Claim;

use super::codec::{refusal_from_wire, refusal_word};
use super::links::Links;
use super::table::BridgeTable;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mailbox::{Sent, key_conflict};
use crate::store::{
    BridgeRecord, EXPIRED, OutboxOutcome as Outcome, OutboxRecord, Refusal, Store, StoreError,
};
use crate::store::{BridgeState, OutboxStatus, SourceRef};
use crate::sync::{KeyLocks, SendKey, lock};
use crate::threads::new_id;
use crate::time::Clock;
use kiki_proto::limits;

/// The first and the longest pause between follow-ups of an accepted entry.
const FOLLOW_UP_FIRST: Duration = Duration::from_secs(1);
const FOLLOW_UP_CAP: Duration = Duration::from_secs(60);
/// How much longer than its attempt a silent peer's probe puts its other entries off.
const PROBE_MARGIN: Duration = Duration::from_millis(100);
/// The longest the worker sleeps without looking: a backstop should a change to the outbox
/// go unannounced (every one is announced, see [`Outbox::work_arrived`]).
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_secs(30);
/// The worker's attempts under way at most (a follow-up call counts as one).
const MAX_ATTEMPTS_IN_FLIGHT: usize = 256;
/// The worker's attempts under way to one peer at most: a peer that went silent while it
/// still counted as answering (its attempts hang until they time out) leaves the other
/// half of the slots to the other peers.
const MAX_ATTEMPTS_PER_PEER: usize = MAX_ATTEMPTS_IN_FLIGHT / 2;
/// The most keys one follow-up call asks about; the target refuses more.
pub(crate) const MAX_FOLLOW_UP_KEYS: usize = 256;
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

/// The source's side of cross-home sends. Cheap to clone.
#[derive(Clone)]
pub(super) struct Outbox {
    inner: Arc<Inner>,
}

/// What the outbox works with.
pub(super) struct OutboxParts {
    pub(super) table: Arc<BridgeTable>,
    pub(super) links: Arc<Links>,
    pub(super) store: Arc<dyn Store>,
    pub(super) config: Arc<Config>,
    /// Rung whenever outbox entries are written or made due, or an attempt ends.
    pub(super) outbox_work: Arc<tokio::sync::Notify>,
    /// Whether this replica works the outbox's retries now (see `replica::OutboxDuty`).
    pub(super) duty: Arc<crate::replica::OutboxDuty>,
    /// Sends under way, one at a time per sender's key (shared with the mailbox).
    pub(super) send_keys: Arc<KeyLocks>,
    /// The home's clock: windows, backoff, follow-ups, attempts' bounds.
    pub(super) clock: Clock,
    /// The home's metrics and feed (attempts, links' round trips).
    pub(super) observer: Arc<crate::observe::Observer>,
}

struct Inner {
    observer: Arc<crate::observe::Observer>,
    table: Arc<BridgeTable>,
    links: Arc<Links>,
    store: Arc<dyn Store>,
    config: Arc<Config>,
    /// Told whenever outbox entries are written or made due, or an attempt ends: the
    /// worker looks again (see `Outbox::run_worker`).
    outbox_work: Arc<tokio::sync::Notify>,
    duty: Arc<crate::replica::OutboxDuty>,
    /// Outcomes of sends already answered whose outbox write is still on its way: a send
    /// with the key looks here first (see `Outbox::run_recorder`).
    recording: std::sync::Mutex<Recording>,
    /// Told when `recording` queues its first outcome, or fills up.
    outcomes_queued: tokio::sync::Notify,
    /// Outbox entries with an attempt under way, or whose outcome waits in `recording`
    /// (see `worker::Claim`).
    attempting: std::sync::Mutex<HashSet<String>>,
    /// Silent peers with a probe under way: the one entry the worker ships to such a peer
    /// at a time (see `Outbox::run_worker`).
    probing: std::sync::Mutex<HashSet<String>>,
    /// The worker's attempts under way, by peer (see `worker::PeerSlot`).
    shipping: std::sync::Mutex<HashMap<String, usize>>,
    /// Sends under way, one at a time per sender's key (shared with the mailbox).
    send_keys: Arc<KeyLocks>,
    /// Peers that answered since the last attempt that found them silent: none of their
    /// outbox entries is backing off (see `link_up`). Any other peer is silent, and gets
    /// one outbox attempt at a time (see `Outbox::probe`).
    settled: std::sync::Mutex<HashSet<String>>,
    /// When each peer last answered a call (see `link_up`).
    answered: std::sync::Mutex<HashMap<String, i64>>,
    /// When a call to each peer last went unanswered, in this run (see `Outbox::expire`).
    unreached: std::sync::Mutex<HashMap<String, i64>>,
    /// How often each peer's entries were made due again as it answered after a silence
    /// (see `link_up` and `Outbox::record`).
    resets: std::sync::Mutex<HashMap<String, u64>>,
    /// The worker's attempts, each a task of its own.
    tasks: TaskTracker,
    /// The home's clock.
    clock: Clock,
}

impl Outbox {
    pub(super) fn new(parts: OutboxParts, tasks: TaskTracker) -> Self {
        let OutboxParts { table, links, store, config, outbox_work, duty, send_keys, clock, observer } =
            parts;
        Self {
            inner: Arc::new(Inner {
                observer,
                table,
                links,
                store,
                config,
                outbox_work,
                duty,
                recording: Default::default(),
                outcomes_queued: Default::default(),
                attempting: Default::default(),
                probing: Default::default(),
                shipping: Default::default(),
                send_keys,
                settled: Default::default(),
                answered: Default::default(),
                unreached: Default::default(),
                resets: Default::default(),
                tasks,
                clock,
            }),
        }
    }

    /// Now, by the home's clock.
    fn now(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Tells the worker to look again: entries were written or made due, or an attempt
    /// ended (its claim and slot are free).
    fn work_arrived(&self) {
        self.inner.outbox_work.notify_one();
    }

    /// The outbox entries whose outcomes are still on their way to the store (the receipts
    /// and pending counts read them here first).
    pub(super) fn recording(&self) -> Vec<OutboxRecord> {
        lock(&self.inner.recording).entries().cloned().collect()
    }

    /// ThreadSend to `target_session` behind `host`, from a thread of this home (`None`: an
    /// external client): durable in the outbox before it answers, shipped at once if the
    /// link allows.
    pub(super) async fn send(
        &self,
        source: Option<SourceRef>,
        host: &str,
        target_session: &str,
        content: &str,
        key: &str,
    ) -> Result<Sent> {
        let sent = self.send_once(source, host, target_session, content, key).await;
        // Its entry may wait for the worker now (and its claim is free).
        self.work_arrived();
        sent
    }

    /// [`Outbox::send`]'s work, its claim on the entry dropped at the end.
    async fn send_once(
        &self,
        source: Option<SourceRef>,
        host: &str,
        target_session: &str,
        content: &str,
        key: &str,
    ) -> Result<Sent> {
        limits::text("content", content, limits::CONTENT_MAX_CHARS)?;
        limits::text("idempotency_key", key, limits::KEY_MAX_CHARS)?;
        limits::text("target.session_id", target_session, limits::ID_MAX_CHARS)?;
        let bridge = self.inner.table.outbound(host).await?;
        let wait = self.inner.config.mailbox.delivery_wait;
        let entry = new_entry(&bridge, source, target_session, content, key, self.now(), wait);
        let key = (entry.key_scope.clone(), entry.key.clone());
        // Held until the outcome is in the store or in `recording`, where a send with this
        // key looks first.
        let _key_lock = self.inner.send_keys.take(key.clone()).await;
        if let Some(answered) = self.answered_by_key(&key, &entry).await? {
            return answered;
        }
        // A new key: a revoked bridge takes no more (a retry of an earlier send is answered
        // above, even after this home revoked its side).
        if bridge.state == BridgeState::Revoked {
            return Err(Error::PermissionDenied(format!("{host}: {}", Refusal::BridgeRevoked)));
        }
        // The worker leaves the entry alone while this attempt is under way
        // (whatever ends it: an answer, the bounded wait, the caller going away).
        let claim = Claim::new_entry(&self.inner, &entry.id);
        let (inserted, (attempt, resets)) = self.insert_and_attempt(&entry, &bridge, host, wait).await?;
        if let Some(existing) = inserted {
            // Unreachable while this home holds the key's lock; answered from the store.
            return replay(None, existing, &entry.request_hash);
        }
        match attempt {
            Ok(Ok(outcome)) => self.first_outcome(host, key, outcome, resets, claim).await,
            // Durable in the outbox: the worker keeps trying.
            _ => Ok(sent_of(&entry, false)),
        }
    }

    /// The answer a send's key already has, if it has one: from the outbox (the same
    /// request replays, another conflicts), or a conflict with a message the sender sent to
    /// a thread of this home (a local send holds the key's lock until its commit, so none
    /// lands after this check). The key decides first: such a send sends nothing.
    async fn answered_by_key(&self, key: &SendKey, entry: &OutboxRecord) -> Result<Option<Result<Sent>>> {
        let in_flight = self.in_flight(key);
        let stored =
            self.inner.store.outbox_by_key(&entry.peer_home_id, &entry.key_scope, &entry.key).await?;
        if let Some(existing) = stored {
            return Ok(Some(replay(in_flight, existing, &entry.request_hash)));
        }
        if let Some(message_id) = self.inner.store.local_key_message(&entry.key_scope, &entry.key).await? {
            return Ok(Some(Err(key_conflict(&message_id))));
        }
        Ok(None)
    }

    /// Commits a new entry and makes its first attempt, overlapping; the answer waits for
    /// both. The commit is queued first (so it is written even if the caller goes away), and
    /// a commit refused at once (the store is busy) stops the attempt before it ships
    /// anything. A commit that fails later, after the target took the message, leaves the
    /// message there and not here: the caller hears the failure, and its retry with the key
    /// is a replay at the target (with other content, a conflict).
    async fn insert_and_attempt(
        &self,
        entry: &OutboxRecord,
        bridge: &BridgeRecord,
        host: &str,
        wait: Duration,
    ) -> Result<(Option<OutboxRecord>, (Result<Result<Outcome>, crate::time::Elapsed>, u64))> {
        let attempted = AtomicBool::new(false);
        let insert = async {
            self.inner.store.outbox_insert(entry).await.map_err(|e| match e {
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
            let outcome = self.inner.clock.timeout(wait, self.attempt(entry.clone(), Some(bridge))).await;
            Ok((outcome, self.resets(&entry.peer_home_id)))
        };
        tokio::try_join!(biased; insert, attempt)
    }

    /// The answer to a send whose first attempt brought an outcome. A refusal is answered
    /// once recorded: after a crash the entry must not be pending again, to be retried and
    /// perhaps delivered after all. Any other outcome is answered before its write: until it
    /// lands the entry stays pending, and a retry after a crash is answered by the target's
    /// dedup; meanwhile receipts read the outcome from memory, so what the sender sees next
    /// agrees with the answer it got.
    async fn first_outcome(
        &self,
        host: &str,
        key: SendKey,
        (shipped, event): Outcome,
        resets: u64,
        claim: Claim,
    ) -> Result<Sent> {
        let answer = first_answer(host, &shipped);
        if shipped.status == OutboxStatus::Rejected {
            self.record(&[(shipped, event)], |_| resets).await?;
            return answer;
        }
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

    /// The answer for a cross-home send's key already in the outbox (`None` if new), for a
    /// retry that would be refused now (the sender's switch turned off since).
    pub(super) async fn replay(
        &self,
        source_thread: &str,
        host: &str,
        target_session: &str,
        content: &str,
        key: &str,
    ) -> Result<Option<Sent>> {
        let bridge = self.inner.table.outbound(host).await?;
        let in_flight = self.in_flight(&(source_thread.to_string(), key.to_string()));
        let Some(stored) = self.inner.store.outbox_by_key(&bridge.peer_home_id, source_thread, key).await?
        else {
            return Ok(None);
        };
        replay(in_flight, stored, &outbox_hash(&bridge.peer_home_id, target_session, content)).map(Some)
    }

    /// The outcome of the send with this key still on its way to the store, if any. Taken
    /// before the store is read, it cannot be missed (see `Outbox::receipts`).
    fn in_flight(&self, key: &SendKey) -> Option<OutboxRecord> {
        lock(&self.inner.recording).answered.get(key).map(|a| a.outcome.0.clone())
    }

    /// One delivery attempt: the entry's new state, and the event a final failure gives its
    /// sending thread. Nothing is recorded here (see [`Outbox::record`]). Its span is one of
    /// the send's trace, whenever and wherever it runs.
    async fn attempt(&self, entry: OutboxRecord, bridge: Option<&BridgeRecord>) -> Result<Outcome> {
        let span = tracing::debug_span!(
            "outbox attempt",
            message_id = %entry.id,
            bridge_id = %entry.bridge_id,
            peer = %entry.peer_home_id,
            attempts = entry.attempts
        );
        crate::observe::traces::continue_attempt(&span, &entry.trace, entry.attempts);
        self.deliver(entry, bridge).instrument(span).await
    }

    async fn deliver(&self, mut entry: OutboxRecord, bridge: Option<&BridgeRecord>) -> Result<Outcome> {
        let now = self.now();
        let bridge = match bridge {
            Some(b) => b.clone(),
            None => match self.inner.table.find(|b| b.id == entry.bridge_id).await? {
                Some(b) => b,
                None => {
                    return Ok(finish(
                        self.now(),
                        entry,
                        OutboxStatus::Rejected,
                        Refusal::BridgeRemoved.as_str(),
                    ));
                }
            },
        };
        if bridge.revoked_here() {
            return Ok(finish(self.now(), entry, OutboxStatus::Rejected, Refusal::BridgeRevoked.as_str()));
        }
        if self.window_over(&entry) {
            return Ok(self.expire(entry, &bridge).await);
        }
        // An attempt under way as the window ends runs its course (up to ATTEMPT_TIMEOUT):
        // its call may have reached the target, which may still take the message.
        let expires_at = self.expires_at(&entry);
        let verdict = self.ship(&bridge, &mut entry).await;
        let (answered, outcome) = match &verdict {
            Verdict::Delivered => (true, "delivered".to_string()),
            Verdict::Waiting => (true, "accepted".to_string()),
            Verdict::Refused(reason) => (true, format!("refused: {reason}")),
            Verdict::NotNow(why) | Verdict::Unanswered(why) => (false, format!("to be retried: {why}")),
        };
        self.inner.observer.outbox_attempt(&entry.peer_home_id, &entry.id, answered, &outcome);
        let mut outcome = match verdict {
            Verdict::Delivered => finish(self.now(), entry, OutboxStatus::Delivered, ""),
            // Followed up soon, before the target's deadline: that confirms it arrived.
            Verdict::Waiting => {
                let now = self.now();
                let (mut accepted, _) = finish(now, entry, OutboxStatus::Accepted, "");
                let first = now + FOLLOW_UP_FIRST.as_millis() as i64;
                accepted.next_attempt_at = within_the_window(first, now, expires_at);
                (accepted, None)
            }
            Verdict::Refused(reason) => refused(self.now(), entry, &reason),
            Verdict::NotNow(why) => retry_refused(self.now(), entry, &why),
            // Unreached: unless the peer answered another call meanwhile (the link is back
            // and this attempt rode a stale connection), back off.
            Verdict::Unanswered(why) if self.answered_since(&entry.peer_home_id, now) => {
                self.retry_soon(entry, &why)
            }
            Verdict::Unanswered(why) => self.retry_later(entry, &why),
        };
        // Never retried after its window: it expires then, not a backoff step later.
        if outcome.0.status == OutboxStatus::Pending {
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
    /// again until the target answers (see [`Outbox::rechecked`]): the target may have
    /// delivered it after all.
    async fn expire(&self, mut entry: OutboxRecord, bridge: &BridgeRecord) -> Outcome {
        let peer = entry.peer_home_id.clone();
        let last_answer = lock(&self.inner.answered).get(&peer).copied().unwrap_or(i64::MIN);
        if lock(&self.inner.unreached).get(&peer).is_none_or(|at| *at < last_answer) {
            let asked = self
                .ask(
                    bridge,
                    &follow_up_call(std::slice::from_ref(&entry), true),
                    Refusal::ends_each_message,
                    None,
                )
                .await;
            match asked {
                Ok(Reply::FollowUp(reply)) if reply.answers.len() == 1 => {
                    match verdict(&reply.answers[0], &mut entry) {
                        Verdict::Delivered => return finish(self.now(), entry, OutboxStatus::Delivered, ""),
                        Verdict::Waiting => return finish(self.now(), entry, OutboxStatus::Accepted, ""),
                        Verdict::Refused(reason) if reason != Refusal::UnknownKey.as_str() => {
                            return refused(self.now(), entry, &reason);
                        }
                        // Unknown there: the target now refuses the key (given up on).
                        Verdict::Refused(_) => {
                            return finish(self.now(), entry, OutboxStatus::Expired, EXPIRED);
                        }
                        Verdict::NotNow(_) | Verdict::Unanswered(_) => {}
                    }
                }
                Err(Verdict::Unanswered(_)) => self.unreached(&peer),
                _ => {}
            }
        }
        let (mut expired, event) = finish(self.now(), entry, OutboxStatus::Expired, EXPIRED);
        expired.next_attempt_at = self.next_recheck(&expired);
        (expired, event)
    }

    /// When to ask the target about an entry that expired without its word: at the pace of
    /// an accepted entry's follow-ups (see [`follow_up_later`]: a minute apart after a
    /// default window), so a peer gone for good costs no more than its accepted messages;
    /// never once the target may have forgotten the key.
    fn next_recheck(&self, entry: &OutboxRecord) -> i64 {
        let now = self.now();
        if age(now, entry) > crate::config::MAX_RETRY_WINDOW {
            return i64::MAX;
        }
        next_follow_up_at(now, entry)
    }

    /// An entry that expired here without its target's word, after the target was asked
    /// again (with `window_over`: a message it still holds unconfirmed expires there). The
    /// target delivered it: the entry says `delivered` (see [`FOUND_DELIVERED`]; the
    /// `undeliverable` event its sender got stays in its log). Confirmed there, waiting for
    /// a turn: `accepted`, not asked about again (as in [`Outbox::expire`]: a later refusal
    /// must not give the sender a second event). Expired, refused or unknown there: expired
    /// for good. No answer: asked again later.
    fn rechecked(&self, entry: OutboxRecord, verdict: Verdict) -> Outcome {
        match verdict {
            // Neither gives an event (see `finish`).
            Verdict::Delivered => finish(self.now(), entry, OutboxStatus::Delivered, FOUND_DELIVERED),
            Verdict::Waiting => finish(self.now(), entry, OutboxStatus::Accepted, ""),
            Verdict::Refused(_) => (OutboxRecord { next_attempt_at: i64::MAX, ..entry }, None),
            Verdict::NotNow(_) | Verdict::Unanswered(_) => {
                let next_attempt_at = self.next_recheck(&entry);
                (OutboxRecord { next_attempt_at, ..entry }, None)
            }
        }
    }

    /// A call to `peer` went unanswered: the peer is silent (see [`Outbox::probe`]), and
    /// until it answers again entries whose window ends expire without asking it (see
    /// [`Outbox::expire`]).
    fn unreached(&self, peer: &str) {
        lock(&self.inner.settled).remove(peer);
        lock(&self.inner.unreached).insert(peer.to_string(), self.now());
    }

    /// One ThreadSend call for `entry`, and what the answer says.
    async fn ship(&self, bridge: &BridgeRecord, entry: &mut OutboxRecord) -> Verdict {
        // Given up after the entry's window, the call is withdrawn: the message expires then,
        // and must not reach the target later through QUIC's retransmissions.
        // (The withdrawal is the bridge crate's, on real time: `left` of the home's clock
        // from now.)
        let left = Duration::from_millis((self.expires_at(entry) - self.now()).max(0) as u64);
        match self.ask(bridge, &send_call(entry, left), Refusal::is_final, Some(Instant::now() + left)).await
        {
            Ok(Reply::ThreadSend(answer)) => verdict(&answer, entry),
            Ok(other) => Verdict::NotNow(format!("unexpected answer: {other:?}")),
            Err(verdict) => verdict,
        }
    }

    /// One call to the bridge's peer: its reply, or, when it brought no answer about the
    /// messages it carried, the verdict for each of them — refused for good if the whole
    /// call was refused with one of `final_codes`. An answer from the peer counts as contact
    /// (see [`Outbox::link_up`]); a refusal for now does not. In the caller's span, which
    /// names the bridge: an attempt's, or a follow-up's.
    async fn ask(
        &self,
        bridge: &BridgeRecord,
        call: &wire::BridgeCall,
        final_if: fn(Refusal) -> bool,
        withdraw_after: Option<Instant>,
    ) -> std::result::Result<Reply, Verdict> {
        let started = Instant::now();
        let answer = self
            .inner
            .clock
            .timeout(ATTEMPT_TIMEOUT, self.inner.links.call_in_current_span(bridge, call, withdraw_after))
            .await;
        if let Ok(Ok(_)) = &answer {
            self.inner.observer.link_rtt(&bridge.peer_home_id, started.elapsed());
        }
        match answer {
            Ok(Ok(wire::BridgeReply { reply: Some(Reply::Error(e)) }))
                if refusal_from_wire(&e).is_some_and(final_if) =>
            {
                self.link_up(bridge).await;
                Err(Verdict::Refused(refusal_word(&e)))
            }
            Ok(Ok(wire::BridgeReply { reply: Some(Reply::Error(e)) })) => {
                Err(Verdict::NotNow(format!("{}: {}", refusal_word(&e), e.message)))
            }
            Ok(Ok(wire::BridgeReply { reply: Some(reply) })) => {
                self.link_up(bridge).await;
                Ok(reply)
            }
            Ok(Ok(wire::BridgeReply { reply: None })) => Err(Verdict::NotNow("an empty answer".into())),
            Ok(Err(e)) => Err(Verdict::Unanswered(e.to_string())),
            Err(_) => Err(Verdict::Unanswered(format!("no answer within {ATTEMPT_TIMEOUT:?}"))),
        }
    }

    /// The peer answered: entries for it that are backing off need not wait any longer.
    /// Written only when some may be (a failed attempt since the last contact, or the first
    /// contact since the start), not on every answer.
    async fn link_up(&self, bridge: &BridgeRecord) {
        let peer = &bridge.peer_home_id;
        lock(&self.inner.answered).insert(peer.clone(), self.now());
        if lock(&self.inner.settled).contains(peer) {
            return;
        }
        // Counted before the write: an outcome recorded after this point is seen to have
        // raced it (see `Outbox::record`).
        *lock(&self.inner.resets).entry(peer.clone()).or_default() += 1;
        if self.inner.store.outbox_retry_now(peer, self.now()).await.is_ok() {
            lock(&self.inner.settled).insert(peer.clone());
            // The store woke the worker as the entries came due, maybe before the peer was
            // settled here: the worker looks again, now that it is no longer silent.
            self.work_arrived();
        }
    }

    fn resets(&self, peer: &str) -> u64 {
        lock(&self.inner.resets).get(peer).copied().unwrap_or(0)
    }

    /// Whether `peer` answered a call since `since` (see [`Outbox::link_up`]).
    fn answered_since(&self, peer: &str, since: i64) -> bool {
        lock(&self.inner.answered).get(peer).is_some_and(|at| *at >= since)
    }

    /// The entry's state for another attempt after a jittered backoff, as long as the peer
    /// has been silent for this entry.
    fn retry_later(&self, entry: OutboxRecord, why: &str) -> Outcome {
        self.unreached(&entry.peer_home_id);
        let last_answer = lock(&self.inner.answered).get(&entry.peer_home_id).copied().unwrap_or(0);
        let now = self.now();
        let silent = now - entry.created_at.max(last_answer);
        let delay = backoff(Duration::from_millis(silent.max(0) as u64));
        retry_after(now, entry, why, delay)
    }

    /// The entry's state for another attempt after the first backoff step only: its attempt
    /// failed, but the link answered meanwhile, so the reset `link_up` made (or skipped, the
    /// peer being settled) must not be undone by this late failure.
    fn retry_soon(&self, entry: OutboxRecord, why: &str) -> Outcome {
        retry_after(self.now(), entry, why, backoff(Duration::ZERO))
    }

    /// The follow-up of entries the target accepted without delivering them (and the
    /// question again about those that expired without its word, see
    /// [`Outbox::rechecked`]): one call asks where all of them stand, and the target
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
            let bridge = self.inner.table.find(|b| b.id == entry.bridge_id && !b.revoked_here()).await?;
            // Past the least time any home keeps keys, the target may have forgotten it.
            let forgotten = age(self.now(), &entry) > crate::config::MAX_RETRY_WINDOW;
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
            let now = self.now();
            let call = follow_up_call(&group, window_over);
            let span =
                tracing::debug_span!("outbox follow-up", bridge_id = %bridge.id, peer = %bridge.peer_home_id);
            let asked = self.ask(&bridge, &call, Refusal::ends_each_message, None).instrument(span).await;
            let verdicts: Vec<Verdict> = match asked {
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
                if entry.status == OutboxStatus::Expired {
                    outcomes.push(self.rechecked(entry, verdict));
                    continue;
                }
                outcomes.push(match verdict {
                    Verdict::Delivered => finish(self.now(), entry, OutboxStatus::Delivered, ""),
                    Verdict::Refused(reason) => refused(self.now(), entry, &reason),
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
        let (mut entry, event) = follow_up_later(self.now(), entry);
        entry.next_attempt_at = within_the_window(entry.next_attempt_at, self.now(), expires_at);
        (entry, event)
    }

    /// Whether the entry's retry window is over: also for one that expired here, whatever
    /// the window is now (raised since?).
    fn window_over(&self, entry: &OutboxRecord) -> bool {
        entry.status == OutboxStatus::Expired || self.now() >= self.expires_at(entry)
    }

    /// The first moment the entry's retry window is over.
    fn expires_at(&self, entry: &OutboxRecord) -> i64 {
        entry.created_at + self.lifetime()
    }

    /// How long after it was sent an entry's retry window is over (just past the window).
    fn lifetime(&self) -> i64 {
        self.inner.config.bridge.retry_window.as_millis() as i64 + 1
    }
}

/// A new cross-home send's outbox entry, its first attempt about to be made by the caller
/// (the worker takes over after `wait`).
fn new_entry(
    bridge: &BridgeRecord,
    source: Option<SourceRef>,
    target_session: &str,
    content: &str,
    key: &str,
    now: i64,
    wait: Duration,
) -> OutboxRecord {
    let (source_thread, source_workspace) = match source {
        Some(s) => (Some(s.thread_id), s.workspace_id),
        None => (None, String::new()),
    };
    OutboxRecord {
        id: new_id("msg"),
        bridge_id: bridge.id.clone(),
        peer_home_id: bridge.peer_home_id.clone(),
        target_session: target_session.to_string(),
        source_thread: source_thread.clone(),
        source_workspace,
        content: content.to_string(),
        key_scope: source_thread.unwrap_or_default(),
        key: key.to_string(),
        request_hash: outbox_hash(&bridge.peer_home_id, target_session, content),
        status: OutboxStatus::Pending,
        reason: String::new(),
        remote_message_id: String::new(),
        attempts: 1,
        next_attempt_at: now + wait.as_millis() as i64,
        created_at: now,
        updated_at: now,
        room: None,
        // The send's: its attempts join its trace.
        trace: crate::observe::traces::traceparent(&tracing::Span::current()),
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
}
