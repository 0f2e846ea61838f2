//! Messages pushed into a running Claude Code session: when `kiki mcp` runs inside a turn
//! and its client takes `claude/channel` notifications, each message (or room post) that
//! would wake the thread is pushed to the agent as it arrives — mid-turn — and only then
//! counted `delivered` (ThreadInbox: the pushed ids are handed back as `taken`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kiki_proto as pb;
use rmcp::model::{CustomNotification, InitializeRequestParams, ServerNotification};
use rmcp::service::{Peer, RoleServer};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use super::calls::Caller;

/// The capability (server and client `experimental`) and the notification's method.
pub const CAPABILITY: &str = "claude/channel";
const METHOD: &str = "notifications/claude/channel";
/// How long one ThreadInbox call waits for a message before asking again.
const POLL_MS: u32 = 30_000;
/// Pause after a failed call that may pass (kikid restarting); the turn ends with it anyway.
const RETRY: Duration = Duration::from_millis(500);

/// Whether the client takes channel notifications: it says so in its capabilities, or it
/// is Claude Code (which reads them from servers that declare the capability; it loads a
/// channel off its allowlist only when started with
/// `--dangerously-load-development-channels server:kiki`).
pub fn supported_by(client: &InitializeRequestParams) -> bool {
    client.capabilities.experimental.as_ref().is_some_and(|e| e.contains_key(CAPABILITY))
        || client.client_info.name == "claude-code"
}

/// Pushes the thread's messages to the client until the turn ends (its token stops
/// working), the client goes away, or `stop` (the client closed the session). What was
/// pushed is handed back as taken by the next call, made right after the push; pushed just
/// as the session closes, it is not handed back and also enters the next turn — at least
/// once, never lost (a client closing may not have read it).
pub async fn push(caller: Arc<Caller>, peer: Peer<RoleServer>, stop: CancellationToken) {
    let Ok(client) = caller.client().await else { return };
    let mut threads = client.threads();
    // Pushed, to be handed back as taken by the next call.
    let mut pushed: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut failures = 0u32;
    loop {
        let request =
            pb::ThreadInboxRequest { taken: std::mem::take(&mut pushed), timeout_ms: Some(POLL_MS) };
        let answer = tokio::select! {
            answer = threads.thread_inbox(request.clone()) => answer,
            () = stop.cancelled() => return,
        };
        let inbox = match answer {
            Ok(inbox) => inbox.into_inner(),
            Err(status) if status.code() == Code::Unauthenticated => return, // the turn ended
            Err(_) if failures < 10 => {
                failures += 1;
                pushed = request.taken;
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(_) => return,
        };
        failures = 0;
        for item in inbox.items {
            if !seen.insert(item.id.clone()) {
                continue;
            }
            let id = item.id.clone();
            if peer
                .send_notification(ServerNotification::CustomNotification(notification(item)))
                .await
                .is_err()
            {
                // The client is gone, maybe after it read this one: not counted, so it
                // enters the next turn (at least once, never lost).
                break;
            }
            pushed.push(id);
        }
    }
}

/// `{content, meta}`: the text, and who sent it (a thread reference, or `owner`), its
/// message id and, for a room post, the room and entry.
fn notification(item: pb::InboxItem) -> CustomNotification {
    let from = item.source.as_ref().map_or_else(|| "owner".to_string(), pb::format_ref);
    let mut meta = serde_json::Map::new();
    meta.insert("from".into(), json!(from));
    if !item.message_id.is_empty() {
        meta.insert("message_id".into(), json!(item.message_id));
    }
    meta.insert("sent_at".into(), json!(item.at));
    if !item.room.is_empty() {
        meta.insert("room".into(), json!(item.room));
        meta.insert("room_entry".into(), json!(item.room_entry));
    }
    CustomNotification::new(METHOD, Some(json!({ "content": item.content, "meta": meta })))
}
