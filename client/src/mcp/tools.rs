//! The seven collaboration tools as MCP sees them: names, titles, descriptions an agent can
//! act on, input and output schemas, and annotations. The parameter names, limits and
//! defaults are the seed's (contract §2 and §7); kikid checks every limit again.

use std::sync::Arc;

use kiki_proto::limits;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// Every tool `kiki mcp` serves, in the order `tools/list` shows them.
pub fn all() -> Vec<Tool> {
    vec![thread_create(), thread_list(), thread_read(), thread_send(), thread_wait(), room_read(), room_add()]
}

/// Inside a turn only: Claude Code's permission prompt tool (`--permission-prompt-tool
/// mcp__kiki__PermissionPrompt`), which asks the home's owner.
pub fn permission_prompt() -> Tool {
    Tool::new(
        "PermissionPrompt",
        "Claude Code's permission prompts, answered by the home's owner: asks to use `tool_name` with \
         `input`, files an attention event the owner answers with `kiki approve ID` or `kiki deny ID`, \
         and returns Claude Code's {\"behavior\": \"allow\"|\"deny\", …} once answered (denied if \
         nobody answers within the home's permission_timeout).",
        object(json!({"type": "object", "required": ["tool_name"], "properties": {
            "tool_name": {"type": "string", "description": "The tool the agent wants to use."},
            "input": {"type": "object", "description": "Its input."},
            "tool_use_id": {"type": "string"}
        }})),
    )
    .with_title("Ask the owner for a permission")
    .annotate(writing("Ask the owner for a permission", false))
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tool(name: &'static str, title: &str, description: &'static str, input: Value, output: Value) -> Tool {
    Tool::new(name, description, object(input)).with_title(title).with_raw_output_schema(object(output))
}

/// Reads only: never changes a thread, never wakes one.
fn reading(title: &str) -> ToolAnnotations {
    ToolAnnotations::with_title(title).read_only(true).destructive(false).idempotent(true).open_world(false)
}

/// Writes, but nothing it does is lost or overwritten.
fn writing(title: &str, idempotent: bool) -> ToolAnnotations {
    ToolAnnotations::with_title(title)
        .read_only(false)
        .destructive(false)
        .idempotent(idempotent)
        .open_world(false)
}

/// The properties that name a thread anywhere: this home's, or one behind a bridge.
fn addressing() -> serde_json::Map<String, Value> {
    let mut properties = serde_json::Map::new();
    properties.insert(
        "session_id".into(),
        json!({"type": "string", "description": "The thread's id (th_…), as ThreadList returns it."}),
    );
    properties.insert(
        "host_id".into(),
        json!({"type": "string", "description": "The thread's home: omitted, empty or \"local\" for this home; else a home id or a bridge's name (the HOST of a HOST/SESSION reference)."}),
    );
    properties.insert(
        "workspace_id".into(),
        json!({"type": "string", "description": "Optional: the thread's workspace; checked when given."}),
    );
    properties.insert(
        "bridge_id".into(),
        json!({"type": "string", "description": "Optional bridge selector (a bridge's id or name) for a thread of another home; the same as host_id."}),
    );
    properties.insert(
        "connection_id".into(),
        json!({"type": "string", "description": "Optional: another name for bridge_id."}),
    );
    properties
}

/// Properties made into a tool's parameters: an object with these, no others.
fn params(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "additionalProperties": false, "required": required, "properties": properties})
}

fn with(mut properties: serde_json::Map<String, Value>, more: Value) -> Value {
    if let Value::Object(more) = more {
        properties.extend(more);
    }
    Value::Object(properties)
}

const THREAD_OUT: &str = "A thread: id, workspace_id, cwd, title, profile, created_at, updated_at, archived, enabled, state (idle|running), host_id.";

fn thread_schema() -> Value {
    json!({"type": "object", "description": THREAD_OUT, "properties": {
        "id": {"type": "string"}, "workspace_id": {"type": "string"}, "cwd": {"type": "string"},
        "title": {"type": "string"}, "profile": {"type": "string"}, "state": {"type": "string"},
        "host_id": {"type": "string"}, "created_at": {"type": "string"}, "updated_at": {"type": "string"}
    }})
}

fn nullable_string(description: &str) -> Value {
    json!({"type": ["string", "null"], "description": description})
}

fn thread_create() -> Tool {
    tool(
        "ThreadCreate",
        "Create a thread",
        "Open a new, independent top-level thread (an agent session) in this home. Use it only when the user explicitly asks for a new thread or session, not for routine delegation. `cwd` must be an absolute path to an existing directory (omitted: this session's workspace root). `profile` names an enabled profile (omitted: the default). `prompt` (at most 100,000 characters) becomes the thread's first user message and starts its turn at once; without it the thread stays empty. `title` overrides the default (with a prompt and no title, the prompt's first line, cut to 80 characters). Returns id, title, cwd, profile and prompt_started; continue the conversation with ThreadSend and ThreadWait.",
        json!({"type": "object", "additionalProperties": false, "properties": {
            "cwd": {"type": "string", "description": "Absolute path of an existing directory the thread works in."},
            "profile": {"type": "string", "description": "An enabled profile's name; omitted: the home's default."},
            "prompt": {"type": "string", "maxLength": 100000, "description": "The first user message (at most 100,000 characters); starts a turn at once."},
            "title": {"type": "string", "description": "The thread's title."}
        }}),
        json!({"type": "object", "required": ["id", "title", "cwd", "profile", "prompt_started"], "properties": {
            "id": {"type": "string"}, "title": {"type": "string"}, "cwd": {"type": "string"},
            "profile": {"type": "string"}, "prompt_started": {"type": "boolean"}, "workspace_id": {"type": "string"}
        }}),
    )
    .annotate(writing("Create a thread", false))
}

fn thread_list() -> Tool {
    tool(
        "ThreadList",
        "List threads",
        "List enabled, unarchived threads, newest first: this home's, or with a bridge selector (bridge_id, connection_id or host_id) only the approved scope of the home behind that bridge (needs its `read` permission). Optionally filter by workspace_id. `limit` 1–100, default 50; pass the returned next_cursor as `cursor` for the next page (absent or null: no more). Each thread's `id` is the session_id the other tools take.",
        json!({"type": "object", "additionalProperties": false, "properties": {
            "bridge_id": {"type": "string", "description": "List the threads of the home behind this bridge (its id or name)."},
            "connection_id": {"type": "string", "description": "Another name for bridge_id."},
            "host_id": {"type": "string", "description": "Another way to select a bridge: its peer's home id or the bridge's name."},
            "workspace_id": {"type": "string", "description": "Only threads of this workspace."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
            "cursor": {"type": "string", "description": "The next_cursor of the previous page."}
        }}),
        json!({"type": "object", "required": ["threads"], "properties": {
            "threads": {"type": "array", "items": thread_schema()},
            "next_cursor": nullable_string("Pass as `cursor` for the next page; null when there is none.")
        }}),
    )
    .annotate(reading("List threads"))
}

fn thread_read() -> Tool {
    tool(
        "ThreadRead",
        "Read a thread's turns",
        "Read a thread's completed turns (input and output) in chronological order, without waking or resuming it. `limit` 1–100, default 20; pass next_cursor back as `cursor` for the next page. A turn's input or output over 16,384 UTF-16 units keeps a preview and lists a `content_refs` entry: read it whole by passing that content_ref (with the same thread), then follow `segment.next` as `cursor` until it is absent. If a cursor is refused as no longer valid (the history was rewritten), restart from the first page without a cursor. Across a bridge it needs `read` and returns the same page shape with coverage.",
        params(&["session_id"], with(
            addressing(),
            json!({
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                "cursor": {"type": "string", "description": "next_cursor of the previous page, or segment.next of a content_ref read."},
                "content_ref": {"type": "string", "description": "A content_refs entry of a turn: read that whole field in segments."}
            }),
        )),
        json!({"type": "object", "properties": {
            "turns": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "seq": {"type": "integer"}, "status": {"type": "string"},
                "input": {"type": "string"}, "output": {"type": "string"},
                "content_refs": {"type": "array"}, "inputs": {"type": "array"}
            }}},
            "next_cursor": nullable_string("Pass as `cursor` for the next page; null when there is none."),
            "segment": {"type": ["object", "null"], "description": "With content_ref: a chunk of the field, and `next` to continue."},
            "thread": {"type": ["object", "null"]},
            "coverage": {"type": ["object", "null"]}
        }}),
    )
    .annotate(reading("Read a thread's turns"))
}

fn thread_send() -> Tool {
    tool(
        "ThreadSend",
        "Send a message to a thread or a room",
        "Two forms. Thread form {session_id (+ host_id/bridge_id for another home), content, idempotency_key}: durably saves an explicit message to that thread, with this thread as its verified source (there is no source parameter). content: non-empty, at most 100,000 characters; idempotency_key: at most 256 characters — reuse a key only to retry the same message (the same key and content return the original message_id; the same key with other content is refused). Answers `delivered` once the message is in the target agent's prompt (not a reply), or `pending` when delivery is slow: it goes on in the background, and a cross-home send retries with its key for up to 15 minutes. A bridge needs `send`, plus `wake` to wake the target. Room form {room, content, mentions?}: posts to a room this thread belongs to (content at most 20,000 characters); mentions are roster ids (thread or persona ids, see RoomRead) and wake only those members; the key defaults to this tool call's id. Room `delivered` means the room's log has the post. Text you write in your own answer stays in your thread; ThreadSend is how you speak to others.",
        params(&["content"], with(
            addressing(),
            json!({
                "room": {"type": "string", "description": "Room form: the room's id (room_…) instead of a session_id."},
                "content": {"type": "string", "minLength": 1, "description": "The message: at most 100,000 characters to a thread, 20,000 to a room."},
                "idempotency_key": {"type": "string", "maxLength": 256, "description": "Thread form: required; the same key for a retry of the same message only. Room form: optional."},
                "mentions": {"type": "array", "items": {"type": "string"}, "description": "Room form: roster ids to wake."}
            }),
        )),
        json!({"type": "object", "required": ["message_id", "status"], "properties": {
            "message_id": {"type": "string"},
            "status": {"type": "string", "enum": ["delivered", "pending", "undeliverable"]},
            "replayed": {"type": "boolean", "description": "An earlier send with this key answered."},
            "reason": {"type": "string"},
            "idempotency_key": {"type": "string"},
            "room_seq": {"type": "integer"},
            "woke": {"type": "array", "items": {"type": "string"}}
        }}),
    )
    .annotate(writing("Send a message", true))
}

fn thread_wait() -> Tool {
    tool(
        "ThreadWait",
        "Wait for threads' activity",
        "Wait for terminal (a turn ended), attention (an agent asks for its user), lifecycle or undeliverable-message events on 1–8 distinct threads of this home or behind approved bridges (a bridge needs `wait`; waiting never wakes a thread). timeout_ms 0–60,000, default 30,000; 0 checks once. Answers as soon as any target has an event, else at the timeout with timed_out: true (a little before a client's own 60 s limit, so it always answers). Each result has a `cursor`: pass it as that target's `cursor` in the next call, or the same events come back. Cancel the tool call to stop waiting.",
        json!({"type": "object", "additionalProperties": false, "required": ["targets"], "properties": {
            "targets": {"type": "array", "minItems": 1, "maxItems": 8, "items": {
                "type": "object", "additionalProperties": false, "required": ["session_id"],
                "properties": with(addressing(), json!({
                    "cursor": {"type": "string", "description": "This target's cursor from the previous ThreadWait."}
                }))
            }},
            "timeout_ms": {"type": "integer", "minimum": 0, "maximum": limits::WAIT_TIMEOUT_MAX_MS, "default": limits::WAIT_TIMEOUT_DEFAULT_MS}
        }}),
        json!({"type": "object", "required": ["results", "timed_out"], "properties": {
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
        }}),
    )
    .annotate(reading("Wait for threads' activity"))
}

fn room_read() -> Tool {
    tool(
        "RoomRead",
        "Read a room",
        "Read a room this thread belongs to: its host, member roster (each roster `id` is what mentions take), pause/archive state, and its saved log, oldest first. limit 1–100, default 50; pass the returned next_cursor as `after_id` for what came after (empty entries mean nothing new, not that members left). Reading wakes nobody and changes nothing. Takes a room id of this home, not a bridge selector.",
        json!({"type": "object", "additionalProperties": false, "required": ["room"], "properties": {
            "room": {"type": "string", "description": "The room's id (room_…)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
            "after_id": {"type": "string", "description": "The next_cursor of the previous read."}
        }}),
        json!({"type": "object", "properties": {
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
        }}),
    )
    .annotate(reading("Read a room"))
}

fn room_add() -> Tool {
    tool(
        "RoomAdd",
        "Add a thread to a room",
        "Add an existing, unarchived top-level thread (find its session_id with ThreadList) to a room this thread belongs to, only when the user asks. The room keeps its host, its members' settings, its limit of six members and each thread's permissions. A thread already in the room is left as it is (added: false). It does not create rooms, personas or threads, and does not join the calling thread.",
        json!({"type": "object", "additionalProperties": false, "required": ["room", "session_id"], "properties": {
            "room": {"type": "string", "description": "The room's id (room_…)."},
            "session_id": {"type": "string", "description": "The thread to add (th_…, or HOST/th_… for a thread behind a bridge)."}
        }}),
        json!({"type": "object", "required": ["added"], "properties": {
            "added": {"type": "boolean", "description": "False when the thread was already in the room."}
        }}),
    )
    .annotate(writing("Add a thread to a room", true))
}
