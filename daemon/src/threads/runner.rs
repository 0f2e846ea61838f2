//! Runs turns: one at a time per thread, different threads concurrently.
//!
//! Input is queued durably first (`Store::enqueue_input`), then the thread is *kicked*. A
//! kicked thread gets one task that claims turns until its queue is empty; a kick that
//! arrives while that task runs marks the thread dirty, so the task looks again before it
//! exits and no input is stranded. A turn claimed elsewhere — a send that started an idle
//! thread's turn in the transaction that stored it — is *handed over* to that same task.
//!
//! A turn in flight when the daemon stops (cleanly or by a crash) is recorded as
//! **failed**, never re-run: an agent's side effects may already have happened, and
//! running it twice is worse than asking the user to retry. Input queued behind it is
//! kept and runs after the restart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use rand::RngCore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span, error, info, info_span, warn};

use crate::config::{Config, ExecutorKind, ProfileConfig};
use crate::executors::agent::Agent;
use crate::executors::desk::{Desk, TurnDesk};
use crate::executors::{self, AgentReport, Live, OnAgentStart, TurnFailure, TurnInput};
use crate::store::{
    ClaimedTurn, EventRecord, Store, ThreadRecord, TurnClaim, TurnOutcome, TurnRecord, TurnStatus,
};
use crate::sync::lock;
use crate::threads::new_id;
use crate::threads::switches;
use crate::time::Clock;

/// Backoff between retries of a failed store write (doubling up to the cap).
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Recorded as the error of a turn that was running when its daemon stopped.
pub const INTERRUPTED: &str = "kikid stopped while the turn was running; the turn was not re-run";

/// How the error of a turn its owner stopped starts (then what the agent said as it ended).
pub const STOPPED: &str = "stopped by its owner (kiki thread stop)";

/// The thread and turn a `KIKI_TOKEN` belongs to, while that turn runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnCaller {
    pub thread_id: String,
    pub turn_id: String,
}

/// What running a turn's agent came to.
struct Ran {
    result: Result<String, TurnFailure>,
    /// kikid stopped during the turn.
    stopped: bool,
    /// The owner stopped the turn (`kiki thread stop`).
    owner_stopped: bool,
    report: AgentReport,
}

/// A turn being run: how its owner stops it, and how the stop learns it ended.
struct RunningTurn {
    turn_id: String,
    started_at: crate::store::Millis,
    stop: CancellationToken,
    /// Cancelled once the turn's end is recorded.
    ended: CancellationToken,
}

/// The owner's stop of a running turn, under way (see [`TurnRunner::stop`]).
#[derive(Debug, Clone)]
pub struct Stopping {
    pub turn_id: String,
    /// Cancelled once the turn's end is recorded.
    pub ended: CancellationToken,
}

/// Unregisters a thread's running turn when its run is over, however it ends.
struct RunGuard<'a> {
    running: &'a Mutex<HashMap<String, RunningTurn>>,
    thread_id: String,
    ended: CancellationToken,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        lock(self.running).remove(&self.thread_id);
        self.ended.cancel();
    }
}

/// What a thread's runner task has yet to look at.
#[derive(Default)]
struct Activity {
    /// Kicked since the task last looked at the queue.
    dirty: bool,
    /// A turn claimed elsewhere, to run next, with the span of the call that claimed it
    /// (the turn's trace continues that call's). At most one: the thread is marked running
    /// until that turn ends, so no other claim can succeed before the task takes it.
    handoff: Option<Box<(ThreadRecord, ClaimedTurn, Span)>>,
}

#[derive(Clone)]
pub struct TurnRunner {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    config: Arc<Config>,
    home: PathBuf,
    /// The home's clock: turns' times, retry pauses.
    clock: Clock,
    /// This process among the home's replicas: its claims are its turns.
    replica: String,
    /// The home's metrics and event feed (turns started and ended).
    observer: Arc<crate::observe::Observer>,
    /// Makes its turns' tokens.
    token_key: TokenKey,
    /// Threads with a runner task, and what that task has yet to look at.
    active: Mutex<HashMap<String, Activity>>,
    /// Live turn tokens → their turn. In memory only: a restart ends every turn.
    tokens: Mutex<HashMap<String, TurnCaller>>,
    /// The turn each thread is running, for its owner to stop.
    running: Mutex<HashMap<String, RunningTurn>>,
    /// Answers what executors ask for mid-turn (the mailbox; set once it exists).
    desk: OnceLock<Weak<dyn Desk>>,
    tasks: TaskTracker,
    stop: CancellationToken,
}

impl TurnRunner {
    pub fn new(
        store: Arc<dyn Store>,
        config: Arc<Config>,
        home: PathBuf,
        clock: Clock,
        replica: String,
        observer: Arc<crate::observe::Observer>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                config,
                home,
                clock,
                replica,
                observer,
                token_key: TokenKey::new(),
                active: Mutex::new(HashMap::new()),
                tokens: Mutex::new(HashMap::new()),
                running: Mutex::new(HashMap::new()),
                desk: OnceLock::new(),
                tasks: TaskTracker::new(),
                stop: CancellationToken::new(),
            }),
        }
    }

    /// The home's clock.
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// The home's observer: its metrics and event feed.
    pub fn observer(&self) -> &Arc<crate::observe::Observer> {
        &self.inner.observer
    }

    /// The turns this process runs now: (thread, turn, when it started).
    pub fn running(&self) -> Vec<(String, String, crate::store::Millis)> {
        lock(&self.inner.running)
            .iter()
            .map(|(thread, turn)| (thread.clone(), turn.turn_id.clone(), turn.started_at))
            .collect()
    }

    /// Gives executors the mailbox to ask for permissions and mid-turn input (see
    /// [`executors::desk`]). Held weakly: the mailbox holds this runner.
    pub fn set_desk(&self, desk: Weak<dyn Desk>) {
        let _ = self.inner.desk.set(desk);
    }

    /// Makes sure the thread's queued input will be run.
    pub fn kick(&self, thread_id: &str) {
        if self.inner.stop.is_cancelled() {
            return; // the restart picks the queue up
        }
        self.wake(thread_id, Activity { dirty: true, handoff: None });
    }

    /// Runs a turn claimed elsewhere (in the transaction that stored its input), then goes
    /// on with the thread's queue.
    pub fn start_claimed(&self, thread: ThreadRecord, claimed: ClaimedTurn) {
        if self.inner.stop.is_cancelled() {
            return; // the restart records the turn as interrupted
        }
        let id = thread.id.clone();
        let handoff = Some(Box::new((thread, claimed, Span::current())));
        self.wake(&id, Activity { dirty: false, handoff });
    }

    /// Gives `work` to the thread's task, starting one if it has none.
    fn wake(&self, thread_id: &str, work: Activity) {
        let mut active = lock(&self.inner.active);
        if let Some(activity) = active.get_mut(thread_id) {
            activity.dirty |= work.dirty;
            if work.handoff.is_some() {
                activity.handoff = work.handoff;
            }
            return;
        }
        active.insert(thread_id.to_string(), work);
        drop(active);
        let inner = self.inner.clone();
        let thread_id = thread_id.to_string();
        let span = info_span!("thread", thread_id = %thread_id);
        self.inner.tasks.spawn(async move { inner.drain(thread_id).await }.instrument(span));
    }

    /// How to start `thread`'s next turn, for a claim made outside the runner (see
    /// [`TurnRunner::start_claimed`]).
    pub fn claim_for(&self, thread: &ThreadRecord) -> TurnClaim {
        self.inner.new_claim(thread)
    }

    /// The running turn a token belongs to: one this replica runs, else one another
    /// replica of the home runs (found in the store by the token's hash).
    pub async fn caller(&self, token: &str) -> Result<Option<TurnCaller>, crate::store::StoreError> {
        if let Some(caller) = lock(&self.inner.tokens).get(token).cloned() {
            return Ok(Some(caller));
        }
        let turn = self.inner.store.turn_of_token(&token_hash(token)).await?;
        Ok(turn.map(|(thread_id, turn_id)| TurnCaller { thread_id, turn_id }))
    }

    /// Whether the caller's turn still runs (its token still works), here or on another
    /// replica. While the store cannot say, it is taken to run (a wait keeps its own bound).
    pub async fn is_running(&self, caller: &TurnCaller) -> bool {
        if lock(&self.inner.tokens).values().any(|running| running == caller) {
            return true;
        }
        match self.inner.store.turn(&caller.thread_id, &caller.turn_id).await {
            Ok(turn) => turn.is_some_and(|turn| turn.status == TurnStatus::Running),
            Err(_) => true,
        }
    }

    /// Stops the thread's running turn (see [`TurnInput::stop`]): its agent is interrupted
    /// and the turn ends `cancelled`. `None` if the runner runs no turn of the thread (none
    /// is running, or one just claimed has not started yet).
    pub fn stop(&self, thread_id: &str) -> Option<Stopping> {
        let running = lock(&self.inner.running);
        let turn = running.get(thread_id)?;
        turn.stop.cancel();
        Some(Stopping { turn_id: turn.turn_id.clone(), ended: turn.ended.clone() })
    }

    /// Why `thread` starts no turn because its agents have spent its profile's budget
    /// (`max_cost_usd`); `None` if it has none or has not spent it.
    pub async fn budget_spent(
        &self,
        thread: &ThreadRecord,
    ) -> Result<Option<String>, crate::store::StoreError> {
        let Some(budget) = self.inner.config.profile(&thread.profile).and_then(|p| p.max_cost_usd) else {
            return Ok(None);
        };
        let total = self.inner.store.cost(Some(&thread.id)).await?;
        Ok((total >= budget).then(|| {
            format!(
                "no turn started: {}; the input waits until the profile's budget is raised and kikid \
                 restarted",
                spent(total, budget)
            )
        }))
    }

    /// Stops every turn (recording it as failed) and waits for the tasks to finish.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

impl Inner {
    async fn drain(&self, thread_id: String) {
        let mut retry = RETRY_FIRST;
        loop {
            let handoff = {
                let mut active = lock(&self.active);
                let Some(activity) = active.get_mut(&thread_id) else { return };
                if self.stop.is_cancelled() || !activity.dirty && activity.handoff.is_none() {
                    active.remove(&thread_id);
                    return;
                }
                activity.dirty = false;
                activity.handoff.take()
            };
            if let Some(handoff) = handoff {
                let (thread, turn, cause) = *handoff;
                let stopped = self.run(&thread, turn, cause).await;
                if stopped {
                    self.hold(&thread_id);
                    continue;
                }
            }
            while !self.stop.is_cancelled() {
                match self.claim(&thread_id).await {
                    Ok(Some((thread, turn))) => {
                        retry = RETRY_FIRST;
                        let stopped = self.run(&thread, turn, Span::none()).await;
                        if stopped {
                            self.hold(&thread_id);
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        // Queued input must not be stranded by a passing store error: keep
                        // the thread active and try again.
                        error!(error = %e, retry_in = ?retry, "cannot start a turn");
                        if !self.pause(retry).await {
                            break;
                        }
                        retry = (retry * 2).min(RETRY_MAX);
                    }
                }
            }
        }
    }

    /// After a turn its owner stopped, the input already queued waits: the owner stopped the
    /// agent, not only that turn. New input (or kikid's next start) starts the next turn,
    /// which takes all of it.
    fn hold(&self, thread_id: &str) {
        if let Some(activity) = lock(&self.active).get_mut(thread_id) {
            activity.dirty = false;
        }
    }

    /// Starts the thread's next turn if it has input to take.
    /// The thread (read once: its cwd and profile never change) and its new turn, if any.
    async fn claim(
        &self,
        thread_id: &str,
    ) -> Result<Option<(ThreadRecord, ClaimedTurn)>, crate::store::StoreError> {
        let Some(thread) = self.store.thread(thread_id).await? else {
            return Ok(None);
        };
        let claimed = self.store.claim_turn(thread_id, self.new_claim(&thread), self.clock.now_ms()).await?;
        Ok(claimed.map(|turn| (thread, turn)))
    }

    /// Sleeps for `delay`; `false` if the daemon is stopping.
    async fn pause(&self, delay: Duration) -> bool {
        tokio::select! {
            () = self.stop.cancelled() => false,
            () = self.clock.sleep(delay) => true,
        }
    }

    /// Runs a claimed turn to its recorded end; `true` if its owner stopped it. Its span
    /// continues `cause`'s trace (the call whose input started it), if any.
    async fn run(&self, thread: &ThreadRecord, claimed: ClaimedTurn, cause: Span) -> bool {
        let stop = CancellationToken::new();
        let ended = CancellationToken::new();
        lock(&self.running).insert(
            thread.id.clone(),
            RunningTurn {
                turn_id: claimed.turn.id.clone(),
                started_at: claimed.turn.started_at,
                stop: stop.clone(),
                ended: ended.clone(),
            },
        );
        let _running = RunGuard { running: &self.running, thread_id: thread.id.clone(), ended };
        let span = info_span!("turn", turn = %claimed.turn.id);
        crate::observe::traces::continue_span(&span, &cause);
        drop(cause);
        self.run_turn(thread, claimed, stop.clone()).instrument(span).await;
        stop.is_cancelled()
    }

    async fn run_turn(&self, thread: &ThreadRecord, claimed: ClaimedTurn, stop: CancellationToken) {
        let turn = &claimed.turn;
        if self.stop.is_cancelled() {
            // A turn handed over as the daemon stops: its agent never gets the input.
            let reason = "kikid stopped before the turn started".into();
            return self.fail_before_agent(turn, reason, "kikid_stopped").await;
        }
        let Some(profile) = self.config.profile(&thread.profile) else {
            let reason = format!("profile {:?} is not configured in this home", thread.profile);
            return self.fail_before_agent(turn, reason, "executor_failed").await;
        };
        let token = self.token_key.token(&turn.id);
        lock(&self.tokens).insert(
            token.clone(),
            TurnCaller { thread_id: turn.thread_id.clone(), turn_id: turn.id.clone() },
        );
        info!(turn_id = %turn.id, seq = turn.seq, profile = %thread.profile, "turn started");
        self.observer.turn_started(&turn.thread_id, &turn.id, &thread.profile);
        let cwd = PathBuf::from(&thread.cwd);
        // Set once the agent is recorded: only then does it get its input.
        let given = Arc::new(AtomicBool::new(false));
        let agent_session = self.agent_session_of(&profile, &turn.thread_id).await;
        // The turn's progress is kept as it happens, by a task of its own so that a slow
        // write never holds up reading the agent.
        let (live, followed) = tokio::sync::mpsc::unbounded_channel();
        let recorder = tokio::spawn(record_live(
            self.store.clone(),
            self.clock.clone(),
            turn.thread_id.clone(),
            turn.id.clone(),
            followed,
        ));
        let [home_var, thread_var, token_name] = kiki_proto::agents::IDENTITY;
        let mut env = vec![
            (home_var, self.home.display().to_string()),
            (thread_var, turn.thread_id.clone()),
            (token_name, token.clone()),
        ];
        // The agent's calls to kiki (and anything it runs that reads it) join the turn's trace.
        let traceparent = crate::observe::traces::traceparent(&Span::current());
        if !traceparent.is_empty() {
            env.push((kiki_proto::TRACE_ENV, traceparent));
        }
        let input = TurnInput {
            items: &claimed.inputs,
            rendered: &turn.input,
            cwd: &cwd,
            mcp: executors::McpServer::kiki(&env),
            env,
            max_output_bytes: self.config.turns.max_output_bytes,
            on_agent_start: Some(self.agent_recorder(&turn.id, given.clone())),
            agent_session,
            live: Some(live),
            desk: self
                .desk
                .get()
                .map(|desk| TurnDesk::new(desk.clone(), turn.thread_id.clone(), turn.id.clone())),
            stop: stop.clone(),
        };
        let mut report = AgentReport::default();
        let (result, stopped) = tokio::select! {
            // A turn that ends as the daemon stops keeps its outcome.
            biased;
            result = executors::run(&profile, input, &mut report) => (result, false),
            () = self.stop.cancelled() => {
                // Stopped while its agent was being recorded, the agent got nothing.
                let agent_started = given.load(Ordering::SeqCst);
                (Err(TurnFailure { output: String::new(), error: INTERRUPTED.into(), agent_started }), true)
            }
        };
        lock(&self.tokens).remove(&token);
        // Every part is kept before the turn is seen to end (the executor dropped its sink).
        let _ = recorder.await;
        let ran = Ran { result, stopped, owner_stopped: stop.is_cancelled(), report };
        self.conclude(turn, (&thread.profile, &profile), ran).await;
    }

    /// The thread's agent session, for an executor that keeps one.
    async fn agent_session_of(&self, profile: &ProfileConfig, thread_id: &str) -> Option<String> {
        if !profile.executor.keeps_session() {
            return None;
        }
        self.store.agent_session(thread_id).await.unwrap_or_else(|e| {
            warn!(error = %e, "cannot read the thread's agent session");
            None
        })
    }

    /// Records how a turn that ran ended: failed before its agent got the input, or its
    /// status, output and usage; a lost agent session makes its messages undeliverable and
    /// tells the owner (before the end, so a caller waiting for the end sees why too); a
    /// turn that spent the thread's budget says so.
    async fn conclude(&self, turn: &TurnRecord, (name, profile): (&str, &ProfileConfig), ran: Ran) {
        let Ran { result, stopped, owner_stopped, report } = ran;
        if let Err(failure) = &result
            && !failure.agent_started
        {
            let code = if stopped { "kikid_stopped" } else { "executor_failed" };
            return self.fail_before_agent(turn, failure.error.clone(), code).await;
        }
        let usage = report.usage;
        let (status, output, error) = match result {
            // Done before the stop reached it: the turn is what it is.
            Ok(output) => (TurnStatus::Completed, output, String::new()),
            Err(failure) if owner_stopped && !stopped => {
                (TurnStatus::Cancelled, failure.output, format!("{STOPPED}: {}", failure.error))
            }
            Err(failure) => (TurnStatus::Failed, failure.output, failure.error),
        };
        if report.lost_session {
            // No agent saw the turn's messages: they are undeliverable, with a reason, not
            // counted delivered to a session that is gone.
            self.undeliver(&turn.id, "agent_session_lost").await;
            self.attention(&turn.thread_id, &turn.id, error.clone()).await;
        }
        let outcome = TurnOutcome {
            turn_id: turn.id.clone(),
            status,
            output,
            error,
            now: self.clock.now_ms(),
            usage,
            agent_session: report.session,
        };
        info!(turn_id = %turn.id, status = outcome.status.as_str(), "turn ended");
        let ran = Duration::from_millis((outcome.now - turn.started_at).max(0) as u64);
        let executor = profile.executor.as_str();
        self.observer.turn_ended(&turn.thread_id, &turn.id, executor, name, outcome.status, ran, usage);
        self.finish(outcome).await;
        if let (Some(budget), Some(spent)) = (profile.max_cost_usd, usage.map(|u| u.cost_usd)) {
            self.check_budget(&turn.thread_id, &turn.id, budget, spent).await;
        }
    }

    /// The turn that spent the thread's budget (`max_cost_usd`) tells its owner: the
    /// thread starts no more turns (see [`Inner::claim`]) until the budget is raised.
    async fn check_budget(&self, thread_id: &str, turn_id: &str, budget: f64, this_turn: f64) {
        let Ok(total) = self.store.cost(Some(thread_id)).await else { return };
        if total >= budget && total - this_turn < budget {
            let reason = format!(
                "{}: it starts no more turns until the profile's budget is raised and kikid restarted",
                spent(total, budget)
            );
            self.attention(thread_id, turn_id, reason).await;
        }
    }

    /// An `attention` event on the thread: something its owner must see to.
    async fn attention(&self, thread_id: &str, turn_id: &str, reason: String) {
        let event = EventRecord::attention(thread_id, turn_id, reason, self.clock.now_ms());
        match self.store.add_event(&event).await {
            Ok(_) => {}
            Err(e) => warn!(error = %e, "cannot record an attention event"),
        }
    }

    /// Records a turn's agent process before it gets its input, so that a restart after a
    /// crash can stop it — and can tell that a turn with none recorded never delivered its
    /// input. If the write fails, the agent is stopped and the turn fails before it.
    fn agent_recorder<'a>(&self, turn_id: &str, recorded: Arc<AtomicBool>) -> OnAgentStart<'a> {
        let (store, turn_id) = (self.store.clone(), turn_id.to_string());
        Box::new(move |agent: Option<Agent>| {
            let (store, turn_id, recorded) = (store.clone(), turn_id.clone(), recorded.clone());
            Box::pin(async move {
                // An agent that cannot be described is recorded too: its input was given.
                let record = agent.map_or_else(|| UNKNOWN_AGENT.to_string(), |a| a.record());
                store
                    .record_agent(&turn_id, &record)
                    .await
                    .map_err(|e| format!("cannot record the agent's process: {e}"))?;
                recorded.store(true, Ordering::SeqCst);
                Ok(())
            })
        })
    }

    /// The agent never got the turn's input: the turn fails, and its messages — which were
    /// not delivered after all — become undeliverable (`code`: `executor_failed` or
    /// `kikid_stopped`), with an event to target and sources.
    async fn fail_before_agent(&self, turn: &crate::store::TurnRecord, reason: String, code: &str) {
        warn!(turn_id = %turn.id, %reason, "the agent could not be started");
        self.observer.turn_ended(
            &turn.thread_id,
            &turn.id,
            "none",
            "",
            TurnStatus::Failed,
            Duration::ZERO,
            None,
        );
        self.undeliver(&turn.id, code).await;
        self.finish(turn_failed(&turn.id, &reason, self.clock.now_ms())).await;
    }

    /// The turn's messages never reached an agent: they become undeliverable with `code`,
    /// with events to target and sources (retried until it sticks, or kikid stops).
    async fn undeliver(&self, turn_id: &str, code: &str) {
        let mut retry = RETRY_FIRST;
        loop {
            match self.store.undeliver_turn_messages(turn_id, code, self.clock.now_ms()).await {
                Ok(_) => break,
                Err(e) => {
                    warn!(error = %e, "cannot mark the turn's messages undeliverable");
                    if !self.pause(retry).await {
                        break;
                    }
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Records the outcome, retrying until it sticks: a thread must not stay "running"
    /// because a write failed. If the daemon stops first, the next start's recovery marks
    /// the turn failed.
    async fn finish(&self, outcome: TurnOutcome) {
        let mut retry = RETRY_FIRST;
        loop {
            match self.store.finish_turn(&outcome).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(error = %e, turn_id = %outcome.turn_id, retry_in = ?retry, "cannot record the turn's end");
                    if !self.pause(retry).await {
                        error!(turn_id = %outcome.turn_id, "stopping; the turn is marked failed at the next start");
                        return;
                    }
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    }
}

/// Keeps what a running turn shows as it happens: its agent's session at once, its parts
/// for followers (the store's published changes wake them). A part that cannot be written is logged and
/// dropped: the turn's outcome does not depend on it.
async fn record_live(
    store: Arc<dyn Store>,
    clock: Clock,
    thread_id: String,
    turn_id: String,
    mut followed: tokio::sync::mpsc::UnboundedReceiver<Live>,
) {
    while let Some(live) = followed.recv().await {
        let written = match &live {
            Live::Session(session) => store.set_agent_session(&thread_id, session, clock.now_ms()).await,
            Live::Part(kind, text) => store.add_turn_part(&turn_id, *kind, text, clock.now_ms()).await,
        };
        if let Err(e) = written {
            warn!(error = %e, "cannot keep a part of the running turn");
        }
    }
}

/// How much of its budget a thread's agents have spent, in words.
fn spent(total: f64, budget: f64) -> String {
    format!("the thread's agents have spent ${total:.4} of its ${budget} budget (max_cost_usd)")
}

impl Inner {
    /// A new turn for `thread`, claimed by this replica, with its token's hash: peer
    /// messages wait while its communication is off.
    fn new_claim(&self, thread: &ThreadRecord) -> TurnClaim {
        let turn_id = new_id("tu");
        let token_hash = token_hash(&self.token_key.token(&turn_id));
        TurnClaim { replica: self.replica.clone(), token_hash, ..turn_claim(&self.config, thread, turn_id) }
    }
}

/// A new turn `turn_id` for `thread`: peer messages wait while its communication is off.
fn turn_claim(config: &Config, thread: &ThreadRecord, turn_id: String) -> TurnClaim {
    TurnClaim {
        turn_id,
        take_messages: switches::communication(config, thread).is_ok(),
        render: executors::render,
        exec: config.profile(&thread.profile).is_some_and(|p| p.executor != ExecutorKind::Echo),
        budget: config.profile(&thread.profile).and_then(|p| p.max_cost_usd),
        replica: String::new(),
        token_hash: String::new(),
    }
}

fn turn_failed(turn_id: &str, reason: &str, now: i64) -> TurnOutcome {
    TurnOutcome {
        turn_id: turn_id.to_string(),
        status: TurnStatus::Failed,
        output: String::new(),
        error: reason.to_string(),
        now,
        usage: None,
        agent_session: None,
    }
}

/// The record of an agent process that could not be described (see `executors::agent`).
const UNKNOWN_AGENT: &str = "unknown";

/// 256 random bits, hex.
/// Makes turn tokens: a turn's token is its id signed with this process's secret key, so
/// that a claim can record the token's hash (see [`TurnClaim::token_hash`]) before the turn
/// starts; only the hash is stored, and no one without the key can make a token.
struct TokenKey(ring::hmac::Key);

impl TokenKey {
    fn new() -> Self {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        Self(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret))
    }

    fn token(&self, turn_id: &str) -> String {
        data_encoding::HEXLOWER.encode(ring::hmac::sign(&self.0, turn_id.as_bytes()).as_ref())
    }
}

/// How a token is kept: its SHA-256, in hex.
fn token_hash(token: &str) -> String {
    use sha2::Digest;
    data_encoding::HEXLOWER.encode(&sha2::Sha256::digest(token.as_bytes()))
}
