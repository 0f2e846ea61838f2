//! One outbox entry's life, apart from the calls that move it: its next state after an
//! answer, a silence or a refusal (with the backoff it waits), how it answers its sender,
//! and the bridge calls that carry it.

use std::time::Duration;

use kiki_proto::bridge::v1 as wire;
use rand::Rng;
use sha2::{Digest, Sha256};
use tracing::debug;
use wire::bridge_call::Call;

use super::backoff::backoff;
use super::{FOLLOW_UP_CAP, FOLLOW_UP_FIRST};
use crate::bridges::codec::refused_by_peer;
use crate::error::Result;
use crate::mailbox::{Sent, key_conflict};
use crate::store::{
    EXPIRED, EventKind, EventRecord, MessageStatus, OutboxOutcome as Outcome, OutboxRecord, OutboxStatus,
    Refusal,
};

/// What a peer's answer to a ThreadSend or follow-up call says about a message.
#[derive(Clone)]
pub(super) enum Verdict {
    Delivered,
    /// The target holds it; no turn has taken it yet.
    Waiting,
    /// Refused for good (the reason), or the message became undeliverable there.
    Refused(String),
    /// The peer answered but not with an outcome (e.g. `bridge_disabled`): try again later.
    NotNow(String),
    /// No answer (the link failed or timed out).
    Unanswered(String),
}

pub(super) fn outbox_hash(peer: &str, target: &str, content: &str) -> String {
    let mut hash = Sha256::new();
    for part in [peer, target, content] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    data_encoding::HEXLOWER.encode(&hash.finalize())
}

/// An entry's final state, due never (unless the caller makes it due: an `accepted` entry's
/// follow-up, an expiry to ask the target about); a failure gives the sending thread an
/// `undeliverable` event.
pub(super) fn finish(now: i64, mut entry: OutboxRecord, status: OutboxStatus, reason: &str) -> Outcome {
    entry.status = status;
    entry.reason = reason.to_string();
    entry.next_attempt_at = i64::MAX;
    entry.updated_at = now;
    let failed = matches!(status, OutboxStatus::Rejected | OutboxStatus::Expired);
    let event = entry.source_thread.clone().filter(|_| failed).map(|thread| EventRecord {
        seq: 0,
        thread_id: thread,
        kind: EventKind::Undeliverable,
        turn_id: None,
        turn_status: None,
        reason: reason.to_string(),
        lifecycle: None,
        message_id: Some(entry.id.clone()),
        request_id: None,
        at: now,
    });
    (entry, event)
}

/// How a finished outbox entry answers its sender.
pub(super) fn sent_of(entry: &OutboxRecord, replayed: bool) -> Sent {
    let status = match entry.status {
        OutboxStatus::Delivered => MessageStatus::Delivered,
        OutboxStatus::Pending | OutboxStatus::Accepted => MessageStatus::Pending,
        OutboxStatus::Rejected | OutboxStatus::Expired => MessageStatus::Undeliverable,
    };
    Sent { message_id: entry.id.clone(), status, replayed, reason: entry.reason.clone() }
}

/// The answer to a send whose key is in the outbox (`stored`, or its outcome `in_flight`):
/// where the message stands (`undeliverable` and the reason if it was refused), as a local
/// replay reports it — or a conflict if the request differs.
pub(super) fn replay(
    in_flight: Option<OutboxRecord>,
    stored: OutboxRecord,
    request_hash: &str,
) -> Result<Sent> {
    let entry = in_flight.filter(|e| e.id == stored.id).unwrap_or(stored);
    if entry.request_hash != request_hash {
        return Err(key_conflict(&entry.id));
    }
    Ok(sent_of(&entry, true))
}

/// A send's first answer for its outbox entry: its status, or, if the target refused the
/// message, that refusal as an error (a first answer is `delivered` or `pending`).
pub(super) fn first_answer(host: &str, entry: &OutboxRecord) -> Result<Sent> {
    if entry.status == OutboxStatus::Rejected {
        let why = Refusal::parse(&entry.reason).map_or("the target refused it", Refusal::meaning);
        let message = format!("{why}; message {} — `kiki bridge receipts {host}` keeps it", entry.id);
        return Err(refused_by_peer(host, Refusal::parse(&entry.reason), &entry.reason, &message));
    }
    Ok(sent_of(entry, false))
}

/// A pending entry's state for another attempt after `delay`.
pub(super) fn retry_after(now: i64, mut entry: OutboxRecord, why: &str, delay: Duration) -> Outcome {
    entry.attempts += 1;
    debug!(message_id = %entry.id, attempts = entry.attempts, why, ?delay, "bridged send will be retried");
    entry.status = OutboxStatus::Pending;
    entry.reason = why.chars().take(200).collect();
    entry.next_attempt_at = now + delay.as_millis() as i64;
    entry.updated_at = now;
    (entry, None)
}

/// How long ago the entry's message was sent.
pub(super) fn age(now: i64, entry: &OutboxRecord) -> Duration {
    Duration::from_millis((now - entry.created_at).max(0) as u64)
}

/// A pending entry's state for another attempt after the peer answered but refused it for
/// now (say, the bridge's inbound access is off): the link is fine, so the pause grows with
/// the message's age instead of the peer's silence, from 250 ms to 30 s.
pub(super) fn retry_refused(now: i64, entry: OutboxRecord, why: &str) -> Outcome {
    let delay = backoff(age(now, &entry));
    retry_after(now, entry, why, delay)
}

/// An accepted entry's state for its next follow-up: after as long as the message has
/// existed (so the pauses double), from 1 s up to a minute — about 20 follow-ups in a
/// 15-minute window. `attempts` still counts the sends only.
pub(super) fn follow_up_later(now: i64, mut entry: OutboxRecord) -> Outcome {
    entry.next_attempt_at = next_follow_up_at(now, &entry);
    (entry, None)
}

/// When an entry's next follow-up is due (see [`follow_up_later`]).
pub(super) fn next_follow_up_at(now: i64, entry: &OutboxRecord) -> i64 {
    let delay =
        age(now, entry).clamp(FOLLOW_UP_FIRST, FOLLOW_UP_CAP).mul_f64(rand::rng().random_range(0.8..1.2));
    now + delay.as_millis() as i64
}

/// A follow-up due at `due`, brought forward to within half of what is left of a retry
/// window ending at `expires_at` while that is open (but not closer than 250 ms).
pub(super) fn within_the_window(due: i64, now: i64, expires_at: i64) -> i64 {
    let left = expires_at - now;
    if left <= 0 { due } else { due.min(now + (left / 2).max(250)) }
}

/// The bridge call that ships an entry (again: the target answers a known key from its
/// dedup), with what is `left` of its retry window: the target's deadline for it.
pub(super) fn send_call(entry: &OutboxRecord, left: Duration) -> wire::BridgeCall {
    wire::BridgeCall::new(Call::ThreadSend(wire::BridgeSendCall {
        target_session: entry.target_session.clone(),
        content: entry.content.clone(),
        idempotency_key: entry.key.clone(),
        source_thread: entry.source_thread.clone().unwrap_or_default(),
        source_workspace: entry.source_workspace.clone(),
        window_left_ms: (left.as_millis() as u64).max(1),
        message_id: entry.id.clone(),
        room: entry.room.as_ref().map(|r| wire::RoomTag {
            room_id: r.tag.room.clone(),
            entry_id: r.tag.entry.clone(),
            author_host: r.author.as_ref().map(|a| a.host_id.clone()).unwrap_or_default(),
            author_thread: r.author.as_ref().map(|a| a.thread_id.clone()).unwrap_or_default(),
        }),
    }))
}

/// The bridge call that asks where the entries' messages stand (their keys only), which
/// confirms those waiting there — or, with `window_over`, expires those not confirmed.
pub(super) fn follow_up_call(entries: &[OutboxRecord], window_over: bool) -> wire::BridgeCall {
    let keys = entries
        .iter()
        .map(|e| wire::FollowUpKey {
            source_thread: e.source_thread.clone().unwrap_or_default(),
            idempotency_key: e.key.clone(),
        })
        .collect();
    wire::BridgeCall::new(Call::FollowUp(wire::FollowUpCall { keys, window_over }))
}

/// An entry the target refused for good (or expired: its deadline passed there first).
pub(super) fn refused(now: i64, entry: OutboxRecord, reason: &str) -> Outcome {
    match reason {
        EXPIRED => finish(now, entry, OutboxStatus::Expired, reason),
        _ => finish(now, entry, OutboxStatus::Rejected, reason),
    }
}

/// What the target's answer for one message says; the target's message id is kept.
pub(super) fn verdict(answer: &wire::SendReply, entry: &mut OutboxRecord) -> Verdict {
    if !answer.message_id.is_empty() {
        entry.remote_message_id = answer.message_id.clone();
    }
    match answer.status() {
        wire::SendStatus::Delivered => Verdict::Delivered,
        wire::SendStatus::Pending => Verdict::Waiting,
        _ => {
            let reason = if answer.reason.is_empty() { "undeliverable" } else { answer.reason.as_str() };
            // With a message id, the message itself became undeliverable there.
            if Refusal::parse(reason).is_some_and(Refusal::is_final) || !answer.message_id.is_empty() {
                Verdict::Refused(reason.to_string())
            } else {
                Verdict::NotNow(reason.to_string())
            }
        }
    }
}
