//! The collaboration tools, each declared once with rmcp's `#[tool]`: its name, title, the
//! description an agent acts on, annotations and output schema here; its parameters as a
//! type (`params.rs`), from which its input schema, the checks of its arguments and their
//! reading come; and its body, the same `kiki.v1` call the CLI makes. The parameter names,
//! limits and defaults are the API's (`kiki_proto::limits`); kikid checks every limit again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiki_proto::{self as pb, limits};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam, Tool};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{tool, tool_router};
use serde_json::{Value, json};

use super::arguments::{Parameters, Refused};
use super::calls::{Caller, Outcome, answer, refused, state_word, tool_call_id, wait_refused};
use super::params;

/// How often a ThreadWait that was given a progress token says it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How long before the client's own limit a ThreadWait answers (`timed_out`, with cursors).
const ANSWER_BEFORE_CLIENT_LIMIT: Duration = Duration::from_secs(2);

/// The tools a session serves: all of them inside a turn; outside one, not the permission
/// prompt (there is no turn to ask for).
pub fn router(in_turn: bool) -> ToolRouter<Caller> {
    let mut router = Caller::tool_router();
    if !in_turn {
        router.remove_route(&Caller::permission_prompt_tool_attr().name);
    }
    router
}

/// Every tool kiki has, whether a session serves it or not: what an over-long request line
/// is checked against.
pub fn all() -> Vec<Tool> {
    Caller::tool_router().list_all()
}

/// The tools `router` serves, in the order `tools/list` shows them.
pub fn listed(router: &ToolRouter<Caller>) -> Vec<Tool> {
    let order = [
        Caller::thread_create_tool_attr,
        Caller::thread_list_tool_attr,
        Caller::thread_read_tool_attr,
        Caller::thread_send_tool_attr,
        Caller::thread_wait_tool_attr,
        Caller::room_read_tool_attr,
        Caller::room_add_tool_attr,
        Caller::permission_prompt_tool_attr,
    ];
    order.iter().map(|tool| tool()).filter(|tool| router.has_route(&tool.name)).collect()
}

#[tool_router(vis = "pub")]
impl Caller {
    #[tool(
        name = "ThreadCreate",
        title = "Create a thread",
        description = "Open a new, independent top-level thread (an agent session) in this home. Use it only when the user explicitly asks for a new thread or session, not for routine delegation. `cwd` must be an absolute path to an existing directory (omitted: this session's workspace root). `profile` names an enabled profile (omitted: the default). `prompt` (at most 100,000 characters) becomes the thread's first user message and starts its turn at once; without it the thread stays empty. `title` overrides the default (with a prompt and no title, the prompt's first line, cut to 80 characters). Returns id, title, cwd, profile and prompt_started; continue the conversation with ThreadSend and ThreadWait.",
        output_schema = output::thread_create(),
        annotations(
            title = "Create a thread",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn thread_create(&self, Parameters(args): Parameters<params::ThreadCreate>) -> Outcome {
        let args = args?;
        // Omitted, the thread works where this session does: its workspace root.
        let cwd = args.cwd.or_else(|| std::env::current_dir().ok().map(|dir| dir.display().to_string()));
        let request = pb::ThreadCreateRequest {
            cwd,
            profile: args.profile,
            prompt: args.prompt,
            title: args.title,
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

    #[tool(
        name = "ThreadList",
        title = "List threads",
        description = "List enabled, unarchived threads, newest first: this home's, or with a bridge selector (bridge_id, connection_id or host_id) only the approved scope of the home behind that bridge (needs its `read` permission). Optionally filter by workspace_id. `limit` 1–100, default 50; pass the returned next_cursor as `cursor` for the next page (absent or null: no more). Each thread's `id` is the session_id the other tools take.",
        output_schema = output::thread_list(),
        annotations(
            title = "List threads",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn thread_list(&self, Parameters(args): Parameters<params::ThreadList>) -> Outcome {
        let args = args?;
        let request = pb::ThreadListRequest {
            bridge: params::home(args.host_id, args.bridge_id, args.connection_id, "")?.unwrap_or_default(),
            workspace_id: args.workspace_id.unwrap_or_default(),
            limit: args.limit,
            cursor: args.cursor.unwrap_or_default(),
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

    #[tool(
        name = "ThreadRead",
        title = "Read a thread's turns",
        description = "Read a thread's completed turns (input and output) in chronological order, without waking or resuming it. `limit` 1–100, default 20; pass next_cursor back as `cursor` for the next page. A turn's input or output over 16,384 UTF-16 units keeps a preview and lists a `content_refs` entry: read it whole by passing that content_ref (with the same thread), then follow `segment.next` as `cursor` until it is absent. If a cursor is refused as no longer valid (the history was rewritten), restart from the first page without a cursor. Across a bridge it needs `read` and returns the same page shape with coverage.",
        output_schema = output::thread_read(),
        annotations(
            title = "Read a thread's turns",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn thread_read(&self, Parameters(args): Parameters<params::ThreadRead>) -> Outcome {
        let args = args?;
        let request = pb::ThreadReadRequest {
            target: Some(args.address.thread("")?),
            limit: args.limit,
            cursor: args.cursor.unwrap_or_default(),
            content_ref: args.content_ref.unwrap_or_default(),
            last: None,
            tool_calls: false,
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

    #[tool(
        name = "ThreadSend",
        title = "Send a message to a thread or a room",
        description = "Two forms. Thread form {session_id (+ host_id/bridge_id for another home), content, idempotency_key}: durably saves an explicit message to that thread, with this thread as its verified source (there is no source parameter). content: non-empty, at most 100,000 characters; idempotency_key: at most 256 characters — reuse a key only to retry the same message (the same key and content return the original message_id; the same key with other content is refused). Answers `delivered` once the message is in the target agent's prompt (not a reply), or `pending` when delivery is slow: it goes on in the background, and a cross-home send retries with its key for up to 15 minutes. A bridge needs `send`, plus `wake` to wake the target. Room form {room, content, mentions?}: posts to a room this thread belongs to (content at most 20,000 characters); mentions are roster ids (thread or persona ids, see RoomRead) and wake only those members; the key defaults to this tool call's id. Room `delivered` means the room's log has the post. Text you write in your own answer stays in your thread; ThreadSend is how you speak to others.",
        output_schema = output::thread_send(),
        annotations(
            title = "Send a message",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn thread_send(
        &self,
        Parameters(args): Parameters<params::ThreadSend>,
        context: RequestContext<RoleServer>,
    ) -> Outcome {
        let args = args?;
        let content = args.content.unwrap_or_default();
        let request = match args.room {
            Some(room) => {
                if args.address.given() {
                    return Err(Refused::parameter(
                        "room",
                        "give either room (to post to a room) or session_id (to send to a thread), not both",
                    ));
                }
                // By default the tool call's id, so a retried call posts once.
                let key = args.idempotency_key.unwrap_or_else(|| tool_call_id(&context));
                let mentions = args.mentions.unwrap_or_default();
                pb::ThreadSendRequest { target: None, room, content, idempotency_key: key, mentions }
            }
            None => {
                if args.mentions.is_some() {
                    return Err(Refused::parameter("mentions", "mentions are for a room post (with room)"));
                }
                let target = Some(args.address.thread("")?);
                let Some(idempotency_key) = args.idempotency_key else {
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

    #[tool(
        name = "ThreadWait",
        title = "Wait for threads' activity",
        description = "Wait for terminal (a turn ended), attention (an agent asks for its user), lifecycle or undeliverable-message events on 1–8 distinct threads of this home or behind approved bridges (a bridge needs `wait`; waiting never wakes a thread). timeout_ms 0–60,000, default 30,000; 0 checks once. Answers as soon as any target has an event, else at the timeout with timed_out: true (a little before a client's own 60 s limit, so it always answers). Each result has a `cursor`: pass it as that target's `cursor` in the next call, or the same events come back. Cancel the tool call to stop waiting.",
        output_schema = output::thread_wait(),
        annotations(
            title = "Wait for threads' activity",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn thread_wait(
        &self,
        Parameters(args): Parameters<params::ThreadWait>,
        context: RequestContext<RoleServer>,
    ) -> Outcome {
        let args = args?;
        let Some(targets) = args.targets else {
            return Err(Refused::parameter(
                "targets",
                "required: a list of 1 to 8 threads ({session_id, …})",
            ));
        };
        let asked =
            Duration::from_millis(u64::from(args.timeout_ms.unwrap_or(limits::WAIT_TIMEOUT_DEFAULT_MS)));
        // Answer before the client gives up on the call; kikid checks the limit itself.
        let budget = self.tool_timeout.saturating_sub(ANSWER_BEFORE_CLIENT_LIMIT);
        let timeout_ms = match args.timeout_ms {
            Some(ms) if ms > limits::WAIT_TIMEOUT_MAX_MS => Some(ms),
            _ => Some(asked.min(budget).as_millis() as u32),
        };
        let mut cursors = std::collections::HashMap::new();
        let mut refs = Vec::new();
        // Each target given a cursor, by its index: kikid names the bad one by its reference.
        let mut with_cursor = Vec::new();
        for (index, target) in targets.into_iter().enumerate() {
            let thread = target.address.thread(&format!("targets[{index}]."))?;
            if let Some(cursor) = target.cursor {
                with_cursor.push((index, pb::format_ref(&thread)));
                cursors.insert(pb::format_ref(&thread), cursor);
            }
            refs.push(thread);
        }
        let request = pb::ThreadWaitRequest { targets: refs, timeout_ms, cursors };
        let mut threads = self.threads(&request).await?;
        // A parked wait holds no answer: its place in `kiki mcp` goes to other calls.
        self.answers.park(&context.id);
        let total = f64::from(timeout_ms.unwrap_or_default());
        let waited = with_progress(threads.thread_wait(request), &context, total).await?;
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

    #[tool(
        name = "RoomRead",
        title = "Read a room",
        description = "Read a room this thread belongs to: its host, member roster (each roster `id` is what mentions take), pause/archive state, and its saved log, oldest first. limit 1–100, default 50; pass the returned next_cursor as `after_id` for what came after (empty entries mean nothing new, not that members left). Reading wakes nobody and changes nothing. Takes a room id of this home, not a bridge selector.",
        output_schema = output::room_read(),
        annotations(
            title = "Read a room",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn room_read(&self, Parameters(args): Parameters<params::RoomRead>) -> Outcome {
        let args = args?;
        let request = pb::RoomReadRequest {
            room: args.room.unwrap_or_default(),
            limit: args.limit,
            after_id: args.after_id.unwrap_or_default(),
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

    #[tool(
        name = "RoomAdd",
        title = "Add a thread to a room",
        description = "Add an existing, unarchived top-level thread (find its session_id with ThreadList) to a room this thread belongs to, only when the user asks. The room keeps its host, its members' settings, its limit of six members and each thread's permissions. A thread already in the room is left as it is (added: false). It does not create rooms, personas or threads, and does not join the calling thread.",
        output_schema = output::room_add(),
        annotations(
            title = "Add a thread to a room",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn room_add(&self, Parameters(args): Parameters<params::RoomAdd>) -> Outcome {
        let args = args?;
        let request = pb::RoomAddRequest {
            room: args.room.unwrap_or_default(),
            session_id: args.session_id.unwrap_or_default(),
        };
        let added = self.threads(&request).await?.room_add(request).await.map_err(refused)?.into_inner();
        let summary = if added.added { "added to the room" } else { "already in the room: nothing changed" };
        answer(&added, summary.to_string())
    }

    /// Inside a turn only: Claude Code's permission prompt tool (`--permission-prompt-tool
    /// mcp__kiki__PermissionPrompt`), which asks the home's owner; the owner's answer, in
    /// the shape Claude Code reads.
    #[tool(
        name = "PermissionPrompt",
        title = "Ask the owner for a permission",
        description = "Claude Code's permission prompts, answered by the home's owner: asks to use `tool_name` with `input`, files an attention event the owner answers with `kiki approve ID` or `kiki deny ID`, and returns Claude Code's {\"behavior\": \"allow\"|\"deny\", …} once answered (denied if nobody answers within the home's permission_timeout).",
        annotations(
            title = "Ask the owner for a permission",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn permission_prompt(
        &self,
        Parameters(args): Parameters<params::PermissionPrompt>,
        context: RequestContext<RoleServer>,
    ) -> Outcome {
        let args = args?;
        let input = args.input.unwrap_or_else(|| Value::Object(JsonObject::new()));
        let text = input.to_string();
        let chars = text.chars().count();
        if chars > limits::TOOL_INPUT_MAX_CHARS {
            let max = limits::TOOL_INPUT_MAX_CHARS;
            return Err(Refused::parameter(
                "input",
                format!("must be at most {max} characters, got {chars}"),
            ));
        }
        let request = pb::PermissionAskRequest { tool: args.tool_name.unwrap_or_default(), input: text };
        // The owner may take minutes: its place in `kiki mcp` goes to other calls.
        self.answers.park(&context.id);
        let answer =
            self.threads(&request).await?.permission_ask(request).await.map_err(refused)?.into_inner();
        let behavior = if answer.allowed {
            json!({"behavior": "allow", "updatedInput": input})
        } else {
            json!({"behavior": "deny", "message": format!("{} ({})", answer.reason, answer.request_id)})
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(behavior.to_string())]))
    }
}

/// Waits for `call`, saying it still waits every [`PROGRESS_EVERY`] when the call has a
/// progress token (`total`: the most it will wait, the total a client can show). A
/// cancelled call is dropped, which resets its stream: kikid's parked wait ends with it.
async fn with_progress<T>(
    call: impl Future<Output = T>,
    context: &RequestContext<RoleServer>,
    total: f64,
) -> Result<T, Refused> {
    tokio::pin!(call);
    let progress = context.meta.get_progress_token();
    let started = Instant::now();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        tokio::select! {
            answer = &mut call => return Ok(answer),
            () = context.ct.cancelled() => return Err(Refused("cancelled: the wait was cancelled".into())),
            _ = ticks.tick(), if progress.is_some() => {
                if let Some(token) = &progress {
                    let elapsed = started.elapsed().as_millis() as f64;
                    let note = ProgressNotificationParam::new(token.clone(), elapsed)
                        .with_total(total)
                        .with_message("waiting for the threads' activity");
                    // A client gone away ends the call through its cancellation.
                    let _ = context.peer.notify_progress(note).await;
                }
            }
        }
    }
}

/// What each tool answers: kikid's answer as JSON (`structuredContent`), described as far
/// as agents need it.
mod output {
    use super::*;

    fn object(value: Value) -> Arc<JsonObject> {
        match value {
            Value::Object(map) => Arc::new(map),
            _ => Arc::new(JsonObject::new()),
        }
    }

    fn nullable_string(description: &str) -> Value {
        json!({"type": ["string", "null"], "description": description})
    }

    fn thread() -> Value {
        json!({"type": "object", "description": "A thread: id, workspace_id, cwd, title, profile, created_at, updated_at, archived, enabled, state (idle|running), host_id.", "properties": {
            "id": {"type": "string"}, "workspace_id": {"type": "string"}, "cwd": {"type": "string"},
            "title": {"type": "string"}, "profile": {"type": "string"}, "state": {"type": "string"},
            "host_id": {"type": "string"}, "created_at": {"type": "string"}, "updated_at": {"type": "string"}
        }})
    }

    pub fn thread_create() -> Arc<JsonObject> {
        object(
            json!({"type": "object", "required": ["id", "title", "cwd", "profile", "prompt_started"], "properties": {
                "id": {"type": "string"}, "title": {"type": "string"}, "cwd": {"type": "string"},
                "profile": {"type": "string"}, "prompt_started": {"type": "boolean"}, "workspace_id": {"type": "string"}
            }}),
        )
    }

    pub fn thread_list() -> Arc<JsonObject> {
        object(json!({"type": "object", "required": ["threads"], "properties": {
            "threads": {"type": "array", "items": thread()},
            "next_cursor": nullable_string("Pass as `cursor` for the next page; null when there is none.")
        }}))
    }

    pub fn thread_read() -> Arc<JsonObject> {
        object(json!({"type": "object", "properties": {
            "turns": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "seq": {"type": "integer"}, "status": {"type": "string"},
                "input": {"type": "string"}, "output": {"type": "string"},
                "content_refs": {"type": "array"}, "inputs": {"type": "array"}
            }}},
            "next_cursor": nullable_string("Pass as `cursor` for the next page; null when there is none."),
            "segment": {"type": ["object", "null"], "description": "With content_ref: a chunk of the field, and `next` to continue."},
            "thread": {"type": ["object", "null"]},
            "coverage": {"type": ["object", "null"]}
        }}))
    }

    pub fn thread_send() -> Arc<JsonObject> {
        object(json!({"type": "object", "required": ["message_id", "status"], "properties": {
            "message_id": {"type": "string"},
            "status": {"type": "string", "enum": ["delivered", "pending", "undeliverable"]},
            "replayed": {"type": "boolean", "description": "An earlier send with this key answered."},
            "reason": {"type": "string"},
            "idempotency_key": {"type": "string"},
            "room_seq": {"type": "integer"},
            "woke": {"type": "array", "items": {"type": "string"}}
        }}))
    }

    pub fn thread_wait() -> Arc<JsonObject> {
        object(json!({"type": "object", "required": ["results", "timed_out"], "properties": {
            "results": {"type": "array", "items": {"type": "object", "properties": {
                "target": {"type": ["object", "null"]},
                "events": {"type": "array", "items": {"type": "object", "properties": {
                    "seq": {"type": "integer"}, "kind": {"type": "string"}, "at": {"type": "string"},
                    "turn_id": {"type": "string"}, "reason": {"type": "string"}, "message_id": {"type": "string"}
                }}},
                "cursor": {"type": "string", "description": "Pass back as this target's cursor."},
                "home_id": {"type": "string"}
            }}},
            "timed_out": {"type": "boolean"}
        }}))
    }

    pub fn room_read() -> Arc<JsonObject> {
        object(json!({"type": "object", "properties": {
            "room": {"type": "string"}, "name": {"type": "string"}, "host": {"type": "string"},
            "members": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "role": {"type": "string"}, "kind": {"type": "string"}
            }}},
            "paused": {"type": "boolean"}, "archived": {"type": "boolean"},
            "entries": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "seq": {"type": "integer"}, "author": {"type": "string"},
                "content": {"type": "string"}, "mentions": {"type": "array"}, "at": {"type": "string"}
            }}},
            "next_cursor": nullable_string("Pass as `after_id` for what comes next.")
        }}))
    }

    pub fn room_add() -> Arc<JsonObject> {
        object(json!({"type": "object", "required": ["added"], "properties": {
            "added": {"type": "boolean", "description": "False when the thread was already in the room."}
        }}))
    }
}

#[cfg(test)]
mod tests {
    use super::super::arguments::over_long;
    use super::super::skim;
    use super::*;

    fn argument(name: &str, bytes: usize, chars: Option<usize>) -> skim::Argument {
        skim::Argument { name: name.into(), bytes, chars }
    }

    /// The error an over-long call to `tool` gets, if any.
    fn over(tool: &str, arguments: &[skim::Argument]) -> Option<String> {
        let tools = all();
        over_long(tool, tools.iter().find(|t| t.name == tool).map(|t| &*t.input_schema), arguments)
    }

    #[test]
    fn an_over_long_call_gets_the_error_it_would_get_whole() {
        let key = argument("idempotency_key", 3, Some(1));
        let content = argument("content", 5 << 20, Some(5 << 20));
        assert_eq!(
            over("ThreadSend", &[argument("session_id", 6, Some(4)), content.clone(), key]).as_deref(),
            Some("invalid_argument: content: must be at most 100000 characters, got 5242880")
        );
        // A room post's content has the room's limit.
        assert_eq!(
            over("ThreadSend", &[argument("room", 10, Some(8)), content.clone()]).as_deref(),
            Some("invalid_argument: content: must be at most 20000 characters, got 5242880")
        );
        assert!(
            over("ThreadRead", std::slice::from_ref(&content))
                .is_some_and(|s| s.starts_with("invalid_argument: content: not a parameter"))
        );
        assert!(over("Nope", &[]).is_some_and(|s| s.starts_with("not_found: no tool named \"Nope\"")));
        // Nothing over a length limit: none of these (the transport names the request's size).
        assert_eq!(over("ThreadSend", &[argument("mentions", 5 << 20, None)]), None);
        // Claude Code's permission prompt may carry arguments kiki does not read.
        let said = over("PermissionPrompt", &[argument("input", 5 << 20, None), argument("extra", 2, None)]);
        assert_eq!(said, None);
        let said = over("PermissionPrompt", &[argument("tool_name", 300, Some(300))]);
        assert_eq!(
            said.as_deref(),
            Some("invalid_argument: tool_name: must be at most 200 characters, got 300")
        );
    }

    #[test]
    fn the_tools_are_listed_in_order_and_the_permission_prompt_only_inside_a_turn() {
        let names =
            |in_turn| listed(&router(in_turn)).into_iter().map(|t| t.name.to_string()).collect::<Vec<_>>();
        let seven =
            ["ThreadCreate", "ThreadList", "ThreadRead", "ThreadSend", "ThreadWait", "RoomRead", "RoomAdd"];
        assert_eq!(names(false), seven);
        assert_eq!(names(true)[..7], seven);
        assert_eq!(names(true)[7], "PermissionPrompt");
    }
}
