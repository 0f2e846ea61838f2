//! The outbox worker: ships due entries — retries, follow-ups, the questions about expired
//! ones — each on a task of its own, at most [`MAX_ATTEMPTS_IN_FLIGHT`] at once and a
//! peer's share of them per peer, one at a time to a silent peer (its probe).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::backoff::{BACKOFF_CAP, backoff};
use super::{
    ATTEMPT_TIMEOUT, Inner, LOOK_AT_LEAST_EVERY, MAX_ATTEMPTS_IN_FLIGHT, MAX_ATTEMPTS_PER_PEER, Outbox,
    PROBE_MARGIN, age,
};
use crate::error::Result;
use crate::store::{BridgeRecord, OutboxRecord};
use crate::store::{Direction, OutboxStatus};
use crate::sync::lock;

/// A claim on an outbox entry's attempt, or on a silent peer's probe; dropped, it may be
/// taken again. It does not keep the bridges alive: an answered send's claim waits in
/// `Inner::recording`.
pub(super) struct Claim {
    inner: std::sync::Weak<Inner>,
    on: Claimed,
    name: String,
}

#[derive(Clone, Copy)]
pub(super) enum Claimed {
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
    pub(super) fn try_take(inner: &Arc<Inner>, on: Claimed, name: &str) -> Option<Self> {
        lock(Self::set(inner, on)).insert(name.to_string()).then(|| Self {
            inner: Arc::downgrade(inner),
            on,
            name: name.to_string(),
        })
    }

    /// The attempt of an entry not yet written: nobody else can know its id.
    pub(super) fn new_entry(inner: &Arc<Inner>, id: &str) -> Self {
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

impl Outbox {
    /// The outbox worker: ships due entries until `stop`. Each peer's are listed on their
    /// own, at most its share of attempts at a time, so no peer's backlog hides another's and
    /// a listing costs the same however many entries wait. Each attempt runs on its own
    /// task, so a peer that does not answer (up to [`ATTEMPT_TIMEOUT`] per attempt) holds
    /// up no other; an entry already being attempted (inline by its send, or by an
    /// earlier tick) is skipped until its outcome is recorded. A silent peer gets one
    /// attempt at a time (see [`Outbox::probe`]), except for entries whose retry window is
    /// over (they expire, see [`Outbox::expire`]) or whose bridge this home revoked. No peer
    /// gets more than [`MAX_ATTEMPTS_PER_PEER`] at once.
    ///
    /// Between passes it sleeps until the next entry falls due or until told of work
    /// ([`Outbox::work_arrived`]: an entry written or made due, an attempt ended), whichever
    /// comes first — never a fixed poll.
    pub(crate) async fn run_worker(&self, stop: CancellationToken) {
        let worker = self.inner.observer.worker("outbox");
        for pass in 0usize.. {
            worker.idle();
            // Taken before the pass: work announced during it starts the next one at once.
            let told = self.inner.outbox_work.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            // Another replica of the home works the outbox meanwhile (taking the duty rings
            // `told`).
            if !self.inner.duty.held() {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = &mut told => {}
                }
                continue;
            }
            worker.busy();
            // Whatever their state: a revoked bridge's entries still have to end.
            let bridges = match self.inner.table.all().await {
                Ok(bridges) => bridges,
                Err(e) => {
                    warn!(error = %e, "cannot read the bridges");
                    worker.failed(&e);
                    Default::default()
                }
            };
            let outbound: Vec<&BridgeRecord> =
                bridges.iter().filter(|b| b.direction == Direction::Outbound).collect();
            // Another peer goes first at each pass, so none always gets the last free slots.
            let first = pass % outbound.len().max(1);
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
                match self.inner.store.outbox_due(peer, self.now(), MAX_ATTEMPTS_PER_PEER as u32).await {
                    Ok(due) => {
                        if !self.ship_due(due).await {
                            break;
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot read the outbox");
                        worker.failed(&e);
                        break;
                    }
                }
            }
            let next_due = self.next_due(&outbound).await;
            let nap = next_due
                .map_or(LOOK_AT_LEAST_EVERY, |at| Duration::from_millis((at - self.now()).max(0) as u64))
                .min(LOOK_AT_LEAST_EVERY);
            worker.idle();
            tokio::select! {
                () = stop.cancelled() => return,
                () = &mut told => {}
                () = self.inner.clock.sleep(nap) => {}
            }
        }
    }

    /// When the first entry of the `outbound` bridges' peers falls due from now on (those
    /// due already are under way, or wait for a slot or a probe: their end is announced).
    async fn next_due(&self, outbound: &[&BridgeRecord]) -> Option<i64> {
        let now = self.now();
        let mut first: Option<i64> = None;
        for bridge in outbound {
            match self.inner.store.outbox_next_due(&bridge.peer_home_id, now).await {
                Ok(due) => first = first.into_iter().chain(due).min(),
                // Looked at again by the backstop.
                Err(e) => warn!(error = %e, "cannot read when the outbox is next due"),
            }
        }
        first
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
            if entry.status != OutboxStatus::Pending && !silent {
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
            let outbox = self.clone();
            self.inner.tasks.spawn(async move {
                let age = age(outbox.now(), &entry);
                let done = match probe {
                    Some(_) => outbox.probe(entry).await,
                    None => outbox.attempt_due(entry).await.map(drop),
                };
                if let Err(e) = done {
                    warn!(error = %e, "outbox attempt failed to record");
                    // Not again at once: the claims are held through a backoff.
                    outbox.inner.clock.sleep(backoff(age)).await;
                }
                drop((claim, probe, slot));
                outbox.work_arrived();
            });
        }
        let slot = follow_ups.first().and_then(|(e, _)| PeerSlot::try_take(&self.inner, &e.peer_home_id));
        if let Some(slot) = slot {
            let (entries, claims): (Vec<_>, Vec<_>) = follow_ups.into_iter().unzip();
            let outbox = self.clone();
            self.inner.tasks.spawn(async move {
                let age = entries.first().map(|e| age(outbox.now(), e)).unwrap_or_default();
                if let Err(e) = outbox.follow_up_due(entries).await {
                    warn!(error = %e, "outbox follow-up failed to record");
                    outbox.inner.clock.sleep(backoff(age)).await;
                }
                drop((claims, slot));
                outbox.work_arrived();
            });
        }
        slots_left
    }

    /// A due entry shipped as the probe of its silent peer: the peer's other entries wait
    /// for its outcome (and the worker does not list them meanwhile). An answer makes them
    /// due again at once (see [`Outbox::link_up`]); silence puts them off until the probe's
    /// next attempt, so a peer that does not answer holds one attempt at a time, not a slot
    /// per entry for [`ATTEMPT_TIMEOUT`] each.
    async fn probe(&self, entry: OutboxRecord) -> Result<()> {
        let (peer, started) = (entry.peer_home_id.clone(), self.now());
        self.put_off(
            &peer,
            &entry.id,
            started + (ATTEMPT_TIMEOUT + PROBE_MARGIN).as_millis() as i64,
            started,
        )
        .await;
        let outcome = self.attempt_due(entry).await?;
        // Unless the probe is over for good (then another entry becomes the next probe).
        if let Some(probe) = outcome.filter(|e| {
            matches!(e.status, OutboxStatus::Pending | OutboxStatus::Accepted)
                && e.next_attempt_at != i64::MAX
        }) && self.silent(&peer)
        {
            let until = probe.next_attempt_at.min(self.now() + BACKOFF_CAP.as_millis() as i64);
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
            && let Err(e) = self.inner.store.outbox_retry_now(peer, self.now()).await
        {
            warn!(error = %e, peer, "cannot make a peer's outbox entries due again");
        }
    }

    /// Whether `peer` has not answered since an attempt that found it silent, or since
    /// this home started (see [`Outbox::link_up`]).
    pub(super) fn silent(&self, peer: &str) -> bool {
        !lock(&self.inner.settled).contains(peer)
    }

    /// The worker's attempt of a due entry (a send again, or the follow-up of an accepted
    /// one), read again once claimed. The outcome recorded, if it was attempted.
    async fn attempt_due(&self, listed: OutboxRecord) -> Result<Option<OutboxRecord>> {
        let Some(entry) = self.still_due(&listed).await? else {
            return Ok(None);
        };
        let peer = entry.peer_home_id.clone();
        let outcomes = match entry.status {
            OutboxStatus::Pending => vec![self.attempt(entry, None).await?],
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
            due.extend(self.still_due(entry).await?.filter(|e| e.status != OutboxStatus::Pending));
        }
        let Some(peer) = due.first().map(|e| e.peer_home_id.clone()) else {
            return Ok(());
        };
        let outcomes = self.follow_up(due).await?;
        let resets = self.resets(&peer);
        self.record(&outcomes, |_| resets).await
    }

    /// The entry as it stands now, if still due: an earlier attempt may have recorded an
    /// outcome after the worker's tick listed it.
    async fn still_due(&self, listed: &OutboxRecord) -> Result<Option<OutboxRecord>> {
        let current =
            self.inner.store.outbox_by_key(&listed.peer_home_id, &listed.key_scope, &listed.key).await?;
        Ok(current.filter(|e| {
            e.next_attempt_at <= self.now()
                && matches!(e.status, OutboxStatus::Pending | OutboxStatus::Accepted | OutboxStatus::Expired)
        }))
    }

    /// The bridge to call about the entry; none once its window is over (it then expires,
    /// and the target is asked with `window_over`, see [`Outbox::expire`]) or the bridge is
    /// revoked here or gone (its fate then needs no call). Such entries do not wait for a
    /// silent peer's probe.
    async fn bridge_to_call(&self, entry: &OutboxRecord) -> Result<Option<BridgeRecord>> {
        if self.window_over(entry) {
            return Ok(None);
        }
        self.inner.table.find(|b| b.id == entry.bridge_id && !b.revoked_here()).await
    }

    /// Whether calls still go to `peer`: an outbound bridge to it is not revoked here.
    /// Otherwise its entries need no call (they end as `bridge_revoked` or `bridge_removed`).
    async fn calls_go_to(&self, peer: &str) -> bool {
        let Ok(bridges) = self.inner.table.all().await else { return true };
        bridges
            .iter()
            .any(|b| b.direction == Direction::Outbound && !b.revoked_here() && b.peer_home_id == peer)
    }
}
