//! The `kiki.v1` gRPC API shared by the daemon and the client, and `kiki.bridge.v1`, the
//! protocol between homes.
//!
//! Generated from `proto/kiki/**/*.proto` at build time (protox, no system `protoc`).
//! Besides the generated types this crate holds only what every side needs to agree on:
//! the codec (a body that does not decode is the sender's fault), the descriptor set served
//! for reflection, the JSON spelling of enums, the metadata key that carries a turn's token,
//! the text form of thread references, the API's limits, and the home directory's layout and
//! who may use it.
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
    }
}

pub use v1::*;

pub mod codec;
#[cfg(test)]
mod compat;
pub mod home;
pub mod limits;
mod reference;
pub use reference::{ParseRefError, format_ref, parse_ref};

/// The encoded `FileDescriptorSet` of `kiki.v1`, for tonic reflection (v1 and v1alpha).
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("kiki_descriptor");

/// gRPC metadata key carrying the per-turn secret an executor hands its agent
/// (`KIKI_TOKEN`). A call that carries it acts as that turn's thread.
pub const TOKEN_METADATA_KEY: &str = "kiki-token";

/// The serde serializers named in `build.rs`: an enum field prints as the lower-case
/// name of its value without the type prefix (`THREAD_STATE_IDLE` → `"idle"`).
pub mod json {
    use serde::Serializer;

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

    /// Whether an enum field holds its unspecified value (0).
    pub fn unset(value: &i32) -> bool {
        *value == 0
    }

    /// `("TURN_STATUS_COMPLETED", "TURN_STATUS_")` → `"completed"`.
    pub fn enum_word(name: &str, prefix: &str) -> String {
        name.strip_prefix(prefix).unwrap_or(name).to_ascii_lowercase()
    }
}
