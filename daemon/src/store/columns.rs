//! The column lists every backend selects records by (the schemas match column for column),
//! and the lists kept in one TEXT column.

pub const THREAD_COLUMNS: &str = "seq, id, workspace_id, cwd, title, profile, created_at, updated_at, archived, enabled, running, turn_count, communication";

pub const TURN_COLUMNS: &str = "id, thread_id, seq, status, input, output, error, started_at, ended_at, input_tokens, output_tokens, cost_usd";

pub const OUTBOX_COLUMNS: &str = "id, bridge_id, peer_home_id, target_session, source_thread, content, key_scope, key, \
     request_hash, status, reason, remote_message_id, attempts, next_attempt_at, created_at, updated_at, source_workspace, \
     room_id, room_entry, room_author_host, room_author";

pub const MESSAGE_COLUMNS: &str = "id, target_thread, source_host, source_thread, source_workspace, content, status, reason, created_at, delivered_at, turn_id, deadline";

pub const EVENT_COLUMNS: &str =
    "seq, thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, request_id, at";

pub const BRIDGE_COLUMNS: &str = "id, direction, peer_home_id, alias, address, state, permissions, workspaces, \
     request_id, created_at, updated_at, last_success, last_error, last_error_at, revoked_by_peer, requested";

/// `"a,b"` → `["a", "b"]`; `""` → `[]`.
pub fn split_list(text: &str) -> Vec<String> {
    text.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()
}
