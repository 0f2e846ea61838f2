//! The `acp` executor: any agent that speaks the Agent Client Protocol (JSON-RPC 2.0 over
//! stdio), one ACP session continued turn after turn.
//!
//! Each kiki turn starts the profile's command, `initialize`s, loads the kiki thread's
//! session (`session/load`, which needs the agent's `loadSession` capability;
//! `session/new` the first time) with kiki's MCP server in its `mcpServers`, and sends the
//! turn's input as one `session/prompt`. Its `session/update`s are the turn's progress; its
//! `session/request_permission` requests go to the owner (`kiki approve` / `deny`). The
//! prompt's answer (its `stopReason`) ends the turn. ACP has no way to add input to a
//! running prompt, so messages that arrive meanwhile wait for the next turn. A session that
//! cannot be loaded fails the turn: it is never replaced by a fresh one silently.

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::desk::TurnDesk;
use super::process::Spawned;
use super::rpc::{Incoming, METHOD_NOT_FOUND, Peer, RpcError};
use super::session::{self, Transcript};
use super::turn::{AgentReport, Live, McpServer, PartKind, TurnFailure, TurnInput, Usage, say};

/// The ACP version kiki speaks.
const PROTOCOL_VERSION: u64 = 1;

/// ACP's error for a session (or other resource) the agent does not have.
const RESOURCE_NOT_FOUND: i64 = -32002;

pub async fn run(
    command: &[String],
    allowed_tools: &[String],
    input: TurnInput<'_>,
    report: &mut AgentReport,
) -> Result<String, TurnFailure> {
    let (agent, stdin, stdout) = Spawned::start(command, &input).await?;
    let (peer, mut incoming) = Peer::start(stdin, stdout, true);
    let mut transcript = Transcript::new(input.live.clone(), input.max_output_bytes);
    let driven = drive(&peer, &mut incoming, &input, allowed_tools, &mut transcript, report).await;
    session::finish(agent, peer, incoming, transcript, driven, "The ACP agent").await
}

async fn drive(
    peer: &Peer,
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
    input: &TurnInput<'_>,
    allowed_tools: &[String],
    transcript: &mut Transcript,
    report: &mut AgentReport,
) -> Result<(), String> {
    let hello = json!({
        "protocolVersion": PROTOCOL_VERSION,
        // kiki serves no files or terminals: the agent uses its own.
        "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
        "clientInfo": {"name": "kiki", "title": "kiki", "version": env!("CARGO_PKG_VERSION")},
    });
    let agent = peer.request("initialize", hello).await.map_err(|e| handshake(&e))?;
    let cwd = input.cwd.display().to_string();
    let servers = mcp_servers(&input.mcp);
    let session = match &input.agent_session {
        Some(session) => {
            let lost = |detail: &str| super::turn::lost_session(session, "the ACP agent", detail);
            if agent["agentCapabilities"]["loadSession"].as_bool() != Some(true) {
                report.lost_session = true;
                transcript.prompted = true; // a lost session fails the turn itself, with attention
                return Err(lost("it cannot load sessions: no loadSession capability"));
            }
            let params = json!({"sessionId": session, "cwd": cwd, "mcpServers": servers});
            match peer.request("session/load", params).await {
                Ok(_) => {}
                Err(RpcError::Failed { code: RESOURCE_NOT_FOUND, message }) => {
                    report.lost_session = true;
                    transcript.prompted = true; // a lost session fails the turn itself, with attention
                    return Err(lost(&message));
                }
                // Say, not signed in: the session may well be there.
                Err(failed) => return Err(format!("the ACP agent did not load session {session}: {failed}")),
            }
            // The agent replays the session's history before it answers: not this turn's.
            while let Ok(replayed) = incoming.try_recv() {
                if let Incoming::Request { id, method, .. } = replayed {
                    peer.respond(id, Err((METHOD_NOT_FOUND, format!("kiki does not answer {method}"))));
                }
            }
            session.clone()
        }
        None => {
            let created = peer
                .request("session/new", json!({"cwd": cwd, "mcpServers": servers}))
                .await
                .map_err(|e| handshake(&e))?;
            created["sessionId"].as_str().ok_or("the ACP agent made a session without an id")?.to_string()
        }
    };
    report.session = Some(session.clone());
    say(input.live.as_ref(), Live::Session(session.clone()));

    transcript.prompted = true;
    let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": input.rendered}]});
    let answer = peer.request("session/prompt", prompt);
    tokio::pin!(answer);
    let mut asks = tokio::task::JoinSet::new();
    let answered = loop {
        tokio::select! {
            answered = &mut answer => break answered,
            message = incoming.recv() => match message {
                Some(Incoming::Notification { method, params }) => update(&method, &params, &session, transcript),
                Some(Incoming::Request { id, method, params }) => {
                    let (peer, desk, allowed) = (peer.clone(), input.desk.clone(), allowed_tools.to_vec());
                    asks.spawn(async move { peer.respond(id, request(&method, &params, desk, &allowed).await) });
                }
                Some(Incoming::Garbled(what)) => return Err(format!("the ACP agent wrote {what}")),
                // Closed: the answer fails at once.
                None => break (&mut answer).await,
            },
        }
    };
    asks.abort_all();
    // Updates sent before the answer are all queued by now.
    while let Ok(message) = incoming.try_recv() {
        if let Incoming::Notification { method, params } = message {
            update(&method, &params, &session, transcript);
        }
    }
    let answered = match answered {
        Ok(answered) => answered,
        Err(RpcError::Closed) => return Err(String::new()),
        Err(failed) => return Err(format!("the ACP agent failed the prompt: {failed}")),
    };
    report.usage = usage(&answered["usage"]);
    match answered["stopReason"].as_str() {
        // It stopped at a limit of its own: what it did is the turn's.
        Some("end_turn" | "max_tokens" | "max_turn_requests") => Ok(()),
        Some("refusal") => Err("the ACP agent refused the prompt".into()),
        Some("cancelled") => Err("the ACP agent cancelled the prompt".into()),
        other => Err(format!("the ACP agent ended the prompt with stop reason {other:?}")),
    }
}

fn handshake(e: &RpcError) -> String {
    format!("the ACP agent did not answer: {e}")
}

/// kiki's MCP server as an ACP stdio server.
fn mcp_servers(kiki: &McpServer) -> Value {
    let env: Vec<Value> =
        kiki.env.iter().map(|(name, value)| json!({"name": name, "value": value})).collect();
    json!([{"name": "kiki", "command": kiki.command, "args": McpServer::ARGS, "env": env}])
}

/// Tokens, when the agent reports them with its answer.
fn usage(reported: &Value) -> Option<Usage> {
    let tokens = |field: &str| reported[field].as_u64();
    let (input, output) = (tokens("inputTokens"), tokens("outputTokens"));
    (input.is_some() || output.is_some()).then(|| Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cost_usd: 0.0,
    })
}

/// Takes one `session/update` of the prompt.
fn update(method: &str, params: &Value, session: &str, transcript: &mut Transcript) {
    if method != "session/update" || params["sessionId"].as_str() != Some(session) {
        return;
    }
    let update = &params["update"];
    match update["sessionUpdate"].as_str() {
        Some("agent_message_chunk") => {
            if let Some(text) = update["content"]["text"].as_str() {
                transcript.chunk(text);
            }
        }
        Some("tool_call") => {
            let title = update["title"].as_str().unwrap_or("a tool");
            let kind = update["kind"].as_str().unwrap_or("other");
            transcript.part(PartKind::Tool, format!("{kind} {title}"));
        }
        Some("tool_call_update") => {
            let status = update["status"].as_str().unwrap_or_default();
            if matches!(status, "completed" | "failed") {
                let content: Vec<&str> = update["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["content"]["text"].as_str())
                    .collect();
                transcript.part(PartKind::ToolResult, format!("{status}\n{}", content.join("\n")));
            }
        }
        _ => {}
    }
}

/// Answers one of the agent's requests: a permission goes to the owner (unless the
/// profile allows the tool's kind or title); kiki offers no files or terminals.
async fn request(
    method: &str,
    params: &Value,
    desk: Option<TurnDesk>,
    allowed: &[String],
) -> Result<Value, (i64, String)> {
    if method != "session/request_permission" {
        return Err((METHOD_NOT_FOUND, format!("kiki does not answer {method}")));
    }
    let call = &params["toolCall"];
    let kind = call["kind"].as_str().unwrap_or("other");
    let allowed =
        session::permitted(kind, call["title"].as_str(), &call.to_string(), desk.as_ref(), allowed).await;
    Ok(json!({"outcome": choose(&params["options"], allowed)}))
}

/// The option that says yes (or no) once, else always; cancelled if the agent offers none.
fn choose(options: &Value, allowed: bool) -> Value {
    let kinds: [&str; 2] =
        if allowed { ["allow_once", "allow_always"] } else { ["reject_once", "reject_always"] };
    let options = options.as_array().map(Vec::as_slice).unwrap_or_default();
    let chosen = kinds.iter().find_map(|kind| options.iter().find(|o| o["kind"].as_str() == Some(kind)));
    match chosen.and_then(|o| o["optionId"].as_str()) {
        Some(id) => json!({"outcome": "selected", "optionId": id}),
        None => json!({"outcome": "cancelled"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owners_answer_picks_the_agents_option() {
        let options = json!([
            {"optionId": "always", "kind": "allow_always"},
            {"optionId": "once", "kind": "allow_once"},
            {"optionId": "no", "kind": "reject_once"},
        ]);
        assert_eq!(choose(&options, true), json!({"outcome": "selected", "optionId": "once"}));
        assert_eq!(choose(&options, false), json!({"outcome": "selected", "optionId": "no"}));
        let only_yes = json!([{"optionId": "y", "kind": "allow_always"}]);
        assert_eq!(choose(&only_yes, false), json!({"outcome": "cancelled"}));
    }

    #[test]
    fn updates_of_the_session_make_the_transcript() {
        let (live, mut followed) = mpsc::unbounded_channel();
        let mut transcript = Transcript::new(Some(live), 1 << 20);
        let chunk = |text: &str| json!({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}});
        update("session/update", &chunk("hel"), "s", &mut transcript);
        update("session/update", &chunk("lo"), "s", &mut transcript);
        update("session/update", &chunk("not ours"), "other", &mut transcript);
        let call = json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "ls", "kind": "execute"}});
        update("session/update", &call, "s", &mut transcript);
        let done = json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed", "content": [{"type": "content", "content": {"type": "text", "text": "a b"}}]}});
        update("session/update", &done, "s", &mut transcript);
        let mut seen = Vec::new();
        while let Ok(event) = followed.try_recv() {
            seen.push(event);
        }
        assert_eq!(
            seen,
            [
                Live::Part(PartKind::Text, "hello".into()),
                Live::Part(PartKind::Tool, "execute ls".into()),
                Live::Part(PartKind::ToolResult, "completed\na b".into()),
            ]
        );
        assert_eq!(
            usage(&json!({"inputTokens": 3, "outputTokens": 4})),
            Some(Usage { input_tokens: 3, output_tokens: 4, cost_usd: 0.0 })
        );
        assert_eq!(usage(&Value::Null), None);
    }
}
