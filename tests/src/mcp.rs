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

/// `kiki --home HOME mcp` driven line by line by a raw JSON-RPC client, for what an SDK
/// client never sends (lines that are not JSON, over-long ones) or never does (stop reading
/// its answers).
pub struct Raw {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
}

impl Raw {
    /// Starts the server and completes the handshake.
    pub async fn start(kiki: &Path, home: &Path) -> anyhow::Result<Raw> {
        let mut child = tokio::process::Command::new(kiki)
            .arg("--home")
            .arg(home)
            .arg("mcp")
            .env_remove("KIKI_TOKEN")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(tokio::io::BufReader::new);
        let Some(stdout) = stdout else { anyhow::bail!("no stdout") };
        let mut raw = Raw { child, stdin, stdout };
        raw.send(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        )
        .await?;
        let answer = raw.answer().await?;
        anyhow::ensure!(answer["result"]["serverInfo"]["name"] == "kiki", "no handshake: {answer}");
        raw.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await?;
        Ok(raw)
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Writes `line` and its newline.
    pub async fn send(&mut self, line: &[u8]) -> anyhow::Result<()> {
        use tokio::io::AsyncWriteExt;
        let Some(stdin) = self.stdin.as_mut() else { anyhow::bail!("stdin was taken") };
        stdin.write_all(line).await?;
        stdin.write_all(b"\n").await?;
        Ok(stdin.flush().await?)
    }

    /// stdin, to write from elsewhere (a task that may block while nobody reads).
    pub fn take_stdin(&mut self) -> Option<tokio::process::ChildStdin> {
        self.stdin.take()
    }

    /// The next line the server writes, as JSON; an error after 20 s without one.
    pub async fn answer(&mut self) -> anyhow::Result<Value> {
        use tokio::io::AsyncBufReadExt;
        let mut line = String::new();
        let read = tokio::time::timeout(std::time::Duration::from_secs(20), self.stdout.read_line(&mut line));
        anyhow::ensure!(read.await?? > 0, "kiki mcp closed stdout");
        Ok(serde_json::from_str(&line)?)
    }
}
