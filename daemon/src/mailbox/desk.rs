//! A running turn's desk (see [`crate::executors::desk`]): an executor's permission
//! requests and mid-turn input take the same paths as `kiki mcp`'s PermissionAsk and
//! ThreadInbox for that turn.

use std::time::Duration;

use async_trait::async_trait;

use super::{PermissionRequests, Waits};
use crate::caller::Caller;
use crate::executors::desk::{Desk, Permission};
use crate::store::InputRecord;
use crate::threads::runner::TurnCaller;

/// What an executor asks of the home during a turn.
pub struct TurnDesk {
    pub waits: Waits,
    pub permissions: PermissionRequests,
}

#[async_trait]
impl Desk for TurnDesk {
    async fn ask_permission(
        &self,
        thread_id: &str,
        turn_id: &str,
        tool: &str,
        input: &str,
    ) -> Result<Permission, String> {
        let caller = Caller::Turn(TurnCaller { thread_id: thread_id.into(), turn_id: turn_id.into() });
        // Agents' tool names and inputs may be longer than a request keeps.
        let tool: String = tool.chars().take(kiki_proto::limits::TOOL_MAX_CHARS).collect();
        let input: String = input.chars().take(kiki_proto::limits::TOOL_INPUT_MAX_CHARS).collect();
        let decision =
            self.permissions.ask_permission(&caller, &tool, &input).await.map_err(|e| e.to_string())?;
        Ok(Permission { allowed: decision.allowed, reason: decision.reason })
    }

    async fn take_input(
        &self,
        thread_id: &str,
        turn_id: &str,
        taken: Vec<String>,
        timeout: Duration,
    ) -> Result<Vec<InputRecord>, String> {
        let caller = Caller::Turn(TurnCaller { thread_id: thread_id.into(), turn_id: turn_id.into() });
        let timeout_ms = u32::try_from(timeout.as_millis())
            .unwrap_or(u32::MAX)
            .min(kiki_proto::limits::WAIT_TIMEOUT_MAX_MS);
        let (items, _delivered) =
            self.waits.inbox(&caller, taken, Some(timeout_ms)).await.map_err(|e| e.to_string())?;
        Ok(items)
    }
}
