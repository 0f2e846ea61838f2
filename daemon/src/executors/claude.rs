//! The `claude` executor: Claude Code's headless mode, one session continued turn after
//! turn.
//!
//! Each turn runs `COMMAND -p --output-format stream-json --verbose` with the turn's input on
//! stdin, `--resume SESSION` once the thread has a session, and kiki's MCP server in
//! `--mcp-config` so the agent has the collaboration tools (acting as the thread, through
//! the turn's `KIKI_TOKEN`). The stream's `system`/`init` event names the session; its
//! `result` event is the turn's outcome, with tokens and cost. A session Claude Code no
//! longer has fails the turn with that reason: it is never replaced by a fresh one silently.

use kiki_proto::agents;
use serde_json::Value;

use super::process::{self, Exited};
use super::turn::{AgentReport, Live, LiveSink, McpServer, TurnFailure, TurnInput, lost_session, say};
use crate::store::{PartKind, TurnUsage};

/// `kiki mcp`'s tool that turns Claude Code's permission prompts into requests to the owner
/// (Claude Code names a server's tool `mcp__SERVER__TOOL`).
const PERMISSION_TOOL: &str = "mcp__kiki__PermissionPrompt";

/// What Claude Code says when `--resume` names a session it does not have.
const NO_SESSION: &str = "No conversation found with session ID";

/// The arguments after the profile's command for one turn.
pub fn arguments(session: Option<&str>, mcp_config: &str, allowed_tools: &[String]) -> Vec<String> {
    let mut args: Vec<String> =
        ["-p", "--output-format", "stream-json", "--verbose"].iter().map(|a| a.to_string()).collect();
    if let Some(session) = session {
        args.extend(["--resume".into(), session.into()]);
    }
    args.extend(["--mcp-config".into(), mcp_config.into()]);
    // What the agent may not do unasked is asked of the owner (`kiki approve` / `deny`).
    args.extend(["--permission-prompt-tool".into(), PERMISSION_TOOL.into()]);
    if !allowed_tools.is_empty() {
        args.extend(["--allowedTools".into(), allowed_tools.join(",")]);
    }
    args
}

pub async fn run(
    command: &[String],
    allowed_tools: &[String],
    input: TurnInput<'_>,
    report: &mut AgentReport,
) -> Result<String, TurnFailure> {
    let resumed = input.agent_session.clone();
    let mut argv = command.to_vec();
    argv.extend(arguments(resumed.as_deref(), &input.mcp.claude_config(), allowed_tools));
    let live = input.live.clone();
    let mut stream = Stream::default();
    let exited = process::run(&argv, &input, &mut |line| stream.feed(line, live.as_ref())).await?;
    report.session = stream.session.clone().or(resumed.clone());
    report.usage = stream.usage;
    outcome(exited, stream, resumed.as_deref(), report)
}

impl McpServer {
    /// Claude Code's `--mcp-config` naming kiki's server.
    pub fn claude_config(&self) -> String {
        let claude = agents::Agent::Claude;
        serde_json::json!({agents::servers(claude): {agents::SERVER: self.entry(claude)}}).to_string()
    }
}

/// What a turn's stream-json output said.
#[derive(Debug, Default)]
struct Stream {
    session: Option<String>,
    /// The assistant's text, for a turn that ended without a result.
    text: Vec<String>,
    /// The `result` event: its text, and whether it is an error (with its subtype).
    result: Option<(String, Option<String>)>,
    usage: Option<TurnUsage>,
}

impl Stream {
    /// Takes one line of the stream as it comes, telling `live` what a follower sees: the
    /// session as soon as it is named, the agent's text and its tool calls and results.
    fn feed(&mut self, line: &[u8], live: Option<&LiveSink>) {
        let Ok(event) = serde_json::from_slice::<Value>(line) else { return };
        let say = |event: Live| say(live, event);
        if let Some(session) = event["session_id"].as_str()
            && self.session.as_deref() != Some(session)
        {
            self.session = Some(session.to_string());
            say(Live::Session(session.to_string()));
        }
        match event["type"].as_str() {
            Some("assistant") => {
                for part in event["message"]["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("text") => {
                            let text = part["text"].as_str().unwrap_or_default().to_string();
                            say(Live::Part(PartKind::Text, text.clone()));
                            self.text.push(text);
                        }
                        Some("tool_use") => {
                            let call = format!("{} {}", part["name"].as_str().unwrap_or("?"), part["input"]);
                            say(Live::Part(PartKind::Tool, call));
                        }
                        _ => {}
                    }
                }
            }
            Some("user") => {
                for part in event["message"]["content"].as_array().into_iter().flatten() {
                    if part["type"].as_str() == Some("tool_result") {
                        let content = match &part["content"] {
                            Value::String(text) => text.clone(),
                            other => other.to_string(),
                        };
                        say(Live::Part(PartKind::ToolResult, content));
                    }
                }
            }
            Some("result") => {
                let text = event["result"].as_str().unwrap_or_default().to_string();
                let error = event["is_error"]
                    .as_bool()
                    .unwrap_or(false)
                    .then(|| event["subtype"].as_str().unwrap_or("error").to_string());
                self.result = Some((text, error));
                self.usage = Some(TurnUsage {
                    input_tokens: tokens(&event["usage"], "input_tokens"),
                    output_tokens: tokens(&event["usage"], "output_tokens"),
                    cost_usd: event["total_cost_usd"].as_f64().unwrap_or(0.0),
                });
            }
            _ => {}
        }
    }
}

/// Input tokens count what the cache read and wrote too: they were all sent.
fn tokens(usage: &Value, field: &str) -> u64 {
    let own = usage[field].as_u64().unwrap_or(0);
    if field == "input_tokens" {
        own + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
            + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0)
    } else {
        own
    }
}

fn outcome(
    exited: Exited,
    stream: Stream,
    resumed: Option<&str>,
    report: &mut AgentReport,
) -> Result<String, TurnFailure> {
    let fail = |output: String, error: String| TurnFailure { output, error, agent_started: true };
    if let Some(session) = resumed
        && !exited.status.success()
        && exited.stderr_tail.contains(NO_SESSION)
    {
        report.lost_session = true;
        return Err(fail(String::new(), lost_session(session, "Claude Code", &exited.stderr_tail)));
    }
    match stream.result {
        Some((text, None)) if exited.status.success() => Ok(text),
        Some((text, Some(subtype))) => {
            // Its result says why (`Not logged in · Please run /login`); the subtype may say
            // only `success` (the run itself went fine).
            let kind = if subtype == "success" { String::new() } else { format!(" ({subtype})") };
            let why = text.lines().next().unwrap_or_default();
            Err(fail(text.clone(), format!("Claude Code ended the turn with an error{kind}: {why}")))
        }
        _ => Err(fail(
            stream.text.join("\n"),
            format!("Claude Code ended without a result: {}", exited.failure_reason()),
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_permission_tool_is_kiki_mcps_by_the_name_claude_code_gives_it() {
        assert_eq!(PERMISSION_TOOL, format!("mcp__{}__PermissionPrompt", kiki_proto::agents::SERVER));
    }

    use super::*;

    #[test]
    fn a_turn_resumes_its_session_with_kikis_tools() {
        let args = arguments(Some("s-1"), "{}", &["mcp__kiki__ThreadSend".into()]);
        assert_eq!(
            args,
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--resume",
                "s-1",
                "--mcp-config",
                "{}",
                "--permission-prompt-tool",
                "mcp__kiki__PermissionPrompt",
                "--allowedTools",
                "mcp__kiki__ThreadSend"
            ]
        );
        assert!(!arguments(None, "{}", &[]).contains(&"--resume".to_string()));
    }

    #[test]
    fn the_stream_gives_the_session_the_result_and_the_usage() {
        let out = br#"{"type":"system","subtype":"init","session_id":"s-9"}
not json
{"type":"assistant","session_id":"s-9","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","name":"Bash"}]}}
{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s-9","total_cost_usd":0.25,"usage":{"input_tokens":3,"cache_read_input_tokens":7,"output_tokens":5}}
"#;
        let (live, mut followed) = tokio::sync::mpsc::unbounded_channel();
        let mut stream = Stream::default();
        for line in out.split(|b| *b == b'\n') {
            stream.feed(line, Some(&live));
        }
        assert_eq!(stream.session.as_deref(), Some("s-9"));
        assert_eq!(stream.text, ["hi"]);
        let mut seen = Vec::new();
        while let Ok(event) = followed.try_recv() {
            seen.push(event);
        }
        assert_eq!(
            seen,
            [
                Live::Session("s-9".into()),
                Live::Part(PartKind::Text, "hi".into()),
                Live::Part(PartKind::Tool, "Bash null".into())
            ]
        );
        assert_eq!(stream.result, Some(("done".into(), None)));
        assert_eq!(stream.usage, Some(TurnUsage { input_tokens: 10, output_tokens: 5, cost_usd: 0.25 }));
    }
}
