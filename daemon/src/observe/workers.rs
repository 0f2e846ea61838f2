//! The home's background work as named workers (as garage's `Worker`s are): each long-running
//! loop of the home registers itself, says whether it is working or waiting for work, and
//! keeps its last failure, so that `kiki status --workers` shows what the home is doing and
//! what went wrong without reading its log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::store::Millis;
use crate::sync::lock;
use crate::time::Clock;

const IDLE: u8 = 0;
const BUSY: u8 = 1;
const STOPPED: u8 = 2;

/// Every worker the home started, in the order it started them.
#[derive(Default)]
pub struct Workers {
    list: std::sync::Mutex<Vec<Arc<Slot>>>,
}

/// What a worker last told.
struct Slot {
    name: &'static str,
    state: AtomicU8,
    rounds: AtomicU64,
    last_error: std::sync::Mutex<Option<(Millis, String)>>,
}

/// A worker as its list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerView {
    pub name: &'static str,
    pub state: &'static str,
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
            state: AtomicU8::new(IDLE),
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
                state: match slot.state.load(Ordering::Acquire) {
                    BUSY => "busy",
                    STOPPED => "stopped",
                    _ => "idle",
                },
                rounds: slot.rounds.load(Ordering::Relaxed),
                last_error: lock(&slot.last_error).clone(),
            })
            .collect()
    }
}

impl Worker {
    /// It works on a round.
    pub fn busy(&self) {
        self.slot.state.store(BUSY, Ordering::Release);
        self.slot.rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// It waits for work.
    pub fn idle(&self) {
        self.slot.state.store(IDLE, Ordering::Release);
    }

    /// Its round failed with `error` (kept until the next one).
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        *lock(&self.slot.last_error) = Some((self.clock.now_ms(), error.to_string()));
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.slot.state.store(STOPPED, Ordering::Release);
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
                    state: "busy",
                    rounds: 1,
                    last_error: Some((5, "peer unreachable".into()))
                },
                WorkerView { name: "heartbeat", state: "stopped", rounds: 1, last_error: None },
            ]
        );
    }
}
