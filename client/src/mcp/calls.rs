//! The kikid side of a tool call: who the tools act as and the connection they share,
//! kikid's message limit, and a call's answer as MCP wants it — `structuredContent` plus a
//! text rendering, or a tool error (`isError`) whose text says what was wrong and what to
//! do next. The tools themselves are in `tools.rs`.

use std::path::PathBuf;
use std::time::Duration;

use kiki_client::{Client, ClientError};
use kiki_proto::{self as pb, limits};
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::{RequestContext, RoleServer};
use serde::Serialize;
use serde_json::Value;
use tonic::Code;

use super::arguments::Refused;
use super::transport::Answers;

/// Refuses a call kikid would not take whole (its message limit), naming its size.
fn fits(request: &impl prost::Message) -> Result<(), Refused> {
    let bytes = request.encoded_len();
    if bytes > limits::MESSAGE_MAX_BYTES {
        return Err(Refused(format!(
            "invalid_argument: the call is {bytes} bytes, more than the {} bytes kikid \
             takes in one call. Shorten the arguments.",
            limits::MESSAGE_MAX_BYTES
        )));
    }
    Ok(())
}

tokio::task_local! {
    /// The tool call being served: its calls to kikid name it and continue its trace.
    static TOOL_CALL: ToolCall;
}

/// A tool call, as kikid's spans name it.
#[derive(Clone, Debug)]
pub struct ToolCall {
    pub tool: String,
    /// The W3C trace context the call continues: the client's `_meta.traceparent`, else
    /// `kiki mcp`'s `TRACEPARENT` (the turn that started it).
    pub traceparent: Option<String>,
}

impl ToolCall {
    /// The call to tool `tool` with the request's `_meta`.
    pub fn new(tool: &str, context: &RequestContext<RoleServer>) -> Self {
        let traceparent =
            context.meta.0.get(pb::TRACE_METADATA_KEY).and_then(Value::as_str).map(str::to_string);
        Self { tool: tool.to_string(), traceparent }
    }

    /// Runs `serve` as this call.
    pub async fn serve<T>(self, serve: impl Future<Output = T>) -> T {
        TOOL_CALL.scope(self, serve).await
    }
}

/// Who the tools act as, and the home they talk to.
pub struct Caller {
    pub socket: PathBuf,
    /// The turn's `KIKI_TOKEN` when `kiki mcp` runs inside a turn.
    pub token: Option<String>,
    /// How long the client gives one tool call (`--tool-timeout-ms`).
    pub tool_timeout: Duration,
    /// The requests' places in `kiki mcp`: a call that waits for long gives its place up.
    pub answers: Answers,
    /// Connected at the first call that needs kikid, so the server starts and lists its
    /// tools without a running home; kept for the calls after.
    client: tokio::sync::Mutex<Option<Client>>,
}

/// A tool's answer, or why there is none.
pub type Outcome = Result<CallToolResult, Refused>;

impl Caller {
    pub fn new(socket: PathBuf, token: Option<String>, tool_timeout: Duration, answers: Answers) -> Self {
        Self { socket, token, tool_timeout, answers, client: tokio::sync::Mutex::new(None) }
    }

    /// The connection to kikid, made now if there is none. A home that is not running is
    /// one clear error at once.
    pub async fn client(&self) -> Result<Client, Refused> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let connected = Client::connect(&self.socket).await.map_err(|e| match e {
            ClientError::Unreachable { socket, message } => Refused(format!(
                "unavailable: kikid is not running at {socket} ({message}); nothing was done. Start the \
                 home with `kiki up`, then call again."
            )),
            other => Refused(other.to_string()),
        })?;
        let connected = crate::connect::in_callers_trace(connected);
        let client = match &self.token {
            Some(token) => connected.with_token(token).map_err(|e| Refused(e.to_string()))?,
            None => connected,
        };
        *slot = Some(client.clone());
        Ok(client)
    }

    /// kikid's thread service for `request`, once it is known to fit kikid's message limit,
    /// for the tool call being served.
    pub async fn threads(&self, request: &impl prost::Message) -> Result<kiki_client::ThreadClient, Refused> {
        Ok(self.for_call(request).await?.threads())
    }

    /// kikid's session tools for `request`, as [`Caller::threads`].
    pub async fn tools(&self, request: &impl prost::Message) -> Result<kiki_client::ToolClient, Refused> {
        Ok(self.for_call(request).await?.tools())
    }

    /// The connection for `request` (once it fits kikid's limit), naming the tool call
    /// being served and continuing its trace.
    async fn for_call(&self, request: &impl prost::Message) -> Result<Client, Refused> {
        fits(request)?;
        let client = self.client().await?;
        Ok(TOOL_CALL
            .try_with(|call| {
                let client = client.clone().for_tool(&call.tool);
                match &call.traceparent {
                    Some(traceparent) => client.with_trace(traceparent),
                    None => client,
                }
            })
            .unwrap_or(client))
    }
}

/// A result: the answer as `structuredContent`, and as text a summary line followed by the
/// same JSON, for clients that show the model only text.
pub fn answer<T: Serialize>(value: &T, summary: String) -> Outcome {
    let structured = serde_json::to_value(value).map_err(|e| Refused(format!("internal: {e}")))?;
    let mut result = CallToolResult::structured(structured.clone());
    result.content = vec![ContentBlock::text(format!("{summary}\n{structured}"))];
    Ok(result)
}

pub fn state_word(state: i32) -> &'static str {
    match pb::ThreadState::try_from(state) {
        Ok(pb::ThreadState::Running) => "running",
        _ => "idle",
    }
}

/// The tool call's id, where the client gives one (Claude Code's `claudecode/toolUseId`),
/// else a fresh one: the key of a room post made without one.
pub fn tool_call_id(context: &RequestContext<RoleServer>) -> String {
    context
        .meta
        .0
        .get("claudecode/toolUseId")
        .and_then(Value::as_str)
        .map_or_else(|| format!("mcp-{}", ulid::Ulid::new()), |id| format!("tool-{id}"))
}

/// kikid's refusal as the agent reads it: its code word, kikid's message (which names the
/// field and limit, or the reason), and what to do next where kikid does not say it, each
/// a sentence of its own.
pub fn refused(status: tonic::Status) -> Refused {
    // A status the client made from a broken connection: the outcome is unknown.
    if std::error::Error::source(&status).is_some() && status.code() != Code::Unavailable {
        return Refused(format!(
            "unavailable: the connection to kikid was lost before it answered ({}); the outcome is \
             unknown. Retry the same call (a send with the same idempotency_key is safe to repeat).",
            status.message()
        ));
    }
    let next = match status.code() {
        Code::AlreadyExists | Code::Aborted => "Use a new idempotency_key for a new message.",
        Code::Unauthenticated => {
            "This kiki mcp was started by a turn that has ended; the call was not made as anyone else. \
             Calls work again in the thread's next turn."
        }
        Code::Unavailable => "Retry in a moment; a send with the same idempotency_key is safe to repeat.",
        // kikid's words say what to do (free space, retry, park fewer waits).
        _ => "",
    };
    Refused(sentences(&format!("{}: {}", crate::output::code_word(status.code()), status.message()), next))
}

/// `first`, ended as a sentence, then `then` (if any).
fn sentences(first: &str, then: &str) -> String {
    if then.is_empty() {
        return first.to_string();
    }
    let stop = if first.ends_with(['.', '!', '?']) { "" } else { "." };
    format!("{first}{stop} {then}")
}

/// A ThreadWait's refusal, with kikid's `cursors` (the gRPC field) named as the tool's
/// `targets[i].cursor`: the target whose cursor kikid names, or the only one with a cursor.
pub fn wait_refused(status: tonic::Status, with_cursor: &[(usize, String)]) -> Refused {
    let Some(said) =
        status.message().strip_prefix("cursors: ").filter(|_| status.code() == Code::InvalidArgument)
    else {
        return refused(status);
    };
    let named = with_cursor.iter().find(|(_, name)| said.contains(&format!("the cursor for {name} ")));
    let field = match (named, with_cursor) {
        (Some((index, _)), _) | (None, [(index, _)]) => format!("targets[{index}].cursor"),
        _ => "targets[].cursor".to_string(),
    };
    Refused::parameter(&field, said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kikid_and_kiki_mcp_speak_in_sentences() {
        assert_eq!(sentences("a: b", "Do c."), "a: b. Do c.");
        assert_eq!(sentences("a: b.", "Do c."), "a: b. Do c.");
        assert_eq!(sentences("a: b", ""), "a: b");
        let said = refused(tonic::Status::already_exists(
            "idempotency_key: already used (m); reuse a key only for the same target and content",
        ))
        .0;
        assert_eq!(
            said,
            "already_exists: idempotency_key: already used (m); reuse a key only for the same target and content. \
             Use a new idempotency_key for a new message."
        );
        let said = refused(tonic::Status::resource_exhausted(
            "ThreadWait: this connection already has 1024 waits parked",
        ))
        .0;
        assert_eq!(said, "resource_exhausted: ThreadWait: this connection already has 1024 waits parked");
    }

    #[test]
    fn a_bad_wait_cursor_is_named_as_the_tools_parameter() {
        let with_cursor = [(0, "th_a".to_string()), (2, "th_c".to_string())];
        let bad = |message: &str| wait_refused(tonic::Status::invalid_argument(message), &with_cursor).0;
        assert_eq!(
            bad("cursors: the cursor for th_c is not one ThreadWait returned; restart without it"),
            "invalid_argument: targets[2].cursor: the cursor for th_c is not one ThreadWait returned; restart without it"
        );
        assert!(
            bad("cursors: has a key that is not one of the targets")
                .starts_with("invalid_argument: targets[].cursor: ")
        );
        let one = wait_refused(tonic::Status::invalid_argument("cursors: junk"), &with_cursor[1..]).0;
        assert_eq!(one, "invalid_argument: targets[2].cursor: junk");
        assert_eq!(bad("targets: must be distinct"), "invalid_argument: targets: must be distinct");
    }
}
