//! This kikid as one of the home's replicas (see docs/design/replicas.md): its record and
//! heartbeat, taking over what replicas gone left running, and which replica works the
//! outbox.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kiki_proto::home::HomeDir;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::boot::Task;
use crate::executors::agent::Agent;
use crate::store::{ReplicaRecord, Store};
use crate::threads::runner::{INTERRUPTED, TurnRunner};
use crate::time::{self, Clock};

/// This process as one of the home's replicas, made as it starts (a restart is a new one);
/// its bridge address is known once its endpoint is bound.
pub(crate) fn this_replica(home: &HomeDir, clock: &Clock) -> ReplicaRecord {
    let now = clock.now_ms();
    ReplicaRecord {
        id: crate::threads::new_id("rep"),
        host: kiki_proto::home::host_name(),
        home: home.root().display().to_string(),
        pid: std::process::id(),
        bridge_listen: String::new(),
        started_at: now,
        heartbeat_at: now,
    }
}

/// Writes this replica's first heartbeat (before the home answers, so that its status
/// lists it), then one every third of the lease until shutdown, and takes it off the record
/// as it stops. After each heartbeat that landed it takes over what replicas silent for a
/// lease left running (see [`take_over`]) and has the runner go on with their threads'
/// queues; one whose own heartbeat did not land takes over nothing, and works no outbox
/// (see [`OutboxDuty`]), nor does it for a lease after its heartbeats land again. Replicas silent for an hour are forgotten by the others'
/// heartbeats.
pub(crate) async fn heartbeat(
    store: Arc<dyn Store>,
    mut replica: ReplicaRecord,
    lease: Duration,
    runner: TurnRunner,
    duty: Arc<OutboxDuty>,
    shutdown: CancellationToken,
) -> Task {
    async fn beat(store: &dyn Store, replica: &mut ReplicaRecord, clock: &Clock) -> bool {
        const FORGET_AFTER: Duration = Duration::from_secs(3600);
        replica.heartbeat_at = clock.now_ms();
        let forget_before = replica.heartbeat_at - time::ms(FORGET_AFTER);
        match store.heartbeat(replica, forget_before).await {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %e, "cannot write this replica's heartbeat");
                false
            }
        }
    }
    let clock = runner.clock().clone();
    let worker = runner.observer().worker("heartbeat");
    let landed = beat(&*store, &mut replica, &clock).await;
    duty.decide(landed, &*store, &replica, lease).await;
    let handle = tokio::spawn(async move {
        // Back from a time without the store, this replica's heartbeats were not the only
        // ones that could not land: it gives the others a lease to beat again before it
        // judges any of them gone (takes over their turns, or the outbox from them).
        let (mut cut_off, mut judge_from) = (!landed, 0);
        loop {
            worker.idle();
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = clock.sleep(lease / 3) => {}
            }
            worker.busy();
            let landed = beat(&*store, &mut replica, &clock).await;
            if !landed {
                worker.failed(&"this replica's heartbeat did not land (see the log)");
            }
            if landed && cut_off {
                judge_from = replica.heartbeat_at + time::ms(lease);
            }
            cut_off = !landed;
            let judging = landed && replica.heartbeat_at >= judge_from;
            duty.decide(judging, &*store, &replica, lease).await;
            if !judging {
                continue;
            }
            match take_over(&*store, &clock, replica.heartbeat_at - time::ms(lease)).await {
                Ok(threads) => threads.iter().for_each(|thread| runner.kick(thread)),
                Err(e) => {
                    warn!(error = %e, "cannot take over the turns of replicas gone");
                    worker.failed(&e);
                }
            }
        }
        if let Err(e) = store.retire_replica(&replica.id).await {
            warn!(error = %e, "cannot take this replica off the record");
        }
    });
    Task { name: "heartbeat", handle }
}

/// Fails the running turns of the replicas gone (none with a heartbeat at or after
/// `live_since`): never re-run, an agent left running on this machine is stopped, and an
/// `exec` turn whose agent never got its input gives its messages back as undeliverable.
/// Returns their threads.
pub(crate) async fn take_over(
    store: &dyn Store,
    clock: &Clock,
    live_since: time::Millis,
) -> Result<Vec<String>, crate::store::StoreError> {
    let turns = store.interrupted_turns(live_since).await?;
    if turns.is_empty() {
        return Ok(Vec::new());
    }
    let mut stopped = 0;
    for turn in turns {
        match turn.agent.as_deref() {
            // An exec agent never described never got its input: nothing was delivered.
            Some("") => {
                store.undeliver_turn_messages(&turn.turn_id, "kikid_stopped", clock.now_ms()).await?;
            }
            Some(record) => stopped += usize::from(Agent::from_record(record).is_some_and(|a| a.stop())),
            None => {}
        }
    }
    if stopped > 0 {
        warn!(agents = stopped, "stopped agent processes left running by the last stop");
    }
    let interrupted = store.fail_interrupted_turns(INTERRUPTED, clock.now_ms(), live_since).await?;
    if !interrupted.is_empty() {
        warn!(turns = interrupted.len(), "marked turns interrupted by the last stop as failed");
    }
    Ok(interrupted)
}

/// Whether this replica works the home's outbox: retries, probes and follow-ups (a send's
/// first attempt is made by the replica that accepted it). One replica at a time does, the
/// longest running of those alive, so that no entry is worked twice at once; when it is
/// gone, the next takes the duty at its next heartbeat after the lease. Decided at every
/// heartbeat; a replica whose heartbeat did not land gives it up.
#[derive(Debug)]
pub struct OutboxDuty {
    held: AtomicBool,
    /// Rung when the duty is taken up, for the worker to look at once.
    work: Arc<tokio::sync::Notify>,
}

impl OutboxDuty {
    pub fn new(work: Arc<tokio::sync::Notify>) -> Self {
        Self { held: AtomicBool::new(false), work }
    }

    /// Whether this replica works the outbox now.
    pub fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    async fn decide(&self, landed: bool, store: &dyn Store, me: &ReplicaRecord, lease: Duration) {
        let held = landed
            && match store.replicas().await {
                Ok(replicas) => works_outbox(&me.id, &replicas, me.heartbeat_at - time::ms(lease)),
                Err(e) => {
                    warn!(error = %e, "cannot read the home's replicas");
                    self.held()
                }
            };
        if held && !self.held.swap(true, Ordering::AcqRel) {
            self.work.notify_one();
        } else if !held {
            self.held.store(false, Ordering::Release);
        }
    }
}

/// Whether `me` is the replica that works the outbox: the longest running of the replicas
/// alive (a heartbeat at or after `live_since`), the lowest id among equals.
pub(crate) fn works_outbox(me: &str, replicas: &[ReplicaRecord], live_since: time::Millis) -> bool {
    replicas
        .iter()
        .filter(|r| r.heartbeat_at >= live_since)
        .min_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)))
        .is_some_and(|first| first.id == me)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(id: &str, started_at: i64, heartbeat_at: i64) -> ReplicaRecord {
        ReplicaRecord {
            id: id.into(),
            host: "box".into(),
            home: "/h".into(),
            pid: 1,
            bridge_listen: String::new(),
            started_at,
            heartbeat_at,
        }
    }

    #[test]
    fn the_longest_running_live_replica_works_the_outbox() {
        let replicas = [replica("rep_b", 10, 500), replica("rep_a", 20, 500), replica("rep_c", 5, 100)];
        // rep_c started first but is silent since before 400: rep_b has the duty.
        assert!(works_outbox("rep_b", &replicas, 400));
        assert!(!works_outbox("rep_a", &replicas, 400));
        assert!(!works_outbox("rep_c", &replicas, 400));
        assert!(works_outbox("rep_c", &replicas, 50), "alive, it has it");
        let tied = [replica("rep_y", 10, 500), replica("rep_x", 10, 500)];
        assert!(works_outbox("rep_x", &tied, 400) && !works_outbox("rep_y", &tied, 400));
        assert!(!works_outbox("rep_x", &[], 0), "not on record: not its");
    }
}
