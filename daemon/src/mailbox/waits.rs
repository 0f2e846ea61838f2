//! Waiting on this home's threads: ThreadWait on their event logs, `attention` raised by
//! a turn's agent (and the owner's list of what waits for them), and ThreadInbox, through
//! which a running turn's agent takes input mid-turn. Callers park on per-thread signals
//! ([`crate::threads::signals`]) and answer at once when kikid stops.

use std::collections::HashMap;
use std::sync::Arc;

use kiki_proto as pb;
use kiki_proto::limits::{self, WAIT_TARGETS_MAX, WAIT_TIMEOUT_DEFAULT_MS, WAIT_TIMEOUT_MAX_MS};
use tokio_util::sync::CancellationToken;
use tracing::instrument;

use super::park;
use crate::caller::Caller;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{EventRecord, InputRecord, Store};
use crate::sync::uncancelled;
use crate::threads::runner::TurnRunner;
use crate::threads::signals::{self, Signals};
use crate::threads::{Threads, cursor, switches};

/// Message ids one ThreadInbox call may name as taken.
const INBOX_TAKEN_MAX: usize = 1_000;
/// Events returned per target per ThreadWait call; the cursor carries on from there.
const EVENTS_PER_TARGET: u32 = 100;
/// Open attention events one list shows.
const OPEN_ATTENTION_MOST: u32 = 1_000;

/// What a ThreadWait, an `attention` or a ThreadInbox call needs.
#[derive(Clone)]
pub struct Waits {
    pub(super) threads: Threads,
    pub(super) store: Arc<dyn Store>,
    config: Arc<Config>,
    pub(super) runner: TurnRunner,
    pub(super) signals: Signals,
    /// Cancelled when the daemon stops: parked calls answer at once instead of holding the
    /// shutdown for up to a minute.
    pub(super) stopping: CancellationToken,
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

/// An attention event still waiting for the owner, with what to do about it.
#[derive(Debug)]
pub struct OpenAttention {
    pub thread: crate::store::ThreadRecord,
    pub event: EventRecord,
    /// The commands that answer it.
    pub next: String,
}

impl Waits {
    pub fn new(threads: Threads, config: Arc<Config>, signals: Signals, stopping: CancellationToken) -> Self {
        let (store, runner) = (threads.store().clone(), threads.runner().clone());
        Self { threads, store, config, runner, signals, stopping }
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
        let deadline = self.runner.clock().now_ms() + i64::from(timeout);
        // Boxed: resolving the targets needs more state than parking does.
        let watched = Box::pin(self.watched(targets, cursors)).await?;
        let subscription = self.signals.subscribe(watched.iter().map(|w| w.thread_id.clone()).collect());
        loop {
            let (results, any) = self.events_of(&watched).await?;
            if any {
                return Ok((results, false));
            }
            drop(results);
            if !park(self.runner.clock(), &subscription, deadline, &self.stopping).await {
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
        let event = EventRecord::attention(
            &caller.thread_id,
            &caller.turn_id,
            reason.to_string(),
            self.runner.clock().now_ms(),
        );
        let store = self.store.clone();
        uncancelled(async move {
            store.add_event(&event).await?;
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
        if !self.runner.is_running(caller).await {
            return Ok((Vec::new(), Vec::new()));
        }
        let take_messages = match self.store.thread(&thread_id).await? {
            Some(thread) => switches::communication(&self.config, &thread).is_ok(),
            None => return Ok((Vec::new(), Vec::new())),
        };
        let delivered = if taken.is_empty() {
            Vec::new()
        } else {
            let (store, turn_id) = (self.store.clone(), caller.turn_id.clone());
            let now = self.runner.clock().now_ms();
            let thread = thread_id.clone();
            uncancelled(async move {
                let delivered = store
                    .take_into_turn(&thread, &turn_id, take_messages, taken, crate::executors::render, now)
                    .await?;
                Ok::<_, Error>(delivered)
            })
            .await?
        };
        let deadline = self.runner.clock().now_ms() + i64::from(timeout);
        loop {
            if !self.runner.is_running(caller).await {
                return Ok((Vec::new(), delivered));
            }
            let Some(thread) = self.store.thread(&thread_id).await? else {
                return Ok((Vec::new(), delivered));
            };
            let take_messages = switches::communication(&self.config, &thread).is_ok();
            let items = self.store.inbox(&thread_id, take_messages).await?;
            if !items.is_empty() || !park(self.runner.clock(), &subscription, deadline, &self.stopping).await
            {
                return Ok((items, delivered));
            }
        }
    }

    /// `kiki attention list`: the open attention events of the home's unarchived threads,
    /// oldest first, at most [`OPEN_ATTENTION_MOST`] (and whether more are open).
    pub async fn open_attention(&self, caller: &Caller) -> Result<(Vec<OpenAttention>, bool)> {
        caller.owner_only("listing attention events")?;
        let mut events = self.store.open_attention(OPEN_ATTENTION_MOST + 1).await?;
        let more = events.len() > OPEN_ATTENTION_MOST as usize;
        events.truncate(OPEN_ATTENTION_MOST as usize);
        let mut open = Vec::with_capacity(events.len());
        for event in events {
            let thread = self.threads.get("", "", &event.thread_id).await?;
            let next = match &event.request_id {
                Some(id) => format!("kiki approve {id}  or  kiki deny {id} --reason TEXT"),
                None => format!("kiki thread read {0}, then answer with kiki thread say {0} TEXT", thread.id),
            };
            open.push(OpenAttention { thread, event, next });
        }
        Ok((open, more))
    }
}
