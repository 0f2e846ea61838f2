//! A peer's calls on this home's rooms, and on rooms of a peer that a thread of this home
//! joined. The room's home decides everything about its room: a member's home only
//! forwards its thread's posts (`send`) and reads (`read`), and is told when one of its
//! threads joins (`send`, the thread in the bridge's scope).

use kiki_proto as pb;
use kiki_proto::bridge::v1 as wire;

use super::Inbound;
use crate::bridges::codec::Rejection;
use crate::error::Error;
use crate::store::{Permission, SourceRef};

impl Inbound {
    /// The room's home tells this one that a thread of it joined one of its rooms.
    pub(super) async fn serve_room_join(
        &self,
        peer: &str,
        call: wire::RoomJoinCall,
    ) -> std::result::Result<wire::RoomJoinReply, Rejection> {
        let bridge = self.granted(peer, Permission::Send).await?;
        let target =
            pb::ThreadRef { host_id: String::new(), workspace_id: String::new(), session_id: call.session };
        let thread = self.scoped_thread(&bridge, &target).await?;
        if thread.archived {
            return Err(Error::FailedPrecondition(format!("thread {} is archived", thread.id)).into());
        }
        self.rooms.joined_elsewhere(&call.room_id, peer).await?;
        Ok(wire::RoomJoinReply {})
    }

    /// A post by a thread of `peer` to a room of this home.
    pub(super) async fn serve_room_post(
        &self,
        peer: &str,
        call: wire::RoomPostCall,
    ) -> std::result::Result<pb::ThreadSendResponse, Rejection> {
        self.granted(peer, Permission::Send).await?;
        let author = SourceRef {
            host_id: peer.to_string(),
            thread_id: call.source_thread,
            workspace_id: call.source_workspace,
        };
        let rooms = &self.rooms;
        let posted = rooms
            .post_from_peer(peer, author, &call.room_id, &call.content, &call.mentions, &call.idempotency_key)
            .await?;
        Ok(crate::convert::posted_to_pb(posted))
    }

    /// RoomRead by a thread of `peer` of a room of this home.
    pub(super) async fn serve_room_read(
        &self,
        peer: &str,
        call: wire::RoomReadCall,
    ) -> std::result::Result<pb::RoomReadResponse, Rejection> {
        self.granted(peer, Permission::Read).await?;
        let rooms = &self.rooms;
        let page =
            rooms.read_for_peer(peer, &call.source_thread, &call.room_id, call.limit, &call.after_id).await?;
        Ok(crate::convert::room_page_to_pb(page))
    }
}
