//! The bridge wire codec: what crosses between homes as the wire (`kiki.bridge.v1`) spells it.
//! Here, how this home's errors, refusals, permissions and grant states travel to a peer (the
//! wire's enums), and how a peer's come back: a value this home does not know (a newer
//! peer's) reads as nothing, a refusal for now or no grant. In [`messages`], the calls' and
//! answers' messages, translated to and from the local API's (`kiki.v1`).

use kiki_proto as pb;
use kiki_proto::bridge::v1 as wire;
use wire::bridge_reply::Reply;

use crate::error::Error;
use crate::store::{BridgeState, Permission, Permissions, Refusal};

mod messages;
pub(super) use messages::Mirror;

pub(super) fn wire_error(code: Refusal, message: impl Into<String>) -> wire::BridgeReply {
    let error = wire::WireError { code: refusal_to_wire(code) as i32, message: message.into() };
    wire::BridgeReply { reply: Some(Reply::Error(error)) }
}

pub(super) fn refusal_to_wire(r: Refusal) -> wire::Refusal {
    match r {
        Refusal::PermissionDenied => wire::Refusal::PermissionDenied,
        Refusal::BridgeRevoked => wire::Refusal::BridgeRevoked,
        Refusal::BridgeDisabled => wire::Refusal::BridgeDisabled,
        Refusal::BridgeRemoved => wire::Refusal::BridgeRemoved,
        Refusal::ThreadNotFound => wire::Refusal::ThreadNotFound,
        Refusal::ThreadArchived => wire::Refusal::ThreadArchived,
        Refusal::TooLarge => wire::Refusal::TooLarge,
        Refusal::CommunicationDisabled => wire::Refusal::CommunicationDisabled,
        Refusal::InvalidArgument => wire::Refusal::InvalidArgument,
        Refusal::FailedPrecondition => wire::Refusal::FailedPrecondition,
        Refusal::UnknownKey => wire::Refusal::UnknownKey,
        Refusal::RateLimited => wire::Refusal::RateLimited,
        Refusal::Expired => wire::Refusal::Expired,
        Refusal::Internal => wire::Refusal::Internal,
    }
}

/// The refusal a peer's error names; `None` for one this home does not know.
pub(super) fn refusal_from_wire(e: &wire::WireError) -> Option<Refusal> {
    Some(match wire::Refusal::try_from(e.code).ok()? {
        wire::Refusal::Unspecified => return None,
        wire::Refusal::PermissionDenied => Refusal::PermissionDenied,
        wire::Refusal::BridgeRevoked => Refusal::BridgeRevoked,
        wire::Refusal::BridgeDisabled => Refusal::BridgeDisabled,
        wire::Refusal::BridgeRemoved => Refusal::BridgeRemoved,
        wire::Refusal::ThreadNotFound => Refusal::ThreadNotFound,
        wire::Refusal::ThreadArchived => Refusal::ThreadArchived,
        wire::Refusal::TooLarge => Refusal::TooLarge,
        wire::Refusal::CommunicationDisabled => Refusal::CommunicationDisabled,
        wire::Refusal::InvalidArgument => Refusal::InvalidArgument,
        wire::Refusal::FailedPrecondition => Refusal::FailedPrecondition,
        wire::Refusal::UnknownKey => Refusal::UnknownKey,
        wire::Refusal::RateLimited => Refusal::RateLimited,
        wire::Refusal::Expired => Refusal::Expired,
        wire::Refusal::Internal => Refusal::Internal,
    })
}

/// A peer's error code as people read it: the refusal's word, or the number of one this
/// home does not know.
pub(super) fn refusal_word(e: &wire::WireError) -> String {
    refusal_from_wire(e).map_or_else(|| format!("refusal {}", e.code), |r| r.to_string())
}

pub(super) fn permissions_to_wire(set: Permissions) -> Vec<i32> {
    set.iter()
        .map(|p| match p {
            Permission::Read => wire::Permission::Read,
            Permission::Send => wire::Permission::Send,
            Permission::Wake => wire::Permission::Wake,
            Permission::Wait => wire::Permission::Wait,
        } as i32)
        .collect()
}

/// The permissions a peer names; one this home does not know grants nothing here.
pub(super) fn permissions_from_wire(values: &[i32]) -> Permissions {
    values
        .iter()
        .filter_map(|v| match wire::Permission::try_from(*v).ok()? {
            wire::Permission::Read => Some(Permission::Read),
            wire::Permission::Send => Some(Permission::Send),
            wire::Permission::Wake => Some(Permission::Wake),
            wire::Permission::Wait => Some(Permission::Wait),
            wire::Permission::Unspecified => None,
        })
        .collect()
}

/// An approved bridge's state as a ping answers it.
pub(super) fn grant_state(state: BridgeState) -> wire::GrantState {
    match state {
        BridgeState::Requested => wire::GrantState::Pending,
        BridgeState::Active => wire::GrantState::Active,
        BridgeState::Disabled => wire::GrantState::Disabled,
        BridgeState::Rejected => wire::GrantState::Rejected,
        BridgeState::Expired => wire::GrantState::Expired,
        BridgeState::Revoked => wire::GrantState::Revoked,
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
pub(super) fn to_wire(e: Error) -> wire::BridgeReply {
    wire_error(refusal_of(&e), e.to_string())
}

/// A peer's error as this home's caller sees it.
pub(super) fn from_wire(host: &str, e: wire::WireError) -> Error {
    refused_by_peer(host, refusal_from_wire(&e), &refusal_word(&e), &e.message)
}

/// A refusal by the peer behind `host` (`word` names it; `refusal`, if this home knows it)
/// as this home's caller sees it.
pub(super) fn refused_by_peer(host: &str, refusal: Option<Refusal>, word: &str, message: &str) -> Error {
    let message = format!("{host}: {word}: {message}");
    match refusal {
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
        reason: code.as_str().to_string(),
        ..Default::default()
    }
}
