//! What an executor gets for one turn and what it gives back, shared by every executor:
//! the turn's input and environment, its live progress, the agent's report (session, usage)
//! and how a turn fails; kiki's MCP server as the agents' configurations name it.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use kiki_proto::agents;
use tokio_util::sync::CancellationToken;

use super::agent::Agent;
use super::desk;
use crate::store::{InputRecord, PartKind, TurnUsage};

/// Told about each agent process of a turn once it runs, before it gets any input. An error
/// stops the agent before it gets any: the turn fails and its messages are not delivered.
pub type OnAgentStart<'a> = Box<
    dyn Fn(Option<Agent>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> + Send + Sync + 'a,
>;

/// What an executor gets for one turn.
pub struct TurnInput<'a> {
    /// The turn's items, in order.
    pub items: &'a [InputRecord],
    /// The same items rendered as one text (see [`render`]); `exec` writes it to stdin.
    pub rendered: &'a str,
    pub cwd: &'a Path,
    /// `KIKI_HOME`, `KIKI_THREAD_ID`, `KIKI_TOKEN`.
    pub env: Vec<(&'static str, String)>,
    pub max_output_bytes: usize,
    /// The runner records the agent with its turn (see [`agent`]); awaited before the
    /// agent gets its input.
    pub on_agent_start: Option<OnAgentStart<'a>>,
    /// The agent's own session to continue (`claude`), from the thread's earlier turns or
    /// the session it was created from.
    pub agent_session: Option<String>,
    /// kiki's MCP server, which the session agents get in their MCP configuration.
    pub mcp: McpServer,
    /// Where a running turn's progress goes as it happens (`claude`, `codex`, `acp`).
    pub live: Option<LiveSink>,
    /// Where the agent's permission requests and mid-turn input go (`codex`, `acp`).
    pub desk: Option<desk::TurnDesk>,
    /// Cancelled when the owner stops the turn (`kiki thread stop`): the executor interrupts
    /// its agent as the agent's protocol allows (Codex `turn/interrupt`, ACP
    /// `session/cancel`, else its process group: SIGTERM, then SIGKILL after
    /// [`STOP_GRACE`]) and returns once the agent has ended the turn.
    pub stop: CancellationToken,
}

/// How long an agent asked to stop has to end its turn before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a running turn shows as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// The agent named its session (kept at once: a kikid killed mid-turn does not lose it).
    Session(String),
    Part(PartKind, String),
}

/// Unbounded, but its backlog is bounded by what the agent may write (`[turns]
/// max_output_bytes`): each part is cut to [`PART_MAX_CHARS`] before it is sent.
pub type LiveSink = tokio::sync::mpsc::UnboundedSender<Live>;

/// How much of one part (a text, a tool call or result) a turn keeps.
pub const PART_MAX_CHARS: usize = 16_384;

/// What an agent said about its turn besides its output, whether the turn completed or not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentReport {
    /// The agent's own session id, to resume at the next turn.
    pub session: Option<String>,
    pub usage: Option<TurnUsage>,
    /// The session the turn was to resume is gone at the agent.
    pub lost_session: bool,
}

/// A turn that did not complete: what it printed before failing, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnFailure {
    pub output: String,
    pub error: String,
    /// False when the agent never got the input (no profile, the command could not start):
    /// the turn's messages were then not delivered after all.
    pub agent_started: bool,
}

impl TurnFailure {
    /// A failure before the agent received its input.
    pub fn before_agent(error: String) -> Self {
        Self { output: String::new(), error, agent_started: false }
    }
}

/// kiki's MCP server (`kiki mcp`) as the turn's thread: what each agent's MCP configuration
/// names, in its own shape. Its `env` is given explicitly: agents may start MCP servers with
/// a filtered environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    pub command: String,
    pub env: Vec<(String, String)>,
}

impl McpServer {
    /// `kiki` is looked for beside `kikid` (or one directory up, where cargo puts test
    /// binaries), else on the PATH.
    pub fn kiki(env: &[(&str, String)]) -> Self {
        let beside = std::env::current_exe().ok().and_then(|exe| {
            exe.ancestors().skip(1).take(2).map(|dir| dir.join("kiki")).find(|kiki| kiki.is_file())
        });
        let command = beside.map_or_else(|| "kiki".to_string(), |path| path.display().to_string());
        Self { command, env: env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect() }
    }

    /// Its entry as `agent` takes it (`kiki_proto::agents`), with the turn's values.
    pub fn entry(&self, agent: agents::Agent) -> serde_json::Value {
        agents::entry(agent, &self.command, &agents::MCP_ARGS, agents::Env::Given(&self.env))
    }
}

/// Sends `event` to a follower, a part cut to [`PART_MAX_CHARS`].
pub(super) fn say(live: Option<&LiveSink>, event: Live) {
    if let Some(live) = live {
        let _ = live.send(match event {
            Live::Part(kind, text) => Live::Part(kind, text.chars().take(PART_MAX_CHARS).collect()),
            session => session,
        });
    }
}

/// Why a turn failed whose agent no longer has the session it was to continue.
pub(super) fn lost_session(session: &str, agent: &str, detail: &str) -> String {
    format!(
        "the agent's session {session} is gone ({agent}: {}); the thread was not started afresh — \
         create a new thread, or one with --resume-agent-session",
        detail.trim()
    )
}
