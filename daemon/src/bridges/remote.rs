//! Calls over an outbound bridge on the threads behind it: ThreadList, ThreadRead and
//! ThreadWait (sends go through the outbox), and a member's calls on a room behind it. Each
//! call's outcome is the bridge's link health, written when it changes. The calls are made in
//! the wire's terms (`kiki.bridge.v1`); the answers are the local API's once they arrive.

use std::collections::HashMap;
use std::sync::Arc;

use kiki_proto as pb;
use kiki_proto::bridge::v1 as wire;
use wire::bridge_call::Call;
use wire::bridge_reply::Reply;

use super::codec::{Mirror, from_wire};
use super::links::Links;
use super::pairing::Pairing;
use super::table::BridgeTable;
use super::{HEALTH_EVERY, ListQuery, ReadQuery};
use crate::error::{Error, Result};
use crate::mailbox::WaitResult;
use crate::store::{BridgeState, Refusal};

/// Calls over outbound bridges, with what they work with.
pub(super) struct Remote {
    pub(super) table: Arc<BridgeTable>,
    pub(super) links: Arc<Links>,
    /// Learns the grant from a call's outcome (link health).
    pub(super) pairing: Arc<Pairing>,
}

impl Remote {
    /// A call whose answer must be `expect`ed; other answers and wire errors are errors.
    async fn call<T>(&self, host: &str, call: Call, pick: fn(Reply) -> Option<T>) -> Result<T> {
        let mut bridge = self.table.outbound(host).await?;
        if bridge.state == BridgeState::Revoked {
            return Err(Error::PermissionDenied(format!("{host}: {}", Refusal::BridgeRevoked)));
        }
        let result = self.links.call(&bridge, &wire::BridgeCall::new(call), None).await;
        // Link health is written when it changes, not on every successful call.
        let now = self.pairing.now();
        let stale = bridge.last_success.is_none_or(|t| now - t > HEALTH_EVERY.as_millis() as i64);
        match &result {
            Ok(_) if stale || bridge.last_error_at > bridge.last_success => {
                bridge.last_success = Some(now);
                let _ = self.pairing.save_learnt(&bridge, false).await;
            }
            Ok(_) => {}
            Err(e) => {
                self.pairing.note_error(&mut bridge, e.to_string());
                let _ = self.pairing.save_learnt(&bridge, false).await;
            }
        }
        match result?.reply {
            Some(Reply::Error(e)) => Err(from_wire(host, e)),
            Some(reply) => {
                pick(reply).ok_or_else(|| Error::FailedPrecondition(format!("{host}: unexpected answer")))
            }
            None => Err(Error::FailedPrecondition(format!("{host}: empty answer"))),
        }
    }

    /// ThreadList of the home behind `host`.
    pub(super) async fn list(&self, host: &str, query: ListQuery<'_>) -> Result<pb::ThreadListResponse> {
        let call = wire::ThreadListCall {
            workspace_id: query.workspace_id.to_string(),
            limit: query.limit,
            cursor: query.cursor.to_string(),
        };
        self.call(host, Call::ThreadList(call), |r| match r {
            Reply::ThreadList(page) => Some(pb::ThreadListResponse::from_wire(page)),
            _ => None,
        })
        .await
    }

    /// ThreadWait on threads behind `host` (all targets on that one home, each named by its
    /// alias or home id). Cursor keys and result targets are translated between
    /// `HOST/SESSION` here and `SESSION` there.
    pub(super) async fn wait(
        &self,
        host: &str,
        targets: &[pb::ThreadRef],
        timeout_ms: Option<u32>,
        cursors: &HashMap<String, String>,
    ) -> Result<(Vec<WaitResult>, bool)> {
        let local_targets: Vec<wire::ThreadRef> =
            targets.iter().map(|t| pb::ThreadRef { host_id: String::new(), ..t.clone() }.to_wire()).collect();
        let cursors: HashMap<String, String> = cursors
            .iter()
            .map(|(key, cursor)| {
                let session = key.rsplit_once('/').map(|(_, s)| s).unwrap_or(key);
                (session.to_string(), cursor.clone())
            })
            .collect();
        let call = wire::ThreadWaitCall { targets: local_targets, timeout_ms, cursors };
        let mut answer = self
            .call(host, Call::ThreadWait(call), |r| match r {
                Reply::ThreadWait(answer) => Some(pb::ThreadWaitResponse::from_wire(answer)),
                _ => None,
            })
            .await?;
        // Each result is named back as the caller named its target (alias or home id),
        // beside the home id this home pinned (not the one the peer claims).
        let peer = self.table.outbound(host).await?.peer_home_id;
        for result in &mut answer.results {
            result.home_id = peer.clone();
            let Some(target) = result.target.as_mut() else { continue };
            let asked = targets.iter().find(|t| t.session_id == target.session_id);
            target.host_id = asked.map_or(host, |t| &t.host_id).to_string();
        }
        Ok((answer.results.into_iter().map(crate::convert::wait_result_from_pb).collect(), answer.timed_out))
    }

    /// Tells the home behind `host` that its thread `session` joined room `room_id` of this
    /// home (the thread must exist in the bridge's scope there, the bridge grant `send`).
    pub(super) async fn room_join(&self, host: &str, room_id: &str, session: &str) -> Result<()> {
        let call = wire::RoomJoinCall { room_id: room_id.to_string(), session: session.to_string() };
        self.call(host, Call::RoomJoin(call), |r| match r {
            Reply::RoomJoin(_) => Some(()),
            _ => None,
        })
        .await
    }

    /// A post to a room of the home behind `host`, by a thread of this home.
    pub(super) async fn room_post(
        &self,
        host: &str,
        call: wire::RoomPostCall,
    ) -> Result<pb::ThreadSendResponse> {
        self.call(host, Call::RoomPost(call), |r| match r {
            Reply::RoomPost(answer) => Some(pb::ThreadSendResponse::from_wire(answer)),
            _ => None,
        })
        .await
    }

    /// RoomRead of a room of the home behind `host`, by a thread of this home.
    pub(super) async fn room_read(
        &self,
        host: &str,
        call: wire::RoomReadCall,
    ) -> Result<pb::RoomReadResponse> {
        self.call(host, Call::RoomRead(call), |r| match r {
            Reply::RoomRead(page) => Some(pb::RoomReadResponse::from_wire(page)),
            _ => None,
        })
        .await
    }

    /// ThreadRead of a thread behind `host`.
    pub(super) async fn read(
        &self,
        target: &pb::ThreadRef,
        query: ReadQuery<'_>,
    ) -> Result<pb::ThreadReadResponse> {
        let call = wire::ThreadReadCall {
            target: Some(pb::ThreadRef { host_id: String::new(), ..target.clone() }.to_wire()),
            limit: query.limit,
            cursor: query.cursor.to_string(),
            content_ref: query.content_ref.to_string(),
            last: query.last,
        };
        self.call(&target.host_id, Call::ThreadRead(call), |r| match r {
            Reply::ThreadRead(page) => Some(pb::ThreadReadResponse::from_wire(page)),
            _ => None,
        })
        .await
    }
}
