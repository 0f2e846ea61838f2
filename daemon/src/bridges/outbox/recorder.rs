//! The recorder: answered sends' outcomes written together. A send's answer does not wait
//! for its outcome's write; until it lands, a send with the same key, the receipts and the
//! pending counts read the outcome here.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::worker::Claim;
use super::{MAX_QUEUED_OUTCOMES, Outbox, Outcome, RECORD_LINGER};
use crate::error::Result;
use crate::store::OutboxRecord;
use crate::store::OutboxStatus;
use crate::sync::{SendKey, lock};

/// Answered sends whose outcomes are on their way to the store (see
/// [`Outbox::run_recorder`]). Until the store has an outcome, a send with its key, the
/// receipts and the pending count read it here.
#[derive(Default)]
pub(crate) struct Recording {
    pub(super) answered: HashMap<SendKey, Answered>,
    /// The keys of the outcomes not yet being written, oldest first.
    pub(super) queued: Vec<SendKey>,
    /// The home is stopping and the recorder is done: a send answered now writes its own
    /// outcome (one still under way when the shutdown grace ran out).
    pub(super) closed: bool,
}

/// An answered send's outcome, with its peer's resets as it was decided (see
/// [`Outbox::record`]) and the claim on its entry: the worker leaves the entry alone until
/// the outcome is written.
pub(super) struct Answered {
    pub(super) outcome: Outcome,
    pub(super) resets: u64,
    pub(super) _claim: Claim,
}

impl Recording {
    /// The outbox entries as their outcomes will be written.
    pub(super) fn entries(&self) -> impl Iterator<Item = &OutboxRecord> {
        self.answered.values().map(|a| &a.outcome.0)
    }
}

impl Outbox {
    /// The recorder: writes answered sends' outcomes until `stop` (then `Outbox::close`
    /// writes what is left). A write waits [`RECORD_LINGER`] after the first outcome queued,
    /// or until [`MAX_QUEUED_OUTCOMES`] are, and carries all of them.
    pub(crate) async fn run_recorder(&self, stop: CancellationToken) {
        let worker = self.inner.observer.worker("outbox recorder");
        loop {
            worker.idle();
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.inner.outcomes_queued.notified() => {}
            }
            worker.busy();
            // Real time: a linger batching writes, no timing of the home's.
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
    pub(crate) async fn record_answered(&self, last: bool) {
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
        // Their claims are free: an entry whose write failed is due to the worker again.
        self.work_arrived();
    }

    /// Saves the outcomes of attempts, in one write; a final failure's event wakes the
    /// sending thread's waiters. `resets(i)` gives the `i`th outcome's peer's resets as read
    /// when it was decided: should the peer have answered after a silence since (another
    /// call's `link_up` made its entries due), a backoff decided before that must not put its
    /// entry off again.
    pub(super) async fn record(&self, outcomes: &[Outcome], resets: impl Fn(usize) -> u64) -> Result<()> {
        self.inner.store.outbox_update(outcomes).await?;
        self.work_arrived();
        for (entry, event) in outcomes {
            if let Some(event) = event {
                warn!(message_id = %entry.id, status = %entry.status, reason = %entry.reason, thread_id = %event.thread_id, "bridged send undeliverable");
            }
        }
        let mut put_off_again: Vec<&str> = outcomes
            .iter()
            .enumerate()
            .filter(|(i, (e, _))| {
                matches!(e.status, OutboxStatus::Pending | OutboxStatus::Accepted)
                    && self.resets(&e.peer_home_id) != resets(*i)
            })
            .map(|(_, (e, _))| e.peer_home_id.as_str())
            .collect();
        put_off_again.sort_unstable();
        put_off_again.dedup();
        for peer in put_off_again {
            // The outcomes are written; at worst these entries wait out their backoff.
            if let Err(e) = self.inner.store.outbox_retry_now(peer, self.now()).await {
                warn!(error = %e, peer, "cannot make a peer's outbox entries due again");
            }
        }
        Ok(())
    }
}
