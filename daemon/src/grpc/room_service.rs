//! `kiki.v1.RoomService`: the owner's room actions (creating a room, its roster and
//! its state are owner actions, not agent tools). Reading, adding a thread and
//! posting are ThreadService's, for the owner and agents alike.

use kiki_proto as pb;
use tonic::{Request, Response, Status};

use super::{caller, status};
use crate::convert::room_to_pb;
use crate::error::Error;
use crate::rooms::Rooms;
use crate::store::RoomChange;
use crate::threads::Threads;

pub struct RoomServiceImpl {
    threads: Threads,
    rooms: Rooms,
}

impl RoomServiceImpl {
    pub fn new(threads: Threads, rooms: Rooms) -> Self {
        Self { threads, rooms }
    }
}

#[tonic::async_trait]
impl pb::room_service_server::RoomService for RoomServiceImpl {
    async fn room_create(
        &self,
        request: Request<pb::RoomCreateRequest>,
    ) -> Result<Response<pb::RoomCreateResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let view = self.rooms.create(&caller, &r.host, &r.name).await.map_err(status)?;
        Ok(Response::new(pb::RoomCreateResponse { room: Some(room_to_pb(&view)) }))
    }

    async fn room_list(
        &self,
        request: Request<pb::RoomListRequest>,
    ) -> Result<Response<pb::RoomListResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let (views, next_cursor) = self.rooms.list(&caller, r.limit, &r.cursor).await.map_err(status)?;
        Ok(Response::new(pb::RoomListResponse { rooms: views.iter().map(room_to_pb).collect(), next_cursor }))
    }

    async fn room_remove(
        &self,
        request: Request<pb::RoomRemoveRequest>,
    ) -> Result<Response<pb::RoomRemoveResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let removed = self.rooms.remove(&caller, &r.room, &r.member).await.map_err(status)?;
        Ok(Response::new(pb::RoomRemoveResponse { removed }))
    }

    async fn room_add_persona(
        &self,
        request: Request<pb::RoomAddPersonaRequest>,
    ) -> Result<Response<pb::RoomAddPersonaResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let added = self
            .rooms
            .add_persona(&caller, &r.room, &r.persona, &r.profile, &r.instructions)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::RoomAddPersonaResponse { added }))
    }

    async fn room_set_state(
        &self,
        request: Request<pb::RoomSetStateRequest>,
    ) -> Result<Response<pb::RoomSetStateResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let change = match pb::RoomAction::try_from(r.action) {
            Ok(pb::RoomAction::Pause) => RoomChange::Pause,
            Ok(pb::RoomAction::Resume) => RoomChange::Resume,
            Ok(pb::RoomAction::Archive) => RoomChange::Archive,
            _ => return Err(status(Error::invalid("action", "pause, resume or archive"))),
        };
        let (view, changed) = self.rooms.change(&caller, &r.room, change).await.map_err(status)?;
        Ok(Response::new(pb::RoomSetStateResponse { room: Some(room_to_pb(&view)), changed }))
    }
}
