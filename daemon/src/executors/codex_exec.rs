//! The `codex` executor's fallback where the app-server is unavailable (a Codex without
//! it): `COMMAND exec --json [resume SESSION] -`, one process per turn with the input on
//! stdin, its JSONL events read as they come. It has no way to ask the owner or to take
//! input mid-turn: Codex's own approval policy applies, and messages wait for the next turn.

use serde_json::Value;

use super::process;
use super::session::Transcript;
use super::turn::{AgentReport, Live, McpServer, PartKind, TurnFailure, TurnInput, Usage, lost_session};

pub async fn run(
    command: &[String],
    input: &TurnInput<'_>,
    report: &mut AgentReport,
) -> Result<String, TurnFailure> {
    let resumed = input.agent_session.clone();
    let mut argv = command.to_vec();
    argv.extend(arguments(resumed.as_deref(), &overrides(&input.mcp)));
    let mut events = Events::new(Transcript::new(input.live.clone(), input.max_output_bytes));
    let exited = process::run(&argv, input, &mut |line| events.feed(line)).await?;
    report.session = events.session.clone().or(resumed.clone());
    report.usage = events.usage;
    let fail = |output: String, error: String| Err(TurnFailure { output, error, agent_started: true });
    if let Some(session) = &resumed
        && events.session.is_none()
        && !exited.status.success()
    {
        report.lost_session = true;
        return fail(String::new(), lost_session(session, "Codex", &exited.stderr_tail));
    }
    let (output, overflowed) = events.transcript.output();
    match events.failed {
        Some(error) => fail(output, format!("Codex ended the turn failed: {error}")),
        None if !exited.status.success() => {
            fail(output, format!("Codex ended without finishing the turn: {}", exited.failure_reason()))
        }
        None if !events.completed => fail(output, "Codex ended without finishing the turn".into()),
        None if overflowed => fail(output, "output exceeded turns.max_output_bytes".into()),
        None => Ok(output),
    }
}

/// The arguments after the profile's command: `exec --json`, kiki's MCP server as config
/// overrides, then `resume SESSION` when there is one, and `-` (the prompt is stdin).
fn arguments(session: Option<&str>, overrides: &[String]) -> Vec<String> {
    let mut args = vec!["exec".to_string(), "--json".to_string()];
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
    let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
    let env: Vec<String> = kiki.env.iter().map(|(k, v)| format!("{} = {}", quote(k), quote(v))).collect();
    vec![
        format!("mcp_servers.kiki.command={}", quote(&kiki.command)),
        format!("mcp_servers.kiki.args=[{}]", McpServer::ARGS.map(quote).join(", ")),
        format!("mcp_servers.kiki.env={{ {} }}", env.join(", ")),
    ]
}

/// What the turn's events said.
struct Events {
    session: Option<String>,
    transcript: Transcript,
    usage: Option<Usage>,
    completed: bool,
    failed: Option<String>,
}

impl Events {
    fn new(transcript: Transcript) -> Self {
        Self { session: None, transcript, usage: None, completed: false, failed: None }
    }

    /// Takes one JSONL event of `codex exec --json`.
    fn feed(&mut self, line: &[u8]) {
        let Ok(event) = serde_json::from_slice::<Value>(line) else { return };
        let item = &event["item"];
        match event["type"].as_str() {
            Some("thread.started") => {
                if let Some(id) = event["thread_id"].as_str() {
                    self.session = Some(id.to_string());
                    self.transcript.say(Live::Session(id.to_string()));
                }
            }
            Some("item.started") if item["type"] == "command_execution" => {
                self.transcript
                    .part(PartKind::Tool, format!("command {}", item["command"].as_str().unwrap_or("")));
            }
            Some("item.completed") => match item["type"].as_str() {
                Some("agent_message") => {
                    self.transcript.answer(item["text"].as_str().unwrap_or("").to_string())
                }
                Some("command_execution") => {
                    let output = item["aggregated_output"].as_str().unwrap_or("");
                    let status =
                        format!("{} (exit {})", item["status"].as_str().unwrap_or(""), item["exit_code"]);
                    self.transcript.part(PartKind::ToolResult, format!("{status}\n{output}"));
                }
                _ => {}
            },
            Some("turn.completed") => {
                self.completed = true;
                let usage = &event["usage"];
                self.usage = Some(Usage {
                    input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
                    output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
                    cost_usd: 0.0,
                });
            }
            Some("turn.failed") => {
                self.failed = Some(event["error"]["message"].as_str().unwrap_or("").to_string())
            }
            Some("error") => self.transcript.error(event["message"].as_str().unwrap_or("").to_string()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_turn_names_its_session_and_reads_stdin() {
        let args = arguments(Some("s-1"), &["a=1".into()]);
        assert_eq!(args, ["exec", "--json", "-c", "a=1", "resume", "s-1", "-"]);
        assert_eq!(arguments(None, &[]), ["exec", "--json", "-"]);
        let kiki =
            McpServer { command: "/a \"b\"/kiki".into(), env: vec![("KIKI_TOKEN".into(), "t".into())] };
        let parsed: Vec<toml::Table> =
            overrides(&kiki).iter().map(|o| o.replacen('=', " = ", 1).parse().expect("TOML")).collect();
        let text = |t: &toml::Table| toml::to_string(t).expect("TOML");
        assert_eq!(text(&parsed[0]), "[mcp_servers.kiki]\ncommand = '/a \"b\"/kiki'\n");
        assert!(text(&parsed[2]).contains("KIKI_TOKEN = \"t\""), "{}", text(&parsed[2]));
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
        assert_eq!(events.usage, Some(Usage { input_tokens: 10, output_tokens: 5, cost_usd: 0.0 }));
        assert_eq!(events.transcript.output(), ("hi".to_string(), false));
    }
}
