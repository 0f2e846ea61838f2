//! The `kiki.v1` gRPC API shared by the daemon and the client, and `kiki.bridge.v1`, the
//! protocol between homes: two packages with messages of their own, so either can change
//! without the other (the daemon translates between them where its bridges meet the rest).
//!
//! Generated from `proto/kiki/**/*.proto` at build time (protox, no system `protoc`).
//! Besides the generated types this crate holds only what every side needs to agree on:
//! the codec (a body that does not decode is the sender's fault), the descriptor set served
//! for reflection, the one spelling of enums as words ([`Word`], as `--json` prints them),
//! the metadata key that carries a turn's token, the text form of thread references, the
//! API's limits, the home directory's layout and who may use it, and how agent CLIs take
//! kiki's MCP server ([`agents`]: kikid's executors and `kiki mcp install` both write it).
//!
//! # Compatibility
//!
//! `baseline/descriptors.txt` records both packages as older peers and clients rely on them
//! (every field by number, name, label and type; every enum value; every method), and a test
//! (`src/compat.rs`, run by `cargo test -p kiki-proto`) fails, naming each, on a change that
//! would break them: a package, message, enum, service or method gone, a field or enum value
//! gone, renamed or renumbered, a field's type, label or oneof changed. Additions pass. To
//! record a change made on purpose (or additions, once they ship), rewrite the baseline and
//! review its diff:
//!
//! ```text
//! KIKI_UPDATE_PROTO_BASELINE=1 cargo test -p kiki-proto --lib compat
//! ```

#![allow(clippy::doc_lazy_continuation)]

pub mod v1 {
    tonic::include_proto!("kiki.v1");
}

/// The protocol between homes (`kiki.bridge.v1`): what a bridge's calls and replies carry.
pub mod bridge {
    pub mod v1 {
        tonic::include_proto!("kiki.bridge.v1");

        impl BridgeCall {
            /// The call `call`, outside any trace (the bridge call adds its own).
            pub fn new(call: bridge_call::Call) -> Self {
                Self { call: Some(call), traceparent: String::new() }
            }
        }
    }
}

pub use v1::*;

pub mod agents;
pub mod codec;
#[cfg(test)]
mod compat;
pub mod home;
pub mod limits;
mod reference;
pub use reference::{ParseRefError, format_ref, parse_ref};

/// The encoded `FileDescriptorSet` of `kiki.v1` and `kiki.bridge.v1`, for tonic reflection (v1
/// and v1alpha) and the compatibility test.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("kiki_descriptor");

/// gRPC metadata key carrying the per-turn secret an executor hands its agent
/// (`KIKI_TOKEN`). A call that carries it acts as that turn's thread.
pub const TOKEN_METADATA_KEY: &str = "kiki-token";

/// gRPC metadata key carrying the W3C trace context a call continues (`kiki` and `kiki mcp`
/// pass on their environment's `TRACEPARENT`, which a turn's agent has).
pub const TRACE_METADATA_KEY: &str = "traceparent";

/// The environment variable a process finds its trace context in (W3C's convention for
/// processes), set for an agent by its turn.
pub const TRACE_ENV: &str = "TRACEPARENT";

/// gRPC metadata key naming the `kiki mcp` tool a call serves (recorded on the call's span).
pub const MCP_TOOL_METADATA_KEY: &str = "kiki-mcp-tool";

/// The one spelling of every `kiki.v1` enum outside protobuf ([`Word`]), and the serde
/// serializers `build.rs` names for enum fields: a value prints as the lower-case name of its
/// value without the type's prefix (`THREAD_STATE_IDLE` → `"idle"`); one this build does not
/// know, as its number.
pub mod json {
    use serde::Serializer;
    use serde::ser::SerializeSeq;

    /// An enum's values as words: `BRIDGE_STATE_ACTIVE` ↔ `"active"`.
    pub trait Word: Sized {
        /// The value's word; `""` for the unspecified value (0), as an unset string reads.
        fn word(&self) -> String;
        /// The value `word` names; `None` for a word that names none (and for the
        /// unspecified value's).
        fn from_word(word: &str) -> Option<Self>;
    }

    macro_rules! words {
        ($($ty:ty => $prefix:literal,)*) => {$(
            impl Word for $ty {
                fn word(&self) -> String {
                    if *self as i32 == 0 { String::new() } else { enum_word(self.as_str_name(), $prefix) }
                }

                fn from_word(word: &str) -> Option<Self> {
                    let lower = word.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                    let value = Self::from_str_name(&format!("{}{}", $prefix, word.to_ascii_uppercase()))?;
                    (lower && value as i32 != 0).then_some(value)
                }
            }
        )*};
    }

    words! {
        super::ThreadState => "THREAD_STATE_",
        super::Communication => "COMMUNICATION_",
        super::TurnStatus => "TURN_STATUS_",
        super::InputKind => "INPUT_KIND_",
        super::SendStatus => "SEND_STATUS_",
        super::EventKind => "EVENT_KIND_",
        super::RoomAction => "ROOM_ACTION_",
        super::ContentField => "CONTENT_FIELD_",
        super::Lifecycle => "LIFECYCLE_",
        super::MemberRole => "MEMBER_ROLE_",
        super::MemberKind => "MEMBER_KIND_",
        super::DeliveryStatus => "DELIVERY_STATUS_",
        super::PermissionStatus => "PERMISSION_STATUS_",
        super::PartKind => "PART_KIND_",
        super::Direction => "DIRECTION_",
        super::BridgeState => "BRIDGE_STATE_",
        super::Permission => "PERMISSION_",
        super::BridgeRequestStatus => "BRIDGE_REQUEST_STATUS_",
        super::HomeEventKind => "HOME_EVENT_KIND_",
        super::ToolOutcome => "TOOL_OUTCOME_",
        super::WorkerState => "WORKER_STATE_",
        super::Approval => "APPROVAL_",
    }

    /// The words of a list of values, joined by commas (`read,send`).
    pub fn joined<E: Word + TryFrom<i32>>(values: &[i32]) -> String {
        let word = |v: &i32| E::try_from(*v).map_or_else(|_| v.to_string(), |e| e.word());
        values.iter().map(word).collect::<Vec<_>>().join(",")
    }

    // Enums since the first release: an unset value prints as "unspecified".
    macro_rules! enum_serializers {
        ($($name:ident => $ty:ty, $prefix:literal;)*) => {$(
            pub fn $name<S: Serializer>(value: &i32, s: S) -> Result<S::Ok, S::Error> {
                match <$ty>::try_from(*value) {
                    Ok(v) => s.serialize_str(&enum_word(v.as_str_name(), $prefix)),
                    Err(_) => s.serialize_i32(*value),
                }
            }
        )*};
    }

    enum_serializers! {
        thread_state => super::ThreadState, "THREAD_STATE_";
        communication => super::Communication, "COMMUNICATION_";
        turn_status => super::TurnStatus, "TURN_STATUS_";
        input_kind => super::InputKind, "INPUT_KIND_";
        send_status => super::SendStatus, "SEND_STATUS_";
        event_kind => super::EventKind, "EVENT_KIND_";
        room_action => super::RoomAction, "ROOM_ACTION_";
    }

    // Fields that were words before they were enums: an unset value prints as the empty
    // string it was.
    macro_rules! word_serializers {
        ($($name:ident => $ty:ty;)*) => {$(
            pub fn $name<S: Serializer>(value: &i32, s: S) -> Result<S::Ok, S::Error> {
                match <$ty>::try_from(*value) {
                    Ok(v) => s.serialize_str(&v.word()),
                    Err(_) => s.serialize_i32(*value),
                }
            }
        )*};
    }

    word_serializers! {
        content_field => super::ContentField;
        lifecycle => super::Lifecycle;
        member_role => super::MemberRole;
        member_kind => super::MemberKind;
        delivery_status => super::DeliveryStatus;
        permission_status => super::PermissionStatus;
        part_kind => super::PartKind;
        direction => super::Direction;
        bridge_state => super::BridgeState;
        bridge_request_status => super::BridgeRequestStatus;
        home_event_kind => super::HomeEventKind;
        tool_outcome => super::ToolOutcome;
        worker_state => super::WorkerState;
        approval => super::Approval;
    }

    /// A list of permissions, as the list of their words.
    pub fn permissions<S: Serializer>(values: &[i32], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(values.len()))?;
        for value in values {
            match super::Permission::try_from(*value) {
                Ok(p) => seq.serialize_element(&p.word())?,
                Err(_) => seq.serialize_element(value)?,
            }
        }
        seq.end()
    }

    /// Whether an enum field holds its unspecified value (0).
    pub fn unset(value: &i32) -> bool {
        *value == 0
    }

    /// `("TURN_STATUS_COMPLETED", "TURN_STATUS_")` → `"completed"`.
    pub fn enum_word(name: &str, prefix: &str) -> String {
        name.strip_prefix(prefix).unwrap_or(name).to_ascii_lowercase()
    }
}

pub use json::Word;

#[cfg(test)]
mod tests {
    use super::*;

    /// `--json` prints these fields as the words they were before they were enums.
    #[test]
    fn enum_fields_print_as_the_words_they_were() {
        let bridge = Bridge {
            id: "br_1".into(),
            direction: Direction::Inbound as i32,
            state: BridgeState::Active as i32,
            permissions: vec![Permission::Read as i32, Permission::Wait as i32],
            requested: vec![],
            ..Default::default()
        };
        let json = serde_json::to_string(&bridge).expect("json");
        assert!(
            json.starts_with(r#"{"id":"br_1","direction":"inbound","peer_home_id":"","alias":"","address":"","state":"active","permissions":["read","wait"],"#),
            "{json}"
        );
        assert!(json.ends_with(r#""pending":0,"requested":[]}"#), "{json}");

        let request = BridgeRequestRecord {
            want: vec![Permission::Send as i32],
            status: BridgeRequestStatus::Withdrawn as i32,
            ..Default::default()
        };
        let json = serde_json::to_string(&request).expect("json");
        assert!(json.contains(r#""want":["send"],"status":"withdrawn""#), "{json}");

        let receipt = Receipt {
            direction: Direction::Outbound as i32,
            status: DeliveryStatus::Accepted as i32,
            ..Default::default()
        };
        let json = serde_json::to_string(&receipt).expect("json");
        assert!(
            json.contains(r#""direction":"outbound""#) && json.contains(r#""status":"accepted""#),
            "{json}"
        );

        let member = RoomMember {
            role: MemberRole::Host as i32,
            kind: MemberKind::Persona as i32,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&member).expect("json"),
            r#"{"id":"","role":"host","kind":"persona","thread_id":"","profile":""}"#
        );
        let delivery = RoomDelivery { status: DeliveryStatus::Undeliverable as i32, ..Default::default() };
        assert_eq!(
            serde_json::to_string(&delivery).expect("json"),
            r#"{"member":"","status":"undeliverable","reason":""}"#
        );
        let progress = TurnProgress { kind: PartKind::ToolResult as i32, ..Default::default() };
        assert_eq!(
            serde_json::to_string(&progress).expect("json"),
            r#"{"turn_id":"","seq":0,"kind":"tool_result","text":"","at":""}"#
        );
        let decided =
            PermissionDecideResponse { status: PermissionStatus::Denied as i32, ..Default::default() };
        assert_eq!(
            serde_json::to_string(&decided).expect("json"),
            r#"{"status":"denied","tool":"","thread_id":""}"#
        );
        let content = ContentRef { field: ContentField::Output as i32, ..Default::default() };
        assert_eq!(
            serde_json::to_string(&content).expect("json"),
            r#"{"content_ref":"","field":"output","utf16_length":0}"#
        );
        let worker = Worker { state: WorkerState::Busy as i32, ..Default::default() };
        let json = serde_json::to_string(&worker).expect("json");
        assert!(json.contains(r#""state":"busy""#), "{json}");
        let tool = ToolSpec { approval: Approval::OutsideWorkspace as i32, ..Default::default() };
        let json = serde_json::to_string(&tool).expect("json");
        assert!(json.contains(r#""approval":"outside_workspace""#), "{json}");
    }

    #[test]
    fn an_unset_word_prints_empty_as_before_and_an_unknown_value_as_its_number() {
        let attention = Event { kind: EventKind::Attention as i32, ..Default::default() };
        let json = serde_json::to_string(&attention).expect("json");
        assert!(json.contains(r#""lifecycle":"""#), "{json}");
        let archived = Event {
            kind: EventKind::Lifecycle as i32,
            lifecycle: Lifecycle::Archived as i32,
            ..Default::default()
        };
        assert!(serde_json::to_string(&archived).expect("json").contains(r#""lifecycle":"archived""#));
        let newer = Bridge { state: 99, permissions: vec![1, 99], ..Default::default() };
        let json = serde_json::to_string(&newer).expect("json");
        assert!(json.contains(r#""state":99"#) && json.contains(r#""permissions":["read",99]"#), "{json}");
    }

    #[test]
    fn a_word_names_one_value_in_one_spelling() {
        assert_eq!(BridgeState::Requested.word(), "requested");
        assert_eq!(PartKind::from_word("tool_result"), Some(PartKind::ToolResult));
        assert_eq!(PartKind::from_word("TOOL_RESULT"), None, "one spelling");
        assert_eq!(PartKind::from_word("unspecified"), None);
        assert_eq!(PartKind::from_word("fly"), None);
        assert_eq!(PartKind::Unspecified.word(), "");
        assert_eq!(json::joined::<Permission>(&[1, 2, 99]), "read,send,99");
    }
}
