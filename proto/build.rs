//! Compiles the `.proto` files with protox (pure Rust, no system `protoc`) and generates the
//! tonic services: the local API `kiki.v1` (a file per service, plus the shapes they share)
//! and the protocol between homes `kiki.bridge.v1`. The encoded descriptor set of both is
//! kept for gRPC reflection.

use std::path::PathBuf;

use protox::prost::Message;

const PROTOS: &[&str] = &[
    "kiki/v1/common.proto",
    "kiki/v1/threads.proto",
    "kiki/v1/home.proto",
    "kiki/v1/bridges.proto",
    "kiki/v1/rooms.proto",
    "kiki/bridge/v1/threads.proto",
    "kiki/bridge/v1/wire.proto",
];
const INCLUDES: &[&str] = &["."];

/// Enum-typed fields print as their lower-case value name in `--json` output
/// (`"state": "idle"`, not `"state": 1`).
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
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, INCLUDES)?;
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
