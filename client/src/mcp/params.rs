//! Each tool's parameters, declared once as a type: its fields are the parameter names,
//! their doc comments the descriptions an agent reads, their `schemars` attributes the
//! API's limits and defaults (from `kiki_proto::limits`). The input schema `tools/list`
//! shows is made from the type, the arguments are checked against that schema
//! (`arguments.rs`) and then read into the type.

use kiki_proto::{self as pb, limits};
use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::arguments::Refused;

/// The parameters that name a thread anywhere: this home's, or one behind a bridge.
#[derive(Deserialize, JsonSchema)]
pub struct Address {
    /// The thread's id (th_…), as ThreadList returns it.
    pub session_id: Option<String>,
    /// The thread's home: omitted, empty or "local" for this home; else a home id or a bridge's name (the HOST of a HOST/SESSION reference).
    pub host_id: Option<String>,
    /// Optional: the thread's workspace; checked when given.
    pub workspace_id: Option<String>,
    /// Optional bridge selector (a bridge's id or name) for a thread of another home; the same as host_id.
    pub bridge_id: Option<String>,
    /// Optional: another name for bridge_id.
    pub connection_id: Option<String>,
}

impl Address {
    /// Whether any of it is given (`null` is not).
    pub fn given(&self) -> bool {
        [&self.session_id, &self.host_id, &self.workspace_id, &self.bridge_id, &self.connection_id]
            .iter()
            .any(|field| field.is_some())
    }

    /// The thread it names; `prefix` says where in the call (`targets[2].`).
    pub fn thread(self, prefix: &str) -> Result<pb::ThreadRef, Refused> {
        let session_id = self.session_id.unwrap_or_default();
        if session_id.is_empty() {
            return Err(Refused::parameter(
                &format!("{prefix}session_id"),
                "required: the thread's id (th_…), as ThreadList returns it",
            ));
        }
        let host_id = home(self.host_id, self.bridge_id, self.connection_id, prefix)?.unwrap_or_default();
        let workspace_id = self.workspace_id.unwrap_or_default();
        // A HOST/SESSION reference given whole as the session id, as the CLI takes it.
        if host_id.is_empty() && session_id.contains('/') {
            let reference = pb::parse_ref(&session_id)
                .map_err(|e| Refused::parameter(&format!("{prefix}session_id"), e))?;
            return Ok(pb::ThreadRef { workspace_id, ..reference });
        }
        Ok(pb::ThreadRef { host_id, workspace_id, session_id })
    }
}

/// The home named by host_id, bridge_id or connection_id (empty is none): they are one
/// thing, so two that differ are refused rather than one silently winning.
pub fn home(
    host_id: Option<String>,
    bridge_id: Option<String>,
    connection_id: Option<String>,
    prefix: &str,
) -> Result<Option<String>, Refused> {
    let mut home: Option<(String, &str)> = None;
    for (name, value) in [("host_id", host_id), ("bridge_id", bridge_id), ("connection_id", connection_id)] {
        let Some(value) = value.filter(|v| !v.is_empty()) else { continue };
        match &home {
            Some((seen, by)) if *seen != value => {
                return Err(Refused::parameter(
                    &format!("{prefix}{name}"),
                    format!("{value:?} names another home than {by} {seen:?}; give one"),
                ));
            }
            _ => home = Some((value, name)),
        }
    }
    Ok(home.map(|(value, _)| value))
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadCreate {
    /// Absolute path of an existing directory the thread works in.
    pub cwd: Option<String>,
    /// An enabled profile's name; omitted: the home's default.
    pub profile: Option<String>,
    /// The first user message (at most 100,000 characters); starts a turn at once.
    #[schemars(length(max = limits::PROMPT_MAX_CHARS))]
    pub prompt: Option<String>,
    /// The thread's title.
    #[schemars(length(max = limits::TITLE_MAX_CHARS))]
    pub title: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadList {
    /// List the threads of the home behind this bridge (its id or name).
    pub bridge_id: Option<String>,
    /// Another name for bridge_id.
    pub connection_id: Option<String>,
    /// Another way to select a bridge: its peer's home id or the bridge's name.
    pub host_id: Option<String>,
    /// Only threads of this workspace.
    pub workspace_id: Option<String>,
    #[schemars(range(min = 1, max = limits::PAGE_LIMIT_MAX), extend("default" = limits::LIST_LIMIT_DEFAULT))]
    pub limit: Option<u32>,
    /// The next_cursor of the previous page.
    pub cursor: Option<String>,
}

// Flattened parameters cannot deny unknown fields through serde: the schema says it, and
// `arguments.rs` refuses them from the schema.
#[derive(Deserialize, JsonSchema)]
#[schemars(extend("additionalProperties" = false, "required" = ["session_id"]))]
pub struct ThreadRead {
    #[serde(flatten)]
    pub address: Address,
    #[schemars(range(min = 1, max = limits::PAGE_LIMIT_MAX), extend("default" = limits::READ_LIMIT_DEFAULT))]
    pub limit: Option<u32>,
    /// next_cursor of the previous page, or segment.next of a content_ref read.
    pub cursor: Option<String>,
    /// A content_refs entry of a turn: read that whole field in segments.
    pub content_ref: Option<String>,
}

/// Two forms: to a thread (an address and a key), or a room post.
#[derive(Deserialize, JsonSchema)]
#[schemars(extend(
    "additionalProperties" = false,
    // A room post's content has the room's limit.
    "if" = {"required": ["room"], "properties": {"room": {"type": "string"}}},
    "then" = {"properties": {"content": {"maxLength": limits::ROOM_CONTENT_MAX_CHARS}}}
))]
pub struct ThreadSend {
    #[serde(flatten)]
    pub address: Address,
    /// Room form: the room's id (room_…) instead of a session_id.
    pub room: Option<String>,
    /// The message: at most 100,000 characters to a thread, 20,000 to a room.
    #[schemars(required, length(min = 1, max = limits::CONTENT_MAX_CHARS))]
    pub content: Option<String>,
    /// Thread form: required; the same key for a retry of the same message only. Room form: optional.
    #[schemars(length(max = limits::KEY_MAX_CHARS))]
    pub idempotency_key: Option<String>,
    /// Room form: roster ids to wake.
    pub mentions: Option<Vec<String>>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadWait {
    #[schemars(required, length(min = 1, max = limits::WAIT_TARGETS_MAX))]
    pub targets: Option<Vec<Target>>,
    #[schemars(range(max = limits::WAIT_TIMEOUT_MAX_MS), extend("default" = limits::WAIT_TIMEOUT_DEFAULT_MS))]
    pub timeout_ms: Option<u32>,
}

/// One of ThreadWait's threads, with its cursor.
// Its title names it in errors: "not a target's field".
#[derive(Deserialize, JsonSchema)]
#[schemars(inline, title = "target", extend("additionalProperties" = false, "required" = ["session_id"]))]
pub struct Target {
    #[serde(flatten)]
    pub address: Address,
    /// This target's cursor from the previous ThreadWait.
    pub cursor: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoomRead {
    /// The room's id (room_…).
    #[schemars(required)]
    pub room: Option<String>,
    #[schemars(range(min = 1, max = limits::PAGE_LIMIT_MAX), extend("default" = limits::LIST_LIMIT_DEFAULT))]
    pub limit: Option<u32>,
    /// The next_cursor of the previous read.
    pub after_id: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoomAdd {
    /// The room's id (room_…).
    #[schemars(required)]
    pub room: Option<String>,
    /// The thread to add (th_…, or HOST/th_… for a thread behind a bridge).
    #[schemars(required)]
    pub session_id: Option<String>,
}

/// Claude Code's, which may grow: other names pass (no `additionalProperties: false`).
#[derive(Deserialize, JsonSchema)]
pub struct PermissionPrompt {
    /// The tool the agent wants to use.
    #[schemars(required, length(max = limits::TOOL_MAX_CHARS))]
    pub tool_name: Option<String>,
    /// Its input.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<JsonObject>", transform = no_default)]
    pub input: Option<Value>,
    // Not read by kiki.
    #[serde(rename = "tool_use_id")]
    pub _tool_use_id: Option<String>,
}

/// Absent, `input` is `{}` (not the `null` serde's default would say).
fn no_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

/// A value that is there, even `null` (absent is `None`): a permission prompt's `input`
/// is handed on as it came.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}
