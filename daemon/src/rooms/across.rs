//! Rooms across homes. A member of another home is added through this home's bridge to
//! it, and woken through the outbox; a room of another home that a thread of this home
//! joined is bound, here, to the home that joined it, for good: no other peer can move it.

use super::{RoomPage, Rooms, archived, no_room, not_member, room_bound_elsewhere};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::store::{MemberKind, MemberRecord, rules};
use kiki_proto::limits::{self, ID_MAX_CHARS};

impl Rooms {
    /// Whether the room lives in this home.
    pub async fn is_here(&self, room_id: &str) -> Result<bool> {
        // From what posts keep: the post that follows finds the room there too.
        match self.posting_view(room_id).await {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The home a room of another home lives in, as this home learnt it; `NOT_FOUND` if it
    /// knows none.
    pub async fn home_of(&self, room_id: &str) -> Result<String> {
        limits::text("room", room_id, ID_MAX_CHARS)?;
        self.inner.store.room_home(room_id).await?.ok_or_else(|| no_room(room_id))
    }

    /// Records that a thread of this home joined room `room_id` of home `home_id` (that
    /// home told this one, over its bridge). The first home to say so holds the room here
    /// for good: no other peer can join this home's threads to it, move their posts and
    /// reads elsewhere, or bring its entries; nor can a peer claim a room of this home.
    pub async fn joined_elsewhere(&self, room_id: &str, home_id: &str) -> Result<()> {
        limits::text("room_id", room_id, ID_MAX_CHARS)?;
        if self.is_here(room_id).await? {
            return Err(Error::PermissionDenied(format!("room {room_id} is a room of this home")));
        }
        let bound = self.inner.store.bind_room(room_id, home_id, self.now()).await?;
        if bound != home_id {
            return Err(room_bound_elsewhere(room_id, &bound));
        }
        Ok(())
    }

    /// Checks that an entry of room `room_id` brought by `home_id` comes from the home the
    /// room is bound to here (see [`Rooms::joined_elsewhere`]).
    pub async fn check_carrier(&self, room_id: &str, home_id: &str) -> Result<()> {
        match self.inner.store.room_home(room_id).await? {
            Some(bound) if bound == home_id => Ok(()),
            Some(bound) => Err(room_bound_elsewhere(room_id, &bound)),
            None => Err(Error::PermissionDenied(format!(
                "no thread of this home joined room {room_id} through your bridge"
            ))),
        }
    }

    /// RoomRead by a thread of the home `peer` (its bridge grants `read`): a member of the
    /// room.
    pub async fn read_for_peer(
        &self,
        peer: &str,
        source_thread: &str,
        room_id: &str,
        limit: Option<u32>,
        after: &str,
    ) -> Result<RoomPage> {
        let view = self.view(room_id).await?;
        let member = rules::remote_member_id(peer, source_thread);
        if !view.members.iter().any(|m| m.member_id == member) {
            return Err(not_member(&view.room, "RoomRead"));
        }
        self.page(view, limit, after).await
    }

    /// Adds a thread of another home (`home_id`, whose owner's bridge to this one admitted
    /// the room, see `Messaging::room_add`) as the member `HOME_ID/SESSION`.
    pub async fn add_remote(
        &self,
        caller: &Caller,
        room_id: &str,
        home_id: &str,
        session: &str,
    ) -> Result<bool> {
        let view = self.view(room_id).await?;
        if let Some(turn) = caller.turn() {
            self.admit(turn, &view, "RoomAdd").await?;
        }
        let member = MemberRecord {
            member_id: rules::remote_member_id(home_id, session),
            kind: MemberKind::Remote,
            thread_id: None,
            profile: String::new(),
            instructions: String::new(),
            added_at: self.now(),
        };
        self.join(&view.room.id, &member).await
    }

    /// Checks that an agent may add to the room (before its home asks another one).
    pub async fn may_add(&self, caller: &Caller, room_id: &str) -> Result<()> {
        let view = self.view(room_id).await?;
        if view.room.archived {
            return Err(archived(&view.room));
        }
        if let Some(turn) = caller.turn() {
            self.admit(turn, &view, "RoomAdd").await?;
        }
        Ok(())
    }
}
