//! The one list of session tools: each tool's name, title, description, argument type (its
//! JSON Schema and its parsing come from it), approval rule and handler, declared once in
//! [`Registry::new`]. The gRPC service, `kiki mcp` and the approval check all read it.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Approval, Output, ToolContext, ToolError};

/// What running a prepared call comes to.
pub type Running = Pin<Box<dyn Future<Output = Result<Output, ToolError>> + Send>>;

/// A call whose arguments were read: whether it must ask first, and how it runs.
pub struct Prepared {
    /// Why the owner must be asked, for a turn's agent (`None`: allowed).
    pub asks: Option<String>,
    pub run: Box<dyn FnOnce(ToolContext) -> Running + Send>,
}

type Prepare = dyn Fn(Value, &Path) -> Result<Prepared, ToolError> + Send + Sync;

/// One session tool.
pub struct Tool {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub read_only: bool,
    pub approval: Approval,
    /// Its arguments' JSON Schema.
    pub schema: Value,
    prepare: Box<Prepare>,
}

impl Tool {
    /// A tool taking arguments `A`: `asks` checks one call's arguments in a workspace before
    /// anything runs or anyone is asked (an error refuses the call), and says why the owner
    /// must be asked (`None`: allowed); `run` runs it.
    pub fn new<A, Asks, Run, Fut>(spec: Spec, asks: Asks, run: Run) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        Asks: Fn(&A, &Path) -> Result<Option<String>, ToolError> + Send + Sync + 'static,
        Run: Fn(ToolContext, A) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<Output, ToolError>> + Send + 'static,
    {
        let schema = serde_json::to_value(schemars::schema_for!(A)).unwrap_or_default();
        let prepare = move |arguments: Value, cwd: &Path| {
            let args: A = serde_path_to_error::deserialize(arguments).map_err(|e| {
                let field = e.path().to_string();
                let field = if field == "." { "arguments".to_string() } else { field };
                ToolError::invalid(field, e.into_inner().to_string())
            })?;
            let asks = asks(&args, cwd)?;
            let run = run.clone();
            Ok(Prepared {
                asks,
                run: Box::new(move |context: ToolContext| Box::pin(run(context, args)) as Running),
            })
        };
        Self {
            name: spec.name,
            title: spec.title,
            description: spec.description,
            read_only: spec.read_only,
            approval: spec.approval,
            schema,
            prepare: Box::new(prepare),
        }
    }

    /// Reads a call's arguments (a JSON object) for a thread working in `cwd`.
    pub fn prepare(&self, arguments: Value, cwd: &Path) -> Result<Prepared, ToolError> {
        (self.prepare)(arguments, cwd)
    }
}

/// What a tool is, apart from its arguments and handler.
pub struct Spec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub read_only: bool,
    pub approval: Approval,
}

/// Every session tool, by name.
pub struct Registry {
    tools: BTreeMap<&'static str, Tool>,
    /// The order ToolList shows them in.
    order: Vec<&'static str>,
}

impl Registry {
    pub fn new(tools: Vec<Tool>) -> Arc<Self> {
        let order = tools.iter().map(|t| t.name).collect();
        Arc::new(Self { tools: tools.into_iter().map(|t| (t.name, t)).collect(), order })
    }

    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    pub fn all(&self) -> impl Iterator<Item = &Tool> {
        self.order.iter().filter_map(|name| self.tools.get(name))
    }
}

/// Asks nothing (read-only tools, and those whose rule is the owner's own call).
pub fn never<A>(_: &A, _: &Path) -> Result<Option<String>, ToolError> {
    Ok(None)
}

/// Asks when `path` (relative ones taken from the workspace) is outside the workspace.
pub fn outside_workspace(path: &str, cwd: &Path) -> Result<Option<String>, ToolError> {
    let full = normalize(&cwd.join(path));
    let outside = !full.starts_with(normalize(cwd));
    Ok(outside.then(|| format!("{} is outside the thread's workspace", full.display())))
}

/// `path` with `.` and `..` resolved lexically, and symlinks of its existing part followed:
/// a `..` or a link does not take a write out of the workspace unasked.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    // The longest existing prefix, resolved; the rest as written.
    let mut existing = out.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return out,
        }
    }
    let mut resolved = existing.canonicalize().unwrap_or(existing);
    resolved.extend(rest.iter().rev());
    resolved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_outside_the_workspace_asks_and_one_inside_does_not() {
        let dir = tempfile::tempdir().expect("workspace");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).expect("workspace");
        let asks = |path: &str| outside_workspace(path, &ws).expect("checked");
        assert_eq!(asks("src/new/file.rs"), None);
        assert_eq!(asks(ws.join("a.txt").to_str().expect("workspace")), None);
        assert!(asks("../escape.txt").is_some());
        assert!(asks("src/../../escape.txt").is_some());
        assert!(asks("/etc/passwd").is_some());
        // A link inside the workspace to a directory outside it does not make a way out.
        std::os::unix::fs::symlink(dir.path(), ws.join("link")).expect("workspace");
        assert!(asks("link/escape.txt").is_some());
    }
}
