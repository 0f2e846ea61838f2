//! `kiki.v1.BridgeService`: the owner's bridge actions (pairing, revocation, the
//! inbound switch, listing, receipts).

use kiki_proto as pb;
use tonic::{Request, Response, Status};

use super::{caller, status};
use crate::bridges::Bridges;
use crate::convert::{bridge_state_to_pb, direction_to_pb, permissions_to_pb, request_status_to_pb};
use crate::store::{BridgeRecord, BridgeRequestRecord};
use crate::threads::Threads;
use crate::time::rfc3339;

pub struct BridgeServiceImpl {
    threads: Threads,
    bridges: Bridges,
}

impl BridgeServiceImpl {
    pub fn new(threads: Threads, bridges: Bridges) -> Self {
        Self { threads, bridges }
    }

    /// The bridge as `kiki bridge list` shows it, with its pending count as it is now. The
    /// action that returned it has taken effect: a count that cannot be read is logged and
    /// shown as 0 rather than failing the call.
    async fn listed(&self, bridge: BridgeRecord) -> pb::Bridge {
        let pending = self.bridges.pending_count(&bridge).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, bridge = %bridge.id, "cannot count a bridge's pending messages");
            0
        });
        bridge_to_pb(bridge, pending)
    }
}

fn bridge_to_pb(b: BridgeRecord, pending: u64) -> pb::Bridge {
    pb::Bridge {
        id: b.id,
        direction: direction_to_pb(b.direction) as i32,
        peer_home_id: b.peer_home_id,
        alias: b.alias,
        address: b.address,
        state: bridge_state_to_pb(b.state) as i32,
        permissions: permissions_to_pb(b.permissions),
        workspaces: b.workspaces,
        created_at: rfc3339(b.created_at),
        last_success: b.last_success.map(rfc3339).unwrap_or_default(),
        last_error: b.last_error,
        last_error_at: b.last_error_at.map(rfc3339).unwrap_or_default(),
        pending,
        requested: permissions_to_pb(b.requested),
    }
}

fn request_to_pb(r: BridgeRequestRecord) -> pb::BridgeRequestRecord {
    pb::BridgeRequestRecord {
        id: r.id,
        peer_home_id: r.peer_home_id,
        name: r.name,
        want: permissions_to_pb(r.want),
        status: request_status_to_pb(r.status) as i32,
        created_at: rfc3339(r.created_at),
        address: r.address,
    }
}

#[tonic::async_trait]
impl pb::bridge_service_server::BridgeService for BridgeServiceImpl {
    async fn bridge_request(
        &self,
        request: Request<pb::BridgeRequestRequest>,
    ) -> Result<Response<pb::BridgeRequestResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let (bridge, request_id) =
            self.bridges.request(&caller, &r.address, &r.want, &r.expect, &r.name).await.map_err(status)?;
        Ok(Response::new(pb::BridgeRequestResponse { bridge: Some(self.listed(bridge).await), request_id }))
    }

    async fn bridge_pending(
        &self,
        request: Request<pb::BridgePendingRequest>,
    ) -> Result<Response<pb::BridgePendingResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let requests = self.bridges.pending(&caller).await.map_err(status)?;
        Ok(Response::new(pb::BridgePendingResponse {
            requests: requests.into_iter().map(request_to_pb).collect(),
        }))
    }

    async fn bridge_approve(
        &self,
        request: Request<pb::BridgeApproveRequest>,
    ) -> Result<Response<pb::BridgeApproveResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let bridge = self
            .bridges
            .approve(&caller, &r.request_id, &r.allow, &r.workspaces, &r.name)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::BridgeApproveResponse { bridge: Some(self.listed(bridge).await) }))
    }

    async fn bridge_reject(
        &self,
        request: Request<pb::BridgeRejectRequest>,
    ) -> Result<Response<pb::BridgeRejectResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let rejected =
            self.bridges.reject(&caller, &request.into_inner().request_id).await.map_err(status)?;
        Ok(Response::new(pb::BridgeRejectResponse { request: Some(request_to_pb(rejected)) }))
    }

    async fn bridge_rename(
        &self,
        request: Request<pb::BridgeRenameRequest>,
    ) -> Result<Response<pb::BridgeRenameResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let bridge = self.bridges.rename(&caller, &r.bridge, &r.name).await.map_err(status)?;
        Ok(Response::new(pb::BridgeRenameResponse { bridge: Some(self.listed(bridge).await) }))
    }

    async fn bridge_set_inbound(
        &self,
        request: Request<pb::BridgeSetInboundRequest>,
    ) -> Result<Response<pb::BridgeSetInboundResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let bridge = self.bridges.set_inbound(&caller, &r.bridge, r.enabled).await.map_err(status)?;
        Ok(Response::new(pb::BridgeSetInboundResponse { bridge: Some(self.listed(bridge).await) }))
    }

    async fn bridge_revoke(
        &self,
        request: Request<pb::BridgeRevokeRequest>,
    ) -> Result<Response<pb::BridgeRevokeResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let bridge = self.bridges.revoke(&caller, &request.into_inner().bridge).await.map_err(status)?;
        Ok(Response::new(pb::BridgeRevokeResponse { bridge: Some(self.listed(bridge).await) }))
    }

    async fn bridge_list(
        &self,
        request: Request<pb::BridgeListRequest>,
    ) -> Result<Response<pb::BridgeListResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let bridges = self.bridges.list(&caller).await.map_err(status)?;
        let mut listed = Vec::with_capacity(bridges.len());
        for b in bridges {
            let pending = self.bridges.pending_count(&b).await.map_err(status)?;
            listed.push(bridge_to_pb(b, pending));
        }
        Ok(Response::new(pb::BridgeListResponse { bridges: listed, listen: self.bridges.listen_addr() }))
    }

    async fn bridge_receipts(
        &self,
        request: Request<pb::BridgeReceiptsRequest>,
    ) -> Result<Response<pb::BridgeReceiptsResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let request = request.into_inner();
        let page = self
            .bridges
            .receipts(&caller, &request.bridge, request.limit, &request.cursor)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::BridgeReceiptsResponse {
            receipts: page.receipts,
            next_cursor: page.next_cursor,
        }))
    }
}
