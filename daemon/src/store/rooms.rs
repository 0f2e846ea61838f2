//! Rooms: a host thread, a roster of up to six members, and a log with one order per room.
//! A post is one transaction: its entry, the loop guard's count, and the input (or the turn
//! it starts) of every member it wakes, decided by [`rules::plan_post`].

use async_trait::async_trait;

use super::*;

/// Members a room holds beside its host.
pub const ROOM_MEMBERS_MAX: usize = 6;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomRecord {
    pub seq: i64,
    pub id: String,
    pub name: String,
    pub host_thread: String,
    pub paused: bool,
    /// Why it is paused: the owner, or the loop guard with its count.
    pub paused_reason: String,
    pub archived: bool,
    /// Wakes caused by agents' posts since the owner last posted or resumed the room.
    pub agent_wakes: i64,
    /// The newest entry's seq; 0 while the log is empty.
    pub last_seq: i64,
    pub created_at: Millis,
    pub updated_at: Millis,
}

words! {
    MemberKind {
        /// A thread of this home.
        Thread => "thread",
        /// A named profile and instructions, made a thread of this home when first mentioned.
        Persona => "persona",
        /// A thread of another home, reached over a bridge (`HOME_ID/SESSION`).
        Remote => "remote",
    }
}

/// One member beside the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    /// What mentions name: a thread id, a persona id, or `HOME_ID/SESSION`.
    pub member_id: String,
    pub kind: MemberKind,
    /// The thread of this home it is: a thread member's own id, a persona's once made.
    pub thread_id: Option<String>,
    /// A persona's profile and instructions.
    pub profile: String,
    pub instructions: String,
    pub added_at: Millis,
}

/// One entry of a room's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRecord {
    pub room_id: String,
    /// Its place in the room's one order: 1, 2, …
    pub seq: i64,
    pub id: String,
    /// The posting thread; `None` for the owner.
    pub author: Option<SourceRef>,
    pub content: String,
    /// Roster ids, as the post named them.
    pub mentions: Vec<String>,
    /// The roster ids it woke.
    pub woke: Vec<String>,
    pub at: Millis,
    /// How its deliveries to the members of other homes it woke stand (filled in by a
    /// read that shows them; see [`RoomStore::entry_deliveries`]).
    pub deliveries: Vec<EntryDelivery>,
}

/// A post to write: its entry and how to start the turns of the threads it may wake.
#[derive(Debug, Clone)]
pub struct NewEntry {
    pub room_id: String,
    pub id: String,
    pub author: Option<SourceRef>,
    pub content: String,
    pub mentions: Vec<String>,
    /// Idempotency: the author's thread id ("" for the owner) and its key.
    pub key_scope: String,
    pub key: String,
    pub request_hash: String,
    /// Turn claims for the threads the post may wake (each is used only if it wakes it).
    pub claims: Vec<(String, TurnClaim)>,
    /// The outbox entries that carry the post to members of other homes it may wake, one
    /// per member with an active bridge to its home (each is written only if it wakes it).
    pub remote: Vec<(String, OutboxRecord)>,
    /// `[rooms] max_agent_wakes`.
    pub max_agent_wakes: i64,
    pub now: Millis,
}

#[derive(Debug)]
pub enum PostOutcome {
    Posted {
        entry: EntryRecord,
        /// Turns the post started (each took its entry).
        turns: Vec<ClaimedTurn>,
        /// Threads that got the entry queued (busy, or holding peer messages back).
        queued: Vec<String>,
        /// The loop guard paused the room with this reason (the host got an `attention`
        /// event saying it).
        paused: Option<String>,
    },
    /// The key was used before with the same content: the original entry.
    Replayed(EntryRecord),
    /// The key was used before for another content.
    KeyConflict {
        entry_id: String,
    },
    RoomGone,
    Archived,
    /// The author's thread is not (or no longer) in the room.
    NotMember,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddOutcome {
    Added,
    AlreadyMember,
    Full,
    RoomGone,
    Archived,
}

/// A change of a room's state by its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomChange {
    Pause,
    Resume,
    Archive,
}

#[async_trait]
pub trait RoomStore: Send + Sync {
    async fn create_room(&self, room: &RoomRecord) -> StoreResult<()>;

    async fn room(&self, id: &str) -> StoreResult<Option<RoomRecord>>;

    /// Newest first, before the room `before_seq` (all rooms, archived too).
    async fn list_rooms(&self, before_seq: Option<i64>, limit: u32) -> StoreResult<Vec<RoomRecord>>;

    /// The members beside the host, in the order they joined.
    async fn room_members(&self, room_id: &str) -> StoreResult<Vec<MemberRecord>>;

    /// Adds a member unless the room holds it (or its thread) already, is full or archived.
    async fn add_member(&self, room_id: &str, member: &MemberRecord) -> StoreResult<AddOutcome>;

    /// Removes a member (not the host); whether it was one. Its queued entries stay queued.
    async fn remove_member(&self, room_id: &str, member_id: &str, now: Millis) -> StoreResult<bool>;

    /// Records the thread made for a persona unless one was recorded first; the thread the
    /// persona has now.
    async fn set_persona_thread(&self, room_id: &str, persona: &str, thread_id: &str) -> StoreResult<String>;

    /// Pauses, resumes (the loop guard's count starts over) or archives a room; `None` if
    /// there is no such room, else the room and whether it changed. An archived room
    /// changes no more.
    async fn change_room(
        &self,
        room_id: &str,
        change: RoomChange,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Option<(RoomRecord, bool)>>;

    /// Writes a post: its entry in the room's order and, as [`rules::plan_post`] decides,
    /// the input of each member it wakes (an idle one starts its turn in the same commit),
    /// or replays the entry its key made.
    async fn post_to_room(&self, entry: &NewEntry) -> StoreResult<PostOutcome>;

    /// The entry an author's key made in a room, with the hash of the post it was made for.
    async fn room_entry_by_key(
        &self,
        room_id: &str,
        key_scope: &str,
        key: &str,
    ) -> StoreResult<Option<(String, EntryRecord)>>;

    /// Entries after `after_seq`, oldest first.
    async fn room_entries(&self, room_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<EntryRecord>>;

    /// The rooms `thread_id` is the host or a member of.
    async fn rooms_of_thread(&self, thread_id: &str) -> StoreResult<Vec<String>>;

    /// Where the bridged deliveries of an entry (to members of other homes) stand.
    async fn entry_deliveries(&self, entry_id: &str) -> StoreResult<Vec<EntryDelivery>>;

    /// The home a room of another home lives in: the home that first told this one a thread
    /// of it joined the room.
    async fn room_home(&self, room_id: &str) -> StoreResult<Option<String>>;

    /// Binds room `room_id` to home `home_id` unless it is bound already: a binding is never
    /// moved. The home the room is bound to now (`home_id`, or the one bound before).
    async fn bind_room(&self, room_id: &str, home_id: &str, now: Millis) -> StoreResult<String>;
}

/// How the delivery of a room entry to a member of another home stands: its outbox entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryDelivery {
    /// The member's roster id, `HOME_ID/SESSION`.
    pub member: String,
    pub status: OutboxStatus,
    pub reason: String,
}
