//! The wire's words for errors: how this home's errors and refusals travel to a peer in a
//! reply, and how a peer's come back to this home's callers. A refusal travels as its
//! [`Refusal`] word; a word this home does not know (a newer peer's) is read as a refusal
//! for now.

use kiki_proto as pb;
use pb::bridge_reply::Reply;

use crate::error::Error;
use crate::store::Refusal;

pub(super) fn wire_error(code: Refusal, message: impl Into<String>) -> pb::BridgeReply {
    pb::BridgeReply {
        reply: Some(Reply::Error(pb::WireError { code: code.as_str().into(), message: message.into() })),
    }
}

/// The refusal a daemon error is, as a peer hears it.
fn refusal_of(e: &Error) -> Refusal {
    match e {
        Error::InvalidArgument { .. } => Refusal::InvalidArgument,
        Error::NotFound(_) => Refusal::ThreadNotFound,
        Error::PermissionDenied(_) => Refusal::PermissionDenied,
        Error::FailedPrecondition(_) => Refusal::FailedPrecondition,
        _ => Refusal::Internal,
    }
}

/// A daemon error as the peer sees it.
pub(super) fn to_wire(e: Error) -> pb::BridgeReply {
    wire_error(refusal_of(&e), e.to_string())
}

/// A peer's error as this home's caller sees it.
pub(super) fn from_wire(host: &str, e: pb::WireError) -> Error {
    let message = format!("{host}: {}: {}", e.code, e.message);
    match Refusal::parse(&e.code) {
        Some(Refusal::ThreadNotFound) => Error::NotFound(message),
        Some(Refusal::PermissionDenied | Refusal::BridgeRevoked) => Error::PermissionDenied(message),
        Some(Refusal::BridgeDisabled) => Error::Unavailable(message),
        Some(Refusal::InvalidArgument) => Error::InvalidArgument { field: "remote", message },
        Some(Refusal::TooLarge) => Error::InvalidArgument { field: "content", message },
        _ => Error::FailedPrecondition(message),
    }
}

/// Why a peer's call was refused: a refusal and its message, or a daemon error to translate.
pub(super) enum Rejection {
    Wire(Refusal, String),
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

/// A refusal from the mailbox, as a bridge answer's refusal and message.
pub(super) fn wire_refusal(e: Error) -> (Refusal, String) {
    match e {
        Error::Conflict(m) => (Refusal::InvalidArgument, m),
        e @ Error::InvalidArgument { .. } => (Refusal::InvalidArgument, e.to_string()),
        Error::FailedPrecondition(m) => (Refusal::FailedPrecondition, m),
        other => (Refusal::Internal, other.to_string()),
    }
}

/// A refused send, as the target answers it: `undeliverable` with the refusal as its reason.
pub(super) fn refusal_response(code: Refusal) -> pb::ThreadSendResponse {
    pb::ThreadSendResponse {
        message_id: String::new(),
        status: pb::SendStatus::Undeliverable as i32,
        replayed: false,
        reason: code.as_str().to_string(),
    }
}
