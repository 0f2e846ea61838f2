//! Rows: each record's row mapper, and the words as TEXT columns (strings appear only in
//! their enums). Column lists are the SQLite store's (the schemas match column for column).

use sqlx::postgres::{PgArgumentBuffer, PgRow, PgTypeInfo, PgValueRef};
use sqlx::{Decode, Encode, Row, Type, encode::IsNull, error::BoxDynError};

use super::*;

pub(super) use crate::store::columns::*;

/// Each word type as its one spelling in a TEXT column.
macro_rules! word_columns {
    ($($word:ty),*) => {$(
        impl Type<Postgres> for $word {
            fn type_info() -> PgTypeInfo {
                <&str as Type<Postgres>>::type_info()
            }

            fn compatible(ty: &PgTypeInfo) -> bool {
                <&str as Type<Postgres>>::compatible(ty)
            }
        }

        impl Encode<'_, Postgres> for $word {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as Encode<Postgres>>::encode(self.as_str(), buf)
            }
        }

        impl<'r> Decode<'r, Postgres> for $word {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <&str as Decode<Postgres>>::decode(value)?;
                <$word>::parse(text).ok_or_else(|| format!("{text:?} is not a {}", stringify!($word)).into())
            }
        }
    )*};
}

word_columns!(
    Direction,
    BridgeState,
    RequestStatus,
    OutboxStatus,
    InputKind,
    TurnStatus,
    MessageStatus,
    MemberKind,
    CommunicationSetting,
    PermissionStatus,
    EventKind,
    PartKind
);

/// A permission set as its comma-separated words (`read,send`).
impl Type<Postgres> for Permissions {
    fn type_info() -> PgTypeInfo {
        <&str as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as Type<Postgres>>::compatible(ty)
    }
}

impl Encode<'_, Postgres> for Permissions {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <String as Encode<Postgres>>::encode(self.joined(), buf)
    }
}

impl<'r> Decode<'r, Postgres> for Permissions {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<Postgres>>::decode(value)?;
        Permissions::parse(text.split(',').filter(|w| !w.is_empty()))
            .map_err(|word| format!("{word:?} is not a permission").into())
    }
}

pub(super) fn thread_from(row: &PgRow) -> StoreResult<ThreadRecord> {
    Ok(ThreadRecord {
        seq: row.try_get("seq")?,
        id: row.try_get("id")?,
        workspace_id: row.try_get("workspace_id")?,
        cwd: row.try_get("cwd")?,
        title: row.try_get("title")?,
        profile: row.try_get("profile")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        archived: row.try_get("archived")?,
        enabled: row.try_get("enabled")?,
        running: row.try_get("running")?,
        turn_count: row.try_get("turn_count")?,
        communication: row.try_get("communication")?,
    })
}

pub(super) fn turn_from(row: &PgRow) -> StoreResult<TurnRecord> {
    Ok(TurnRecord {
        id: row.try_get("id")?,
        thread_id: row.try_get("thread_id")?,
        seq: row.try_get("seq")?,
        status: row.try_get("status")?,
        input: row.try_get("input")?,
        output: row.try_get("output")?,
        error: row.try_get("error")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        items: Vec::new(),
        usage: match row.try_get::<Option<f64>, _>("cost_usd")? {
            Some(cost_usd) => Some(TurnUsage {
                input_tokens: row.try_get::<Option<i64>, _>("input_tokens")?.unwrap_or(0) as u64,
                output_tokens: row.try_get::<Option<i64>, _>("output_tokens")?.unwrap_or(0) as u64,
                cost_usd,
            }),
            None => None,
        },
    })
}

pub(super) fn source_from(row: &PgRow) -> StoreResult<Option<SourceRef>> {
    let thread: Option<String> = row.try_get("source_thread")?;
    let host: Option<String> = row.try_get("source_host")?;
    let workspace_id: String = row.try_get("source_workspace")?;
    Ok(thread.map(|thread_id| SourceRef { host_id: host.unwrap_or_default(), thread_id, workspace_id }))
}

pub(super) fn input_from(row: &PgRow) -> StoreResult<InputRecord> {
    Ok(InputRecord {
        id: row.try_get("id")?,
        kind: row.try_get("kind")?,
        content: row.try_get("content")?,
        message_id: row.try_get("message_id")?,
        source: source_from(row)?,
        room: match (
            row.try_get::<Option<String>, _>("room_id")?,
            row.try_get::<Option<String>, _>("room_entry")?,
        ) {
            (Some(room), entry) => {
                let entry = entry.or_else(|| row.try_get("message_id").ok().flatten()).unwrap_or_default();
                Some(RoomTag { room, entry })
            }
            (None, _) => None,
        },
        via: row.try_get("via_home")?,
        now: row.try_get("created_at")?,
    })
}

pub(super) fn outbox_from(row: &PgRow) -> StoreResult<OutboxRecord> {
    Ok(OutboxRecord {
        id: row.try_get("id")?,
        bridge_id: row.try_get("bridge_id")?,
        peer_home_id: row.try_get("peer_home_id")?,
        target_session: row.try_get("target_session")?,
        source_thread: row.try_get("source_thread")?,
        source_workspace: row.try_get("source_workspace")?,
        content: row.try_get("content")?,
        key_scope: row.try_get("key_scope")?,
        key: row.try_get("key")?,
        request_hash: row.try_get("request_hash")?,
        status: row.try_get("status")?,
        reason: row.try_get("reason")?,
        remote_message_id: row.try_get("remote_message_id")?,
        attempts: row.try_get("attempts")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        room: match (
            row.try_get::<Option<String>, _>("room_id")?,
            row.try_get::<Option<String>, _>("room_entry")?,
        ) {
            (Some(room), Some(entry)) => {
                let author_host: String =
                    row.try_get::<Option<String>, _>("room_author_host")?.unwrap_or_default();
                let author: String = row.try_get::<Option<String>, _>("room_author")?.unwrap_or_default();
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

pub(super) fn event_from(row: &PgRow) -> StoreResult<EventRecord> {
    Ok(EventRecord {
        seq: row.try_get("seq")?,
        thread_id: row.try_get("thread_id")?,
        kind: row.try_get("kind")?,
        turn_id: row.try_get("turn_id")?,
        turn_status: row.try_get("turn_status")?,
        reason: row.try_get("reason")?,
        lifecycle: Lifecycle::parse(&row.try_get::<String, _>("lifecycle")?),
        message_id: row.try_get("message_id")?,
        request_id: row.try_get("request_id")?,
        at: row.try_get("at")?,
    })
}

pub(super) fn message_from(row: &PgRow) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        id: row.try_get("id")?,
        target_thread: row.try_get("target_thread")?,
        source: source_from(row)?,
        content: row.try_get("content")?,
        status: row.try_get("status")?,
        reason: row.try_get("reason")?,
        created_at: row.try_get("created_at")?,
        delivered_at: row.try_get("delivered_at")?,
        turn_id: row.try_get("turn_id")?,
        deadline: row.try_get("deadline")?,
    })
}

pub(super) fn bridge_from(row: &PgRow) -> StoreResult<BridgeRecord> {
    Ok(BridgeRecord {
        id: row.try_get("id")?,
        direction: row.try_get("direction")?,
        peer_home_id: row.try_get("peer_home_id")?,
        alias: row.try_get("alias")?,
        address: row.try_get("address")?,
        state: row.try_get("state")?,
        permissions: row.try_get("permissions")?,
        workspaces: split_list(&row.try_get::<String, _>("workspaces")?),
        request_id: row.try_get("request_id")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        last_success: row.try_get("last_success")?,
        last_error: row.try_get("last_error")?,
        last_error_at: row.try_get("last_error_at")?,
        revoked_by_peer: row.try_get("revoked_by_peer")?,
        requested: row.try_get("requested")?,
    })
}

pub(super) fn request_from(row: &PgRow) -> StoreResult<BridgeRequestRecord> {
    Ok(BridgeRequestRecord {
        id: row.try_get("id")?,
        peer_home_id: row.try_get("peer_home_id")?,
        name: row.try_get("name")?,
        want: row.try_get("want")?,
        status: row.try_get("status")?,
        created_at: row.try_get("created_at")?,
        decided_at: row.try_get("decided_at")?,
        address: row.try_get("address")?,
    })
}

pub(super) fn receipt_from(row: &PgRow) -> StoreResult<ReceiptRecord> {
    Ok(ReceiptRecord {
        peer_home_id: row.try_get("peer_home_id")?,
        key: row.try_get("key")?,
        message_id: row.try_get("message_id")?,
        target: row.try_get("target")?,
        status: row.try_get("status")?,
        reason: row.try_get("reason")?,
        at: row.try_get("at")?,
    })
}
