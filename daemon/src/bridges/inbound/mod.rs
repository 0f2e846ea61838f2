//! Inbound: serving the calls of peers with a bridge to this home (and a stranger's pairing
//! request). Every call is checked here against the bridge approved for the peer's verified
//! home id, on every call: an unknown peer can only file a pairing request; ThreadList and
//! ThreadRead need `read` and stay inside the granted workspaces, ThreadWait needs `wait`,
//! ThreadSend `send` (and `wake` to deliver into a prompt), room calls as [`rooms`] says; a revoked bridge answers
//! `bridge_revoked` at once, a disabled one `bridge_disabled`. Sends and follow-ups are in
//! [`sends`].

mod rooms;
mod sends;

use std::net::IpAddr;
use std::sync::Arc;

use kiki_bridge::{CallHandler, TrustCheck};
use kiki_proto as pb;
use kiki_proto::bridge::v1 as wire;
use prost::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, warn};
use wire::bridge_call::Call;
use wire::bridge_reply::Reply;

use super::HEALTH_EVERY;
use super::codec::{Mirror, Rejection, to_wire, wire_error};
use super::links::Links;
use super::pairing::Pairing;
use super::parked::ParkedCalls;
use super::table::BridgeTable;
use crate::config::Config;
use crate::error::Error;
use crate::mailbox::{Mailbox, Waits};
use crate::rooms::Rooms;
use crate::store::BridgeRecord;
use crate::store::Store;
use crate::store::{BridgeState, Direction, Permission, Refusal};
use crate::threads::Threads;

/// Serving peers' calls, with what that works with.
pub(super) struct Inbound {
    pub(super) table: Arc<BridgeTable>,
    /// The endpoint peers reach this home on.
    pub(super) links: Arc<Links>,
    pub(super) store: Arc<dyn Store>,
    pub(super) config: Arc<Config>,
    pub(super) threads: Threads,
    /// Takes the messages peers send.
    pub(super) mailbox: Mailbox,
    /// Serves peers' ThreadWaits.
    pub(super) waits: Waits,
    /// Serves peers' room calls.
    pub(super) rooms: Rooms,
    /// Peers' parked calls, ended when their bridge is revoked or turned off.
    pub(super) parked: Arc<ParkedCalls>,
    /// Files peers' pairing requests and answers their pings.
    pub(super) pairing: Arc<Pairing>,
}

impl Inbound {
    /// Accepts peers' connections until `stop` (or the endpoint closes), serving each on a
    /// task of `tasks`.
    pub(super) async fn run(self: Arc<Self>, stop: CancellationToken, tasks: TaskTracker) {
        let accepting = self;
        let worker = accepting.threads.observer().worker("bridge endpoint");
        loop {
            worker.idle();
            let next = tokio::select! {
                () = stop.cancelled() => break,
                next = accepting.links.endpoint().accept() => next,
            };
            let Some(peer) = next else { break };
            worker.busy();
            // A peer with a bridge here gets a known peer's allowance — also when the
            // bridge is disabled, or revoked within the time its keys are kept: its
            // retries and follow-ups about what it sent are answered (large sends
            // included), the rest refused. Anyone else gets a stranger's.
            let trusted: TrustCheck = {
                let (checking, peer_id) = (accepting.clone(), peer.peer_home_id().to_string());
                let kept = accepting.config.mailbox.key_retention.as_millis() as i64;
                Arc::new(move || {
                    let (checking, peer_id) = (checking.clone(), peer_id.clone());
                    Box::pin(async move {
                        let inbound = checking
                            .table
                            .find(|b| b.direction == Direction::Inbound && b.peer_home_id == peer_id);
                        matches!(
                            inbound.await,
                            Ok(Some(b)) if b.state != BridgeState::Revoked || checking.threads.clock().now_ms() - b.updated_at < kept
                        )
                    })
                })
            };
            let serving = accepting.clone();
            let (peer_id, from) = (peer.peer_home_id().to_string(), peer.peer_addr().ip());
            let handler: CallHandler = Arc::new(move |request: Vec<u8>| {
                let serving = serving.clone();
                let peer_id = peer_id.clone();
                Box::pin(async move {
                    let reply = match wire::BridgeCall::decode(request.as_slice()) {
                        Ok(call) => serving.handle(&peer_id, from, call).await,
                        Err(e) => wire_error(Refusal::InvalidArgument, format!("undecodable call: {e}")),
                    };
                    reply.encode_to_vec()
                })
            });
            tasks.spawn(peer.serve(handler, trusted));
        }
        accepting.links.endpoint().close().await;
    }

    /// Answers one call from `peer` (a verified home id) at the address `from`. A call over
    /// an inbound bridge is a real round trip from the peer: it is that bridge's link health.
    pub(super) async fn handle(&self, peer: &str, from: IpAddr, call: wire::BridgeCall) -> wire::BridgeReply {
        // Its span continues the caller's trace.
        let span = tracing::debug_span!("bridge serve", peer = %peer);
        crate::observe::traces::continue_trace(&span, &call.traceparent);
        async {
            let reply = self.answer(peer, from, call).await;
            self.heard_from(peer).await;
            reply
        }
        .instrument(span)
        .await
    }

    /// Records that `peer` reached its inbound bridge, when the last record is stale
    /// (written when it changes, not on every call).
    async fn heard_from(&self, peer: &str) {
        let Ok(Some(bridge)) =
            self.table.find(|b| b.direction == Direction::Inbound && b.peer_home_id == peer).await
        else {
            return;
        };
        let now = self.threads.clock().now_ms();
        if bridge.state == BridgeState::Revoked
            || bridge.last_success.is_some_and(|t| now - t <= HEALTH_EVERY.as_millis() as i64)
        {
            return;
        }
        // Only that column: the record read above may be outdated by a decision meanwhile.
        if let Err(e) = self.store.bridge_heard_from(&bridge.id, now).await {
            warn!(error = %e, "cannot record an inbound bridge's health");
        }
    }

    /// Serves one call. The services answer in the local API's terms; each answer becomes the
    /// wire's here, as it leaves.
    async fn answer(&self, peer: &str, from: IpAddr, call: wire::BridgeCall) -> wire::BridgeReply {
        let result = match call.call {
            Some(Call::Pair(pair)) => self.pairing.file_request(peer, from, pair).await.map(Reply::Pair),
            Some(Call::Ping(_)) => self.pairing.ping_reply(peer).await.map(Reply::Ping),
            Some(Call::ThreadList(call)) => {
                self.serve_list(peer, call).await.map(|page| Reply::ThreadList(page.to_wire()))
            }
            Some(Call::ThreadRead(call)) => {
                self.serve_read(peer, call).await.map(|page| Reply::ThreadRead(page.to_wire()))
            }
            Some(Call::ThreadWait(call)) => {
                self.serve_wait(peer, call).await.map(|waited| Reply::ThreadWait(waited.to_wire()))
            }
            Some(Call::ThreadSend(call)) => {
                Ok(Reply::ThreadSend(self.serve_send(peer, call).await.to_wire()))
            }
            Some(Call::FollowUp(call)) => self.serve_follow_up(peer, call).await.map(Reply::FollowUp),
            Some(Call::Withdraw(call)) => self.pairing.serve_withdraw(peer, call).await.map(Reply::Withdraw),
            Some(Call::RoomJoin(call)) => self.serve_room_join(peer, call).await.map(Reply::RoomJoin),
            Some(Call::RoomPost(call)) => {
                self.serve_room_post(peer, call).await.map(|posted| Reply::RoomPost(posted.to_wire()))
            }
            Some(Call::RoomRead(call)) => {
                self.serve_room_read(peer, call).await.map(|page| Reply::RoomRead(page.to_wire()))
            }
            None => return wire_error(Refusal::InvalidArgument, "empty call"),
        };
        match result {
            Ok(reply) => wire::BridgeReply { reply: Some(reply) },
            Err(Rejection::Wire(code, message)) => wire_error(code, message),
            Err(Rejection::Daemon(e)) => to_wire(e),
        }
    }

    /// The peer's approved inbound bridge, whether its access is on or off now; a revoked
    /// bridge, or none, is refused.
    pub(super) async fn approved(&self, peer: &str) -> std::result::Result<BridgeRecord, Rejection> {
        match self.table.find(|b| b.direction == Direction::Inbound && b.peer_home_id == peer).await? {
            Some(b) if b.state == BridgeState::Revoked => {
                Err(Rejection::Wire(Refusal::BridgeRevoked, "the target's owner revoked this bridge".into()))
            }
            Some(b) if b.state == BridgeState::Active || b.state == BridgeState::Disabled => Ok(b),
            _ => Err(Rejection::Wire(
                Refusal::PermissionDenied,
                "no approved bridge from your home; file a request with `kiki bridge request`".into(),
            )),
        }
    }

    /// The peer's inbound bridge, if active and granting `permission`.
    pub(super) async fn granted(
        &self,
        peer: &str,
        permission: Permission,
    ) -> std::result::Result<BridgeRecord, Rejection> {
        match self.approved(peer).await? {
            b if b.state == BridgeState::Disabled => Err(Rejection::Wire(
                Refusal::BridgeDisabled,
                "the target's owner turned this bridge's inbound access off for now; nothing was deleted"
                    .into(),
            )),
            b if b.permissions.contains(permission) => Ok(b),
            b => Err(Rejection::Wire(
                Refusal::PermissionDenied,
                format!(
                    "this bridge does not grant {:?} (granted: {})",
                    permission.as_str(),
                    b.permissions.joined()
                ),
            )),
        }
    }

    async fn serve_list(
        &self,
        peer: &str,
        request: wire::ThreadListCall,
    ) -> std::result::Result<pb::ThreadListResponse, Rejection> {
        let bridge = self.granted(peer, Permission::Read).await?;
        // Named by id only: a directory would be looked up on this home's disk.
        if !request.workspace_id.is_empty() && !crate::threads::workspace::is_id(&request.workspace_id) {
            return Err(Error::invalid("workspace_id", "a workspace id (ws_ and 16 hex digits)").into());
        }
        let page = self
            .threads
            .list(
                Some(request.workspace_id.to_ascii_lowercase()),
                request.limit,
                &request.cursor,
                &bridge.workspaces,
            )
            .await?;
        let home = self.links.home_id().to_string();
        Ok(pb::ThreadListResponse {
            threads: page
                .threads
                .iter()
                .map(|t| crate::convert::thread_to_pb(t, &home, self.threads.communication(t)))
                .collect(),
            next_cursor: page.next_cursor,
        })
    }

    async fn serve_read(
        &self,
        peer: &str,
        request: wire::ThreadReadCall,
    ) -> std::result::Result<pb::ThreadReadResponse, Rejection> {
        let bridge = self.granted(peer, Permission::Read).await?;
        let target = request.target.map(pb::ThreadRef::from_wire).unwrap_or_default();
        let thread = self.scoped_thread(&bridge, &target).await?;
        let (limit, cursor, content_ref) = (request.limit, &request.cursor, &request.content_ref);
        let read = self.threads.read_any(thread, limit, cursor, content_ref, request.last).await?;
        let communication = self.threads.communication(crate::threads::Threads::read_thread(&read));
        Ok(crate::convert::read_to_pb(read, self.links.home_id(), communication))
    }

    /// ThreadWait for a peer: needs `wait`, stays inside the scope, never wakes anything.
    async fn serve_wait(
        &self,
        peer: &str,
        request: wire::ThreadWaitCall,
    ) -> std::result::Result<pb::ThreadWaitResponse, Rejection> {
        // Taken before the grant is checked, so a revocation in between still ends this call;
        // but only for a peer with a bridge here (a stranger's calls must leave nothing).
        self.approved(peer).await?;
        let cut_off = self.parked.token(peer);
        let bridge = self.granted(peer, Permission::Wait).await?;
        crate::mailbox::wait_target_count(request.targets.len())?;
        let targets: Vec<pb::ThreadRef> = request.targets.into_iter().map(pb::ThreadRef::from_wire).collect();
        if !bridge.workspaces.is_empty() {
            for target in &targets {
                self.scoped_thread(&bridge, target).await?;
            }
        }
        let waits = &self.waits;
        let (results, timed_out) = tokio::select! {
            waited = waits.wait(targets, request.timeout_ms, request.cursors) => waited?,
            // Whatever the bridge's state now refuses (bridge_revoked, bridge_disabled).
            () = cut_off.cancelled() => return Err(self.granted(peer, Permission::Wait).await.err().unwrap_or_else(|| {
                Rejection::Wire(Refusal::BridgeRevoked, "the target's owner changed this bridge".into())
            })),
        };
        Ok(pb::ThreadWaitResponse {
            results: results.into_iter().map(crate::convert::wait_result_to_pb).collect(),
            timed_out,
        })
    }

    /// The thread `target` names, as a peer limited to `bridge`'s scope sees it: outside the
    /// scope is exactly like absent — also when the peer names a workspace, where "not in
    /// that workspace" would tell it the thread exists.
    async fn scoped_thread(
        &self,
        bridge: &BridgeRecord,
        target: &pb::ThreadRef,
    ) -> std::result::Result<crate::store::ThreadRecord, Rejection> {
        if bridge.workspaces.is_empty() {
            return Ok(self.threads.get("", &target.workspace_id, &target.session_id).await?);
        }
        let absent = || Error::NotFound(format!("no thread {} in this home", target.session_id));
        let thread = self.threads.get("", "", &target.session_id).await?;
        let named_elsewhere = !target.workspace_id.is_empty() && target.workspace_id != thread.workspace_id;
        if named_elsewhere || !bridge.workspaces.contains(&thread.workspace_id) {
            return Err(absent().into());
        }
        Ok(thread)
    }
}
