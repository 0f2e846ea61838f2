//! Cross-home ThreadSend at the target: sends arriving over a bridge, checked against its
//! grant on every call, deduplicated by (source home, source thread, key) so that any number
//! of retries delivers a message once, and delivered into a prompt only with `wake`; the
//! source's follow-ups, answered from the dedup; and the sweep that expires a message whose
//! deadline (the end of its source's retry window) passed before a turn took it or its
//! source confirmed it. The source's side is the outbox.

use std::time::Duration;

use kiki_proto as pb;
use kiki_proto::bridge::v1 as wire;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Inbound;
use crate::bridges::codec::{Mirror, Rejection, refusal_response, wire_refusal};
use crate::bridges::outbox::MAX_FOLLOW_UP_KEYS;
use crate::error::Error;
use crate::mailbox::{Delivery, Mailbox, Sent};
use crate::store::{BridgeRecord, ReceiptRecord, RoomTag, SourceRef, ThreadRecord};
use crate::store::{BridgeState, Direction, OutboxStatus, Permission, Refusal};
use kiki_proto::limits;

/// Keys are the sender's: scoped by its home and thread, they never collide.
fn key_scope(peer: &str, source_thread: &str) -> String {
    format!("{peer}/{source_thread}")
}

impl Inbound {
    /// A send arriving from `peer`: checked against the bridge, deduplicated by key,
    /// delivered into a prompt only with `wake`. Every outcome is a receipt: an accepted
    /// message's is committed with it, a final refusal's is written before the answer leaves.
    /// A replay (a retry) or a refusal for now changes nothing and adds none.
    pub(super) async fn serve_send(&self, peer: &str, call: wire::BridgeSendCall) -> pb::ThreadSendResponse {
        let mut receipt = ReceiptRecord {
            peer_home_id: peer.to_string(),
            key: call.idempotency_key.clone(),
            message_id: String::new(),
            target: call.target_session.clone(),
            status: OutboxStatus::Accepted,
            reason: String::new(),
            at: self.threads.clock().now_ms(),
        };
        let observer = self.threads.observer();
        let (code, message) = match self.accept_from(peer, &call, receipt.clone()).await {
            Ok(sent) => {
                observer.sent(&call.target_session, peer, &Ok(sent.clone()));
                return crate::convert::sent_to_pb(sent);
            }
            Err(refusal) => refusal,
        };
        observer.refused(&call.target_session, peer, code.as_str());
        debug!(peer, %code, %message, "bridged send refused");
        (receipt.status, receipt.reason) = (OutboxStatus::Rejected, code.to_string());
        // No message of this home's: the receipt shows the id its source named it by.
        if crate::threads::is_message_id(&call.message_id) {
            receipt.message_id = call.message_id.clone();
        }
        let response = refusal_response(code);
        // A refusal for now (the bridge's inbound access is off, say) is not the message's
        // fate: the source retries it, and its receipt comes with the outcome. A peer
        // without a bridge, or whose bridge is revoked, can do nothing but file a request:
        // its refused sends are not written down either, nor is a send whose key or target
        // breaks the limits (a source checks them before sending: only a rogue peer does).
        let bounded = (1..=limits::KEY_MAX_CHARS).contains(&call.idempotency_key.chars().count())
            && call.target_session.chars().count() <= limits::ID_MAX_CHARS;
        if !code.is_final()
            || !bounded
            || !matches!(
                self.table.find(|b| b.direction == Direction::Inbound && b.peer_home_id == peer).await,
                Ok(Some(b)) if b.state != BridgeState::Revoked
            )
        {
            return response;
        }
        // Written before the answer, so a peer's refused sends wait for the store's pace.
        if let Err(e) = self.store.add_refusal(&receipt).await {
            warn!(error = %e, "cannot record a bridge receipt");
        }
        response
    }

    /// A follow-up: where the messages with the call's keys stand, each as a replay would
    /// answer it. No message is created; each is confirmed or expired (see
    /// [`Mailbox::follow_up`]). Only a peer with an approved bridge is
    /// answered, even if that bridge is disabled now, its grant narrowed (as for a retry) or
    /// revoked: the source learns what became of what it sent — delivered before the
    /// revocation, or refused by it — and a key this home does not know is `bridge_revoked`.
    pub(super) async fn serve_follow_up(
        &self,
        peer: &str,
        call: wire::FollowUpCall,
    ) -> std::result::Result<wire::FollowUpReply, Rejection> {
        if call.keys.len() > MAX_FOLLOW_UP_KEYS {
            let given = call.keys.len();
            return Err(Rejection::Wire(
                Refusal::InvalidArgument,
                format!("keys: {given} given; a follow-up asks about at most {MAX_FOLLOW_UP_KEYS}"),
            ));
        }
        let unknown = match self.approved(peer).await {
            Ok(_) => Refusal::UnknownKey,
            Err(Rejection::Wire(Refusal::BridgeRevoked, _)) => Refusal::BridgeRevoked,
            Err(refusal) => return Err(refusal),
        };
        let mailbox = &self.mailbox;
        let keys: Vec<(String, String)> = call
            .keys
            .iter()
            .map(|k| (key_scope(peer, &k.source_thread), k.idempotency_key.clone()))
            .collect();
        let answers = match mailbox.follow_up(&keys, call.window_over).await {
            Ok(found) => found
                .into_iter()
                .map(|sent| sent.map(crate::convert::sent_to_pb).unwrap_or_else(|| refusal_response(unknown)))
                .map(Mirror::to_wire)
                .collect(),
            Err(e) => return Err(Rejection::Wire(wire_refusal(e).0, "cannot follow up now".into())),
        };
        Ok(wire::FollowUpReply { answers })
    }

    /// Expires bridged messages here whose deadline passed before a turn took them or their
    /// source confirmed them, about when it passes, until `stop`: their receipts then say
    /// `expired`, as their sources do, also for a thread that runs no turn for a long time.
    /// (A claim expires its thread's overdue messages first, whatever this sweep has done.)
    pub(in crate::bridges) async fn run_expiry(
        &self,
        stop: CancellationToken,
        worker: crate::observe::workers::Worker,
    ) {
        const EVERY: Duration = Duration::from_secs(1);
        const CHUNK: u32 = 256;
        loop {
            worker.busy();
            // A full chunk: more may be overdue, so the next one goes at once.
            let more = match self.store.expire_overdue_messages(self.threads.clock().now_ms(), CHUNK).await {
                Ok(n) => {
                    if n > 0 {
                        debug!(messages = n, "bridged messages expired at their deadline");
                        self.threads.observer().metrics().expired(n);
                    }
                    n == u64::from(CHUNK)
                }
                Err(e) => {
                    warn!(error = %e, "cannot expire overdue bridged messages");
                    worker.failed(&e);
                    false
                }
            };
            if more && !stop.is_cancelled() {
                continue;
            }
            worker.idle();
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.threads.clock().sleep(EVERY) => {}
            }
        }
    }

    async fn accept_from(
        &self,
        peer: &str,
        call: &wire::BridgeSendCall,
        receipt: ReceiptRecord,
    ) -> std::result::Result<Sent, (Refusal, String)> {
        if let Some(tag) = &call.room {
            let fits = |id: &str| id.chars().count() <= limits::ID_MAX_CHARS;
            let ids = [&tag.room_id, &tag.entry_id, &tag.author_host, &tag.author_thread];
            if tag.room_id.is_empty() || tag.entry_id.is_empty() || !ids.iter().all(|id| fits(id)) {
                let most = limits::ID_MAX_CHARS;
                return Err((
                    Refusal::InvalidArgument,
                    format!("room: a room and entry id of 1-{most} characters"),
                ));
            }
        }
        let (bridge, thread, mailbox) = match self.admit(peer, call).await {
            Ok(admitted) => admitted,
            Err(refusal) => return self.replay_refused(peer, call, refusal).await,
        };
        // A room's entries come only from the home the room is bound to here: no other peer
        // can pass its posts off as that room's (a binding is never moved, so this check
        // holds at the commit too).
        if let Some(tag) = &call.room {
            self.rooms.check_carrier(&tag.room_id, peer).await.map_err(|e| match e {
                Error::PermissionDenied(m) => (Refusal::PermissionDenied, m),
                e => wire_refusal(e),
            })?;
        }
        let source_thread = (!call.source_thread.is_empty()).then(|| call.source_thread.clone());
        // A room entry is shown as its author's (a thread of the peer, of a third home, or
        // the peer's owner), in the peer's room.
        let (source, room) = match &call.room {
            Some(tag) => (
                SourceRef {
                    host_id: if tag.author_host.is_empty() {
                        peer.to_string()
                    } else {
                        tag.author_host.clone()
                    },
                    thread_id: tag.author_thread.clone(),
                    workspace_id: String::new(),
                },
                Some(RoomTag { room: tag.room_id.clone(), entry: tag.entry_id.clone() }),
            ),
            None => (
                SourceRef {
                    host_id: peer.to_string(),
                    thread_id: source_thread.clone().unwrap_or_default(),
                    workspace_id: call.source_workspace.clone(),
                },
                None,
            ),
        };
        let delivery = Delivery {
            thread,
            source: Some(source),
            room,
            scope: key_scope(peer, &call.source_thread),
            content: &call.content,
            key: &call.idempotency_key,
            wake: bridge.permissions.contains(Permission::Wake),
            receipt: Some(receipt),
            deadline: (call.window_left_ms > 0).then(|| {
                let left = call.window_left_ms.min(crate::config::MAX_RETRY_WINDOW.as_millis() as u64);
                self.threads.clock().now_ms() + left as i64
            }),
            message_id: (!call.message_id.is_empty()).then(|| call.message_id.clone()),
            // A peer's keys are its own: no send here shares them.
            key_lock: None,
        };
        match mailbox.deliver(delivery).await {
            Ok(sent) => Ok(sent),
            // Revoked or turned off between the check above and the commit: refused as the
            // bridge's state now says — for now only, if it is back on already (a retry
            // settles it; revocation is final and must not be guessed).
            Err(Error::PermissionDenied(_)) => Err(match self.granted(peer, Permission::Send).await {
                Err(Rejection::Wire(code, message)) => (code, message),
                _ => (
                    Refusal::BridgeDisabled,
                    "the target's owner changed this bridge during the call; retry".into(),
                ),
            }),
            Err(e) => Err(wire_refusal(e)),
        }
    }

    /// A refused send whose key this home accepted before gets the original answer instead:
    /// a grant narrowed, a switch or the bridge's inbound access turned off since does not
    /// turn a retry away, nor does revocation (a message it found still waiting answers
    /// `bridge_revoked`; one delivered before it, `delivered`). Nothing new gets in.
    async fn replay_refused(
        &self,
        peer: &str,
        call: &wire::BridgeSendCall,
        refusal: (Refusal, String),
    ) -> std::result::Result<Sent, (Refusal, String)> {
        let mailbox = &self.mailbox;
        if call.idempotency_key.is_empty() {
            return Err(refusal);
        }
        let scope = key_scope(peer, &call.source_thread);
        match mailbox.replay_of(&scope, &call.idempotency_key, &call.target_session, &call.content).await {
            Ok(Some(sent)) => Ok(sent),
            Ok(None) => Err(refusal),
            Err(e) => Err(wire_refusal(e)),
        }
    }

    /// The bridge, target thread and mailbox of a send the bridge and the target let in.
    async fn admit(
        &self,
        peer: &str,
        call: &wire::BridgeSendCall,
    ) -> std::result::Result<(BridgeRecord, ThreadRecord, &Mailbox), (Refusal, String)> {
        let bridge = match self.granted(peer, Permission::Send).await {
            Ok(bridge) => bridge,
            Err(Rejection::Wire(code, message)) => return Err((code, message)),
            Err(Rejection::Daemon(e)) => return Err((Refusal::Internal, e.to_string())),
        };
        let chars = call.content.chars().count();
        if chars > limits::CONTENT_MAX_CHARS {
            return Err((
                Refusal::TooLarge,
                format!("content is {chars} characters; at most {}", limits::CONTENT_MAX_CHARS),
            ));
        }
        if call.content.is_empty()
            || call.idempotency_key.is_empty()
            || call.idempotency_key.chars().count() > limits::KEY_MAX_CHARS
        {
            return Err((
                Refusal::InvalidArgument,
                "content and a key of 1-256 characters are required".into(),
            ));
        }
        // The source thread is the source home's word, shown to the agent in the message's
        // header and kept as the sender's key scope: one of its own thread ids (empty for its
        // external clients), never text that could forge a header line or a path such as
        // `AHOME/OTHERHOME/th_…` posing as a thread of a third home.
        if !call.source_thread.is_empty() && !crate::threads::is_thread_id(&call.source_thread) {
            return Err((
                Refusal::InvalidArgument,
                "source_thread: a thread id (`th_` and a lowercase ULID), or empty for an external client"
                    .into(),
            ));
        }
        let workspace = &call.source_workspace;
        if !workspace.is_empty()
            && (call.source_thread.is_empty() || !crate::threads::workspace::is_id(workspace))
        {
            return Err((
                Refusal::InvalidArgument,
                "source_workspace: a workspace id (`ws_` and 16 hex digits) of the source thread, or empty"
                    .into(),
            ));
        }
        if !call.message_id.is_empty() && !crate::threads::is_message_id(&call.message_id) {
            return Err((
                Refusal::InvalidArgument,
                "message_id: `msg_` and a lowercase ULID, or empty".into(),
            ));
        }
        let thread = match self.threads.get("", "", &call.target_session).await {
            Ok(t) if bridge.workspaces.is_empty() || bridge.workspaces.contains(&t.workspace_id) => t,
            _ => {
                return Err((
                    Refusal::ThreadNotFound,
                    format!("no thread {} in this home", call.target_session),
                ));
            }
        };
        if thread.archived {
            return Err((Refusal::ThreadArchived, format!("thread {} is archived", thread.id)));
        }
        let mailbox = &self.mailbox;
        mailbox.may_receive(&thread).map_err(|e| (Refusal::CommunicationDisabled, e.to_string()))?;
        Ok((bridge, thread, mailbox))
    }
}
