//! The home's session tools (Read, Write, Edit, Glob, Grep, Bash, the task tools, TodoList,
//! Cron), forwarded as they are: kikid's ToolList gives each one's name, description and
//! JSON Schema, and each call is one ToolCall. Their approval, their limits and their record
//! are kikid's. Inside a turn they act for the turn's thread; outside one, for the thread
//! `kiki mcp --thread` names (without it they are not offered).

use std::sync::Arc;

use kiki_proto as pb;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::arguments::Refused;
use super::calls::{Caller, refused};

/// The session tools of the home this `kiki mcp` talks to.
pub struct SessionTools {
    /// Outside a turn: the thread they act for.
    thread: Option<String>,
    /// kikid's list, read once (kept empty when kikid could not be asked: a home that is not
    /// running offers its collaboration tools only).
    listed: OnceCell<Vec<Tool>>,
}

impl SessionTools {
    pub fn new(thread: Option<String>) -> Self {
        Self { thread, listed: OnceCell::new() }
    }

    /// The tools, as MCP lists them; none outside a turn without `--thread`.
    pub async fn list(&self, caller: &Caller) -> &[Tool] {
        if caller.token.is_none() && self.thread.is_none() {
            return &[];
        }
        self.listed
            .get_or_init(|| async {
                let request = pb::ToolListRequest {};
                let listed = match caller.tools(&request).await {
                    Ok(mut tools) => tools.tool_list(request).await.map_err(refused),
                    Err(refused) => Err(refused),
                };
                match listed {
                    Ok(listed) => listed.into_inner().tools.into_iter().map(as_mcp).collect(),
                    Err(Refused(why)) => {
                        eprintln!("kiki mcp: the home's session tools are not offered: {why}");
                        Vec::new()
                    }
                }
            })
            .await
    }

    /// Whether `name` is one of them.
    pub async fn has(&self, caller: &Caller, name: &str) -> bool {
        self.list(caller).await.iter().any(|tool| tool.name == name)
    }

    /// One call, as kikid answers it: its text, its structured result, an error when the
    /// tool failed or was denied.
    pub async fn call(&self, caller: &Caller, name: &str, arguments: Option<JsonObject>) -> CallToolResult {
        let request = pb::ToolCallRequest {
            name: name.to_string(),
            arguments: Value::Object(arguments.unwrap_or_default()).to_string(),
            thread_id: if caller.token.is_some() {
                String::new()
            } else {
                self.thread.clone().unwrap_or_default()
            },
        };
        let answered = match caller.tools(&request).await {
            Ok(mut tools) => tools.tool_call(request).await.map_err(refused),
            Err(refused) => Err(refused),
        };
        match answered {
            Ok(answer) => {
                let answer = answer.into_inner();
                let ok = answer.outcome == pb::ToolOutcome::Ok as i32;
                let mut result = if ok {
                    CallToolResult::success(vec![ContentBlock::text(answer.text)])
                } else {
                    CallToolResult::error(vec![ContentBlock::text(answer.text)])
                };
                if ok && let Ok(Value::Object(structured)) = serde_json::from_str(&answer.structured) {
                    result.structured_content = Some(Value::Object(structured));
                }
                result
            }
            Err(Refused(why)) => CallToolResult::error(vec![ContentBlock::text(why)]),
        }
    }
}

/// A session tool as MCP lists it.
fn as_mcp(spec: pb::ToolSpec) -> Tool {
    let schema: JsonObject = serde_json::from_str(&spec.input_schema).unwrap_or_default();
    let annotations = ToolAnnotations::with_title(spec.title.clone())
        .read_only(spec.read_only)
        .destructive(!spec.read_only)
        .open_world(false);
    Tool::new(spec.name, spec.description, Arc::new(schema))
        .with_title(spec.title)
        .with_annotations(annotations)
}
