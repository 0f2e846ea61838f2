//! `Bash` and the background tasks it starts (`TaskList`, `TaskOutput`, `TaskStop`,
//! `TaskWait`).
//!
//! Every command is a task: `bash -c COMMAND` in the thread's workspace, stdin closed, in a
//! process group of its own, stdout and stderr written together to an owner-only log under
//! `<home>/tasks/`. A foreground call waits for it up to its timeout; a command still running
//! then becomes a background task with a fresh budget (`[background]`), or is ended. Ending
//! a task — stopped, or out of budget — sends its group SIGTERM, then SIGKILL after
//! [`STOP_GRACE`]. A background task's end is reported to its thread: a `task` event
//! (ThreadWait shows it) and the thread's next input (it wakes an idle thread) — unless a
//! TaskWait was waiting for it and reported it.
//!
//! Tasks live in kikid's memory: a clean stop of kikid ends them; after a restart they are
//! gone from TaskList (their logs stay).

use std::collections::VecDeque;
use std::io::{Read as _, Seek as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::{Output, ToolContext, ToolError};
use crate::config::BackgroundConfig;
use crate::store::{EventKind, Millis, words};
use crate::threads::{Threads, new_id};
use crate::time::{ms, rfc3339};

/// A foreground command's time unless it says otherwise, and the most it may ask for.
pub const FOREGROUND_DEFAULT_MS: u64 = 60_000;
pub const FOREGROUND_MAX_MS: u64 = 300_000;
/// Between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// The most of a foreground command's output its answer holds (the end; the log has all).
const FOREGROUND_OUTPUT_BYTES: usize = 30_000;
/// TaskOutput without an offset: the end of the log.
const OUTPUT_PREVIEW_BYTES: u64 = 32 * 1024;
const OUTPUT_PAGE_DEFAULT: u64 = 16_384;
const OUTPUT_PAGE_MAX: u64 = 32_768;
/// How much of a finished task's output its report to the thread quotes.
const REPORT_PREVIEW_BYTES: usize = 16_000;
/// The most tasks a home keeps (ended ones beyond it are forgotten, oldest first).
const TASKS_KEPT: usize = 1_000;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The command, run by `bash -c`.
    pub command: String,
    /// Where it runs (default: the thread's workspace; a relative path starts there).
    pub cwd: Option<String>,
    /// Foreground: how long to wait, in ms (default 60,000, at most 300,000).
    pub timeout: Option<u64>,
    /// Start it as a background task and answer with its id at once.
    #[serde(default)]
    pub run_in_background: bool,
    /// What the background task does (required with run_in_background).
    pub description: Option<String>,
    /// A background task without a time budget.
    #[serde(default)]
    pub disable_timeout: bool,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskListArgs {
    /// Only running tasks (default true).
    pub active_only: Option<bool>,
    /// 1-100, default 20.
    pub limit: Option<u64>,
    pub offset: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskOutputArgs {
    pub task_id: String,
    /// Bytes from the start of the output (omitted: the last 32 KB).
    pub offset: Option<u64>,
    /// 4-32768, default 16384.
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskStopArgs {
    pub task_id: String,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskWaitArgs {
    /// The most seconds to wait (1-86400).
    pub timeout: u64,
    /// The task to wait for (omitted: any task running now).
    pub task_id: Option<String>,
    /// Accepted for agents that send them; a wait on a process task needs no reason.
    #[serde(default)]
    pub sync_wait: bool,
    pub sync_reason: Option<String>,
}

words! {
    /// Where a task stands.
    TaskStatus {
        Running => "running",
        /// Exited 0.
        Completed => "completed",
        /// Exited otherwise, or ended by a signal it was not sent.
        Failed => "failed",
        /// By TaskStop, or because kikid stopped.
        Stopped => "stopped",
        /// Out of its budget, or past a foreground call's timeout.
        TimedOut => "timed_out",
    }
}

/// A task's status reads as its word in what a tool answers.
impl Serialize for TaskStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ending {
    /// Never `running`.
    pub status: TaskStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub ended_at: String,
}

/// One command and what became of it.
pub struct Task {
    pub id: String,
    pub thread_id: String,
    pub command: String,
    pub description: String,
    pub started_at: Millis,
    pub output_path: PathBuf,
    /// Listed and reported to its thread (a foreground command is neither until it times out).
    background: AtomicBool,
    /// TaskWaits waiting for it now: its end is theirs to report.
    waiters: AtomicUsize,
    /// Its end was given to someone: a TaskWait's answer, or the thread's report. Whoever
    /// sets it first tells; the end is reported to the thread at most once.
    told: AtomicBool,
    ended: watch::Sender<Option<Ending>>,
    /// Why it is being stopped, once it is.
    stop: CancellationToken,
    stop_reason: Mutex<Option<(TaskStatus, String)>>,
    /// Its budget's end, in the home's clock (`None`: none); `rearm` wakes its supervisor.
    deadline: Mutex<Option<Millis>>,
    rearm: Notify,
}

impl Task {
    fn ending(&self) -> Option<Ending> {
        self.ended.borrow().clone()
    }

    /// Ends it (its group gets SIGTERM, then SIGKILL), saying why.
    fn stop(&self, status: TaskStatus, reason: String) {
        let mut why = self.stop_reason.lock().unwrap_or_else(|p| p.into_inner());
        if why.is_none() {
            *why = Some((status, reason));
        }
        self.stop.cancel();
    }

    fn summary(&self) -> TaskSummary {
        let ending = self.ending();
        TaskSummary {
            task_id: self.id.clone(),
            command: self.command.clone(),
            description: self.description.clone(),
            status: ending.as_ref().map_or(TaskStatus::Running, |e| e.status),
            exit_code: ending.as_ref().and_then(|e| e.exit_code),
            started_at: rfc3339(self.started_at),
            ended_at: ending.map(|e| e.ended_at),
            output_path: self.output_path.display().to_string(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TaskSummary {
    pub task_id: String,
    pub command: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub status: TaskStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    pub output_path: String,
}

/// The home's tasks.
#[derive(Clone)]
pub struct Tasks {
    inner: Arc<Inner>,
}

struct Inner {
    tasks: Mutex<VecDeque<Arc<Task>>>,
    dir: PathBuf,
    threads: Threads,
    config: BackgroundConfig,
}

impl Tasks {
    /// Tasks whose logs go to `dir`, reported to their threads through `threads`.
    pub fn new(dir: PathBuf, threads: Threads, config: BackgroundConfig) -> Self {
        Self { inner: Arc::new(Inner { tasks: Mutex::default(), dir, threads, config }) }
    }

    fn list(&self) -> Vec<Arc<Task>> {
        self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    fn find(&self, thread_id: &str, id: &str) -> Result<Arc<Task>, ToolError> {
        self.list()
            .into_iter()
            .find(|t| t.id == id && t.thread_id == thread_id && t.background.load(Ordering::SeqCst))
            .ok_or_else(|| {
                ToolError::invalid("task_id", format!("no task {id:?} of this thread (TaskList lists them)"))
            })
    }

    /// The background budget, from now.
    fn budget(&self) -> Option<Millis> {
        let seconds = self.inner.config.bash_task_timeout_s;
        (seconds > 0).then(|| self.inner.threads.clock().now_ms() + ms(Duration::from_secs(seconds)))
    }

    /// Starts `command` for `thread_id` in `cwd`.
    async fn start(
        &self,
        thread_id: &str,
        cwd: &Path,
        command: &str,
        description: &str,
        background: bool,
        deadline: Option<Millis>,
    ) -> Result<Arc<Task>, ToolError> {
        let id = new_id("task");
        std::fs::create_dir_all(&self.inner.dir)
            .map_err(|e| ToolError::Failed(format!("{}: {e}", self.inner.dir.display())))?;
        let output_path = self.inner.dir.join(format!("{id}.log"));
        let log = {
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .create_new(true)
                .append(true)
                .mode(0o600)
                .open(&output_path)
                .map_err(|e| ToolError::Failed(format!("{}: {e}", output_path.display())))?
        };
        let stderr = log.try_clone().map_err(|e| ToolError::Failed(e.to_string()))?;
        let child = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(command)
            .current_dir(cwd)
            .env_remove("KIKI_TOKEN")
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .process_group(0)
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| ToolError::Failed(format!("cannot start bash in {}: {e}", cwd.display())))?;
        let task = Arc::new(Task {
            id,
            thread_id: thread_id.to_string(),
            command: command.to_string(),
            description: description.to_string(),
            started_at: self.inner.threads.clock().now_ms(),
            output_path,
            background: AtomicBool::new(background),
            waiters: AtomicUsize::new(0),
            told: AtomicBool::new(false),
            ended: watch::channel(None).0,
            stop: CancellationToken::new(),
            stop_reason: Mutex::new(None),
            deadline: Mutex::new(deadline),
            rearm: Notify::new(),
        });
        {
            let mut tasks = self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner());
            tasks.push_back(task.clone());
            while tasks.len() > TASKS_KEPT {
                match tasks.iter().position(|t| t.ending().is_some()) {
                    Some(oldest_ended) => drop(tasks.remove(oldest_ended)),
                    None => break,
                }
            }
        }
        tokio::spawn(self.clone().supervise(task.clone(), child));
        Ok(task)
    }

    /// Waits for the task's process, ending it when it is stopped or out of budget; then
    /// records its end and, for a background task, reports it.
    async fn supervise(self, task: Arc<Task>, mut child: tokio::process::Child) {
        let pgid = child.id().map(|pid| Pid::from_raw(pid as i32));
        let clock = self.inner.threads.clock().clone();
        let status = loop {
            let deadline = *task.deadline.lock().unwrap_or_else(|p| p.into_inner());
            let out_of_budget = async {
                match deadline {
                    Some(at) => clock.sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                status = child.wait() => break status.ok(),
                () = task.rearm.notified() => continue,
                () = out_of_budget => {
                    let seconds = self.inner.config.bash_task_timeout_s;
                    task.stop(TaskStatus::TimedOut, format!("ran out of its {seconds} s budget"));
                }
                () = task.stop.cancelled() => {}
            }
            // Stopped: the whole group, gently first.
            if let Some(pgid) = pgid {
                let _ = killpg(pgid, Signal::SIGTERM);
            }
            match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                Ok(status) => break status.ok(),
                Err(_) => {
                    if let Some(pgid) = pgid {
                        let _ = killpg(pgid, Signal::SIGKILL);
                    }
                    break child.wait().await.ok();
                }
            }
        };
        use std::os::unix::process::ExitStatusExt as _;
        let stopped = task.stop_reason.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let exit_code = status.and_then(|s| s.code());
        let ending = Ending {
            status: match (&stopped, exit_code) {
                (Some((status, _)), _) => *status,
                (None, Some(0)) => TaskStatus::Completed,
                _ => TaskStatus::Failed,
            },
            exit_code,
            signal: status.and_then(|s| s.signal()),
            reason: stopped.map(|(_, reason)| reason).unwrap_or_default(),
            ended_at: rfc3339(clock.now_ms()),
        };
        task.ended.send_replace(Some(ending));
        self.report_unless_waited(&task).await;
    }

    /// Reports a background task's end to its thread unless a TaskWait waits for it (which
    /// answers with it) or someone was told already. Asked by the task's supervisor when it
    /// ends, and by each TaskWait as it lets go: a wait that gave up at the very moment of
    /// the end leaves the report to itself.
    async fn report_unless_waited(&self, task: &Task) {
        let untold = task.ending().is_some()
            && task.background.load(Ordering::SeqCst)
            && task.waiters.load(Ordering::SeqCst) == 0
            && !task.told.swap(true, Ordering::SeqCst);
        if untold {
            self.report(task).await;
        }
    }

    /// Tells the task's thread it ended: a `task` event, and input for its next turn.
    async fn report(&self, task: &Task) {
        let Some(ending) = task.ending() else { return };
        let threads = &self.inner.threads;
        let what = if task.description.is_empty() { task.command.clone() } else { task.description.clone() };
        let code = ending.exit_code.map(|c| format!(", exit code {c}")).unwrap_or_default();
        let reason = format!("background task {} ({what}) {}{code}", task.id, ending.status);
        let mut event = crate::store::event(&task.thread_id, EventKind::Task, threads.clock().now_ms());
        event.reason = reason.clone();
        if let Err(e) = threads.store().add_event(&event).await {
            tracing::warn!(error = %e, task = %task.id, "task end not recorded");
        }
        let tail = tail(&task.output_path, REPORT_PREVIEW_BYTES);
        let notice = format!(
            "<task-notification>\n<task-id>{}</task-id>\n<status>{}</status>{}\n<summary>{reason}</summary>\n\
             <output-path>{}</output-path>\n<output>\n{tail}\n</output>\n</task-notification>",
            task.id,
            ending.status,
            ending.exit_code.map(|c| format!("\n<exit-code>{c}</exit-code>")).unwrap_or_default(),
            task.output_path.display(),
        );
        if let Err(e) = threads.queue_input(&task.thread_id, &notice).await {
            tracing::warn!(error = %e, task = %task.id, "task end not queued for its thread");
        }
    }

    /// Ends every running task (kikid is stopping).
    pub async fn stop_all(&self) {
        let running: Vec<_> = self.list().into_iter().filter(|t| t.ending().is_none()).collect();
        for task in &running {
            task.stop(TaskStatus::Stopped, "kikid stopped".to_string());
        }
        for task in running {
            let mut ended = task.ended.subscribe();
            let _ = tokio::time::timeout(STOP_GRACE * 2, ended.wait_for(Option::is_some)).await;
        }
    }
}

impl BashArgs {
    /// Where it runs: `cwd` from the workspace, else the workspace.
    fn dir(&self, workspace: &Path) -> PathBuf {
        self.cwd.as_ref().map_or_else(|| workspace.to_path_buf(), |dir| workspace.join(dir))
    }

    /// The rules of its arguments, checked before anyone is asked.
    pub fn check(&self, workspace: &Path) -> Result<(), ToolError> {
        if self.command.trim().is_empty() {
            return Err(ToolError::invalid("command", "required"));
        }
        let dir = self.dir(workspace);
        if !dir.is_dir() {
            return Err(ToolError::invalid("cwd", format!("{} is not a directory", dir.display())));
        }
        if self.run_in_background {
            if self.description.as_deref().unwrap_or("").trim().is_empty() {
                return Err(ToolError::invalid("description", "required with run_in_background"));
            }
            if self.timeout.is_some() {
                return Err(ToolError::invalid("timeout", "for foreground commands (see disable_timeout)"));
            }
        } else if self.disable_timeout {
            return Err(ToolError::invalid("disable_timeout", "for background tasks (run_in_background)"));
        }
        let timeout = self.timeout.unwrap_or(FOREGROUND_DEFAULT_MS);
        if !(1..=FOREGROUND_MAX_MS).contains(&timeout) {
            return Err(ToolError::invalid("timeout", format!("1-{FOREGROUND_MAX_MS} ms, got {timeout}")));
        }
        Ok(())
    }
}

/// `Bash` (its arguments checked: [`BashArgs::check`]).
pub async fn bash(context: &ToolContext, args: BashArgs) -> Result<Output, ToolError> {
    let cwd = args.dir(&context.cwd);
    let tasks = &context.tasks;
    if args.run_in_background {
        let description = args.description.as_deref().unwrap_or("").trim();
        let deadline = if args.disable_timeout { None } else { tasks.budget() };
        let task = tasks.start(&context.thread.id, &cwd, &args.command, description, true, deadline).await?;
        return Ok(Output::json(&serde_json::json!({
            "task_id": task.id,
            "status": TaskStatus::Running,
            "output_path": task.output_path.display().to_string(),
            "message": "started in the background; its end is reported to this thread",
        })));
    }
    let timeout = args.timeout.unwrap_or(FOREGROUND_DEFAULT_MS);
    let description = args.description.as_deref().unwrap_or("");
    let task = tasks.start(&context.thread.id, &cwd, &args.command, description, false, None).await?;
    let clock = context.threads.clock().clone();
    let mut ended = task.ended.subscribe();
    let waited = tokio::select! {
        _ = ended.wait_for(Option::is_some) => true,
        () = clock.sleep(Duration::from_millis(timeout)) => false,
    };
    if !waited {
        if tasks.inner.config.bash_auto_background_on_timeout {
            *task.deadline.lock().unwrap_or_else(|p| p.into_inner()) = tasks.budget();
            task.background.store(true, Ordering::SeqCst);
            task.rearm.notify_one();
            // It may have ended just now, unreported: report it (once, whoever sees it first).
            tasks.report_unless_waited(&task).await;
            return Ok(Output::json(&serde_json::json!({
                "task_id": task.id,
                "status": TaskStatus::Running,
                "output_path": task.output_path.display().to_string(),
                "message": format!(
                    "still running after {timeout} ms: moved to the background as {}; its end is reported to this thread",
                    task.id
                ),
            })));
        }
        task.stop(TaskStatus::TimedOut, format!("ran past its {timeout} ms timeout"));
        let _ = ended.wait_for(Option::is_some).await;
    }
    let ending = task.ending().unwrap_or_else(|| unreachable_ending(&clock));
    let (output, cut) = tail_with_cut(&task.output_path, FOREGROUND_OUTPUT_BYTES);
    let mut text = output.clone();
    if cut > 0 {
        text = format!(
            "[the first {cut} bytes are left out; all of it: {}]\n{text}",
            task.output_path.display()
        );
    }
    match (ending.status, ending.exit_code) {
        (TaskStatus::Completed, _) => {}
        (_, Some(code)) => text.push_str(&format!("\n[exit code {code}]")),
        (status, None) => text.push_str(&format!("\n[{status}: {}]", ending.reason)),
    }
    let structured = serde_json::json!({
        "output": output,
        "exit_code": ending.exit_code,
        "status": ending.status,
        "output_path": task.output_path.display().to_string(),
    });
    match ending.status {
        TaskStatus::Completed => Ok(Output { text, structured }),
        // A non-zero exit, or ended: the output is the answer, marked as an error.
        _ => Err(ToolError::Failed(text)),
    }
}

fn unreachable_ending(clock: &crate::time::Clock) -> Ending {
    Ending {
        status: TaskStatus::Failed,
        exit_code: None,
        signal: None,
        reason: "no end recorded".into(),
        ended_at: rfc3339(clock.now_ms()),
    }
}

/// `TaskList`.
pub fn task_list(context: &ToolContext, args: TaskListArgs) -> Result<Output, ToolError> {
    let limit = args.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ToolError::invalid("limit", format!("1-100, got {limit}")));
    }
    let offset = args.offset.unwrap_or(0) as usize;
    let active_only = args.active_only.unwrap_or(true);
    let mine: Vec<TaskSummary> = context
        .tasks
        .list()
        .iter()
        .filter(|t| t.thread_id == context.thread.id && t.background.load(Ordering::SeqCst))
        .filter(|t| !active_only || t.ending().is_none())
        .map(|t| t.summary())
        .collect();
    let page: Vec<_> = mine.iter().skip(offset).take(limit as usize).cloned().collect();
    let has_more = offset + page.len() < mine.len();
    Ok(Output::json(&serde_json::json!({
        "tasks": page,
        "has_more": has_more,
        "next_offset": has_more.then_some(offset + limit as usize),
    })))
}

/// `TaskOutput`.
pub fn task_output(context: &ToolContext, args: TaskOutputArgs) -> Result<Output, ToolError> {
    let task = context.tasks.find(&context.thread.id, &args.task_id)?;
    let max = args.max_bytes.unwrap_or(OUTPUT_PAGE_DEFAULT);
    if !(4..=OUTPUT_PAGE_MAX).contains(&max) {
        return Err(ToolError::invalid("max_bytes", format!("4-{OUTPUT_PAGE_MAX}, got {max}")));
    }
    if args.max_bytes.is_some() && args.offset.is_none() {
        return Err(ToolError::invalid(
            "max_bytes",
            "pages from an offset: pass offset too (0 for the start)",
        ));
    }
    let size = std::fs::metadata(&task.output_path).map(|m| m.len()).unwrap_or(0);
    let (start, len) = match args.offset {
        Some(offset) => (offset.min(size), max),
        None => (size.saturating_sub(OUTPUT_PREVIEW_BYTES), OUTPUT_PREVIEW_BYTES),
    };
    let (text, start, end) = read_utf8(&task.output_path, start, len).map_err(ToolError::Failed)?;
    let summary = task.summary();
    let has_more = end < size;
    Ok(Output {
        text: format!("[{} {}; bytes {start}-{end} of {size}]\n{text}", summary.task_id, summary.status),
        structured: serde_json::json!({
            "task": summary,
            "output": text,
            "offset": start,
            "next_offset": has_more.then_some(end),
            "has_more": has_more,
            "full_output_available": true,
            "output_path": task.output_path.display().to_string(),
        }),
    })
}

/// `TaskStop`.
pub async fn task_stop(context: &ToolContext, args: TaskStopArgs) -> Result<Output, ToolError> {
    let task = context.tasks.find(&context.thread.id, &args.task_id)?;
    if task.ending().is_none() {
        task.stop(TaskStatus::Stopped, args.reason.unwrap_or_else(|| "Stopped by TaskStop".to_string()));
        let mut ended = task.ended.subscribe();
        let _ = ended.wait_for(Option::is_some).await;
    }
    Ok(Output::json(&task.summary()))
}

/// `TaskWait`.
pub async fn task_wait(context: &ToolContext, args: TaskWaitArgs) -> Result<Output, ToolError> {
    if !(1..=86_400).contains(&args.timeout) {
        return Err(ToolError::invalid("timeout", format!("1-86400 seconds, got {}", args.timeout)));
    }
    let waited: Vec<Arc<Task>> = match &args.task_id {
        Some(id) => vec![context.tasks.find(&context.thread.id, id)?],
        None => context
            .tasks
            .list()
            .into_iter()
            .filter(|t| t.thread_id == context.thread.id && t.background.load(Ordering::SeqCst))
            .filter(|t| t.ending().is_none())
            .collect(),
    };
    let claims: Vec<Claim> = waited.iter().map(|t| Claim::new(t.clone())).collect();
    let any_ended = futures_any(waited.iter().map(|t| t.ended.subscribe()).collect());
    let clock = context.threads.clock().clone();
    let timed_out = waited.iter().all(|t| t.ending().is_none())
        && !waited.is_empty()
        && tokio::select! {
            () = any_ended => false,
            () = clock.sleep(Duration::from_secs(args.timeout)) => true,
        };
    let summaries: Vec<TaskSummary> = waited.iter().map(|t| t.summary()).collect();
    // The ends in this answer are told; one that came after it is reported to the thread.
    for (task, summary) in waited.iter().zip(&summaries) {
        if summary.status != TaskStatus::Running {
            task.told.store(true, Ordering::SeqCst);
        }
    }
    let (ended, running): (Vec<_>, Vec<_>) =
        summaries.into_iter().partition(|s| s.status != TaskStatus::Running);
    drop(claims);
    for task in &waited {
        context.tasks.report_unless_waited(task).await;
    }
    Ok(Output::json(&serde_json::json!({
        "timed_out": timed_out,
        "ended": ended,
        "running": running,
    })))
}

/// A TaskWait's hold on a task's end report (released when the wait ends, however).
struct Claim(Arc<Task>);

impl Claim {
    fn new(task: Arc<Task>) -> Self {
        task.waiters.fetch_add(1, Ordering::SeqCst);
        Self(task)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Resolves when any of the watched tasks has ended.
async fn futures_any(mut watched: Vec<watch::Receiver<Option<Ending>>>) {
    if watched.is_empty() {
        return;
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut waiting = tokio::task::JoinSet::new();
    for mut receiver in watched.drain(..) {
        let tx = tx.clone();
        waiting.spawn(async move {
            let _ = receiver.wait_for(Option::is_some).await;
            let _ = tx.send(()).await;
        });
    }
    let _ = rx.recv().await;
}

/// The last `bytes` of a log as text, and how many bytes before them were left out.
fn tail_with_cut(path: &Path, bytes: usize) -> (String, u64) {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let start = size.saturating_sub(bytes as u64);
    match read_utf8(path, start, bytes as u64) {
        Ok((text, start, _)) => (text, start),
        Err(e) => (e, 0),
    }
}

fn tail(path: &Path, bytes: usize) -> String {
    tail_with_cut(path, bytes).0
}

/// Up to `len` bytes of `path` from `start`, as whole UTF-8 characters: a start inside a
/// character moves on to the next one, an end inside one stops before it. The text, and
/// where it really starts and ends.
fn read_utf8(path: &Path, start: u64, len: u64) -> Result<(String, u64, u64), String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.seek(std::io::SeekFrom::Start(start)).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(len).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    // Continuation bytes (10xxxxxx) at the start belong to a character begun before it.
    let skip = bytes.iter().take(3).take_while(|b| (**b & 0xC0) == 0x80).count();
    let mut body = &bytes[skip..];
    let cut = match std::str::from_utf8(body) {
        Ok(_) => body.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => body.len(),
    };
    body = &body[..cut];
    let text = String::from_utf8_lossy(body).into_owned();
    let start = start + skip as u64;
    Ok((text, start, start + body.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_of_output_never_splits_a_character() {
        let dir = tempfile::tempdir().expect("log");
        let path = dir.path().join("log");
        std::fs::write(&path, "aé€b").expect("log"); // a(1) é(2) €(3) b(1)
        // From inside é: moves on to €.
        assert_eq!(read_utf8(&path, 2, 10).expect("log"), ("€b".to_string(), 3, 7));
        // Ending inside €: stops before it.
        assert_eq!(read_utf8(&path, 0, 4).expect("log"), ("aé".to_string(), 0, 3));
        assert_eq!(read_utf8(&path, 7, 10).expect("log"), (String::new(), 7, 7));
    }
}
