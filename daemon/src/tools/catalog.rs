//! Every session tool, declared once: its name, title, description, approval rule, argument
//! type and handler. Adding a tool is adding it here.

use std::path::Path;
use std::sync::Arc;

use super::registry::{Registry, Spec, Tool, never, outside_workspace};
use super::{Approval, Output, ToolContext, ToolError, cron, files, search, shell, todo};

/// Every session tool, in the order ToolList shows them.
pub fn all() -> Arc<Registry> {
    Registry::new(
        [file_tools(), search_tools(), shell_tools(), notebook_tools()].into_iter().flatten().collect(),
    )
}

/// `Read`, `Write`, `Edit`: one file of the workspace (or, asking first, outside it).
fn file_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            Spec {
                name: "Read",
                title: "Read a file",
                description: "Read a text file of the thread's workspace (a relative path starts there), its lines numbered `NUMBER\\tTEXT`. `line_offset` is the first line (from 1; negative counts from the end, -1 the last), `n_lines` how many (1-1000, default 1000). At most 1,000 lines or 100 KB per call: a longer read says what was left out and the `next_line_offset` to read on. Reports the file's line endings (a CRLF file reads as LF) and encoding (UTF-16 is converted). Images and videos are refused; so are binary files.",
                read_only: true,
                approval: Approval::Never,
            },
            never,
            |context: ToolContext, args: files::ReadArgs| {
                blocking(move || {
                    let read = files::read(&context.cwd, &args)?;
                    let structured = serde_json::to_value(&read).unwrap_or_default();
                    let mut text = read.content;
                    if let Some(notice) = &read.truncated {
                        text.push_str(&format!("\n[{notice}]"));
                    }
                    Ok(Output { text, structured })
                })
            },
        ),
        Tool::new(
            Spec {
                name: "Write",
                title: "Write a file",
                description: "Create or overwrite a file (`mode`: `overwrite`, the default, or `append`), creating missing parent directories. A relative path starts in the thread's workspace; a path outside it asks the owner first.",
                read_only: false,
                approval: Approval::OutsideWorkspace,
            },
            |args: &files::WriteArgs, cwd: &Path| outside_workspace(&args.path, cwd),
            |context: ToolContext, args: files::WriteArgs| {
                blocking(move || Ok(Output::json(&files::write(&context.cwd, &args)?)))
            },
        ),
        Tool::new(
            Spec {
                name: "Edit",
                title: "Edit a file",
                description: "Replace `old_string` with `new_string` in a file: `old_string` must occur exactly once unless `replace_all` is true, and the two must differ. A CRLF file keeps its CRLF (match it as it reads, with LF). A path outside the thread's workspace asks the owner first.",
                read_only: false,
                approval: Approval::OutsideWorkspace,
            },
            |args: &files::EditArgs, cwd: &Path| outside_workspace(&args.path, cwd),
            |context: ToolContext, args: files::EditArgs| {
                blocking(move || Ok(Output::json(&files::edit(&context.cwd, &args)?)))
            },
        ),
    ]
}

/// `Glob`, `Grep`: finding files and what they hold.
fn search_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            Spec {
                name: "Glob",
                title: "Find files",
                description: "Files whose path (relative to `path`, default the workspace) matches a glob (`**/*.rs`, `src/*.{ts,tsx}`), newest first. Respects .gitignore, .ignore and .rgignore unless `include_ignored`; skips .git. Pages: `head_limit` (default 100; 0 for all) from `offset`; `next_offset` reads on.",
                read_only: true,
                approval: Approval::Never,
            },
            never,
            |context: ToolContext, args: search::GlobArgs| {
                blocking(move || Ok(Output::json(&search::glob(&context.cwd, &args)?)))
            },
        ),
        Tool::new(
            Spec {
                name: "Grep",
                title: "Search file contents",
                description: "Search files with ripgrep's engine: `pattern` (a regular expression), `path` (default the workspace), `type` (rs, py, ts…), `glob`, `output_mode` (`files_with_matches` default, `content`, `count_matches`), context lines `-A`/`-B`/`-C`, `-i`, `-n` (default true), `multiline`, `include_ignored`. Pages: `head_limit` (default 250; 0 for all) from `offset`.",
                read_only: true,
                approval: Approval::Never,
            },
            never,
            |context: ToolContext, args: search::GrepArgs| {
                blocking(move || {
                    let found = search::grep(&context.cwd, &args)?;
                    let mut text = found.entries.join("\n");
                    if let Some(next) = found.next_offset {
                        text.push_str(&format!("\n[{} in all; offset {next} reads on]", found.total));
                    }
                    Ok(Output { text, structured: serde_json::to_value(&found).unwrap_or_default() })
                })
            },
        ),
    ]
}

/// `Bash` and its background tasks: `TaskList`, `TaskOutput`, `TaskStop`, `TaskWait`.
fn shell_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            Spec {
                name: "Bash",
                title: "Run a shell command",
                description: "Run a command with bash in the thread's workspace (or `cwd`), stdin closed. In the foreground it waits up to `timeout` ms (default 60,000, at most 300,000); a command still running then moves to the background as a task (with a fresh 600 s budget) and the answer gives its task id. `run_in_background: true` (with a `description`) returns a task id at once; the task's end is reported to the thread. Stopping ends the command's whole process group: SIGTERM, then SIGKILL after 5 s. Asks the owner first unless the thread's profile allows it.",
                read_only: false,
                approval: Approval::Always,
            },
            |args: &shell::BashArgs, cwd: &Path| {
                args.check(cwd).map(|()| Some("Bash asks the owner first".into()))
            },
            |context: ToolContext, args: shell::BashArgs| async move { shell::bash(&context, args).await },
        ),
        Tool::new(
            Spec {
                name: "TaskList",
                title: "List background tasks",
                description: "The thread's background tasks: `active_only` (default true: running ones), `limit` (1-100, default 20), `offset`; follow `next_offset` while `has_more`.",
                read_only: true,
                approval: Approval::Never,
            },
            never,
            |context: ToolContext, args: shell::TaskListArgs| async move { shell::task_list(&context, args) },
        ),
        Tool::new(
            Spec {
                name: "TaskOutput",
                title: "A background task's output",
                description: "A task's status and output. Without `offset`, the last 32 KB; with `offset` (bytes from the start) up to `max_bytes` (4-32768, default 16384), then follow `next_offset` while `has_more`. `output_path` is the whole log, which Read can open. Never blocks.",
                read_only: true,
                approval: Approval::Never,
            },
            never,
            |context: ToolContext, args: shell::TaskOutputArgs| async move { shell::task_output(&context, args) },
        ),
        Tool::new(
            Spec {
                name: "TaskStop",
                title: "Stop a background task",
                description: "Stop a running task (its process group: SIGTERM, then SIGKILL after 5 s), with an optional `reason` (default \"Stopped by TaskStop\"). Safe on a task that already ended. Asks the owner first.",
                read_only: false,
                approval: Approval::Always,
            },
            |_: &shell::TaskStopArgs, _: &Path| Ok(Some("TaskStop asks the owner first".into())),
            |context: ToolContext, args: shell::TaskStopArgs| async move {
                shell::task_stop(&context, args).await
            },
        ),
        Tool::new(
            Spec {
                name: "TaskWait",
                title: "Wait for background tasks",
                description: "Wait until a task ends (`task_id`), or without one until any task running now ends, for at most `timeout` seconds (1-86400). A timeout is not an error: the answer lists what still runs. A task whose end a wait reported is not reported to the thread again.",
                read_only: true,
                approval: Approval::Never,
            },
            never,
            |context: ToolContext, args: shell::TaskWaitArgs| async move {
                shell::task_wait(&context, args).await
            },
        ),
    ]
}

/// What a thread keeps for itself: `TodoList` (its todos and notes), `Cron` (its scheduled prompts).
fn notebook_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            Spec {
                name: "TodoList",
                title: "Todo list and notes",
                description: "The thread's todo list and working notes. `{}` reads both. `todos` replaces the whole list (each `{title, status}`, status pending, in_progress or done; `[]` clears it). `notes` changes only the sections given (goal, directives, decided, rejected, evidence, files, next, open): a string replaces its section, \"\" deletes it, `notes: null` clears all. Each section at most 1,500 characters, all notes 7,500; a call over a limit changes nothing. A write answers with a receipt (what changed, the revision, counts).",
                read_only: false,
                approval: Approval::Never,
            },
            never,
            |context: ToolContext, args: todo::TodoArgs| async move { todo::todo_list(&context, args).await },
        ),
        Tool::new(
            Spec {
                name: "Cron",
                title: "Scheduled prompts",
                description: "Schedule a prompt into this thread. `action: \"create\"` with `cron` (5 fields: minute hour day-of-month month day-of-week, the home's local time), `prompt` (at most 8 KB) and `recurring` (default true; false fires once and is deleted): returns its id, humanSchedule and nextFireAt. `action: \"list\"` lists them; `action: \"delete\"` with `id` cancels one. At most 50 per thread. Recurring fires are shifted by a fixed jitter (up to 10% of the period, at most 15 min); fires missed while the home was down come once, with their count; a recurring prompt older than 7 days fires a last time and is deleted. Create and delete ask the owner first.",
                read_only: false,
                approval: Approval::Always,
            },
            |args: &cron::CronArgs, _: &Path| args.check(),
            |context: ToolContext, args: cron::CronArgs| async move { cron::cron_tool(&context, args).await },
        ),
    ]
}

/// Runs file work on the blocking pool.
async fn blocking(
    work: impl FnOnce() -> Result<Output, ToolError> + Send + 'static,
) -> Result<Output, ToolError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| ToolError::Failed(format!("the tool failed: {e}")))?
}
