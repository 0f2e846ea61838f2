//! What a running turn's agent asks of its home through its executor, not through `kiki mcp`:
//! the owner's permission to use a tool (Codex's approvals, ACP's
//! `session/request_permission`), and the messages that arrive while it runs (Codex's turn
//! steering). The mailbox answers, exactly as it answers `kiki mcp`'s PermissionAsk and
//! ThreadInbox for the same turn.

use std::sync::Weak;
use std::time::Duration;

use async_trait::async_trait;

use crate::store::InputRecord;

/// The owner's answer to an agent's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    pub allowed: bool,
    pub reason: String,
}

/// The home's side (the mailbox), for any turn.
#[async_trait]
pub trait Desk: Send + Sync {
    /// Files the request with an `attention` event and waits for `kiki approve` / `deny`, or
    /// its expiry.
    async fn ask_permission(
        &self,
        thread_id: &str,
        turn_id: &str,
        tool: &str,
        input: &str,
    ) -> Result<Permission, String>;

    /// Puts the queued messages `taken` (by message or room entry id) into the running turn,
    /// counted `delivered`; then the thread's queued input that would wake it, waiting up to
    /// `timeout` for some. Nothing once the turn has ended.
    async fn take_input(
        &self,
        thread_id: &str,
        turn_id: &str,
        taken: Vec<String>,
        timeout: Duration,
    ) -> Result<Vec<InputRecord>, String>;
}

/// One turn's desk. Held weakly: a home that is stopping answers nothing.
#[derive(Clone)]
pub struct TurnDesk {
    desk: Weak<dyn Desk>,
    thread_id: String,
    turn_id: String,
}

impl TurnDesk {
    pub fn new(desk: Weak<dyn Desk>, thread_id: String, turn_id: String) -> Self {
        Self { desk, thread_id, turn_id }
    }

    /// The owner's answer; a home that cannot ask denies.
    pub async fn ask_permission(&self, tool: &str, input: &str) -> Permission {
        let Some(desk) = self.desk.upgrade() else {
            return Permission { allowed: false, reason: "kikid is stopping".into() };
        };
        desk.ask_permission(&self.thread_id, &self.turn_id, tool, input)
            .await
            .unwrap_or_else(|reason| Permission { allowed: false, reason })
    }

    /// See [`Desk::take_input`]. An error or a stopping home gives nothing, after a pause
    /// (callers poll in a loop).
    pub async fn take_input(&self, taken: Vec<String>, timeout: Duration) -> Vec<InputRecord> {
        let taken = match self.desk.upgrade() {
            Some(desk) => desk.take_input(&self.thread_id, &self.turn_id, taken, timeout).await,
            None => Err("kikid is stopping".into()),
        };
        match taken {
            Ok(items) => items,
            Err(e) => {
                tracing::warn!(error = %e, "cannot take input into the running turn");
                tokio::time::sleep(timeout.min(Duration::from_secs(1))).await;
                Vec::new()
            }
        }
    }
}
