//! The wire's words for errors: how this home's errors and refusals travel to a peer in a
//! reply, and how a peer's come back to this home's callers.

use kiki_proto as pb;
use pb::bridge_reply::Reply;

use crate::error::Error;

pub(super) fn wire_error(code: &str, message: impl Into<String>) -> pb::BridgeReply {
    pb::BridgeReply {
        reply: Some(Reply::Error(pb::WireError { code: code.into(), message: message.into() })),
    }
}

/// A daemon error as the peer sees it.
pub(super) fn to_wire(e: Error) -> pb::BridgeReply {
    let code = match &e {
        Error::InvalidArgument { .. } => "invalid_argument",
        Error::NotFound(_) => "thread_not_found",
        Error::PermissionDenied(_) => "permission_denied",
        Error::FailedPrecondition(_) => "failed_precondition",
        _ => "internal",
    };
    wire_error(code, e.to_string())
}

/// A peer's error as this home's caller sees it.
pub(super) fn from_wire(host: &str, e: pb::WireError) -> Error {
    let message = format!("{host}: {}: {}", e.code, e.message);
    match e.code.as_str() {
        "thread_not_found" => Error::NotFound(message),
        "permission_denied" | "bridge_revoked" => Error::PermissionDenied(message),
        "bridge_disabled" => Error::Unavailable(message),
        "invalid_argument" => Error::InvalidArgument { field: "remote", message },
        "too_large" => Error::InvalidArgument { field: "content", message },
        _ => Error::FailedPrecondition(message),
    }
}

/// Why a peer's call was refused: a wire code and message, or a daemon error to translate.
pub(super) enum Rejection {
    Wire(&'static str, String),
    Daemon(Error),
}

impl From<Error> for Rejection {
    fn from(e: Error) -> Self {
        Rejection::Daemon(e)
    }
}

impl From<crate::store::StoreError> for Rejection {
    fn from(e: crate::store::StoreError) -> Self {
        Rejection::Daemon(e.into())
    }
}

/// A refusal from the mailbox, as a bridge answer's code and message.
pub(super) fn wire_refusal(e: Error) -> (&'static str, String) {
    match e {
        Error::Conflict(m) => ("invalid_argument", m),
        e @ Error::InvalidArgument { .. } => ("invalid_argument", e.to_string()),
        Error::FailedPrecondition(m) => ("failed_precondition", m),
        other => ("internal", other.to_string()),
    }
}

/// A refused send, as the target answers it: `undeliverable` with the code as its reason.
pub(super) fn refusal_response(code: &str) -> pb::ThreadSendResponse {
    pb::ThreadSendResponse {
        message_id: String::new(),
        status: pb::SendStatus::Undeliverable as i32,
        replayed: false,
        reason: code.to_string(),
    }
}
