//! Runs turns: one at a time per thread, different threads concurrently.
//!
//! Input is queued durably first (`Store::enqueue_input`), then the thread is *kicked*. A
//! kicked thread gets one task that claims turns until its queue is empty; a kick that
//! arrives while that task runs marks the thread dirty, so the task looks again before it
//! exits and no input is stranded.
//!
//! A turn in flight when the daemon stops (cleanly or by a crash) is recorded as
//! **failed**, never re-run: an agent's side effects may already have happened, and
//! running it twice is worse than asking the user to retry. Input queued behind it is
//! kept and runs after the restart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngCore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, error, info, info_span, warn};

use crate::config::Config;
use crate::executors::{self, TurnFailure, TurnInput};
use crate::mailbox::signals::Signals;
use crate::mailbox::switches;
use crate::store::{ClaimedTurn, Store, TurnOutcome, TurnStatus};
use crate::threads::new_id;
use crate::time::now_ms;

/// Recorded as the error of a turn that was running when its daemon stopped.
pub const INTERRUPTED: &str = "kikid stopped while the turn was running; the turn was not re-run";

/// The thread and turn a `KIKI_TOKEN` belongs to, while that turn runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnCaller {
    pub thread_id: String,
    pub turn_id: String,
}

#[derive(Clone)]
pub struct TurnRunner {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    config: Arc<Config>,
    home: PathBuf,
    /// Threads with a runner task; `true` if kicked again since the task last looked.
    active: Mutex<HashMap<String, bool>>,
    /// Live turn tokens → their turn. In memory only: a restart ends every turn.
    tokens: Mutex<HashMap<String, TurnCaller>>,
    /// Wakes callers parked on a thread when its turn takes messages or ends.
    signals: Signals,
    tasks: TaskTracker,
    stop: CancellationToken,
}

impl TurnRunner {
    pub fn new(store: Arc<dyn Store>, config: Arc<Config>, home: PathBuf, signals: Signals) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                config,
                home,
                active: Mutex::new(HashMap::new()),
                tokens: Mutex::new(HashMap::new()),
                signals,
                tasks: TaskTracker::new(),
                stop: CancellationToken::new(),
            }),
        }
    }

    /// Makes sure the thread's queued input will be run.
    pub fn kick(&self, thread_id: &str) {
        if self.inner.stop.is_cancelled() {
            return; // the restart picks the queue up
        }
        let mut active = lock(&self.inner.active);
        if let Some(dirty) = active.get_mut(thread_id) {
            *dirty = true;
            return;
        }
        active.insert(thread_id.to_string(), true);
        drop(active);
        let inner = self.inner.clone();
        let thread_id = thread_id.to_string();
        let span = info_span!("thread", thread_id = %thread_id);
        self.inner.tasks.spawn(async move { inner.drain(thread_id).await }.instrument(span));
    }

    /// The running turn a token belongs to.
    pub fn caller(&self, token: &str) -> Option<TurnCaller> {
        lock(&self.inner.tokens).get(token).cloned()
    }

    /// Stops every turn (recording it as failed) and waits for the tasks to finish.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Inner {
    async fn drain(&self, thread_id: String) {
        loop {
            {
                let mut active = lock(&self.active);
                let dirty = active.get_mut(&thread_id).map(std::mem::take).unwrap_or(false);
                if !dirty || self.stop.is_cancelled() {
                    active.remove(&thread_id);
                    return;
                }
            }
            loop {
                if self.stop.is_cancelled() {
                    break;
                }
                let turn_id = new_id("tu");
                // Peer messages wait while the thread's communication is off.
                let take_messages = match self.store.thread(&thread_id).await {
                    Ok(Some(thread)) => switches::communication(&self.config, &thread).is_ok(),
                    Ok(None) => break,
                    Err(e) => {
                        error!(error = %e, "cannot read the thread; will retry on the next input");
                        break;
                    }
                };
                let claimed = self
                    .store
                    .claim_turn(&thread_id, &turn_id, take_messages, executors::render, now_ms())
                    .await;
                match claimed {
                    Ok(Some(turn)) => {
                        self.signals.notify(&thread_id);
                        self.run(turn).await;
                        self.signals.notify(&thread_id);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        error!(error = %e, "cannot start a turn; will retry on the next input");
                        break;
                    }
                }
            }
        }
    }

    async fn run(&self, claimed: ClaimedTurn) {
        let turn = &claimed.turn;
        let thread = match self.store.thread(&turn.thread_id).await {
            Ok(Some(thread)) => thread,
            Ok(None) => return self.finish(turn_failed(&turn.id, "the thread no longer exists")).await,
            Err(e) => return self.finish(turn_failed(&turn.id, &format!("store: {e}"))).await,
        };
        let Some(profile) = self.config.profile(&thread.profile) else {
            let reason = format!("profile {:?} is not configured in this home", thread.profile);
            return self.finish(turn_failed(&turn.id, &reason)).await;
        };
        let token = new_token();
        lock(&self.tokens).insert(
            token.clone(),
            TurnCaller { thread_id: turn.thread_id.clone(), turn_id: turn.id.clone() },
        );
        info!(turn_id = %turn.id, seq = turn.seq, profile = %thread.profile, "turn started");
        let cwd = PathBuf::from(&thread.cwd);
        let input = TurnInput {
            items: &claimed.inputs,
            rendered: &turn.input,
            cwd: &cwd,
            env: vec![
                ("KIKI_HOME", self.home.display().to_string()),
                ("KIKI_THREAD_ID", turn.thread_id.clone()),
                ("KIKI_TOKEN", token.clone()),
            ],
            max_output_bytes: self.config.turns.max_output_bytes,
        };
        let result = tokio::select! {
            result = executors::run(&profile, input) => result,
            () = self.stop.cancelled() => Err(TurnFailure { output: String::new(), error: INTERRUPTED.into() }),
        };
        lock(&self.tokens).remove(&token);
        let outcome = match result {
            Ok(output) => TurnOutcome {
                turn_id: turn.id.clone(),
                status: TurnStatus::Completed,
                output,
                error: String::new(),
                now: now_ms(),
            },
            Err(failure) => TurnOutcome {
                turn_id: turn.id.clone(),
                status: TurnStatus::Failed,
                output: failure.output,
                error: failure.error,
                now: now_ms(),
            },
        };
        info!(turn_id = %turn.id, status = outcome.status.as_str(), "turn ended");
        self.finish(outcome).await;
    }

    /// Records the outcome, retrying briefly: a thread must not stay "running" because one
    /// write failed. If it still fails, the next start's recovery marks the turn failed.
    async fn finish(&self, outcome: TurnOutcome) {
        for attempt in 1..=5u32 {
            match self.store.finish_turn(&outcome).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(error = %e, attempt, turn_id = %outcome.turn_id, "cannot record the turn's end");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                }
            }
        }
        error!(turn_id = %outcome.turn_id, "gave up recording the turn's end; it is failed at the next start");
    }
}

fn turn_failed(turn_id: &str, reason: &str) -> TurnOutcome {
    TurnOutcome {
        turn_id: turn_id.to_string(),
        status: TurnStatus::Failed,
        output: String::new(),
        error: reason.to_string(),
        now: now_ms(),
    }
}

/// 256 random bits, hex.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
