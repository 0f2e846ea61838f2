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
//!
//! The messages are ACP's own types (`agent_client_protocol_schema::v1`); [`rpc::Peer`]
//! carries them as JSON. What kiki reads is as tolerant as the schema: an update of a kind
//! it does not know (a newer agent's) is not the turn's, and optional fields may be missing.
//!
//! [`rpc::Peer`]: super::rpc::Peer

use std::path::PathBuf;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    self as acp, AGENT_METHOD_NAMES as AGENT, CLIENT_METHOD_NAMES as CLIENT,
};
use kiki_proto::agents;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use super::desk::TurnDesk;
use super::process::Spawned;
use super::rpc::{Incoming, Peer, RpcError};
use super::session::{self, Transcript};
use super::turn::{AgentReport, Live, McpServer, STOP_GRACE, TurnFailure, TurnInput, say};
use crate::store::{PartKind, TurnUsage};

/// The ACP version kiki speaks.
const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V1;

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

/// The turn's conversation, step by step; `Err` is why it failed (`""`: the agent closed its
/// output, see `session::finish`).
async fn drive(
    peer: &Peer,
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
    input: &TurnInput<'_>,
    allowed_tools: &[String],
    transcript: &mut Transcript,
    report: &mut AgentReport,
) -> Result<(), String> {
    let agent = initialize(peer).await?;
    let session = open_session(peer, input, &agent.agent_capabilities, transcript, report).await?;
    report.session = Some(session.to_string());
    say(input.live.as_ref(), Live::Session(session.to_string()));
    let mut progress = Progress { session, transcript, spend: Spend::default() };
    progress.before_prompt(peer, incoming);

    progress.transcript.prompted = true;
    let answered = prompt(peer, incoming, input, allowed_tools, &mut progress).await?;
    // Updates sent before the answer are all queued by now.
    while let Ok(message) = incoming.try_recv() {
        if let Incoming::Notification { method, params } = message {
            progress.take(&method, params);
        }
    }
    // Counted whether the prompt ended well or not: what the turn cost, it cost.
    let tokens = answered.as_ref().ok().and_then(|answer| usage(answer.get("usage").unwrap_or(&Value::Null)));
    report.usage = progress.spend.usage(tokens);
    match answered {
        Ok(answer) => stopped(&answer),
        Err(RpcError::Closed) => Err(String::new()),
        Err(failed) => Err(format!("the ACP agent failed the prompt: {failed}")),
    }
}

/// The handshake: kiki's version and capabilities, the agent's in answer.
async fn initialize(peer: &Peer) -> Result<acp::InitializeResponse, String> {
    let hello = acp::InitializeRequest::new(PROTOCOL_VERSION)
        // kiki serves no files or terminals: the agent uses its own.
        .client_capabilities(acp::ClientCapabilities::default())
        .client_info(acp::Implementation::new("kiki", env!("CARGO_PKG_VERSION")).title("kiki".to_string()));
    let answer = peer.request(AGENT.initialize, message(&hello)).await.map_err(|e| handshake(&e))?;
    acp::InitializeResponse::deserialize(&answer)
        .map_err(|e| format!("the ACP agent answered initialize with what ACP does not: {e}"))
}

/// The turn's session, with kiki's MCP server: the thread's own, loaded (a session the agent
/// cannot load is lost: the turn fails with attention), or a new one the first time.
async fn open_session(
    peer: &Peer,
    input: &TurnInput<'_>,
    agent: &acp::AgentCapabilities,
    transcript: &mut Transcript,
    report: &mut AgentReport,
) -> Result<acp::SessionId, String> {
    let cwd = PathBuf::from(input.cwd.display().to_string());
    let servers = mcp_servers(&input.mcp);
    let Some(session) = &input.agent_session else {
        let new = acp::NewSessionRequest::new(cwd).mcp_servers(servers);
        let created = peer.request(AGENT.session_new, message(&new)).await.map_err(|e| handshake(&e))?;
        let created = acp::NewSessionResponse::deserialize(&created)
            .map_err(|_| "the ACP agent made a session without an id")?;
        return Ok(created.session_id);
    };
    let mut lost = |detail: &str| {
        report.lost_session = true;
        transcript.prompted = true; // a lost session fails the turn itself, with attention
        super::turn::lost_session(session, "the ACP agent", detail)
    };
    if !agent.load_session {
        return Err(lost("it cannot load sessions: no loadSession capability"));
    }
    let load = acp::LoadSessionRequest::new(session.clone(), cwd).mcp_servers(servers);
    match peer.request(AGENT.session_load, message(&load)).await {
        // Its answer says nothing kiki uses.
        Ok(_) => Ok(acp::SessionId::new(session.clone())),
        Err(RpcError::Failed { code, message }) if code == error_code(acp::ErrorCode::ResourceNotFound) => {
            Err(lost(&message))
        }
        // Say, not signed in: the session may well be there.
        Err(failed) => Err(format!("the ACP agent did not load session {session}: {failed}")),
    }
}

/// Sends the turn's input as one `session/prompt` and takes what comes until its answer:
/// the agent's updates, its requests (each answered by a task of its own: a permission waits
/// for the owner), the owner's stop. `Err` is a conversation that broke off before the
/// answer; the requests still open are dropped with their tasks.
async fn prompt(
    peer: &Peer,
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
    input: &TurnInput<'_>,
    allowed_tools: &[String],
    progress: &mut Progress<'_>,
) -> Result<Result<Value, RpcError>, String> {
    let text = acp::ContentBlock::Text(acp::TextContent::new(input.rendered));
    let prompt = acp::PromptRequest::new(progress.session.clone(), vec![text]);
    let answer = peer.request(AGENT.session_prompt, message(&prompt));
    tokio::pin!(answer);
    let mut asks = tokio::task::JoinSet::new();
    // Once the owner stops the turn: how long the agent has to end the prompt.
    let mut cancelled: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            // The prompt is sent when its call is first polled: before a cancel can be.
            biased;
            answered = &mut answer => return Ok(answered),
            () = input.stop.cancelled(), if cancelled.is_none() => {
                // The agent answers the prompt `cancelled`; what it still asks is answered
                // `cancelled` too (see `request`), as ACP wants of a client that cancels.
                cancelled = Some(tokio::time::Instant::now() + STOP_GRACE);
                let cancel = acp::CancelNotification::new(progress.session.clone());
                peer.notify(AGENT.session_cancel, message(&cancel));
            }
            () = tokio::time::sleep_until(cancelled.unwrap_or_else(tokio::time::Instant::now)),
                if cancelled.is_some() =>
            {
                return Err(format!("the ACP agent did not end the prompt within {STOP_GRACE:?} of session/cancel"));
            }
            message = incoming.recv() => match message {
                Some(Incoming::Notification { method, params }) => progress.take(&method, params),
                Some(Incoming::Request { id, method, params }) => {
                    let (peer, desk, allowed) = (peer.clone(), input.desk.clone(), allowed_tools.to_vec());
                    let stop = input.stop.clone();
                    asks.spawn(async move {
                        let answer = tokio::select! {
                            answer = request(&method, params, desk, &allowed) => answer,
                            () = stop.cancelled() => cancelled_request(&method),
                        };
                        peer.respond(id, answer)
                    });
                }
                Some(Incoming::Garbled(what)) => return Err(format!("the ACP agent wrote {what}")),
                // Closed: the answer fails at once.
                None => return Ok((&mut answer).await),
            },
        }
    }
}

/// How the prompt ended, from its answer's `stopReason`.
fn stopped(answer: &Value) -> Result<(), String> {
    match acp::PromptResponse::deserialize(answer).map(|answer| answer.stop_reason) {
        // It stopped at a limit of its own: what it did is the turn's.
        Ok(acp::StopReason::EndTurn | acp::StopReason::MaxTokens | acp::StopReason::MaxTurnRequests) => {
            Ok(())
        }
        Ok(acp::StopReason::Refusal) => Err("the ACP agent refused the prompt".into()),
        Ok(acp::StopReason::Cancelled) => Err("the ACP agent cancelled the prompt".into()),
        _ => {
            let said = answer.get("stopReason").and_then(Value::as_str);
            Err(format!("the ACP agent ended the prompt with stop reason {said:?}"))
        }
    }
}

fn handshake(e: &RpcError) -> String {
    format!("the ACP agent did not answer: {e}")
}

/// An ACP message as the JSON the peer sends. ACP's types serialize to JSON objects whatever
/// their values (the paths in them are text already), so nothing is lost to the default.
fn message(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_default()
}

/// One of ACP's error codes as JSON-RPC carries it.
fn error_code(code: acp::ErrorCode) -> i64 {
    i32::from(code).into()
}

/// How ACP spells one of its words (a tool's kind, a status): as it is written on the wire.
fn spelling(word: &impl Serialize) -> String {
    match serde_json::to_value(word) {
        Ok(Value::String(word)) => word,
        _ => String::new(),
    }
}

/// kiki's MCP server as an ACP stdio server: the entry `agents::acp_server` describes.
fn mcp_servers(kiki: &McpServer) -> Vec<acp::McpServer> {
    let env = kiki.env.iter().map(|(name, value)| acp::EnvVariable::new(name, value)).collect();
    let args = agents::MCP_ARGS.iter().map(|arg| arg.to_string()).collect();
    vec![acp::McpServer::Stdio(acp::McpServerStdio::new(agents::SERVER, &kiki.command).args(args).env(env))]
}

/// Tokens an agent reports with its prompt's answer (`usage`), either count alone. The
/// schema has this end-of-turn usage only as an unstable feature, and wants a total too.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReportedTokens {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

/// Tokens, when the agent reports them with its answer.
fn usage(reported: &Value) -> Option<TurnUsage> {
    let ReportedTokens { input_tokens, output_tokens } = ReportedTokens::deserialize(reported).ok()?;
    (input_tokens.is_some() || output_tokens.is_some()).then(|| TurnUsage {
        input_tokens: input_tokens.unwrap_or(0),
        output_tokens: output_tokens.unwrap_or(0),
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
    fn take(&mut self, update: &acp::SessionUpdate) {
        let acp::SessionUpdate::UsageUpdate(acp::UsageUpdate { cost: Some(cost), .. }) = update else {
            return;
        };
        if cost.currency.eq_ignore_ascii_case("USD") && cost.amount.is_finite() && cost.amount >= 0.0 {
            self.latest = Some(cost.amount);
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

/// What the turn's session's updates make: the transcript, and what the turn cost.
struct Progress<'t> {
    session: acp::SessionId,
    transcript: &'t mut Transcript,
    spend: Spend,
}

impl Progress<'_> {
    /// What the agent sent before the prompt (a loaded session's history, replayed) is not
    /// this turn's, but the session's cost so far is what this turn's cost counts from.
    fn before_prompt(&mut self, peer: &Peer, incoming: &mut mpsc::UnboundedReceiver<Incoming>) {
        while let Ok(before) = incoming.try_recv() {
            match before {
                Incoming::Request { id, method, .. } => peer.respond(id, Err(not_answered(&method))),
                Incoming::Notification { method, params } => {
                    if let Some(update) = session_update(&method, params, &self.session) {
                        self.spend.take(&update);
                    }
                }
                Incoming::Garbled(_) => {}
            }
        }
        self.spend.prompted();
    }

    /// Takes one of the agent's notifications during the prompt.
    fn take(&mut self, method: &str, params: Value) {
        let Some(update) = session_update(method, params, &self.session) else { return };
        self.spend.take(&update);
        match update {
            acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk {
                content: acp::ContentBlock::Text(text),
                ..
            }) => self.transcript.chunk(&text.text),
            acp::SessionUpdate::ToolCall(call) => {
                self.transcript.part(PartKind::Tool, format!("{} {}", spelling(&call.kind), call.title));
            }
            acp::SessionUpdate::ToolCallUpdate(acp::ToolCallUpdate { fields, .. }) => {
                let Some(status @ (acp::ToolCallStatus::Completed | acp::ToolCallStatus::Failed)) =
                    fields.status
                else {
                    return;
                };
                let content: Vec<&str> = fields.content.iter().flatten().filter_map(text_of).collect();
                self.transcript
                    .part(PartKind::ToolResult, format!("{}\n{}", spelling(&status), content.join("\n")));
            }
            _ => {}
        }
    }
}

/// The update a notification carries if it is a `session/update` of `session` that the
/// schema reads; an update of a kind it does not know is not the turn's.
fn session_update(method: &str, params: Value, session: &acp::SessionId) -> Option<acp::SessionUpdate> {
    if method != CLIENT.session_update {
        return None;
    }
    let notification: acp::SessionNotification = serde_json::from_value(params).ok()?;
    (notification.session_id == *session).then_some(notification.update)
}

/// A tool's output, where it is text.
fn text_of(content: &acp::ToolCallContent) -> Option<&str> {
    match content {
        acp::ToolCallContent::Content(acp::Content { content: acp::ContentBlock::Text(text), .. }) => {
            Some(&text.text)
        }
        _ => None,
    }
}

/// Answers one of the agent's requests: a permission goes to the owner (unless the
/// profile allows the tool's kind or title); kiki offers no files or terminals.
async fn request(
    method: &str,
    params: Value,
    desk: Option<TurnDesk>,
    allowed: &[String],
) -> Result<Value, (i64, String)> {
    if method != CLIENT.session_request_permission {
        return Err(not_answered(method));
    }
    let asked = acp::RequestPermissionRequest::deserialize(&params)
        .map_err(|e| (error_code(acp::ErrorCode::InvalidParams), format!("not a permission request: {e}")))?;
    let call = &asked.tool_call.fields;
    let kind = spelling(&call.kind.unwrap_or_default());
    let details = serde_json::to_string(&asked.tool_call).unwrap_or_default();
    let allowed = session::permitted(&kind, call.title.as_deref(), &details, desk.as_ref(), allowed).await;
    Ok(message(&acp::RequestPermissionResponse::new(choose(&asked.options, allowed))))
}

/// The answer to a request of a prompt the owner stopped: a permission is `cancelled`.
fn cancelled_request(method: &str) -> Result<Value, (i64, String)> {
    if method == CLIENT.session_request_permission {
        return Ok(message(&acp::RequestPermissionResponse::new(acp::RequestPermissionOutcome::Cancelled)));
    }
    Err(not_answered(method))
}

/// The answer to a request kiki does not serve.
fn not_answered(method: &str) -> (i64, String) {
    (error_code(acp::ErrorCode::MethodNotFound), format!("kiki does not answer {method}"))
}

/// The option that says yes (or no) once, else always; cancelled if the agent offers none.
fn choose(options: &[acp::PermissionOption], allowed: bool) -> acp::RequestPermissionOutcome {
    use acp::PermissionOptionKind::{AllowAlways, AllowOnce, RejectAlways, RejectOnce};
    let kinds = if allowed { [AllowOnce, AllowAlways] } else { [RejectOnce, RejectAlways] };
    let chosen = kinds.iter().find_map(|kind| options.iter().find(|o| o.kind == *kind));
    match chosen {
        Some(option) => acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(
            option.option_id.clone(),
        )),
        None => acp::RequestPermissionOutcome::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_owners_answer_picks_the_agents_option() {
        let option = |id: &str, kind| acp::PermissionOption::new(id.to_string(), id, kind);
        let options = [
            option("always", acp::PermissionOptionKind::AllowAlways),
            option("once", acp::PermissionOptionKind::AllowOnce),
            option("no", acp::PermissionOptionKind::RejectOnce),
        ];
        let choose = |options: &[acp::PermissionOption], allowed| message(&choose(options, allowed));
        assert_eq!(choose(&options, true), json!({"outcome": "selected", "optionId": "once"}));
        assert_eq!(choose(&options, false), json!({"outcome": "selected", "optionId": "no"}));
        let only_yes = [option("y", acp::PermissionOptionKind::AllowAlways)];
        assert_eq!(choose(&only_yes, false), json!({"outcome": "cancelled"}));
    }

    #[test]
    fn updates_of_the_session_make_the_transcript() {
        let (live, mut followed) = mpsc::unbounded_channel();
        let mut transcript = Transcript::new(Some(live), 1 << 20);
        let chunk = |text: &str| json!({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}});
        let mut progress =
            Progress { session: "s".into(), transcript: &mut transcript, spend: Spend::default() };
        let mut update = |params: Value, session: &str| {
            let params = json!({"sessionId": session, "update": params["update"]});
            progress.take("session/update", params);
        };
        update(chunk("hel"), "s");
        update(chunk("lo"), "s");
        update(chunk("not ours"), "other");
        // A kind the schema does not know (a newer agent's) is not the turn's.
        update(json!({"update": {"sessionUpdate": "a_later_kind", "text": "?"}}), "s");
        let call = json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "ls", "kind": "execute"}});
        update(call, "s");
        let done = json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed", "content": [{"type": "content", "content": {"type": "text", "text": "a b"}}]}});
        update(done, "s");
        let spend = progress.spend;
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
        // What the schema reads of an update: one it does not read counts nothing.
        let take = |spend: &mut Spend, update: Value| {
            if let Ok(update) = acp::SessionUpdate::deserialize(&update) {
                spend.take(&update);
            }
        };
        // The session had cost $0.50 before the prompt; $0.75 at its end.
        let mut spend = Spend::default();
        take(&mut spend, cost(0.5, "USD"));
        spend.prompted();
        take(&mut spend, cost(0.6, "USD"));
        take(&mut spend, cost(0.75, "USD"));
        take(&mut spend, json!({"sessionUpdate": "usage_update", "used": 1000, "size": 200_000}));
        take(&mut spend, cost(9.0, "EUR"));
        let tokens = TurnUsage { input_tokens: 3, output_tokens: 4, cost_usd: 0.0 };
        assert_eq!(spend.usage(Some(tokens)), Some(TurnUsage { cost_usd: 0.25, ..tokens }));
        // Nothing before the prompt: all of it; a count that started again: all of it.
        let mut fresh = Spend::default();
        fresh.prompted();
        take(&mut fresh, cost(0.2, "usd"));
        assert_eq!(fresh.usage(None), Some(TurnUsage { input_tokens: 0, output_tokens: 0, cost_usd: 0.2 }));
        let mut restarted = Spend { before: Some(0.5), latest: None };
        take(&mut restarted, cost(0.1, "USD"));
        assert_eq!(restarted.usage(None).map(|u| u.cost_usd), Some(0.1));
        // Only a usage_update counts; only dollars.
        let mut none = Spend::default();
        take(&mut none, cost(1.0, "EUR"));
        take(
            &mut none,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}, "cost": {"amount": 1.0, "currency": "USD"}}),
        );
        assert_eq!(none.usage(None), None);
    }

    /// What kiki sends is what it sent when it wrote ACP's JSON by hand (the schema's
    /// capabilities also say `auth.terminal: false`: no terminals for signing in either).
    #[test]
    fn kikis_messages_are_acps() {
        let hello = acp::InitializeRequest::new(PROTOCOL_VERSION)
            .client_capabilities(acp::ClientCapabilities::default())
            .client_info(acp::Implementation::new("kiki", "1.0").title("kiki".to_string()));
        assert_eq!(
            message(&hello),
            json!({
                "protocolVersion": 1,
                "clientCapabilities": {
                    "fs": {"readTextFile": false, "writeTextFile": false},
                    "terminal": false,
                    "auth": {"terminal": false},
                },
                "clientInfo": {"name": "kiki", "title": "kiki", "version": "1.0"},
            })
        );
        let kiki = McpServer { command: "/bin/kiki".into(), env: vec![("KIKI_TOKEN".into(), "t".into())] };
        let servers = json!([agents::acp_server(&kiki.command, &agents::MCP_ARGS, &kiki.env)]);
        assert_eq!(message(&mcp_servers(&kiki)), servers);
        let new = acp::NewSessionRequest::new("/w").mcp_servers(mcp_servers(&kiki));
        assert_eq!(message(&new), json!({"cwd": "/w", "mcpServers": servers}));
        let load = acp::LoadSessionRequest::new("s", "/w").mcp_servers(mcp_servers(&kiki));
        assert_eq!(message(&load), json!({"sessionId": "s", "cwd": "/w", "mcpServers": servers}));
        let text = acp::ContentBlock::Text(acp::TextContent::new("hi"));
        assert_eq!(
            message(&acp::PromptRequest::new("s", vec![text])),
            json!({"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]})
        );
        assert_eq!(message(&acp::CancelNotification::new("s")), json!({"sessionId": "s"}));
        assert_eq!(
            cancelled_request("session/request_permission"),
            Ok(json!({"outcome": {"outcome": "cancelled"}}))
        );
        assert_eq!(
            cancelled_request("fs/read_text_file"),
            Err((-32601, "kiki does not answer fs/read_text_file".into()))
        );
    }

    #[test]
    fn a_prompt_ends_by_its_stop_reason() {
        assert_eq!(stopped(&json!({"stopReason": "end_turn"})), Ok(()));
        assert_eq!(stopped(&json!({"stopReason": "max_tokens"})), Ok(()));
        assert_eq!(
            stopped(&json!({"stopReason": "refusal"})),
            Err("the ACP agent refused the prompt".into())
        );
        assert_eq!(
            stopped(&json!({"stopReason": "cancelled"})),
            Err("the ACP agent cancelled the prompt".into())
        );
        assert_eq!(
            stopped(&json!({"stopReason": "bored"})),
            Err("the ACP agent ended the prompt with stop reason Some(\"bored\")".into())
        );
        assert_eq!(stopped(&json!({})), Err("the ACP agent ended the prompt with stop reason None".into()));
    }
}
