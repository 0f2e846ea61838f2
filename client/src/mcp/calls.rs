//! One tool call: its arguments read (a wrong type or an unknown name is refused naming the
//! parameter), the same `kiki.v1` call the CLI makes, and its answer as MCP wants it —
//! `structuredContent` plus a text rendering, or a tool error (`isError`) whose text says
//! what was wrong and what to do next.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kiki_client::{Client, ClientError};
use kiki_proto as pb;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam};
use rmcp::service::{RequestContext, RoleServer};
use serde::Serialize;
use serde_json::Value;
use tonic::Code;

use super::skim;
use super::transport::{Answers, LINE_MAX};

/// How often a ThreadWait that was given a progress token says it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How long before the client's own limit a ThreadWait answers (`timed_out`, with cursors).
const ANSWER_BEFORE_CLIENT_LIMIT: Duration = Duration::from_secs(2);

use kiki_proto::limits;

/// The contract's length limits on arguments (kikid checks them too, with the same words),
/// checked here as well so that an over-long argument of any size — even one kikid's
/// message limit would refuse first, or a request line too long to keep — gets the same
/// error: `content: must be at most 100000 characters, got N`.
fn length_limit(tool: &str, name: &str, room: bool) -> Option<usize> {
    Some(match (tool, name) {
        ("ThreadCreate", "prompt") => limits::PROMPT_MAX_CHARS,
        ("ThreadCreate", "title") => limits::TITLE_MAX_CHARS,
        ("ThreadSend", "content") if room => limits::ROOM_CONTENT_MAX_CHARS,
        ("ThreadSend", "content") => limits::CONTENT_MAX_CHARS,
        ("ThreadSend", "idempotency_key") => limits::KEY_MAX_CHARS,
        ("PermissionPrompt", "tool_name") => limits::TOOL_MAX_CHARS,
        _ => return None,
    })
}

fn too_long(name: &str, max: usize, chars: usize) -> Refused {
    Refused::parameter(name, format!("must be at most {max} characters, got {chars}"))
}

/// The parameters each tool takes; `None` for a tool kiki does not have.
fn parameters(tool: &str) -> Option<&'static [&'static str]> {
    Some(match tool {
        "ThreadCreate" => THREAD_CREATE,
        "ThreadList" => THREAD_LIST,
        "ThreadRead" => THREAD_READ,
        "ThreadSend" => THREAD_SEND,
        "ThreadWait" => THREAD_WAIT,
        "RoomRead" => ROOM_READ,
        "RoomAdd" => ROOM_ADD,
        "PermissionPrompt" => PERMISSION_PROMPT,
        _ => return None,
    })
}

/// The tool error for a call whose request line was too long to keep (see
/// [`super::transport`]): the same as the call would get whole — an unknown parameter, or
/// the first argument over its length limit — else the request's size.
pub fn over_long(tool: &str, arguments: &[skim::Argument], bytes: usize) -> String {
    let Some(names) = parameters(tool) else {
        return unknown_tool(tool).0;
    };
    // As for a call read whole: Claude Code's permission prompt may grow arguments.
    if tool != "PermissionPrompt"
        && let Some(unknown) = arguments.iter().find(|a| !names.contains(&a.name.as_str()))
    {
        return not_a_parameter(&unknown.name, names).0;
    }
    let room = arguments.iter().any(|a| a.name == "room");
    for argument in arguments {
        if let (Some(max), Some(chars)) = (length_limit(tool, &argument.name, room), argument.chars)
            && chars > max
        {
            return too_long(&argument.name, max, chars).0;
        }
    }
    let largest = arguments
        .iter()
        .max_by_key(|a| a.bytes)
        .map_or_else(String::new, |a| format!(" ({} alone is {} bytes)", a.name, a.bytes));
    format!(
        "invalid_argument: the request is {bytes} bytes{largest}; kiki mcp reads requests of at most \
         {LINE_MAX} bytes. Shorten the arguments."
    )
}

fn unknown_tool(tool: &str) -> Refused {
    Refused(format!("not_found: no tool named {tool:?}; tools/list names them"))
}

fn not_a_parameter(name: &str, names: &[&str]) -> Refused {
    Refused::parameter(name, format!("not a parameter of this tool (it takes {})", names.join(", ")))
}

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

/// Who the tools act as, and the home they talk to.
pub struct Caller {
    pub socket: PathBuf,
    /// The turn's `KIKI_TOKEN` when `kiki mcp` runs inside a turn.
    pub token: Option<String>,
    /// How long the client gives one tool call (`--tool-timeout-ms`).
    pub tool_timeout: Duration,
    /// The requests' places in `kiki mcp`: a call that waits for long gives its place up.
    answers: Answers,
    /// Connected at the first call that needs kikid, so the server starts and lists its
    /// tools without a running home; kept for the calls after.
    client: tokio::sync::Mutex<Option<Client>>,
}

/// Why a call failed, as the agent reads it.
pub struct Refused(String);

impl Refused {
    fn parameter(name: &str, what: impl std::fmt::Display) -> Self {
        Self(format!("invalid_argument: {name}: {what}"))
    }
}

type Outcome = Result<CallToolResult, Refused>;

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
        let client = match &self.token {
            Some(token) => connected.with_token(token).map_err(|e| Refused(e.to_string()))?,
            None => connected,
        };
        *slot = Some(client.clone());
        Ok(client)
    }

    /// kikid's thread service for `request`, once it is known to fit kikid's message limit.
    async fn threads(&self, request: &impl prost::Message) -> Result<kiki_client::ThreadClient, Refused> {
        fits(request)?;
        Ok(self.client().await?.threads())
    }

    /// Runs the tool `name`.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Outcome {
        match name {
            "ThreadCreate" => self.thread_create(Args::new(name, arguments, THREAD_CREATE)?).await,
            "ThreadList" => self.thread_list(Args::new(name, arguments, THREAD_LIST)?).await,
            "ThreadRead" => self.thread_read(Args::new(name, arguments, THREAD_READ)?).await,
            "ThreadSend" => self.thread_send(Args::new(name, arguments, THREAD_SEND)?, context).await,
            "ThreadWait" => self.thread_wait(Args::new(name, arguments, THREAD_WAIT)?, context).await,
            "RoomRead" => self.room_read(Args::new(name, arguments, ROOM_READ)?).await,
            "RoomAdd" => self.room_add(Args::new(name, arguments, ROOM_ADD)?).await,
            // Its arguments are Claude Code's, which may grow: not checked against a list.
            "PermissionPrompt" if self.token.is_some() => {
                let args = Args::new("PermissionPrompt", arguments, PERMISSION_PROMPT)?;
                self.permission_prompt(args, context).await
            }
            other => Err(unknown_tool(other)),
        }
    }

    async fn thread_create(&self, args: Args) -> Outcome {
        // Omitted, the thread works where this session does: its workspace root.
        let cwd = match args.string("cwd")? {
            Some(cwd) => Some(cwd),
            None => std::env::current_dir().ok().map(|dir| dir.display().to_string()),
        };
        let request = pb::ThreadCreateRequest {
            cwd,
            profile: args.string("profile")?,
            prompt: args.string("prompt")?,
            title: args.string("title")?,
            resume_agent_session: None,
        };
        let created =
            self.threads(&request).await?.thread_create(request).await.map_err(refused)?.into_inner();
        let summary = format!(
            "created thread {} ({:?}) in {}{}",
            created.id,
            created.title,
            created.cwd,
            if created.prompt_started { "; its first turn has started" } else { "" }
        );
        answer(&created, summary)
    }

    async fn thread_list(&self, args: Args) -> Outcome {
        let request = pb::ThreadListRequest {
            bridge: args.bridge()?.unwrap_or_default(),
            workspace_id: args.string("workspace_id")?.unwrap_or_default(),
            limit: args.number("limit")?,
            cursor: args.string("cursor")?.unwrap_or_default(),
        };
        let page = self.threads(&request).await?.thread_list(request).await.map_err(refused)?.into_inner();
        let mut summary = format!("{} thread(s)", page.threads.len());
        for thread in &page.threads {
            summary.push_str(&format!("\n{} {:?} ({})", thread.id, thread.title, state_word(thread.state)));
        }
        if let Some(cursor) = &page.next_cursor {
            summary.push_str(&format!("\nmore: pass cursor {cursor:?}"));
        }
        answer(&page, summary)
    }

    async fn thread_read(&self, args: Args) -> Outcome {
        let request = pb::ThreadReadRequest {
            target: Some(args.target()?),
            limit: args.number("limit")?,
            cursor: args.string("cursor")?.unwrap_or_default(),
            content_ref: args.string("content_ref")?.unwrap_or_default(),
            last: None,
        };
        let page = self.threads(&request).await?.thread_read(request).await.map_err(refused)?.into_inner();
        let summary = match &page.segment {
            Some(segment) => format!(
                "{} from UTF-16 offset {}{}",
                segment.content_ref,
                segment.offset,
                segment.next.as_ref().map_or(" (the end)".into(), |next| format!("; next: {next:?}"))
            ),
            None => format!(
                "{} turn(s){}",
                page.turns.len(),
                page.next_cursor.as_ref().map_or(String::new(), |c| format!("; more: pass cursor {c:?}"))
            ),
        };
        answer(&page, summary)
    }

    async fn thread_send(&self, args: Args, context: &RequestContext<RoleServer>) -> Outcome {
        let content = args.string("content")?.unwrap_or_default();
        let request = match args.string("room")? {
            Some(room) => {
                if args.has_any(&["session_id", "host_id", "workspace_id", "bridge_id", "connection_id"]) {
                    return Err(Refused::parameter(
                        "room",
                        "give either room (to post to a room) or session_id (to send to a thread), not both",
                    ));
                }
                // The seed's default: the tool call's id, so a retried call posts once.
                let key = match args.string("idempotency_key")? {
                    Some(key) => key,
                    None => tool_call_id(context),
                };
                pb::ThreadSendRequest {
                    target: None,
                    room,
                    content,
                    idempotency_key: key,
                    mentions: args.strings("mentions")?,
                }
            }
            None => {
                if args.has_any(&["mentions"]) {
                    return Err(Refused::parameter("mentions", "mentions are for a room post (with room)"));
                }
                let target = Some(args.target()?);
                let Some(idempotency_key) = args.string("idempotency_key")? else {
                    return Err(Refused::parameter(
                        "idempotency_key",
                        "required to send to a thread: a key of at most 256 characters naming this message \
                         (the same key again only to retry the same message)",
                    ));
                };
                pb::ThreadSendRequest {
                    target,
                    room: String::new(),
                    content,
                    idempotency_key,
                    mentions: Vec::new(),
                }
            }
        };
        let sent = self.threads(&request).await?.thread_send(request).await.map_err(refused)?.into_inner();
        let status = serde_json::to_value(&sent).ok().and_then(|v| v["status"].as_str().map(str::to_string));
        let mut summary = format!(
            "{} {}{}",
            sent.message_id,
            status.unwrap_or_default(),
            if sent.replayed { " (an earlier send with this key)" } else { "" }
        );
        if !sent.reason.is_empty() {
            summary.push_str(&format!(": {}", sent.reason));
        }
        answer(&sent, summary)
    }

    async fn thread_wait(&self, args: Args, context: &RequestContext<RoleServer>) -> Outcome {
        let targets = args.targets()?;
        let requested = args.number("timeout_ms")?;
        let asked = Duration::from_millis(requested.map_or(30_000, u64::from));
        // Answer before the client gives up on the call; kikid checks the limit itself.
        let budget = self.tool_timeout.saturating_sub(ANSWER_BEFORE_CLIENT_LIMIT);
        let timeout_ms = match requested {
            Some(ms) if ms > limits::WAIT_TIMEOUT_MAX_MS => Some(ms),
            _ => Some(asked.min(budget).as_millis() as u32),
        };
        let mut cursors = std::collections::HashMap::new();
        let mut refs = Vec::new();
        // Each target given a cursor, by its index: kikid names the bad one by its reference.
        let mut with_cursor = Vec::new();
        for (index, (target, cursor)) in targets.into_iter().enumerate() {
            if let Some(cursor) = cursor {
                with_cursor.push((index, pb::format_ref(&target)));
                cursors.insert(pb::format_ref(&target), cursor);
            }
            refs.push(target);
        }
        let request = pb::ThreadWaitRequest { targets: refs, timeout_ms, cursors };
        let mut threads = self.threads(&request).await?;
        // A parked wait holds no answer: its place in `kiki mcp` goes to other calls.
        self.answers.park(&context.id);
        let call = threads.thread_wait(request);
        tokio::pin!(call);
        let progress = context.meta.get_progress_token();
        let started = Instant::now();
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        let waited = loop {
            tokio::select! {
                answer = &mut call => break answer,
                // Dropping the call resets its stream: kikid's parked wait ends with it.
                () = context.ct.cancelled() => return Err(Refused("cancelled: the wait was cancelled".into())),
                _ = ticks.tick(), if progress.is_some() => {
                    if let Some(token) = &progress {
                        let elapsed = started.elapsed().as_millis() as f64;
                        // The most this call will wait: the total a client can show.
                        let total = f64::from(timeout_ms.unwrap_or_default());
                        let note = ProgressNotificationParam::new(token.clone(), elapsed)
                            .with_total(total)
                            .with_message("waiting for the threads' activity");
                        // A client gone away ends the call through its cancellation.
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
            }
        };
        let waited = waited.map_err(|status| wait_refused(status, &with_cursor))?.into_inner();
        let mut summary = if waited.timed_out {
            "timed out: no new events; call again with each result's cursor".to_string()
        } else {
            "events:".to_string()
        };
        for result in &waited.results {
            let name = result.target.as_ref().map(pb::format_ref).unwrap_or_default();
            summary.push_str(&format!(
                "\n{name}: {} event(s), cursor {:?}",
                result.events.len(),
                result.cursor
            ));
        }
        answer(&waited, summary)
    }

    /// Claude Code's permission prompt: the owner's answer, in the shape Claude Code reads.
    async fn permission_prompt(&self, args: Args, context: &RequestContext<RoleServer>) -> Outcome {
        let tool = args.string("tool_name")?.unwrap_or_default();
        let input = args.values.get("input").cloned().unwrap_or_else(|| Value::Object(JsonObject::new()));
        let text = input.to_string();
        let chars = text.chars().count();
        if chars > limits::TOOL_INPUT_MAX_CHARS {
            return Err(too_long("input", limits::TOOL_INPUT_MAX_CHARS, chars));
        }
        let request = pb::PermissionAskRequest { tool, input: text };
        // The owner may take minutes: its place in `kiki mcp` goes to other calls.
        self.answers.park(&context.id);
        let answer =
            self.threads(&request).await?.permission_ask(request).await.map_err(refused)?.into_inner();
        let behavior = if answer.allowed {
            serde_json::json!({"behavior": "allow", "updatedInput": input})
        } else {
            serde_json::json!({"behavior": "deny", "message": format!("{} ({})", answer.reason, answer.request_id)})
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(behavior.to_string())]))
    }

    async fn room_read(&self, args: Args) -> Outcome {
        let request = pb::RoomReadRequest {
            room: args.string("room")?.unwrap_or_default(),
            limit: args.number("limit")?,
            after_id: args.string("after_id")?.unwrap_or_default(),
        };
        let page = self.threads(&request).await?.room_read(request).await.map_err(refused)?.into_inner();
        let mut summary = format!(
            "room {} (host {}, {} member(s){}): {} entr{}",
            page.room,
            page.host,
            page.members.len(),
            if page.paused { ", paused" } else { "" },
            page.entries.len(),
            if page.entries.len() == 1 { "y" } else { "ies" }
        );
        if let Some(cursor) = &page.next_cursor {
            summary.push_str(&format!("; next: pass after_id {cursor:?}"));
        }
        answer(&page, summary)
    }

    async fn room_add(&self, args: Args) -> Outcome {
        let request = pb::RoomAddRequest {
            room: args.string("room")?.unwrap_or_default(),
            session_id: args.string("session_id")?.unwrap_or_default(),
        };
        let added = self.threads(&request).await?.room_add(request).await.map_err(refused)?.into_inner();
        let summary = if added.added { "added to the room" } else { "already in the room: nothing changed" };
        answer(&added, summary.to_string())
    }
}

/// A result: the answer as `structuredContent`, and as text a summary line followed by the
/// same JSON, for clients that show the model only text.
fn answer<T: Serialize>(value: &T, summary: String) -> Outcome {
    let structured = serde_json::to_value(value).map_err(|e| Refused(format!("internal: {e}")))?;
    let mut result = CallToolResult::structured(structured.clone());
    result.content = vec![ContentBlock::text(format!("{summary}\n{structured}"))];
    Ok(result)
}

/// A tool error's result.
pub fn tool_error(refused: Refused) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(refused.0)])
}

fn state_word(state: i32) -> &'static str {
    match pb::ThreadState::try_from(state) {
        Ok(pb::ThreadState::Running) => "running",
        _ => "idle",
    }
}

/// The tool call's id, where the client gives one (Claude Code's `claudecode/toolUseId`),
/// else a fresh one: the key of a room post made without one.
fn tool_call_id(context: &RequestContext<RoleServer>) -> String {
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
fn refused(status: tonic::Status) -> Refused {
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
fn wait_refused(status: tonic::Status, with_cursor: &[(usize, String)]) -> Refused {
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

const ADDRESS: &[&str] = &["session_id", "host_id", "workspace_id", "bridge_id", "connection_id"];
const THREAD_CREATE: &[&str] = &["cwd", "profile", "prompt", "title"];
const THREAD_LIST: &[&str] = &["bridge_id", "connection_id", "host_id", "workspace_id", "limit", "cursor"];
const THREAD_READ: &[&str] = &[
    "session_id",
    "host_id",
    "workspace_id",
    "bridge_id",
    "connection_id",
    "limit",
    "cursor",
    "content_ref",
];
const THREAD_SEND: &[&str] = &[
    "session_id",
    "host_id",
    "workspace_id",
    "bridge_id",
    "connection_id",
    "room",
    "content",
    "idempotency_key",
    "mentions",
];
const THREAD_WAIT: &[&str] = &["targets", "timeout_ms"];
const ROOM_READ: &[&str] = &["room", "limit", "after_id"];
const ROOM_ADD: &[&str] = &["room", "session_id"];
/// Claude Code's, which may grow: only what kiki reads is checked.
const PERMISSION_PROMPT: &[&str] = &["tool_name", "input", "tool_use_id"];

/// A call's arguments, checked against the names its tool takes and their length limits.
struct Args {
    values: JsonObject,
}

impl Args {
    fn new(tool: &str, arguments: Option<JsonObject>, names: &[&str]) -> Result<Self, Refused> {
        let values = arguments.unwrap_or_default();
        // Claude Code's permission prompt may grow arguments kiki does not read.
        if tool != "PermissionPrompt"
            && let Some(unknown) = values.keys().find(|k| !names.contains(&k.as_str()))
        {
            return Err(not_a_parameter(unknown, names));
        }
        let room = values.get("room").is_some_and(Value::is_string);
        for name in names {
            if let (Some(max), Some(Value::String(text))) =
                (length_limit(tool, name, room), values.get(*name))
            {
                let chars = text.chars().count();
                if chars > max {
                    return Err(too_long(name, max, chars));
                }
            }
        }
        Ok(Self { values })
    }

    fn has_any(&self, names: &[&str]) -> bool {
        names.iter().any(|name| self.values.get(*name).is_some_and(|v| !v.is_null()))
    }

    /// A string parameter; `null` is the same as absent.
    fn string(&self, name: &str) -> Result<Option<String>, Refused> {
        string_in(&self.values, name)
    }

    fn number(&self, name: &str) -> Result<Option<u32>, Refused> {
        match self.values.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => match value.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Ok(Some(n)),
                None => Err(Refused::parameter(name, format!("must be a non-negative integer, got {value}"))),
            },
        }
    }

    fn strings(&self, name: &str) -> Result<Vec<String>, Refused> {
        match self.values.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str().map(str::to_string).ok_or_else(|| {
                        Refused::parameter(name, format!("must be a list of strings, got {item}"))
                    })
                })
                .collect(),
            Some(other) => Err(Refused::parameter(name, format!("must be a list of strings, got {other}"))),
        }
    }

    /// A bridge selector for ThreadList: bridge_id, connection_id or host_id (one name).
    fn bridge(&self) -> Result<Option<String>, Refused> {
        host_in(&self.values, "")
    }

    /// The thread the call addresses.
    fn target(&self) -> Result<pb::ThreadRef, Refused> {
        target_in(&self.values, "")
    }

    /// ThreadWait's targets, each with its cursor.
    fn targets(&self) -> Result<Vec<(pb::ThreadRef, Option<String>)>, Refused> {
        let Some(Value::Array(items)) = self.values.get("targets") else {
            return Err(Refused::parameter(
                "targets",
                "required: a list of 1 to 8 threads ({session_id, …})",
            ));
        };
        let mut names: Vec<&str> = ADDRESS.to_vec();
        names.push("cursor");
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let field = format!("targets[{i}]");
                let Value::Object(target) = item else {
                    return Err(Refused::parameter(
                        &field,
                        format!("must be an object {{session_id, …}}, got {item}"),
                    ));
                };
                if let Some(unknown) = target.keys().find(|k| !names.contains(&k.as_str())) {
                    return Err(Refused::parameter(
                        &format!("{field}.{unknown}"),
                        format!("not a target's field (it takes {})", names.join(", ")),
                    ));
                }
                Ok((target_in(target, &format!("{field}."))?, string_in(target, "cursor")?))
            })
            .collect()
    }
}

fn string_in(object: &JsonObject, name: &str) -> Result<Option<String>, Refused> {
    match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(Refused::parameter(name, format!("must be a string, got {other}"))),
    }
}

/// The home named by host_id, bridge_id or connection_id: they are one thing, so two that
/// differ are refused rather than one silently winning.
fn host_in(object: &JsonObject, prefix: &str) -> Result<Option<String>, Refused> {
    let mut host: Option<(String, &str)> = None;
    for name in ["host_id", "bridge_id", "connection_id"] {
        let Some(value) = string_in(object, name)?.filter(|v| !v.is_empty()) else { continue };
        match &host {
            Some((seen, by)) if *seen != value => {
                return Err(Refused::parameter(
                    &format!("{prefix}{name}"),
                    format!("{value:?} names another home than {by} {seen:?}; give one"),
                ));
            }
            _ => host = Some((value, name)),
        }
    }
    Ok(host.map(|(value, _)| value))
}

fn target_in(object: &JsonObject, prefix: &str) -> Result<pb::ThreadRef, Refused> {
    let session_id = string_in(object, "session_id")?.unwrap_or_default();
    if session_id.is_empty() {
        return Err(Refused::parameter(
            &format!("{prefix}session_id"),
            "required: the thread's id (th_…), as ThreadList returns it",
        ));
    }
    let host_id = host_in(object, prefix)?.unwrap_or_default();
    let workspace_id = string_in(object, "workspace_id")?.unwrap_or_default();
    // A HOST/SESSION reference given whole as the session id, as the CLI takes it.
    if host_id.is_empty() && session_id.contains('/') {
        let reference =
            pb::parse_ref(&session_id).map_err(|e| Refused::parameter(&format!("{prefix}session_id"), e))?;
        return Ok(pb::ThreadRef { workspace_id, ..reference });
    }
    Ok(pb::ThreadRef { host_id, workspace_id, session_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argument(name: &str, bytes: usize, chars: Option<usize>) -> skim::Argument {
        skim::Argument { name: name.into(), bytes, chars }
    }

    #[test]
    fn an_over_long_call_gets_the_error_it_would_get_whole() {
        let key = argument("idempotency_key", 3, Some(1));
        let content = argument("content", 5 << 20, Some(5 << 20));
        assert_eq!(
            over_long("ThreadSend", &[argument("session_id", 6, Some(4)), content.clone(), key], 5 << 20),
            "invalid_argument: content: must be at most 100000 characters, got 5242880"
        );
        // A room post's content has the room's limit.
        assert_eq!(
            over_long("ThreadSend", &[argument("room", 10, Some(8)), content.clone()], 5 << 20),
            "invalid_argument: content: must be at most 20000 characters, got 5242880"
        );
        assert!(
            over_long("ThreadRead", std::slice::from_ref(&content), 5 << 20)
                .starts_with("invalid_argument: content: not a parameter")
        );
        assert!(over_long("Nope", &[], 5 << 20).starts_with("not_found: no tool named \"Nope\""));
        // Nothing over a length limit: the request's size, and its largest argument.
        let said = over_long("ThreadSend", &[argument("mentions", 5 << 20, None)], (5 << 20) + 40);
        assert!(said.contains("5242920 bytes") && said.contains("mentions alone is 5242880 bytes"), "{said}");
        // Claude Code's permission prompt may carry arguments kiki does not read.
        let said = over_long(
            "PermissionPrompt",
            &[argument("input", 5 << 20, None), argument("extra", 2, None)],
            5 << 20,
        );
        assert!(said.contains("input alone"), "{said}");
    }

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
