//! The `codex` executor's fallback for a Codex without the app-server (see
//! [`super::codex_release`]): `COMMAND exec --json [--skip-git-repo-check] -c … [resume
//! SESSION] -`, one process per turn with the input on stdin, its JSONL events read as they
//! come. It has no way to ask the owner or to take input mid-turn: Codex's own approval
//! policy applies, and messages wait for the next turn.
//!
//! Releases print three shapes of events, all read here: `thread.started`, `item.*` and
//! `turn.*` (`--json` from 0.44); `session.created` and the same `item.*` and `turn.*`
//! (`--experimental-json`, 0.42–0.43, used where the release lists it); and the protocol's
//! own events, `{"id", "msg": {"type": …}}` (`--json` before 0.44), which name no session:
//! a thread on such a release starts a new Codex session every turn.

use std::path::Path;

use kiki_proto::agents;
use serde_json::Value;

use super::codex_release::ExecFlags;
use super::process;
use super::session::Transcript;
use super::turn::{AgentReport, Live, McpServer, TurnFailure, TurnInput, lost_session};
use crate::store::{PartKind, TurnUsage};

pub async fn run(
    command: &[String],
    flags: ExecFlags,
    input: &TurnInput<'_>,
    report: &mut AgentReport,
) -> Result<String, TurnFailure> {
    let resumed = input.agent_session.clone();
    let fail = |output: String, error: String| Err(TurnFailure { output, error, agent_started: true });
    if let Some(session) = &resumed
        && !flags.resume
    {
        // Never a fresh session in its place.
        report.lost_session = true;
        let why = "this release's `codex exec` cannot resume a session (it has no `exec resume`)";
        return fail(String::new(), lost_session(session, "Codex", why));
    }
    let skip_git_repo_check = flags.skip_git_repo_check && !in_git_repository(input.cwd);
    let mut argv = command.to_vec();
    argv.extend(arguments(resumed.as_deref(), flags, skip_git_repo_check, &overrides(&input.mcp)));
    let mut events = Events::new(Transcript::new(input.live.clone(), input.max_output_bytes));
    let exited = process::run(&argv, input, &mut |line| events.feed(line)).await?;
    report.session = events.session.clone().or(resumed.clone());
    report.usage = events.usage;
    if let Some(session) = &resumed
        && events.session.is_none()
        && !exited.status.success()
    {
        report.lost_session = true;
        return fail(String::new(), lost_session(session, "Codex", &exited.stderr_tail));
    }
    let last_error = events.transcript.last_error();
    let (output, overflowed) = events.transcript.output();
    match events.failed {
        Some(error) => fail(output, format!("Codex ended the turn failed: {error}")),
        None if !exited.status.success() => {
            fail(output, format!("Codex ended without finishing the turn: {}", exited.failure_reason()))
        }
        // Older releases exit 0 after an error that ended the turn.
        None if !events.completed => fail(
            output,
            match last_error {
                Some(error) => format!("Codex ended without finishing the turn: {error}"),
                None => "Codex ended without finishing the turn".into(),
            },
        ),
        None if overflowed => fail(output, "output exceeded turns.max_output_bytes".into()),
        None => Ok(output),
    }
}

/// Whether `cwd` is in a git repository, as Codex looks for one (a `.git` here or above).
fn in_git_repository(cwd: &Path) -> bool {
    cwd.ancestors().any(|dir| dir.join(".git").exists())
}

/// The arguments after the profile's command: `exec` with its JSON events (and
/// `--skip-git-repo-check` outside a git repository, where Codex refuses to run without
/// it), kiki's MCP server as config overrides, then `resume SESSION` when there is one, and
/// `-` (the prompt is stdin).
fn arguments(
    session: Option<&str>,
    flags: ExecFlags,
    skip_git_repo_check: bool,
    overrides: &[String],
) -> Vec<String> {
    let json = if flags.experimental_json { "--experimental-json" } else { "--json" };
    let mut args = vec!["exec".to_string(), json.to_string()];
    if skip_git_repo_check {
        args.push("--skip-git-repo-check".into());
    }
    for value in overrides {
        args.extend(["-c".to_string(), value.clone()]);
    }
    if let Some(session) = session {
        args.extend(["resume".to_string(), session.to_string()]);
    }
    args.push("-".into());
    args
}

/// `-c` values giving Codex kiki's MCP server (TOML values, quoted as TOML strings).
fn overrides(kiki: &McpServer) -> Vec<String> {
    let codex = agents::Agent::Codex;
    let table = format!("{}.{}", agents::servers(codex), agents::SERVER);
    let Value::Object(entry) = kiki.entry(codex) else { return Vec::new() };
    // Every member is a string, a list or a table of strings: each is a TOML value.
    let toml = |value: &Value| toml::Value::try_from(value).map(|v| v.to_string()).unwrap_or_default();
    entry.iter().map(|(key, value)| format!("{table}.{key}={}", toml(value))).collect()
}

/// What the turn's events said.
struct Events {
    session: Option<String>,
    transcript: Transcript,
    usage: Option<TurnUsage>,
    completed: bool,
    failed: Option<String>,
}

impl Events {
    fn new(transcript: Transcript) -> Self {
        Self { session: None, transcript, usage: None, completed: false, failed: None }
    }

    /// Takes one JSONL event of `codex exec`, in any of the releases' shapes.
    fn feed(&mut self, line: &[u8]) {
        let Ok(event) = serde_json::from_slice::<Value>(line) else { return };
        if event["msg"].is_object() {
            return self.feed_protocol(&event["msg"]);
        }
        let item = &event["item"];
        match event["type"].as_str() {
            Some("thread.started" | "session.created") => {
                let id = event["thread_id"].as_str().or(event["session_id"].as_str());
                if let Some(id) = id {
                    self.session = Some(id.to_string());
                    self.transcript.say(Live::Session(id.to_string()));
                }
            }
            Some("item.started") if kind(item) == Some("command_execution") => {
                self.transcript.part(PartKind::Tool, format!("command {}", text(&item["command"])));
            }
            Some("item.completed") => match kind(item) {
                Some("agent_message" | "assistant_message") => self.transcript.answer(text(&item["text"])),
                Some("command_execution") => {
                    let status = format!("{} (exit {})", text(&item["status"]), item["exit_code"]);
                    let output = text(&item["aggregated_output"]);
                    self.transcript.part(PartKind::ToolResult, format!("{status}\n{output}"));
                }
                _ => {}
            },
            Some("turn.completed") => {
                self.completed = true;
                self.usage = Some(tokens(&event["usage"]));
            }
            Some("turn.failed") => self.failed = Some(text(&event["error"]["message"])),
            Some("error") => self.transcript.error(text(&event["message"])),
            _ => {}
        }
    }

    /// One event of the Codex protocol (`--json` before 0.44): `{"id", "msg": {"type", …}}`.
    /// The config summary and the prompt printed before them are not events.
    fn feed_protocol(&mut self, msg: &Value) {
        match msg["type"].as_str() {
            Some("agent_message_delta") => self.transcript.chunk(msg["delta"].as_str().unwrap_or_default()),
            Some("agent_message") => self.transcript.answer(text(&msg["message"])),
            Some("exec_command_begin") => {
                let command = match &msg["command"] {
                    Value::Array(words) => words.iter().map(text).collect::<Vec<_>>().join(" "),
                    other => text(other),
                };
                self.transcript.part(PartKind::Tool, format!("command {command}"));
            }
            Some("exec_command_end") => {
                let output = msg["aggregated_output"].as_str().or(msg["stdout"].as_str()).unwrap_or_default();
                self.transcript.part(PartKind::ToolResult, format!("exit {}\n{output}", msg["exit_code"]));
            }
            // The session's tokens so far (one session per run here: the turn's).
            Some("token_count") => {
                let total = &msg["info"]["total_token_usage"];
                self.usage = Some(tokens(if total.is_object() { total } else { msg }));
            }
            Some("task_complete") => {
                self.completed = true;
                if let Some(last) = msg["last_agent_message"].as_str()
                    && self.transcript.is_empty()
                {
                    self.transcript.answer(last.to_string());
                }
            }
            // A retry's notice, or what ended the turn (the last one said).
            Some("error" | "stream_error") => self.transcript.error(text(&msg["message"])),
            _ => {}
        }
    }
}

/// An item's kind: its `type`, or `item_type` where an early `--experimental-json` names it so.
fn kind(item: &Value) -> Option<&str> {
    item["type"].as_str().or(item["item_type"].as_str())
}

fn tokens(usage: &Value) -> TurnUsage {
    TurnUsage {
        input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        cost_usd: 0.0,
    }
}

/// A JSON string's text, or the JSON itself.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: ExecFlags = ExecFlags { skip_git_repo_check: true, experimental_json: false, resume: true };

    #[test]
    fn a_resumed_turn_names_its_session_and_reads_stdin() {
        let args = arguments(Some("s-1"), ALL, false, &["a=1".into()]);
        assert_eq!(args, ["exec", "--json", "-c", "a=1", "resume", "s-1", "-"]);
        assert_eq!(arguments(None, ALL, false, &[]), ["exec", "--json", "-"]);
        let kiki =
            McpServer { command: "/a \"b\"/kiki".into(), env: vec![("KIKI_TOKEN".into(), "t".into())] };
        let parsed: Vec<toml::Table> =
            overrides(&kiki).iter().map(|o| o.replacen('=', " = ", 1).parse().expect("TOML")).collect();
        let text = |t: &toml::Table| toml::to_string(t).expect("TOML");
        assert_eq!(text(&parsed[0]), "[mcp_servers.kiki]\ncommand = '/a \"b\"/kiki'\n");
        assert!(text(&parsed[2]).contains("KIKI_TOKEN = \"t\""), "{}", text(&parsed[2]));
    }

    #[test]
    fn outside_a_git_repository_codex_is_told_to_run_anyway_if_it_can_be() {
        assert_eq!(arguments(None, ALL, true, &[]), ["exec", "--json", "--skip-git-repo-check", "-"]);
        let experimental = ExecFlags { experimental_json: true, ..ALL };
        assert_eq!(arguments(None, experimental, false, &[]), ["exec", "--experimental-json", "-"]);
        let repo = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(repo.path().join(".git")).expect(".git");
        std::fs::create_dir_all(repo.path().join("src/deep")).expect("src");
        assert!(in_git_repository(&repo.path().join("src/deep")));
        let plain = tempfile::tempdir().expect("dir");
        assert!(!in_git_repository(plain.path()));
    }

    #[test]
    fn the_events_give_the_session_the_answer_and_the_usage() {
        let mut events = Events::new(Transcript::new(None, 1 << 20));
        for line in [
            r#"{"type":"thread.started","thread_id":"t-1"}"#,
            r#"{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"hi"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":5}}"#,
        ] {
            events.feed(line.as_bytes());
        }
        assert_eq!(events.session.as_deref(), Some("t-1"));
        assert!(events.completed);
        assert_eq!(events.usage, Some(TurnUsage { input_tokens: 10, output_tokens: 5, cost_usd: 0.0 }));
        assert_eq!(events.transcript.output(), ("hi".to_string(), false));
    }

    /// `session.created` as 0.42.0 prints it with `--experimental-json`.
    #[test]
    fn experimental_events_name_the_session() {
        let mut events = Events::new(Transcript::new(None, 1 << 20));
        for line in [
            r#"{"type":"session.created","session_id":"01a243a1-9394-7911-85dc-ff9dfe468ca8"}"#,
            r#"{"type":"item.completed","item":{"id":"itm_0","item_type":"assistant_message","text":"hi"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":7,"cached_input_tokens":0,"output_tokens":2}}"#,
        ] {
            events.feed(line.as_bytes());
        }
        assert_eq!(events.session.as_deref(), Some("01a243a1-9394-7911-85dc-ff9dfe468ca8"));
        assert!(events.completed);
        assert_eq!(events.transcript.output(), ("hi".to_string(), false));
    }

    /// As 0.39.0 prints them with `--json`: its summary, the prompt, then protocol events.
    #[test]
    fn protocol_events_of_older_releases_give_the_answer_or_the_error() {
        let mut events = Events::new(Transcript::new(None, 1 << 20));
        for line in [
            r#"{"provider":"openai","model":"gpt-5","workdir":"/w","sandbox":"read-only"}"#,
            r#"{"prompt":"say hi\n"}"#,
            r#"{"id":"0","msg":{"type":"task_started","model_context_window":272000}}"#,
            r#"{"id":"0","msg":{"type":"exec_command_begin","call_id":"c","command":["bash","-lc","ls"],"cwd":"/w"}}"#,
            r#"{"id":"0","msg":{"type":"exec_command_end","call_id":"c","stdout":"a\n","aggregated_output":"a\n","exit_code":0}}"#,
            r#"{"id":"0","msg":{"type":"agent_message","message":"hi"}}"#,
            r#"{"id":"0","msg":{"type":"token_count","info":{"total_token_usage":{"input_tokens":9,"output_tokens":3},"last_token_usage":{"input_tokens":9,"output_tokens":3}}}}"#,
            r#"{"id":"0","msg":{"type":"task_complete","last_agent_message":"hi"}}"#,
        ] {
            events.feed(line.as_bytes());
        }
        assert_eq!(events.session, None, "these releases name no session");
        assert!(events.completed);
        assert_eq!(events.usage, Some(TurnUsage { input_tokens: 9, output_tokens: 3, cost_usd: 0.0 }));
        assert_eq!(events.transcript.output(), ("hi".to_string(), false));

        let mut failed = Events::new(Transcript::new(None, 1 << 20));
        for line in [
            r#"{"id":"0","msg":{"type":"stream_error","message":"stream error: …; retrying 1/5 in 181ms…"}}"#,
            r#"{"id":"0","msg":{"type":"error","message":"error sending request for url (https://api.openai.com/v1/responses)"}}"#,
        ] {
            failed.feed(line.as_bytes());
        }
        assert!(!failed.completed);
        assert_eq!(
            failed.transcript.last_error().as_deref(),
            Some("error sending request for url (https://api.openai.com/v1/responses)")
        );
    }
}
