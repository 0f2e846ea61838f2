//! The `codex` executor: the Codex app-server (`COMMAND app-server`, JSON-RPC over stdio),
//! one Codex thread continued turn after turn.
//!
//! Each kiki turn starts the app-server, `initialize`s, reopens the kiki thread's Codex
//! thread (`thread/resume`; `thread/start` the first time) with kiki's MCP server in its
//! config, and runs one `turn/start`. While the turn runs, input that would wake the kiki
//! thread is steered into it (`turn/steer`) and counted delivered once Codex takes it, and
//! Codex's approval requests go to the owner (`kiki approve` / `deny`); the owner's `kiki
//! thread stop` sends `turn/interrupt`. `turn/completed` ends it; the app-server is then
//! closed. A Codex thread that can no longer be resumed fails the turn: it is never replaced
//! by a fresh one silently. A Codex without the app-server (its help lists none, see
//! `codex_release`) runs `codex exec` instead (`codex_exec`).

use std::time::Duration;

use kiki_proto::agents;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::codex_exec;
use super::codex_release::{self, Release};
use super::desk::TurnDesk;
use super::input::render;
use super::process::Spawned;
use super::rpc::{Incoming, METHOD_NOT_FOUND, Peer, RpcError};
use super::session::{self, Transcript};
use super::turn::{AgentReport, Live, McpServer, STOP_GRACE, TurnFailure, TurnInput, say};
use crate::store::inbox_id;
use crate::store::{PartKind, TurnUsage};

/// How long a steering poll waits for input before looking again.
const STEER_WAIT: Duration = Duration::from_secs(30);
/// At the turn's end, how long a steer under way may take to be answered.
const STEER_GRACE: Duration = Duration::from_secs(5);

pub async fn run(
    command: &[String],
    allowed_tools: &[String],
    input: TurnInput<'_>,
    report: &mut AgentReport,
) -> Result<String, TurnFailure> {
    // A release without the app-server (before 0.44) runs `codex exec` instead; its own
    // help says which it is (see `codex_release`).
    if let Some(Release::Exec(flags)) = codex_release::release(command, &input).await {
        return codex_exec::run(command, flags, &input, report).await;
    }
    let mut argv = command.to_vec();
    argv.push("app-server".into());
    let (agent, stdin, stdout) = Spawned::start(&argv, &input).await?;
    let (peer, mut incoming) = Peer::start(stdin, stdout, false);
    let client = json!({"name": "kiki", "title": "kiki", "version": env!("CARGO_PKG_VERSION")});
    let hello = peer.request("initialize", json!({"clientInfo": client})).await;
    if let Err(RpcError::Closed) = hello {
        // Gone before the handshake: whatever was decided of this Codex is asked again next
        // turn, and one that says it has no app-server runs `codex exec` now.
        codex_release::forget(command);
        drop((peer, incoming));
        let exit = agent.end(Duration::from_secs(5)).await.unwrap_or_default();
        if exit.contains("app-server") {
            let flags = codex_release::exec_flags(command, &input).await;
            return codex_exec::run(command, flags, &input, report).await;
        }
        return Err(TurnFailure::before_agent(format!(
            "the Codex app-server ended before its handshake: {exit}"
        )));
    }
    let mut transcript = Transcript::new(input.live.clone(), input.max_output_bytes);
    let driven = match hello {
        Ok(_) => drive(&peer, &mut incoming, &input, allowed_tools, &mut transcript, report).await,
        Err(e) => Err(handshake(&e)),
    };
    session::finish(agent, peer, incoming, transcript, driven, "Codex").await
}

/// The conversation of one turn after the handshake's `initialize`, step by step; `Err` is
/// why it failed (`""`: Codex closed its output, see `session::finish`).
async fn drive(
    peer: &Peer,
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
    input: &TurnInput<'_>,
    allowed_tools: &[String],
    transcript: &mut Transcript,
    report: &mut AgentReport,
) -> Result<(), String> {
    peer.notify("initialized", Value::Null);
    let thread = open_thread(peer, input, transcript, report).await?;
    report.session = Some(thread.clone());
    say(input.live.as_ref(), Live::Session(thread.clone()));

    transcript.prompted = true;
    let id = start_turn(peer, &thread, input.rendered).await?;
    let mut turn = Turn { peer, thread, id, steering_done: CancellationToken::new(), asks: JoinSet::new() };
    // Aborted with the turn if it is dropped (kikid stopping).
    let steering = input.desk.clone().map(|desk| {
        let (peer, thread, id) = (peer.clone(), turn.thread.clone(), turn.id.clone());
        AbortOnDropHandle::new(tokio::spawn(steer(peer, desk, thread, id, turn.steering_done.clone())))
    });
    let mut usage = TurnUsage::default();
    let ended = turn.follow(incoming, input, allowed_tools, transcript, &mut usage).await;
    // What is being steered lands (and is counted) before the turn is seen to end; a Codex
    // that does not answer the steer is not waited for long (the input then waits for the
    // next turn, which may give the agent a message twice, never lose it).
    turn.steering_done.cancel();
    if let Some(steering) = steering {
        let _ = tokio::time::timeout(STEER_GRACE, steering).await;
    }
    turn.asks.abort_all();
    report.usage = Some(usage);
    ended
}

/// The turn's Codex thread, with kiki's MCP server: the kiki thread's own, resumed (one
/// Codex cannot resume is lost: the turn fails with attention), or a new one the first time.
async fn open_thread(
    peer: &Peer,
    input: &TurnInput<'_>,
    transcript: &mut Transcript,
    report: &mut AgentReport,
) -> Result<String, String> {
    let cwd = input.cwd.display().to_string();
    let config = mcp_config(&input.mcp);
    let opened = match &input.agent_session {
        Some(thread) => {
            let params = json!({"threadId": thread, "cwd": cwd, "config": config});
            peer.request("thread/resume", params).await.map_err(|e| match e {
                RpcError::Failed { message, .. } => {
                    report.lost_session = true;
                    transcript.prompted = true; // a lost session fails the turn itself, with attention
                    super::turn::lost_session(thread, "Codex", &message)
                }
                closed => handshake(&closed),
            })?
        }
        None => peer
            .request("thread/start", json!({"cwd": cwd, "config": config}))
            .await
            .map_err(|e| handshake(&e))?,
    };
    let thread = opened["thread"]["id"].as_str().ok_or("Codex opened a thread without an id")?;
    Ok(thread.to_string())
}

/// Starts the turn with the turn's input; its id.
async fn start_turn(peer: &Peer, thread: &str, rendered: &str) -> Result<String, String> {
    let input = json!([{"type": "text", "text": rendered}]);
    let started = peer
        .request("turn/start", json!({"threadId": thread, "input": input}))
        .await
        .map_err(|e| format!("Codex did not start the turn: {e}"))?;
    let turn = started["turn"]["id"].as_str().ok_or("Codex started a turn without an id")?;
    Ok(turn.to_string())
}

/// A running Codex turn, as kiki follows it.
struct Turn<'a> {
    peer: &'a Peer,
    thread: String,
    id: String,
    /// Cancelled when nothing more goes into the turn: it is ending, or being stopped.
    steering_done: CancellationToken,
    /// kiki's answers to Codex's requests under way, and its `turn/interrupt`.
    asks: JoinSet<()>,
}

impl Turn<'_> {
    /// Takes what Codex says until the turn ends (`turn/completed`): its notifications, its
    /// requests (each answered by a task of its own: an approval waits for the owner), the
    /// owner's stop.
    async fn follow(
        &mut self,
        incoming: &mut mpsc::UnboundedReceiver<Incoming>,
        input: &TurnInput<'_>,
        allowed_tools: &[String],
        transcript: &mut Transcript,
        usage: &mut TurnUsage,
    ) -> Result<(), String> {
        // Once the owner stops the turn: how long Codex has to end it.
        let mut interrupted: Option<tokio::time::Instant> = None;
        loop {
            let message = tokio::select! {
                message = incoming.recv() => message,
                () = input.stop.cancelled(), if interrupted.is_none() => {
                    interrupted = Some(tokio::time::Instant::now() + STOP_GRACE);
                    self.interrupt();
                    continue;
                }
                () = tokio::time::sleep_until(interrupted.unwrap_or_else(tokio::time::Instant::now)),
                    if interrupted.is_some() =>
                {
                    return Err(format!("Codex did not end the turn within {STOP_GRACE:?} of turn/interrupt"));
                }
            };
            let Some(message) = message else {
                return Err(String::new()); // the agent closed its output: see `session::finish`
            };
            match message {
                Incoming::Notification { method, params } => {
                    if let Some(ended) = note(&method, &params, &self.id, transcript, usage) {
                        return ended;
                    }
                }
                Incoming::Request { id, method, params } => {
                    let (peer, desk, allowed) =
                        (self.peer.clone(), input.desk.clone(), allowed_tools.to_vec());
                    self.asks.spawn(async move {
                        peer.respond(id, approve(&method, &params, desk, &allowed).await)
                    });
                }
                Incoming::Garbled(what) => return Err(format!("Codex wrote {what}")),
            }
        }
    }

    /// The owner stops the turn: nothing more goes into it (what would have waits for the
    /// next), and Codex is asked to interrupt it.
    fn interrupt(&mut self) {
        self.steering_done.cancel();
        let (peer, thread, turn) = (self.peer.clone(), self.thread.clone(), self.id.clone());
        self.asks.spawn(async move {
            let params = json!({"threadId": thread, "turnId": turn});
            if let Err(e) = peer.request("turn/interrupt", params).await {
                tracing::debug!(error = %e, "Codex refused turn/interrupt");
            }
        });
    }
}

/// Codex's answer to a handshake call, as the reason of a failed turn.
fn handshake(e: &RpcError) -> String {
    format!("the Codex app-server did not answer: {e}")
}

/// kiki's MCP server as a Codex config override (`mcp_servers.kiki`).
fn mcp_config(kiki: &McpServer) -> Value {
    let codex = agents::Agent::Codex;
    json!({format!("{}.{}", agents::servers(codex), agents::SERVER): kiki.entry(codex)})
}

/// Takes one notification of the turn; `Some` when it ended (`Ok`) or failed.
fn note(
    method: &str,
    params: &Value,
    turn: &str,
    transcript: &mut Transcript,
    usage: &mut TurnUsage,
) -> Option<Result<(), String>> {
    let item = &params["item"];
    match method {
        "item/started" => match item["type"].as_str() {
            Some("commandExecution") => {
                transcript.part(PartKind::Tool, format!("command {}", text(&item["command"])))
            }
            Some("mcpToolCall") => transcript.part(
                PartKind::Tool,
                format!("{}.{} {}", text(&item["server"]), text(&item["tool"]), item["arguments"]),
            ),
            Some("fileChange") => {
                let paths: Vec<&str> = item["changes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["path"].as_str())
                    .collect();
                transcript.part(PartKind::Tool, format!("file_change {}", paths.join(" ")));
            }
            Some("webSearch") => {
                transcript.part(PartKind::Tool, format!("web_search {}", text(&item["query"])))
            }
            _ => {}
        },
        // Kept as it streams, so a turn cut short still shows what the agent said.
        "item/agentMessage/delta" => transcript.chunk(params["delta"].as_str().unwrap_or_default()),
        "item/completed" => match item["type"].as_str() {
            Some("agentMessage") => transcript.answer(text(&item["text"])),
            Some("commandExecution") => {
                let status = format!("{} (exit {})", text(&item["status"]), item["exitCode"]);
                transcript
                    .part(PartKind::ToolResult, format!("{status}\n{}", text(&item["aggregatedOutput"])));
            }
            Some("mcpToolCall") => {
                let outcome = if item["error"].is_null() { &item["result"] } else { &item["error"] };
                transcript.part(PartKind::ToolResult, format!("{} {outcome}", text(&item["status"])));
            }
            Some("fileChange") => transcript.part(PartKind::ToolResult, text(&item["status"])),
            _ => {}
        },
        "thread/tokenUsage/updated" => {
            // `last` is one model call's; a turn makes several.
            let last = &params["tokenUsage"]["last"];
            usage.input_tokens += last["inputTokens"].as_u64().unwrap_or(0);
            usage.output_tokens += last["outputTokens"].as_u64().unwrap_or(0);
        }
        "error" => transcript.error(text(&params["error"]["message"])),
        "turn/completed" if params["turn"]["id"].as_str() == Some(turn) => {
            let done = &params["turn"];
            return Some(match done["status"].as_str() {
                Some("completed") => Ok(()),
                Some("interrupted") => Err("the Codex turn was interrupted".into()),
                status => {
                    let why = done["error"]["message"]
                        .as_str()
                        .map(str::to_string)
                        .or_else(|| transcript.last_error());
                    Err(format!(
                        "Codex ended the turn {}: {}",
                        status.unwrap_or("without a status"),
                        why.unwrap_or_else(|| "no reason given".into())
                    ))
                }
            });
        }
        _ => {}
    }
    None
}

/// A JSON string's text, or the JSON itself.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Answers one of Codex's requests: approvals go to the owner (unless the profile allows
/// the tool), anything else is not kiki's to answer.
async fn approve(
    method: &str,
    params: &Value,
    desk: Option<TurnDesk>,
    allowed: &[String],
) -> Result<Value, (i64, String)> {
    let (tool, details) = match method {
        "item/commandExecution/requestApproval" => (
            "command",
            json!({
                "command": params["command"], "cwd": params["cwd"], "reason": params["reason"]
            }),
        ),
        "item/fileChange/requestApproval" => {
            ("file_change", json!({"reason": params["reason"], "grantRoot": params["grantRoot"]}))
        }
        "item/permissions/requestApproval" => {
            ("permissions", json!({"permissions": params["permissions"], "reason": params["reason"]}))
        }
        other => return Err((METHOD_NOT_FOUND, format!("kiki does not answer {other}"))),
    };
    let allowed = session::permitted(tool, None, &details.to_string(), desk.as_ref(), allowed).await;
    Ok(match method {
        // The granted subset: all of it, or nothing.
        "item/permissions/requestApproval" if allowed => json!({"permissions": params["permissions"]}),
        "item/permissions/requestApproval" => json!({"permissions": {}}),
        _ => json!({"decision": if allowed { "accept" } else { "decline" }}),
    })
}

/// Steers what would wake the thread into its running turn, each batch counted delivered
/// once Codex has taken it. Ends when `done` is cancelled, after a steer under way lands,
/// or when Codex refuses one (the input then waits for the next turn).
async fn steer(peer: Peer, desk: TurnDesk, thread: String, turn: String, done: CancellationToken) {
    loop {
        let asked = tokio::time::Instant::now();
        let items = tokio::select! {
            items = desk.take_input(Vec::new(), STEER_WAIT) => items,
            () = done.cancelled() => return,
        };
        if items.is_empty() {
            // Nothing before the poll's end: the turn is over for the home (or it failed).
            if asked.elapsed() < STEER_WAIT {
                return;
            }
            continue;
        }
        let ids: Vec<String> = items.iter().filter_map(|i| inbox_id(i).map(str::to_string)).collect();
        let params = json!({
            "threadId": thread,
            "input": [{"type": "text", "text": render(&items)}],
            "expectedTurnId": turn,
        });
        if let Err(e) = peer.request("turn/steer", params).await {
            tracing::debug!(error = %e, "Codex took no more input into the turn");
            return;
        }
        desk.take_input(ids, Duration::ZERO).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_make_the_transcript_and_the_usage() {
        let (live, mut followed) = tokio::sync::mpsc::unbounded_channel();
        let mut transcript = Transcript::new(Some(live), 1 << 20);
        let mut usage = TurnUsage::default();
        let notes = [
            ("item/started", json!({"item": {"type": "commandExecution", "command": "ls"}})),
            (
                "item/completed",
                json!({"item": {"type": "commandExecution", "status": "completed", "exitCode": 0, "aggregatedOutput": "a\n"}}),
            ),
            (
                "thread/tokenUsage/updated",
                json!({"tokenUsage": {"last": {"inputTokens": 10, "outputTokens": 5}}}),
            ),
            (
                "thread/tokenUsage/updated",
                json!({"tokenUsage": {"last": {"inputTokens": 1, "outputTokens": 2}}}),
            ),
            ("item/agentMessage/delta", json!({"delta": "do"})),
            ("item/completed", json!({"item": {"type": "agentMessage", "text": "done"}})),
            ("turn/completed", json!({"turn": {"id": "other", "status": "completed"}})),
        ];
        for (method, params) in &notes {
            assert_eq!(note(method, params, "t1", &mut transcript, &mut usage), None);
        }
        let end = json!({"turn": {"id": "t1", "status": "failed", "error": {"message": "quota"}}});
        assert_eq!(
            note("turn/completed", &end, "t1", &mut transcript, &mut usage),
            Some(Err("Codex ended the turn failed: quota".into()))
        );
        assert_eq!(usage, TurnUsage { input_tokens: 11, output_tokens: 7, cost_usd: 0.0 });
        let mut seen = Vec::new();
        while let Ok(event) = followed.try_recv() {
            seen.push(event);
        }
        assert_eq!(
            seen,
            [
                Live::Part(PartKind::Tool, "command ls".into()),
                Live::Part(PartKind::ToolResult, "completed (exit 0)\na\n".into()),
                Live::Part(PartKind::Text, "done".into()),
            ]
        );
    }

    #[test]
    fn kikis_server_is_a_config_override() {
        let kiki = McpServer { command: "/bin/kiki".into(), env: vec![("KIKI_TOKEN".into(), "t".into())] };
        assert_eq!(
            mcp_config(&kiki),
            json!({"mcp_servers.kiki": {"command": "/bin/kiki", "args": ["mcp"], "env": {"KIKI_TOKEN": "t"}}})
        );
    }
}
