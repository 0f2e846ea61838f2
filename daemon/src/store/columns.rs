//! Rows as every backend reads them: the column lists records are selected by (the schemas
//! match column for column), and each record's mapper, written once over [`Columns`] — a
//! row of any backend, read by column name as the type the record holds.

use super::*;

/// One value of a row, as a backend hands it over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'r> {
    Null,
    Int(i64),
    Real(f64),
    Bool(bool),
    Text(&'r str),
}

/// A row of a backend, read by column name.
pub trait Columns {
    /// The value of the column `name`.
    fn cell(&self, name: &str) -> StoreResult<Cell<'_>>;

    /// The column `name` as the type a record holds.
    fn get<T: Column>(&self, name: &str) -> StoreResult<T> {
        T::from_cell(self.cell(name)?).map_err(|why| StoreError::Backend(format!("column {name}: {why}")))
    }
}

/// A type a record holds, made from one [`Cell`].
pub trait Column: Sized {
    fn from_cell(cell: Cell<'_>) -> Result<Self, String>;
}

impl Column for i64 {
    fn from_cell(cell: Cell<'_>) -> Result<Self, String> {
        match cell {
            Cell::Int(n) => Ok(n),
            other => Err(format!("{other:?} is not an integer")),
        }
    }
}

/// A switch: Postgres' BOOLEAN, SQLite's 0 or 1.
impl Column for bool {
    fn from_cell(cell: Cell<'_>) -> Result<Self, String> {
        match cell {
            Cell::Bool(b) => Ok(b),
            Cell::Int(n) => Ok(n != 0),
            other => Err(format!("{other:?} is not a switch")),
        }
    }
}

impl Column for f64 {
    fn from_cell(cell: Cell<'_>) -> Result<Self, String> {
        match cell {
            Cell::Real(x) => Ok(x),
            Cell::Int(n) => Ok(n as f64),
            other => Err(format!("{other:?} is not a number")),
        }
    }
}

impl Column for String {
    fn from_cell(cell: Cell<'_>) -> Result<Self, String> {
        match cell {
            Cell::Text(text) => Ok(text.to_string()),
            other => Err(format!("{other:?} is not text")),
        }
    }
}

impl<T: Column> Column for Option<T> {
    fn from_cell(cell: Cell<'_>) -> Result<Self, String> {
        match cell {
            Cell::Null => Ok(None),
            cell => T::from_cell(cell).map(Some),
        }
    }
}

/// Each word type read from its one spelling.
macro_rules! word_column {
    ($($word:ty),*) => {$(
        impl Column for $word {
            fn from_cell(cell: Cell<'_>) -> Result<Self, String> {
                match cell {
                    Cell::Text(text) => <$word>::parse(text)
                        .ok_or_else(|| format!("{text:?} is not a {}", stringify!($word))),
                    other => Err(format!("{other:?} is not a word")),
                }
            }
        }
    )*};
}

row_words!(word_column);

/// A permission set from its comma-separated words (`read,send`).
impl Column for Permissions {
    fn from_cell(cell: Cell<'_>) -> Result<Self, String> {
        match cell {
            Cell::Text(text) => Permissions::parse(text.split(',').filter(|w| !w.is_empty()))
                .map_err(|word| format!("{word:?} is not a permission")),
            other => Err(format!("{other:?} is not a permission set")),
        }
    }
}

pub const THREAD_COLUMNS: &str = "seq, id, workspace_id, cwd, title, profile, created_at, updated_at, archived, enabled, running, turn_count, communication";

pub const TURN_COLUMNS: &str = "id, thread_id, seq, status, input, output, error, started_at, ended_at, input_tokens, output_tokens, cost_usd";

pub const OUTBOX_COLUMNS: &str = "id, bridge_id, peer_home_id, target_session, source_thread, content, key_scope, key, \
     request_hash, status, reason, remote_message_id, attempts, next_attempt_at, created_at, updated_at, source_workspace, \
     room_id, room_entry, room_author_host, room_author, trace";

pub const MESSAGE_COLUMNS: &str = "id, target_thread, source_host, source_thread, source_workspace, content, status, reason, created_at, delivered_at, turn_id, deadline";

pub const EVENT_COLUMNS: &str =
    "seq, thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, request_id, at";

pub const BRIDGE_COLUMNS: &str = "id, direction, peer_home_id, alias, address, state, permissions, workspaces, \
     request_id, created_at, updated_at, last_success, last_error, last_error_at, revoked_by_peer, requested";

pub const ROOM_COLUMNS: &str = "seq, id, name, host_thread, paused, paused_reason, archived, agent_wakes, \
     (SELECT COALESCE(MAX(e.seq), 0) FROM room_entries e WHERE e.room_id = rooms.id) AS last_seq, created_at, updated_at";
pub const MEMBER_COLUMNS: &str = "member_id, kind, thread_id, profile, instructions, added_at";
pub const ENTRY_COLUMNS: &str = "room_id, seq, id, author_host, author, content, mentions, woke, at";

pub const PERMISSION_COLUMNS: &str =
    "id, thread_id, turn_id, tool, input, status, reason, created_at, decided_at";

/// `"a,b"` → `["a", "b"]`; `""` → `[]`.
pub fn split_list(text: &str) -> Vec<String> {
    text.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()
}

pub fn thread_from(row: &impl Columns) -> StoreResult<ThreadRecord> {
    Ok(ThreadRecord {
        seq: row.get("seq")?,
        id: row.get("id")?,
        workspace_id: row.get("workspace_id")?,
        cwd: row.get("cwd")?,
        title: row.get("title")?,
        profile: row.get("profile")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        archived: row.get("archived")?,
        enabled: row.get("enabled")?,
        running: row.get("running")?,
        turn_count: row.get("turn_count")?,
        communication: row.get("communication")?,
    })
}

pub fn turn_from(row: &impl Columns) -> StoreResult<TurnRecord> {
    Ok(TurnRecord {
        id: row.get("id")?,
        thread_id: row.get("thread_id")?,
        seq: row.get("seq")?,
        status: row.get("status")?,
        input: row.get("input")?,
        output: row.get("output")?,
        error: row.get("error")?,
        started_at: row.get("started_at")?,
        ended_at: row.get("ended_at")?,
        items: Vec::new(),
        usage: match row.get::<Option<f64>>("cost_usd")? {
            Some(cost_usd) => Some(TurnUsage {
                input_tokens: row.get::<Option<i64>>("input_tokens")?.unwrap_or(0) as u64,
                output_tokens: row.get::<Option<i64>>("output_tokens")?.unwrap_or(0) as u64,
                cost_usd,
            }),
            None => None,
        },
    })
}

pub fn source_from(row: &impl Columns) -> StoreResult<Option<SourceRef>> {
    let thread: Option<String> = row.get("source_thread")?;
    let host: Option<String> = row.get("source_host")?;
    let workspace_id: String = row.get("source_workspace")?;
    Ok(thread.map(|thread_id| SourceRef { host_id: host.unwrap_or_default(), thread_id, workspace_id }))
}

pub fn input_from(row: &impl Columns) -> StoreResult<InputRecord> {
    Ok(InputRecord {
        id: row.get("id")?,
        kind: row.get("kind")?,
        content: row.get("content")?,
        message_id: row.get("message_id")?,
        source: source_from(row)?,
        room: match (row.get::<Option<String>>("room_id")?, row.get::<Option<String>>("room_entry")?) {
            (Some(room), entry) => {
                let entry = entry.or_else(|| row.get("message_id").ok().flatten()).unwrap_or_default();
                Some(RoomTag { room, entry })
            }
            (None, _) => None,
        },
        via: row.get("via_home")?,
        now: row.get("created_at")?,
    })
}

pub fn outbox_from(row: &impl Columns) -> StoreResult<OutboxRecord> {
    Ok(OutboxRecord {
        id: row.get("id")?,
        bridge_id: row.get("bridge_id")?,
        peer_home_id: row.get("peer_home_id")?,
        target_session: row.get("target_session")?,
        source_thread: row.get("source_thread")?,
        source_workspace: row.get("source_workspace")?,
        content: row.get("content")?,
        key_scope: row.get("key_scope")?,
        key: row.get("key")?,
        request_hash: row.get("request_hash")?,
        status: row.get("status")?,
        reason: row.get("reason")?,
        remote_message_id: row.get("remote_message_id")?,
        trace: row.get("trace")?,
        attempts: row.get("attempts")?,
        next_attempt_at: row.get("next_attempt_at")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        room: match (row.get::<Option<String>>("room_id")?, row.get::<Option<String>>("room_entry")?) {
            (Some(room), Some(entry)) => {
                let author_host: String = row.get::<Option<String>>("room_author_host")?.unwrap_or_default();
                let author: String = row.get::<Option<String>>("room_author")?.unwrap_or_default();
                Some(OutboundEntry {
                    tag: RoomTag { room, entry },
                    author: (!author.is_empty()).then(|| SourceRef {
                        host_id: author_host,
                        thread_id: author,
                        workspace_id: String::new(),
                    }),
                })
            }
            _ => None,
        },
    })
}

pub fn event_from(row: &impl Columns) -> StoreResult<EventRecord> {
    Ok(EventRecord {
        seq: row.get("seq")?,
        thread_id: row.get("thread_id")?,
        kind: row.get("kind")?,
        turn_id: row.get("turn_id")?,
        turn_status: row.get("turn_status")?,
        reason: row.get("reason")?,
        lifecycle: Lifecycle::parse(&row.get::<String>("lifecycle")?),
        message_id: row.get("message_id")?,
        request_id: row.get("request_id")?,
        at: row.get("at")?,
    })
}

pub fn message_from(row: &impl Columns) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        id: row.get("id")?,
        target_thread: row.get("target_thread")?,
        source: source_from(row)?,
        content: row.get("content")?,
        status: row.get("status")?,
        reason: row.get("reason")?,
        created_at: row.get("created_at")?,
        delivered_at: row.get("delivered_at")?,
        turn_id: row.get("turn_id")?,
        deadline: row.get("deadline")?,
    })
}

pub fn bridge_from(row: &impl Columns) -> StoreResult<BridgeRecord> {
    Ok(BridgeRecord {
        id: row.get("id")?,
        direction: row.get("direction")?,
        peer_home_id: row.get("peer_home_id")?,
        alias: row.get("alias")?,
        address: row.get("address")?,
        state: row.get("state")?,
        permissions: row.get("permissions")?,
        workspaces: split_list(&row.get::<String>("workspaces")?),
        request_id: row.get("request_id")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        last_success: row.get("last_success")?,
        last_error: row.get("last_error")?,
        last_error_at: row.get("last_error_at")?,
        revoked_by_peer: row.get("revoked_by_peer")?,
        requested: row.get("requested")?,
    })
}

pub fn request_from(row: &impl Columns) -> StoreResult<BridgeRequestRecord> {
    Ok(BridgeRequestRecord {
        id: row.get("id")?,
        peer_home_id: row.get("peer_home_id")?,
        name: row.get("name")?,
        want: row.get("want")?,
        status: row.get("status")?,
        created_at: row.get("created_at")?,
        decided_at: row.get("decided_at")?,
        address: row.get("address")?,
    })
}

pub fn receipt_from(row: &impl Columns) -> StoreResult<ReceiptRecord> {
    Ok(ReceiptRecord {
        peer_home_id: row.get("peer_home_id")?,
        key: row.get("key")?,
        message_id: row.get("message_id")?,
        target: row.get("target")?,
        status: row.get("status")?,
        reason: row.get("reason")?,
        at: row.get("at")?,
    })
}

/// A replica's row (`REPLICA_COLUMNS`).
pub fn replica_from(row: &impl Columns) -> StoreResult<ReplicaRecord> {
    Ok(ReplicaRecord {
        id: row.get("id")?,
        host: row.get("host")?,
        home: row.get("home")?,
        pid: row.get::<i64>("pid")? as u32,
        bridge_listen: row.get("bridge_listen")?,
        started_at: row.get("started_at")?,
        heartbeat_at: row.get("heartbeat_at")?,
    })
}

pub const REPLICA_COLUMNS: &str = "id, host, home, pid, bridge_listen, started_at, heartbeat_at";

pub fn room_from(row: &impl Columns) -> StoreResult<RoomRecord> {
    Ok(RoomRecord {
        seq: row.get("seq")?,
        id: row.get("id")?,
        name: row.get("name")?,
        host_thread: row.get("host_thread")?,
        paused: row.get("paused")?,
        paused_reason: row.get("paused_reason")?,
        archived: row.get("archived")?,
        agent_wakes: row.get("agent_wakes")?,
        last_seq: row.get("last_seq")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
    })
}

pub fn member_from(row: &impl Columns) -> StoreResult<MemberRecord> {
    Ok(MemberRecord {
        member_id: row.get("member_id")?,
        kind: row.get("kind")?,
        thread_id: row.get("thread_id")?,
        profile: row.get("profile")?,
        instructions: row.get("instructions")?,
        added_at: row.get("added_at")?,
    })
}

pub fn entry_from(row: &impl Columns) -> StoreResult<EntryRecord> {
    let author: String = row.get("author")?;
    let author_host: String = row.get("author_host")?;
    let words = |text: String| text.split(' ').filter(|w| !w.is_empty()).map(str::to_string).collect();
    Ok(EntryRecord {
        room_id: row.get("room_id")?,
        seq: row.get("seq")?,
        id: row.get("id")?,
        author: (!author.is_empty()).then(|| SourceRef {
            host_id: author_host,
            thread_id: author,
            workspace_id: String::new(),
        }),
        content: row.get("content")?,
        mentions: words(row.get("mentions")?),
        woke: words(row.get("woke")?),
        at: row.get("at")?,
        deliveries: Vec::new(),
    })
}

pub fn permission_from(row: &impl Columns) -> StoreResult<PermissionRecord> {
    Ok(PermissionRecord {
        id: row.get("id")?,
        thread_id: row.get("thread_id")?,
        turn_id: row.get("turn_id")?,
        tool: row.get("tool")?,
        input: row.get("input")?,
        status: row.get("status")?,
        reason: row.get("reason")?,
        created_at: row.get("created_at")?,
        decided_at: row.get("decided_at")?,
    })
}

pub const PART_COLUMNS: &str = "seq, kind, text, at";

pub fn part_from(row: &impl Columns) -> StoreResult<TurnPart> {
    Ok(TurnPart { seq: row.get("seq")?, kind: row.get("kind")?, text: row.get("text")?, at: row.get("at")? })
}

/// An outbox entry of a room entry, as its member's delivery.
pub const DELIVERY_COLUMNS: &str = "peer_home_id, target_session, status, reason";

pub fn delivery_from(row: &impl Columns) -> StoreResult<EntryDelivery> {
    Ok(EntryDelivery {
        member: format!("{}/{}", row.get::<String>("peer_home_id")?, row.get::<String>("target_session")?),
        status: row.get("status")?,
        reason: row.get("reason")?,
    })
}

/// A turn's id and status (`SELECT id, status …`).
pub fn turn_status_from(row: &impl Columns) -> StoreResult<(String, TurnStatus)> {
    Ok((row.get("id")?, row.get("status")?))
}

pub const TOOL_CALL_COLUMNS: &str =
    "seq, thread_id, turn_id, name, arguments, outcome, result, duration_ms, at";

pub fn tool_call_from(row: &impl Columns) -> StoreResult<ToolCallRecord> {
    Ok(ToolCallRecord {
        seq: row.get("seq")?,
        thread_id: row.get("thread_id")?,
        turn_id: row.get("turn_id")?,
        name: row.get("name")?,
        arguments: row.get("arguments")?,
        outcome: row.get("outcome")?,
        result: row.get("result")?,
        duration_ms: row.get("duration_ms")?,
        at: row.get("at")?,
    })
}

pub const CRON_COLUMNS: &str = "id, thread_id, cron, prompt, recurring, created_at, next_fire_at";

pub fn cron_from(row: &impl Columns) -> StoreResult<CronRecord> {
    Ok(CronRecord {
        id: row.get("id")?,
        thread_id: row.get("thread_id")?,
        cron: row.get("cron")?,
        prompt: row.get("prompt")?,
        recurring: row.get("recurring")?,
        created_at: row.get("created_at")?,
        next_fire_at: row.get("next_fire_at")?,
    })
}
