//! Rooms on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl RoomStore for PostgresStore {
    #[allow(unused_variables)]
    async fn create_room(&self, room: &RoomRecord) -> StoreResult<()> {
        todo!("create_room")
    }

    #[allow(unused_variables)]
    async fn room(&self, id: &str) -> StoreResult<Option<RoomRecord>> {
        todo!("room")
    }

    #[allow(unused_variables)]
    async fn list_rooms(&self, before_seq: Option<i64>, limit: u32) -> StoreResult<Vec<RoomRecord>> {
        todo!("list_rooms")
    }

    #[allow(unused_variables)]
    async fn room_members(&self, room_id: &str) -> StoreResult<Vec<MemberRecord>> {
        todo!("room_members")
    }

    #[allow(unused_variables)]
    async fn add_member(&self, room_id: &str, member: &MemberRecord) -> StoreResult<AddOutcome> {
        todo!("add_member")
    }

    #[allow(unused_variables)]
    async fn remove_member(&self, room_id: &str, member_id: &str, now: Millis) -> StoreResult<bool> {
        todo!("remove_member")
    }

    #[allow(unused_variables)]
    async fn set_persona_thread(&self, room_id: &str, persona: &str, thread_id: &str) -> StoreResult<String> {
        todo!("set_persona_thread")
    }

    #[allow(unused_variables)]
    async fn change_room(&self, room_id: &str, change: RoomChange, reason: &str, now: Millis) -> StoreResult<Option<(RoomRecord, bool)>> {
        todo!("change_room")
    }

    #[allow(unused_variables)]
    async fn post_to_room(&self, entry: &NewEntry) -> StoreResult<PostOutcome> {
        todo!("post_to_room")
    }

    #[allow(unused_variables)]
    async fn room_entry_by_key(&self, room_id: &str, key_scope: &str, key: &str) -> StoreResult<Option<(String, EntryRecord)>> {
        todo!("room_entry_by_key")
    }

    #[allow(unused_variables)]
    async fn room_entries(&self, room_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<EntryRecord>> {
        todo!("room_entries")
    }

    #[allow(unused_variables)]
    async fn rooms_of_thread(&self, thread_id: &str) -> StoreResult<Vec<String>> {
        todo!("rooms_of_thread")
    }

    #[allow(unused_variables)]
    async fn entry_deliveries(&self, entry_id: &str) -> StoreResult<Vec<EntryDelivery>> {
        todo!("entry_deliveries")
    }

    #[allow(unused_variables)]
    async fn room_home(&self, room_id: &str) -> StoreResult<Option<String>> {
        todo!("room_home")
    }

    #[allow(unused_variables)]
    async fn bind_room(&self, room_id: &str, home_id: &str, now: Millis) -> StoreResult<String> {
        todo!("bind_room")
    }

}
