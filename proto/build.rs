//! Compiles the `.proto` files with protox (pure Rust, no system `protoc`) and generates the
//! tonic services: the local API `kiki.v1` (a file per service, plus the shapes they share)
//! and the protocol between homes `kiki.bridge.v1`. The encoded descriptor set of both is
//! kept for gRPC reflection.

use std::path::PathBuf;

use protox::prost::Message;

const PROTOS: &[&str] = &[
    "kiki/v1/common.proto",
    "kiki/v1/tools.proto",
    "kiki/v1/threads.proto",
    "kiki/v1/home.proto",
    "kiki/v1/bridges.proto",
    "kiki/v1/rooms.proto",
    "kiki/bridge/v1/threads.proto",
    "kiki/bridge/v1/wire.proto",
];
const INCLUDES: &[&str] = &["."];

/// Enum-typed fields print as their lower-case value name in `--json` output
/// (`"state": "idle"`, not `"state": 1`), each through its serializer in `src/lib.rs`
/// (`json`). Every enum field of `kiki.v1` must be here: the build fails naming one that is
/// not.
const ENUM_FIELDS: &[(&str, &str)] = &[
    ("kiki.v1.Thread.state", "thread_state"),
    ("kiki.v1.Thread.communication", "communication"),
    ("kiki.v1.Turn.status", "turn_status"),
    ("kiki.v1.TurnInput.kind", "input_kind"),
    ("kiki.v1.ThreadSendResponse.status", "send_status"),
    ("kiki.v1.Event.kind", "event_kind"),
    ("kiki.v1.Event.turn_status", "turn_status"),
    ("kiki.v1.ThreadStopResponse.turn_status", "turn_status"),
    ("kiki.v1.ThreadSetRequest.communication", "communication"),
    ("kiki.v1.RoomSetStateRequest.action", "room_action"),
    // Words before they were enums: an unset value prints as the empty string it was.
    ("kiki.v1.ContentRef.field", "content_field"),
    ("kiki.v1.Event.lifecycle", "lifecycle"),
    ("kiki.v1.RoomMember.role", "member_role"),
    ("kiki.v1.RoomMember.kind", "member_kind"),
    ("kiki.v1.RoomDelivery.status", "delivery_status"),
    ("kiki.v1.PermissionDecideResponse.status", "permission_status"),
    ("kiki.v1.TurnProgress.kind", "part_kind"),
    ("kiki.v1.Bridge.direction", "direction"),
    ("kiki.v1.Bridge.state", "bridge_state"),
    ("kiki.v1.Bridge.permissions", "permissions"),
    ("kiki.v1.Bridge.requested", "permissions"),
    ("kiki.v1.BridgeRequestRecord.want", "permissions"),
    ("kiki.v1.BridgeRequestRecord.status", "bridge_request_status"),
    ("kiki.v1.Receipt.direction", "direction"),
    ("kiki.v1.Receipt.status", "delivery_status"),
    ("kiki.v1.HomeEvent.kind", "home_event_kind"),
    ("kiki.v1.ToolCallResponse.outcome", "tool_outcome"),
    ("kiki.v1.ToolCallRecord.outcome", "tool_outcome"),
    ("kiki.v1.Worker.state", "worker_state"),
    ("kiki.v1.ToolSpec.approval", "approval"),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, INCLUDES)?;
    every_enum_field_has_its_words(&descriptors)?;
    let descriptor_path =
        PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR not set")?).join("kiki_descriptor.bin");
    std::fs::write(&descriptor_path, descriptors.encode_to_vec())?;

    let mut builder = tonic_prost_build::configure()
        // tonic-prost's codec but for decode errors, which are the sender's (src/codec.rs).
        .codec_path("crate::codec::KikiCodec")
        .type_attribute(".kiki.v1", "#[derive(serde::Serialize)]")
        .file_descriptor_set_path(&descriptor_path)
        .skip_protoc_run();
    for (field, serializer) in ENUM_FIELDS {
        builder = builder
            .field_attribute(field, format!("#[serde(serialize_with = \"crate::json::{serializer}\")]"));
    }
    // Only a terminal event has a turn status: other events leave it out.
    builder = builder.field_attribute(
        "kiki.v1.Event.turn_status",
        "#[serde(skip_serializing_if = \"crate::json::unset\")]",
    );
    // `kiki doctor` reads the findings `kikid --check` prints when no daemon runs.
    for message in ["kiki.v1.DoctorResponse", "kiki.v1.DoctorFinding"] {
        builder = builder.type_attribute(message, "#[derive(serde::Deserialize)]");
    }
    // `prost::Name` for every message: the codec names the message a body failed to be.
    let mut config = tonic_prost_build::Config::new();
    config.enable_type_names();
    builder.compile_with_config(config, PROTOS, INCLUDES)?;
    Ok(())
}

/// Fails the build on an enum field of `kiki.v1` that `ENUM_FIELDS` does not name: it would
/// print as a number in `--json` output.
fn every_enum_field_has_its_words(set: &prost_types::FileDescriptorSet) -> Result<(), String> {
    use prost_types::DescriptorProto;
    use prost_types::field_descriptor_proto::Type;

    fn walk(scope: &str, message: &DescriptorProto, missing: &mut Vec<String>) {
        let name = format!("{scope}.{}", message.name());
        for field in &message.field {
            let full = format!("{name}.{}", field.name());
            if field.r#type() == Type::Enum && !ENUM_FIELDS.iter().any(|(f, _)| *f == full) {
                missing.push(full);
            }
        }
        for nested in &message.nested_type {
            walk(&name, nested, missing);
        }
    }

    let mut missing = Vec::new();
    for file in set.file.iter().filter(|f| f.package() == "kiki.v1") {
        for message in &file.message_type {
            walk(file.package(), message, &mut missing);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("enum fields without a serializer in build.rs ENUM_FIELDS: {}", missing.join(", ")))
    }
}
