//! The `acp` executor: any agent that speaks the Agent Client Protocol (JSON-RPC 2.0 over
//! stdio), one ACP session continued turn after turn.
//!
//! Each kiki turn starts the profile's command, `initialize`s, loads the kiki thread's
//! session (`session/load`, which needs the agent's `loadSession` capability;
//! `session/new` the first time) with kiki's MCP server in its `mcpServers`, and sends the
//! turn's input as one `session/prompt`. Its `session/update`s are the turn's progress (and
//! its `usage_update`s the turn's cost, see [`Spend`]); its
//! `session/request_permission` requests go to the owner (`kiki approve` / `deny`). The
//! prompt's answer (its `stopReason`) ends the turn; the owner's `kiki thread stop` sends
//! `session/cancel`. ACP has no way to add input to a
//! running prompt, so messages that arrive meanwhile wait for the next turn. A session that
//! cannot be loaded fails the turn: it is never replaced by a fresh one silently.

use kiki_proto::agents;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::desk::TurnDesk;
use super::process::Spawned;
use super::rpc::{Incoming, METHOD_NOT_FOUND, Peer, RpcError};
use super::session::{self, Transcript};
use super::turn::{AgentReport, Live, McpServer, STOP_GRACE, TurnFailure, TurnInput, say};
use crate::store::{PartKind, TurnUsage};

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
    // What the agent sent before the prompt (a loaded session's history, replayed) is not
    // this turn's, but the session's cost so far is what this turn's cost counts from.
    let mut spend = Spend::default();
    while let Ok(before) = incoming.try_recv() {
        match before {
            Incoming::Request { id, method, .. } => {
                peer.respond(id, Err((METHOD_NOT_FOUND, format!("kiki does not answer {method}"))));
            }
            Incoming::Notification { method, params } if is_ours(&method, &params, &session) => {
                spend.take(&params["update"]);
            }
            _ => {}
        }
    }
    spend.prompted();

    transcript.prompted = true;
    let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": input.rendered}]});
    let answer = peer.request("session/prompt", prompt);
    tokio::pin!(answer);
    let mut asks = tokio::task::JoinSet::new();
    // Once the owner stops the turn: how long the agent has to end the prompt.
    let mut cancelled: Option<tokio::time::Instant> = None;
    let answered = loop {
        tokio::select! {
            // The prompt is sent when its call is first polled: before a cancel can be.
            biased;
            answered = &mut answer => break answered,
            () = input.stop.cancelled(), if cancelled.is_none() => {
                // The agent answers the prompt `cancelled`; what it still asks is answered
                // `cancelled` too (see `request`), as ACP wants of a client that cancels.
                cancelled = Some(tokio::time::Instant::now() + STOP_GRACE);
                peer.notify("session/cancel", json!({"sessionId": session}));
            }
            () = tokio::time::sleep_until(cancelled.unwrap_or_else(tokio::time::Instant::now)),
                if cancelled.is_some() =>
            {
                return Err(format!("the ACP agent did not end the prompt within {STOP_GRACE:?} of session/cancel"));
            }
            message = incoming.recv() => match message {
                Some(Incoming::Notification { method, params }) => {
                    update(&method, &params, &session, transcript, &mut spend)
                }
                Some(Incoming::Request { id, method, params }) => {
                    let (peer, desk, allowed) = (peer.clone(), input.desk.clone(), allowed_tools.to_vec());
                    let stop = input.stop.clone();
                    asks.spawn(async move {
                        let answer = tokio::select! {
                            answer = request(&method, &params, desk, &allowed) => answer,
                            () = stop.cancelled() => cancelled_request(&method),
                        };
                        peer.respond(id, answer)
                    });
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
            update(&method, &params, &session, transcript, &mut spend);
        }
    }
    // Counted whether the prompt ended well or not: what the turn cost, it cost.
    let tokens = answered.as_ref().ok().and_then(|answered| usage(&answered["usage"]));
    report.usage = spend.usage(tokens);
    let answered = match answered {
        Ok(answered) => answered,
        Err(RpcError::Closed) => return Err(String::new()),
        Err(failed) => return Err(format!("the ACP agent failed the prompt: {failed}")),
    };
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
    json!([agents::acp_server(&kiki.command, &agents::MCP_ARGS, &kiki.env)])
}

/// Tokens, when the agent reports them with its answer.
fn usage(reported: &Value) -> Option<TurnUsage> {
    let tokens = |field: &str| reported[field].as_u64();
    let (input, output) = (tokens("inputTokens"), tokens("outputTokens"));
    (input.is_some() || output.is_some()).then(|| TurnUsage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cost_usd: 0.0,
    })
}

/// What a turn cost, from the agent's `usage_update`s: each carries the session's cost so
/// far (ACP's `cost`, `{amount, currency}`), so the turn's is the last one's amount less
/// the last one before the prompt. With none before the prompt (an agent that reports only
/// while it works, or a new session) the whole amount counts: more, never less, than the
/// turn cost. Only dollars are counted (`max_cost_usd`).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Spend {
    /// The session's cost when the prompt was sent.
    before: Option<f64>,
    /// The session's cost as last reported.
    latest: Option<f64>,
}

impl Spend {
    /// Takes a `session/update`'s `update`, if it is a `usage_update` with a cost in dollars.
    fn take(&mut self, update: &Value) {
        if update["sessionUpdate"].as_str() != Some("usage_update") {
            return;
        }
        let cost = &update["cost"];
        let dollars = cost["currency"].as_str().is_some_and(|c| c.eq_ignore_ascii_case("USD"));
        if let (true, Some(amount)) = (dollars, cost["amount"].as_f64())
            && amount.is_finite()
            && amount >= 0.0
        {
            self.latest = Some(amount);
        }
    }

    /// The prompt is sent: what was reported so far is the session's cost before the turn.
    fn prompted(&mut self) {
        self.before = self.latest;
    }

    /// The turn's usage: its tokens (from the prompt's answer) and its cost, if the agent
    /// reported either.
    fn usage(self, tokens: Option<TurnUsage>) -> Option<TurnUsage> {
        let cost = self.latest.map(|latest| match self.before {
            Some(before) if latest >= before => latest - before,
            // A count that went down started again (a new process): all of it is this turn's.
            _ => latest,
        });
        match (tokens, cost) {
            (None, None) => None,
            (tokens, cost) => Some(TurnUsage { cost_usd: cost.unwrap_or(0.0), ..tokens.unwrap_or_default() }),
        }
    }
}

/// A `session/update` of the turn's session.
fn is_ours(method: &str, params: &Value, session: &str) -> bool {
    method == "session/update" && params["sessionId"].as_str() == Some(session)
}

/// Takes one `session/update` of the prompt.
fn update(method: &str, params: &Value, session: &str, transcript: &mut Transcript, spend: &mut Spend) {
    if !is_ours(method, params, session) {
        return;
    }
    let update = &params["update"];
    spend.take(update);
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

/// The answer to a request of a prompt the owner stopped: a permission is `cancelled`.
fn cancelled_request(method: &str) -> Result<Value, (i64, String)> {
    if method == "session/request_permission" {
        return Ok(json!({"outcome": {"outcome": "cancelled"}}));
    }
    Err((METHOD_NOT_FOUND, format!("kiki does not answer {method}")))
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
        let mut spend = Spend::default();
        update("session/update", &chunk("hel"), "s", &mut transcript, &mut spend);
        update("session/update", &chunk("lo"), "s", &mut transcript, &mut spend);
        update("session/update", &chunk("not ours"), "other", &mut transcript, &mut spend);
        let call = json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "ls", "kind": "execute"}});
        update("session/update", &call, "s", &mut transcript, &mut spend);
        let done = json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed", "content": [{"type": "content", "content": {"type": "text", "text": "a b"}}]}});
        update("session/update", &done, "s", &mut transcript, &mut spend);
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
            Some(TurnUsage { input_tokens: 3, output_tokens: 4, cost_usd: 0.0 })
        );
        assert_eq!(usage(&Value::Null), None);
        assert_eq!(spend.usage(None), None, "no usage_update, no tokens: nothing reported");
    }

    #[test]
    fn usage_updates_give_the_turns_cost_from_the_sessions() {
        let cost = |amount: f64, currency: &str| json!({"sessionUpdate": "usage_update", "used": 900, "size": 200_000, "cost": {"amount": amount, "currency": currency}});
        // The session had cost $0.50 before the prompt; $0.75 at its end.
        let mut spend = Spend::default();
        spend.take(&cost(0.5, "USD"));
        spend.prompted();
        spend.take(&cost(0.6, "USD"));
        spend.take(&cost(0.75, "USD"));
        spend.take(&json!({"sessionUpdate": "usage_update", "used": 1000, "size": 200_000}));
        spend.take(&cost(9.0, "EUR"));
        let tokens = TurnUsage { input_tokens: 3, output_tokens: 4, cost_usd: 0.0 };
        assert_eq!(spend.usage(Some(tokens)), Some(TurnUsage { cost_usd: 0.25, ..tokens }));
        // Nothing before the prompt: all of it; a count that started again: all of it.
        let mut fresh = Spend::default();
        fresh.prompted();
        fresh.take(&cost(0.2, "usd"));
        assert_eq!(fresh.usage(None), Some(TurnUsage { input_tokens: 0, output_tokens: 0, cost_usd: 0.2 }));
        let mut restarted = Spend { before: Some(0.5), latest: None };
        restarted.take(&cost(0.1, "USD"));
        assert_eq!(restarted.usage(None).map(|u| u.cost_usd), Some(0.1));
        // Only a usage_update counts; only dollars.
        let mut none = Spend::default();
        none.take(&cost(1.0, "EUR"));
        none.take(
            &json!({"sessionUpdate": "agent_message_chunk", "cost": {"amount": 1.0, "currency": "USD"}}),
        );
        assert_eq!(none.usage(None), None);
    }
}
