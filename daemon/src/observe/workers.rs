//! The home's background work as named workers (as garage's `Worker`s are): each long-running
//! loop of the home registers itself, says whether it is working or waiting for work, and
//! keeps its last failure, so that `kiki status --workers` shows what the home is doing and
//! what went wrong without reading its log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::store::{Millis, words};
use crate::sync::lock;
use crate::time::Clock;

words! {
    /// What a worker is doing.
    WorkerState {
        /// Waiting for work.
        Idle => "idle",
        /// Working on a round.
        Busy => "busy",
        /// Its loop ended.
        Stopped => "stopped",
    }
}

/// Every worker the home started, in the order it started them.
#[derive(Default)]
pub struct Workers {
    list: std::sync::Mutex<Vec<Arc<Slot>>>,
}

/// What a worker last told.
struct Slot {
    name: &'static str,
    /// A [`WorkerState`], by its place in [`WorkerState::ALL`].
    state: AtomicU8,
    rounds: AtomicU64,
    last_error: std::sync::Mutex<Option<(Millis, String)>>,
}

/// A worker as its list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerView {
    pub name: &'static str,
    pub state: WorkerState,
    pub rounds: u64,
    pub last_error: Option<(Millis, String)>,
}

/// A running worker's handle: it tells its state through it; dropped (its loop ended), the
/// worker is `stopped`.
pub struct Worker {
    slot: Arc<Slot>,
    clock: Clock,
}

impl Workers {
    /// Registers a worker named `name`, waiting for work.
    pub fn start(&self, name: &'static str, clock: &Clock) -> Worker {
        let slot = Arc::new(Slot {
            name,
            state: AtomicU8::new(WorkerState::Idle as u8),
            rounds: AtomicU64::new(0),
            last_error: Default::default(),
        });
        lock(&self.list).push(slot.clone());
        Worker { slot, clock: clock.clone() }
    }

    pub fn list(&self) -> Vec<WorkerView> {
        lock(&self.list)
            .iter()
            .map(|slot| WorkerView {
                name: slot.name,
                state: slot.state(),
                rounds: slot.rounds.load(Ordering::Relaxed),
                last_error: lock(&slot.last_error).clone(),
            })
            .collect()
    }
}

impl Slot {
    fn state(&self) -> WorkerState {
        let state = self.state.load(Ordering::Acquire);
        WorkerState::ALL.get(usize::from(state)).copied().unwrap_or(WorkerState::Idle)
    }

    fn set(&self, state: WorkerState) {
        self.state.store(state as u8, Ordering::Release);
    }
}

impl Worker {
    /// It works on a round.
    pub fn busy(&self) {
        self.slot.set(WorkerState::Busy);
        self.slot.rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// It waits for work.
    pub fn idle(&self) {
        self.slot.set(WorkerState::Idle);
    }

    /// Its round failed with `error` (kept until the next one).
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        *lock(&self.slot.last_error) = Some((self.clock.now_ms(), error.to_string()));
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.slot.set(WorkerState::Stopped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_tells_its_state_its_rounds_and_its_last_failure() {
        let (workers, clock) = (Workers::default(), Clock::manual(5));
        let outbox = workers.start("outbox", &clock);
        let beat = workers.start("heartbeat", &clock);
        outbox.busy();
        outbox.failed(&"peer unreachable");
        beat.busy();
        beat.idle();
        drop(beat);
        let listed = workers.list();
        assert_eq!(
            listed,
            [
                WorkerView {
                    name: "outbox",
                    state: WorkerState::Busy,
                    rounds: 1,
                    last_error: Some((5, "peer unreachable".into()))
                },
                WorkerView { name: "heartbeat", state: WorkerState::Stopped, rounds: 1, last_error: None },
            ]
        );
    }
}
