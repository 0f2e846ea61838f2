//! An agent's request to use a tool, and the owner's answer: the request is filed with an
//! `attention` event naming it (what ThreadWait shows the owner), the agent's call parks
//! until `kiki approve ID` / `kiki deny ID` answers it, and an unanswered request is denied
//! after `[threads] permission_timeout`.

use std::sync::Arc;
use std::time::Duration;

use kiki_proto::limits;
use tokio_util::sync::CancellationToken;

use super::park;
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::store::{PermissionRecord, PermissionStatus, Store};
use crate::sync::uncancelled;
use crate::threads::runner::TurnRunner;
use crate::threads::signals::Signals;
use crate::threads::{Threads, new_id};
use crate::time::ms;

/// How much of a tool's input the attention event quotes.
const INPUT_PREVIEW_CHARS: usize = 300;

/// The answer an agent gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub request_id: String,
    pub allowed: bool,
    pub reason: String,
}

/// Agents' permission requests and the owner's answers.
#[derive(Clone)]
pub struct PermissionRequests {
    store: Arc<dyn Store>,
    runner: TurnRunner,
    signals: Signals,
    /// `[threads] permission_timeout`: a request unanswered this long is denied.
    timeout: Duration,
    /// Cancelled when the daemon stops: a waiting request is denied at once.
    stopping: CancellationToken,
}

impl PermissionRequests {
    pub fn new(threads: &Threads, timeout: Duration, signals: Signals, stopping: CancellationToken) -> Self {
        let (store, runner) = (threads.store().clone(), threads.runner().clone());
        Self { store, runner, signals, timeout, stopping }
    }

    /// PermissionAsk: files the request and waits for the owner's answer.
    pub async fn ask_permission(&self, caller: &Caller, tool: &str, input: &str) -> Result<Decision> {
        let caller = caller.turn_only("a permission request")?;
        limits::text("tool", tool, limits::TOOL_MAX_CHARS)?;
        limits::text("input", input, limits::TOOL_INPUT_MAX_CHARS)?;
        let request = PermissionRecord {
            id: new_id("perm"),
            thread_id: caller.thread_id.clone(),
            turn_id: caller.turn_id.clone(),
            tool: tool.to_string(),
            input: input.to_string(),
            status: PermissionStatus::Pending,
            reason: String::new(),
            created_at: self.runner.clock().now_ms(),
            decided_at: None,
        };
        let preview: String = input.chars().take(INPUT_PREVIEW_CHARS).collect();
        let cut = if preview.len() < input.len() { "…" } else { "" };
        let reason = format!(
            "the agent asks to use {tool} with {preview}{cut}: `kiki approve {id}` or `kiki deny {id}`",
            id = request.id
        );
        // Parked on before it is filed, so an answer in between is not missed; the thread's
        // own signal says its turn ended (which expires the request).
        let subscription = self
            .signals
            .subscribe(vec![crate::threads::signals::answered(&request.id), caller.thread_id.clone()]);
        let (store, filed) = (self.store.clone(), request.clone());
        uncancelled(async move {
            store.ask_permission(&filed, &reason).await?;
            Ok::<_, Error>(())
        })
        .await?;
        self.runner.observer().permission_requested(&caller.thread_id, &caller.turn_id, &request.id, tool);
        let clock = self.runner.clock().clone();
        let deadline = clock.now_ms() + ms(self.timeout);
        loop {
            let stands = self.store.permission(&request.id).await?;
            if let Some(decided) = stands.filter(|r| r.status != PermissionStatus::Pending) {
                return Ok(decision(decided));
            }
            if !self.runner.is_running(caller).await
                || !park(&clock, &subscription, deadline, &self.stopping).await
            {
                break;
            }
        }
        // Unanswered: denied, for good — a late answer changes nothing.
        let expired = if self.stopping.is_cancelled() {
            "kikid stopped before an answer".to_string()
        } else if !self.runner.is_running(caller).await {
            "the turn ended before an answer".to_string()
        } else {
            let timeout = humantime::format_duration(self.timeout);
            format!("nobody answered within {timeout} ([threads] permission_timeout)")
        };
        let (store, id) = (self.store.clone(), request.id.clone());
        let stands = uncancelled(async move {
            Ok::<_, Error>(
                store.decide_permission(&id, PermissionStatus::Expired, &expired, clock.now_ms()).await?,
            )
        })
        .await?;
        let stands =
            stands.ok_or_else(|| Error::NotFound(format!("permission request {} is gone", request.id)))?;
        Ok(decision(stands))
    }

    /// PermissionDecide: the owner's answer (never a turn's agent: it would answer its own).
    pub async fn decide_permission(
        &self,
        caller: &Caller,
        id: &str,
        allow: bool,
        reason: &str,
    ) -> Result<PermissionRecord> {
        // Never a turn's agent: it would answer its own request.
        caller.owner_only("answering a permission request")?;
        limits::at_most("reason", reason, limits::REASON_MAX_CHARS)?;
        let status = if allow { PermissionStatus::Allowed } else { PermissionStatus::Denied };
        let reason =
            if allow || !reason.is_empty() { reason.to_string() } else { "denied by the owner".into() };
        let (store, id, now) = (self.store.clone(), id.to_string(), self.runner.clock().now_ms());
        let stands = uncancelled(async move {
            let stands = store
                .decide_permission(&id, status, &reason, now)
                .await?
                .ok_or_else(|| Error::NotFound(format!("no permission request {id}")))?;
            Ok::<_, Error>(stands)
        })
        .await?;
        // An answer is final: the agent has it. The same answer again stands; another one
        // is refused, saying how the request was answered.
        if stands.status != status {
            let why = if stands.reason.is_empty() { String::new() } else { format!(" ({})", stands.reason) };
            return Err(Error::FailedPrecondition(format!(
                "permission request {} was already answered: {}{why}; an answer is final, and the \
                 agent has it (it may ask again)",
                stands.id,
                stands.status.as_str()
            )));
        }
        Ok(stands)
    }
}

fn decision(r: PermissionRecord) -> Decision {
    Decision { allowed: r.status == PermissionStatus::Allowed, request_id: r.id, reason: r.reason }
}
