//! The rules a send is decided by, written once above every backend. A backend reads the
//! facts a decision rests on inside its transaction ([`SendFacts`]: a few lookups by key),
//! asks [`refuse_send`], and writes the message only when nothing refuses it: a second
//! backend writes the SQL that reads the facts and stores the message, never the decision.

use super::{NewMessage, SendOutcome};

/// What a send's decision rests on, read in the transaction that would store it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendFacts {
    /// The sender's key, if kept: the request hash it was given for, and its message.
    pub key: Option<KeptKey>,
    /// A message the sender sent to another home with this key (its outbox entry's id).
    pub key_sent_away: Option<String>,
    /// A bridged key its source gave up on before any of its calls arrived (read only for
    /// a bridged send: [`may_be_given_up`]).
    pub key_given_up: bool,
    /// The target thread exists and is not archived.
    pub target_live: bool,
    /// A bridged send's inbound bridge is active now (read only for a bridged send:
    /// [`bridged_from`]; a local send's is `true`).
    pub bridge_open: bool,
    /// A bridged send's id is one this home already gave a message, or to one it sent
    /// (read only for a bridged send).
    pub id_taken: bool,
}

/// A kept idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptKey {
    pub request_hash: String,
    pub message_id: String,
}

/// The peer a send came from over a bridge, if it did: its bridge and its id are facts to
/// read.
pub fn bridged_from(m: &NewMessage) -> Option<&str> {
    m.source.as_ref().map(|s| s.host_id.as_str()).filter(|h| !h.is_empty())
}

/// Whether the send's key may have been given up by its source: only a bridged send with
/// a deadline (the source's retry window) can arrive after that.
pub fn may_be_given_up(m: &NewMessage) -> bool {
    m.deadline.is_some()
}

/// The outcome of a send that is not stored, in the order the rules apply: the key decides
/// first (the same request replays, another conflicts — also with a message sent to
/// another home), then a bridged key given up on, the target, the bridge and the id the
/// source named it by. `None`: the send is accepted and stored.
pub fn refuse_send(m: &NewMessage, facts: &SendFacts) -> Option<SendOutcome> {
    if let Some(key) = &facts.key {
        let message_id = key.message_id.clone();
        return Some(if key.request_hash == m.request_hash {
            SendOutcome::Replayed { message_id }
        } else {
            SendOutcome::KeyConflict { message_id }
        });
    }
    if let Some(message_id) = &facts.key_sent_away {
        return Some(SendOutcome::KeyConflict { message_id: message_id.clone() });
    }
    if may_be_given_up(m) && facts.key_given_up {
        return Some(SendOutcome::GivenUp);
    }
    if !facts.target_live {
        return Some(SendOutcome::TargetGone);
    }
    // A bridge's call is let in before this transaction: a revocation (which refuses what
    // the peer brought) may have committed in between. It keeps the id its source gave it,
    // which must not be one already given here.
    if bridged_from(m).is_some() {
        if !facts.bridge_open {
            return Some(SendOutcome::BridgeClosed);
        }
        if facts.id_taken {
            return Some(SendOutcome::IdTaken);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SourceRef;

    fn send(bridged: bool) -> NewMessage {
        NewMessage {
            id: "msg_1".into(),
            target_thread: "th_t".into(),
            source: bridged.then(|| SourceRef { host_id: "PEER".into(), thread_id: "th_s".into() }),
            content: "hi".into(),
            key_scope: "scope".into(),
            key: "k".into(),
            request_hash: "h".into(),
            wake: true,
            claim: None,
            receipt: None,
            deadline: bridged.then_some(10),
            now: 1,
        }
    }

    fn open() -> SendFacts {
        SendFacts { target_live: true, bridge_open: true, ..SendFacts::default() }
    }

    fn kept(hash: &str) -> Option<KeptKey> {
        Some(KeptKey { request_hash: hash.into(), message_id: "msg_0".into() })
    }

    #[test]
    fn the_key_decides_first_then_the_target_then_the_bridge() {
        let local = send(false);
        assert_eq!(refuse_send(&local, &open()), None, "accepted");
        let replay = SendFacts { key: kept("h"), target_live: false, ..open() };
        assert_eq!(refuse_send(&local, &replay), Some(SendOutcome::Replayed { message_id: "msg_0".into() }));
        let other = SendFacts { key: kept("other"), ..open() };
        assert_eq!(
            refuse_send(&local, &other),
            Some(SendOutcome::KeyConflict { message_id: "msg_0".into() })
        );
        let away = SendFacts { key_sent_away: Some("msg_9".into()), ..open() };
        assert_eq!(refuse_send(&local, &away), Some(SendOutcome::KeyConflict { message_id: "msg_9".into() }));
        assert_eq!(
            refuse_send(&local, &SendFacts { target_live: false, ..open() }),
            Some(SendOutcome::TargetGone)
        );
        // A local send has no bridge to be closed, nor an id of its source's.
        let closed = SendFacts { bridge_open: false, id_taken: true, ..open() };
        assert_eq!(refuse_send(&local, &closed), None);
    }

    #[test]
    fn a_bridged_send_also_needs_its_key_kept_its_bridge_open_and_a_free_id() {
        let bridged = send(true);
        assert_eq!(bridged_from(&bridged), Some("PEER"));
        assert_eq!(refuse_send(&bridged, &open()), None);
        let given_up = SendFacts { key_given_up: true, target_live: false, ..open() };
        assert_eq!(refuse_send(&bridged, &given_up), Some(SendOutcome::GivenUp), "before the target");
        let closed = SendFacts { bridge_open: false, id_taken: true, ..open() };
        assert_eq!(refuse_send(&bridged, &closed), Some(SendOutcome::BridgeClosed), "before the id");
        assert_eq!(
            refuse_send(&bridged, &SendFacts { id_taken: true, ..open() }),
            Some(SendOutcome::IdTaken)
        );
    }
}
