//! Executors run one turn of a thread's agent: `echo` (built-in, deterministic), `exec`
//! (any agent CLI, one process per turn), or one of the session executors, which continue
//! the agent's own session turn after turn: `claude` (Claude Code's headless mode), `codex`
//! (the Codex app-server) and `acp` (any Agent Client Protocol agent). See
//! docs/design/sessions.md.

mod acp;
pub mod agent;
mod claude;
mod codex;
mod codex_exec;
mod codex_release;
pub mod desk;
mod exec;
mod input;
mod process;
mod rpc;
mod session;
mod turn;

pub use input::render;
pub use turn::{
    AgentReport, Live, LiveSink, McpServer, OnAgentStart, PART_MAX_CHARS, STOP_GRACE, TurnFailure, TurnInput,
};

use crate::config::{ExecutorKind, ProfileConfig};
use crate::store::InputRecord;

/// Runs one turn with `profile`'s executor; `Ok` is the turn's output. What the agent said
/// of its session and usage goes into `report`, also when the turn fails.
pub async fn run(
    profile: &ProfileConfig,
    input: TurnInput<'_>,
    report: &mut AgentReport,
) -> Result<String, TurnFailure> {
    match profile.executor {
        ExecutorKind::Echo => Ok(echo(input.items)),
        ExecutorKind::Exec => exec::run(&profile.command, input).await,
        ExecutorKind::Claude => claude::run(&profile.program(), &profile.allowed_tools, input, report).await,
        ExecutorKind::Codex => codex::run(&profile.program(), &profile.allowed_tools, input, report).await,
        ExecutorKind::Acp => acp::run(&profile.program(), &profile.allowed_tools, input, report).await,
    }
}

/// The `echo` executor: one line `echo: CONTENT` per item (messages without their header).
pub fn echo(items: &[InputRecord]) -> String {
    items.iter().map(|item| format!("echo: {}", item.content)).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InputKind;
    use input::tests::item;

    #[test]
    fn echo_prints_one_line_per_item_without_headers() {
        let items = [item(InputKind::User, "hi"), item(InputKind::Message, "ping")];
        assert_eq!(echo(&items), "echo: hi\necho: ping");
    }
}
