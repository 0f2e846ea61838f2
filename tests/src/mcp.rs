//! A real MCP client (rmcp's) talking to `kiki mcp` as a child process: what the MCP tests,
//! the MCP bench and the `mcp-agent` an exec turn runs use.

use std::path::Path;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, CustomNotification,
    Implementation, JsonObject, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::mpsc;

/// What the server pushed: a `claude/channel` notification, or a progress note.
#[derive(Debug, Clone)]
pub enum Pushed {
    Channel(Value),
    Progress(ProgressNotificationParam),
}

/// The client side: declares `claude/channel` when asked, and hands on what is pushed.
pub struct Listener {
    channel: bool,
    pushed: mpsc::UnboundedSender<Pushed>,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.channel {
            capabilities.experimental =
                Some([("claude/channel".to_string(), JsonObject::new())].into_iter().collect());
        }
        ClientConfig::new(capabilities, Implementation::new("kiki-tests", "0"))
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _: NotificationContext<RoleClient>,
    ) {
        if notification.method == "notifications/claude/channel" {
            let _ = self.pushed.send(Pushed::Channel(notification.params.unwrap_or_default()));
        }
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        let _ = self.pushed.send(Pushed::Progress(params));
    }
}

pub type Session = RunningService<RoleClient, Listener>;

/// Starts `kiki [--home HOME] mcp EXTRA…` with `env` (and without an inherited
/// `KIKI_TOKEN` unless `env` names one) and completes the handshake.
pub async fn start(
    kiki: &Path,
    home: Option<&Path>,
    extra: &[&str],
    env: &[(&str, &str)],
    channel: bool,
) -> anyhow::Result<(Session, mpsc::UnboundedReceiver<Pushed>)> {
    let mut command = tokio::process::Command::new(kiki);
    if let Some(home) = home {
        command.arg("--home").arg(home);
    }
    command.arg("mcp").args(extra).env_remove("KIKI_TOKEN").envs(env.iter().copied());
    let (pushed, received) = mpsc::unbounded_channel();
    let session = Listener { channel, pushed }.serve(TokioChildProcess::new(command)?).await?;
    Ok((session, received))
}

/// Calls tool `name` with `arguments` (a JSON object).
pub async fn call(session: &Session, name: &str, arguments: Value) -> anyhow::Result<CallToolResult> {
    let Value::Object(arguments) = arguments else { anyhow::bail!("arguments must be an object") };
    let params = CallToolRequestParams::new(name.to_string()).with_arguments(arguments);
    Ok(session.call_tool(params).await?)
}

/// A result's text.
pub fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}
