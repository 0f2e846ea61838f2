//! The session tools a home runs for its threads, in their workspaces: files ([`files`]:
//! `Read`, `Write`, `Edit`; [`search`]: `Glob`, `Grep`), the shell and its background tasks
//! ([`shell`]: `Bash`, `TaskList`, `TaskOutput`, `TaskStop`, `TaskWait`), [`todo`]
//! (`TodoList`) and [`cron`] (`Cron`). [`catalog`] declares each once in the [`registry`];
//! [`SessionTools::call`] is the one way any of them runs:
//!
//! 1. the thread: a turn's agent calls for its own; the owner names one;
//! 2. the arguments, read into the tool's type (an error names the field; nothing is kept);
//! 3. approval: a turn's agent asks the owner (a permission request) where the tool's rule
//!    says so, unless the thread's profile lists the tool in `allowed_tools`; the owner's own
//!    calls are not asked;
//! 4. the tool runs, and the call is recorded in the thread's history (name, arguments,
//!    outcome, duration) — inside a turn also as the turn's parts, which `--follow` shows.

pub mod catalog;
pub mod cron;
pub mod files;
pub mod registry;
pub mod search;
pub mod shell;
pub mod todo;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use kiki_proto::limits;
use serde::Serialize;
use serde_json::Value;

use crate::caller::Caller;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mailbox::PermissionRequests;
use crate::store::{PartKind, Store, ThreadRecord, ToolCallRecord, ToolOutcome, words};
use crate::threads::Threads;
use registry::{Prepared, Registry};

/// The largest arguments a call takes (a `Write` of a whole file).
pub const ARGUMENTS_MAX_BYTES: usize = 1024 * 1024;
/// How much of its arguments a call's record keeps (a `Write`'s content can be long).
pub const RECORDED_ARGUMENTS_CHARS: usize = 10_000;
/// How much of a result a call's record keeps.
pub const RECORDED_RESULT_CHARS: usize = 2_000;
/// How much of a call's arguments a turn's part shows.
const PART_ARGUMENTS_CHARS: usize = 500;

words! {
    /// When a turn's agent must ask the owner first (the listing's word; each call decides
    /// with its arguments).
    Approval {
        Never => "never",
        OutsideWorkspace => "outside_workspace",
        Always => "always",
    }
}

/// What a tool answers: the text an agent reads, and its structured result.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub text: String,
    pub structured: Value,
}

impl Output {
    /// A result whose text is its JSON.
    pub fn json(result: &impl Serialize) -> Self {
        let structured = serde_json::to_value(result).unwrap_or_default();
        let text = serde_json::to_string_pretty(&structured).unwrap_or_default();
        Self { text, structured }
    }
}

/// Why a tool call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments are wrong: refused, nothing recorded.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The tool ran into an error (a missing file, a failed command): recorded.
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError::Invalid { field: field.into(), message: message.into() }
    }
}

impl From<files::FileToolError> for ToolError {
    fn from(e: files::FileToolError) -> Self {
        match e {
            files::FileToolError::Invalid { field, message } => ToolError::invalid(field, message),
            e @ files::FileToolError::File { .. } => ToolError::Failed(e.to_string()),
        }
    }
}

impl From<crate::store::StoreError> for ToolError {
    fn from(e: crate::store::StoreError) -> Self {
        ToolError::Failed(format!("store: {e}"))
    }
}

/// What a running tool works with: its thread, and the home's parts it may use.
#[derive(Clone)]
pub struct ToolContext {
    pub thread: ThreadRecord,
    /// The thread's workspace: where relative paths start and commands run.
    pub cwd: PathBuf,
    pub store: Arc<dyn Store>,
    pub threads: Threads,
    pub tasks: shell::Tasks,
}

/// The answer to a call that ran (or was denied).
#[derive(Debug, Clone, PartialEq)]
pub struct Called {
    pub text: String,
    pub structured: Option<Value>,
    pub outcome: ToolOutcome,
    pub seq: i64,
}

/// The home's session tools.
#[derive(Clone)]
pub struct SessionTools {
    registry: Arc<Registry>,
    threads: Threads,
    permissions: PermissionRequests,
    config: Arc<Config>,
    tasks: shell::Tasks,
}

impl SessionTools {
    pub fn new(
        threads: Threads,
        permissions: PermissionRequests,
        config: Arc<Config>,
        tasks: shell::Tasks,
    ) -> Self {
        Self { registry: catalog::all(), threads, permissions, config, tasks }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// ToolCall: runs `name` with `arguments` (a JSON object) for a thread — the caller's own
    /// for a turn's agent, `thread_id` for the owner — in the steps the module lists.
    pub async fn call(
        &self,
        caller: &Caller,
        name: &str,
        arguments: &str,
        thread_id: &str,
    ) -> Result<Called> {
        let thread = self.thread_of(caller, thread_id).await?;
        let tool = self
            .registry
            .get(name)
            .ok_or_else(|| Error::NotFound(format!("no session tool {name:?}: ToolList lists them")))?;
        let cwd = PathBuf::from(&thread.cwd);
        let prepared = tool.prepare(json_object(arguments)?, &cwd).map_err(refused)?;
        let started = Instant::now();
        let ran = match self.denied(caller, &thread, name, arguments, prepared.asks.as_deref()).await? {
            Some(denied) => denied,
            None => self.run(&thread, cwd, prepared).await?,
        };
        let duration_ms = started.elapsed().as_millis() as i64;
        self.record(caller, &thread, name, arguments, ran, duration_ms).await
    }

    /// Approval: a turn's agent asks the owner when the call asks (`asks` says why) and the
    /// thread's profile does not allow the tool; the owner's answer to a denial, if denied.
    async fn denied(
        &self,
        caller: &Caller,
        thread: &ThreadRecord,
        name: &str,
        arguments: &str,
        asks: Option<&str>,
    ) -> Result<Option<Ran>> {
        let Some(why) = asks else { return Ok(None) };
        if caller.turn().is_none() || self.allowed_by_profile(thread, name) {
            return Ok(None);
        }
        let input = preview(arguments, limits::TOOL_INPUT_MAX_CHARS - 1);
        let decision = self.permissions.ask_permission(caller, name, &input).await?;
        if decision.allowed {
            return Ok(None);
        }
        let reason = if decision.reason.is_empty() { "denied".to_string() } else { decision.reason };
        let text =
            format!("{name} was not run ({why}): the owner's answer to {}: {reason}", decision.request_id);
        Ok(Some(Ran { outcome: ToolOutcome::Denied, text, structured: None }))
    }

    /// Runs a prepared call in the thread's workspace.
    async fn run(&self, thread: &ThreadRecord, cwd: PathBuf, prepared: Prepared) -> Result<Ran> {
        let context = ToolContext {
            thread: thread.clone(),
            cwd,
            store: self.threads.store().clone(),
            threads: self.threads.clone(),
            tasks: self.tasks.clone(),
        };
        match (prepared.run)(context).await {
            Ok(output) => {
                Ok(Ran { outcome: ToolOutcome::Ok, text: output.text, structured: Some(output.structured) })
            }
            // Arguments found wrong once the tool looked at them (a range, a field of one
            // action): refused like any bad input, nothing kept.
            Err(e @ ToolError::Invalid { .. }) => Err(refused(e)),
            Err(ToolError::Failed(why)) => {
                Ok(Ran { outcome: ToolOutcome::Error, text: why, structured: None })
            }
        }
    }

    /// Records the call in the thread's history and, inside a turn, as the turn's parts.
    async fn record(
        &self,
        caller: &Caller,
        thread: &ThreadRecord,
        name: &str,
        arguments: &str,
        ran: Ran,
        duration_ms: i64,
    ) -> Result<Called> {
        let turn = caller.turn();
        let record = ToolCallRecord {
            seq: 0,
            thread_id: thread.id.clone(),
            turn_id: turn.map(|t| t.turn_id.clone()),
            name: name.to_string(),
            arguments: preview(arguments, RECORDED_ARGUMENTS_CHARS),
            outcome: ran.outcome,
            result: preview(&ran.text, RECORDED_RESULT_CHARS),
            duration_ms,
            at: self.threads.clock().now_ms(),
        };
        let store = self.threads.store().clone();
        let seq =
            crate::sync::uncancelled(async move { Ok::<_, Error>(store.record_tool_call(&record).await?) })
                .await?;
        // Inside a turn, also the turn's progress (what `kiki thread read --follow` shows).
        if let Some(turn) = turn {
            let call = format!("{name} {}", preview(arguments, PART_ARGUMENTS_CHARS));
            self.part(&turn.turn_id, PartKind::Tool, call).await;
            let result = format!(
                "{name}: {} in {duration_ms} ms\n{}",
                ran.outcome.as_str(),
                preview(&ran.text, PART_ARGUMENTS_CHARS)
            );
            self.part(&turn.turn_id, PartKind::ToolResult, result).await;
        }
        Ok(Called { text: ran.text, structured: ran.structured, outcome: ran.outcome, seq })
    }

    /// ThreadRead with tool_calls: a page of the thread's calls after `after`.
    pub async fn history(
        &self,
        caller: &Caller,
        thread_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<ToolCallRecord>> {
        let thread = self.thread_of_reader(caller, thread_id).await?;
        Ok(self.threads.store().tool_calls(&thread.id, after, limit).await?)
    }

    /// The thread a call is for.
    async fn thread_of(&self, caller: &Caller, thread_id: &str) -> Result<ThreadRecord> {
        let id = match caller.turn() {
            Some(turn) if thread_id.is_empty() || thread_id == turn.thread_id => turn.thread_id.clone(),
            Some(turn) => {
                return Err(Error::PermissionDenied(format!(
                    "a turn's agent uses the session tools of its own thread ({}), not {thread_id}",
                    turn.thread_id
                )));
            }
            None if thread_id.is_empty() => {
                return Err(Error::invalid(
                    "thread_id",
                    "required for the owner's calls: the thread whose workspace the tool works in",
                ));
            }
            None => thread_id.to_string(),
        };
        let thread = self.threads.get("", "", &id).await?;
        if thread.archived {
            return Err(Error::FailedPrecondition(format!("thread {id} is archived; unarchive it first")));
        }
        Ok(thread)
    }

    /// The thread whose calls are read: the owner reads any; an agent its own.
    async fn thread_of_reader(&self, caller: &Caller, thread_id: &str) -> Result<ThreadRecord> {
        if let Some(turn) = caller.turn()
            && turn.thread_id != thread_id
        {
            return Err(Error::PermissionDenied(
                "a turn's agent reads its own thread's tool calls only".to_string(),
            ));
        }
        self.threads.get("", "", thread_id).await
    }

    /// Whether the thread's profile lets its agent use `tool` without asking: `allowed_tools`
    /// names it as is or as an MCP client sees it (`mcp__kiki__Bash`).
    fn allowed_by_profile(&self, thread: &ThreadRecord, tool: &str) -> bool {
        let profile = self.config.profile(&thread.profile).unwrap_or_default();
        profile.allowed_tools.iter().any(|allowed| {
            allowed == tool
                || allowed.strip_prefix(&format!("mcp__{}__", kiki_proto::agents::SERVER)) == Some(tool)
        })
    }

    /// Adds a part to a running turn; a failure is only logged (the call's record is what
    /// keeps it).
    async fn part(&self, turn_id: &str, kind: PartKind, text: String) {
        let now = self.threads.clock().now_ms();
        if let Err(e) = self.threads.store().add_turn_part(turn_id, kind, &text, now).await {
            tracing::debug!(error = %e, turn_id, "tool call not added to its turn");
        }
    }
}

/// What a call came to, before it is recorded.
struct Ran {
    outcome: ToolOutcome,
    text: String,
    structured: Option<Value>,
}

/// A call's arguments: a JSON object (empty text: `{}`), at most [`ARGUMENTS_MAX_BYTES`].
fn json_object(arguments: &str) -> Result<Value> {
    if arguments.len() > ARGUMENTS_MAX_BYTES {
        return Err(Error::invalid(
            "arguments",
            format!("at most {ARGUMENTS_MAX_BYTES} bytes, got {}", arguments.len()),
        ));
    }
    if arguments.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let value: Value = serde_json::from_str(arguments)
        .map_err(|e| Error::invalid("arguments", format!("not a JSON object: {e}")))?;
    if !value.is_object() {
        return Err(Error::invalid("arguments", "must be a JSON object"));
    }
    Ok(value)
}

/// A call refused before it ran: wrong arguments (naming the field), or a check that failed.
fn refused(e: ToolError) -> Error {
    match e {
        ToolError::Invalid { field, message } => Error::invalid("arguments", format!("{field}: {message}")),
        ToolError::Failed(m) => Error::FailedPrecondition(m),
    }
}

/// The first `chars` characters of `text`, with `…` when cut.
pub fn preview(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}
