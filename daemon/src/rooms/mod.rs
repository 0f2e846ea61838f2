//! Rooms: a host thread and up to six members sharing a log, woken by mention
//! (ThreadSend to a room, RoomRead, RoomAdd). The owner creates rooms and manages their
//! rosters and state; an agent posts, reads and adds from inside a turn of a thread that
//! belongs to the room. A post is one store transaction ([`crate::store::RoomStore::post_to_room`]):
//! `delivered` means the log has the entry, and the members it wakes have it queued (an idle
//! one's turn started in that commit). Who is woken is [`crate::store::rules::plan_post`].

mod across;
mod posts;

use std::collections::HashMap;
use std::sync::Arc;

use crate::caller::Caller;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mailbox::Mailbox;
use crate::store::{
    AddOutcome, CommunicationSetting, EntryRecord, MemberKind, MemberRecord, ROOM_MEMBERS_MAX, RoomChange,
    RoomRecord, Store, ThreadRecord, rules,
};
use crate::sync::lock;
use crate::threads::runner::TurnCaller;
use crate::threads::{CreateRequest, Threads, cursor, new_id};
use kiki_proto::limits;

use limits::{ID_MAX_CHARS, INSTRUCTIONS_MAX_CHARS, PERSONA_ID_MAX_CHARS};

#[derive(Clone)]
pub struct Rooms {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    threads: Threads,
    mailbox: Mailbox,
    config: Arc<Config>,
    /// One persona's thread is made at a time, so two first mentions make one thread.
    making_persona: tokio::sync::Mutex<()>,
    /// Rooms and rosters as posts check them before their write, so a post reads neither
    /// twice: forgotten on every change made here (the only writer of rosters and states
    /// but the loop guard's pause, which no check before the write looks at). The write
    /// itself decides on the stored room and roster.
    posting: std::sync::Mutex<PostingViews>,
}

/// The rooms posts know, and how many times one was forgotten: a view read before a
/// change is not kept after it.
#[derive(Default)]
struct PostingViews {
    views: HashMap<String, RoomView>,
    forgotten: u64,
}

/// Rooms whose rosters [`Inner::posting`] holds at most; it starts over when full.
const POSTING_CACHE_MAX: usize = 4096;

/// A room with its roster.
#[derive(Debug, Clone)]
pub struct RoomView {
    pub room: RoomRecord,
    pub members: Vec<MemberRecord>,
}

/// A page of a room's log.
#[derive(Debug)]
pub struct RoomPage {
    pub view: RoomView,
    pub entries: Vec<EntryRecord>,
    /// Where the next read goes on from (after the page's last entry).
    pub next_cursor: String,
}

/// A post's answer.
#[derive(Debug)]
pub struct Posted {
    pub entry: EntryRecord,
    /// The key the post was made under (made for it when the caller gave none).
    pub key: String,
    pub replayed: bool,
}

impl Rooms {
    /// The home's clock, now.
    fn now(&self) -> crate::time::Millis {
        self.inner.threads.clock().now_ms()
    }

    pub fn new(threads: Threads, mailbox: Mailbox, config: Arc<Config>) -> Self {
        let store = threads.store().clone();
        let making_persona = tokio::sync::Mutex::new(());
        Self {
            inner: Arc::new(Inner {
                store,
                threads,
                mailbox,
                config,
                making_persona,
                posting: Default::default(),
            }),
        }
    }

    /// A room hosted by a thread of this home, named `name` (default: the host's title).
    pub async fn create(&self, caller: &Caller, host: &str, name: &str) -> Result<RoomView> {
        caller.owner_only("managing rooms")?;
        let host = self.live_thread("host", host).await?;
        let name = if name.is_empty() { host.title.clone() } else { name.to_string() };
        one_line("name", &name, limits::TITLE_MAX_CHARS)?;
        let now = self.now();
        let room = RoomRecord {
            seq: 0,
            id: new_id("room"),
            name,
            host_thread: host.id,
            paused: false,
            paused_reason: String::new(),
            archived: false,
            agent_wakes: 0,
            last_seq: 0,
            created_at: now,
            updated_at: now,
        };
        self.inner.store.create_room(&room).await?;
        self.view(&room.id).await
    }

    /// Rooms newest first, with their rosters.
    pub async fn list(
        &self,
        caller: &Caller,
        limit: Option<u32>,
        cursor: &str,
    ) -> Result<(Vec<RoomView>, Option<String>)> {
        caller.owner_only("managing rooms")?;
        let limit = limits::page_limit("limit", limit, limits::LIST_LIMIT_DEFAULT)?;
        let before = match cursor {
            "" => None,
            c => {
                Some(cursor::decode_number("cursor", "rooms", &cursor::decode("cursor", "rooms", c, 1)?[0])?)
            }
        };
        let mut rooms = self.inner.store.list_rooms(before, limit + 1).await?;
        let next = (rooms.len() > limit as usize).then(|| {
            rooms.truncate(limit as usize);
            cursor::encode("rooms", &[&rooms[limit as usize - 1].seq.to_string()])
        });
        let mut views = Vec::with_capacity(rooms.len());
        for room in rooms {
            let members = self.inner.store.room_members(&room.id).await?;
            views.push(RoomView { room, members });
        }
        Ok((views, next))
    }

    /// RoomRead: the room, its roster and the entries after `after` (a previous
    /// `next_cursor`; empty: from the first). Changes nothing and wakes nobody.
    #[tracing::instrument(level = "debug", skip_all, fields(room_id = %room_id))]
    pub async fn read(
        &self,
        caller: &Caller,
        room_id: &str,
        limit: Option<u32>,
        after: &str,
    ) -> Result<RoomPage> {
        let view = self.view(room_id).await?;
        if let Some(turn) = caller.turn() {
            self.admit(turn, &view, "RoomRead").await?;
        }
        self.page(view, limit, after).await
    }

    async fn page(&self, view: RoomView, limit: Option<u32>, after: &str) -> Result<RoomPage> {
        let limit = limits::page_limit("limit", limit, limits::LIST_LIMIT_DEFAULT)?;
        let after_seq = match after {
            "" => 0,
            c => {
                let parts = cursor::decode("after_id", "room", c, 2)?;
                if parts[0] != view.room.id {
                    return Err(Error::invalid("after_id", "a cursor of another room"));
                }
                cursor::decode_number("after_id", "room", &parts[1])?
            }
        };
        let mut entries = self.inner.store.room_entries(&view.room.id, after_seq, limit).await?;
        for entry in &mut entries {
            if entry.woke.iter().any(|m| rules::is_remote_member(m)) {
                entry.deliveries = self.inner.store.entry_deliveries(&entry.id).await?;
            }
        }
        let last = entries.last().map_or(after_seq, |e| e.seq);
        let next_cursor = cursor::encode("room", &[&view.room.id, &last.to_string()]);
        Ok(RoomPage { view, entries, next_cursor })
    }

    /// RoomAdd (the owner's, or an agent's of a room its thread is in): an existing,
    /// unarchived thread of this home joins; `false` if it had.
    pub async fn add(&self, caller: &Caller, room_id: &str, session: &str) -> Result<bool> {
        let view = self.view(room_id).await?;
        if let Some(turn) = caller.turn() {
            self.admit(turn, &view, "RoomAdd").await?;
        }
        let thread = self.live_thread("session_id", session).await?;
        let member = MemberRecord {
            member_id: thread.id.clone(),
            kind: MemberKind::Thread,
            thread_id: Some(thread.id),
            profile: String::new(),
            instructions: String::new(),
            added_at: self.now(),
        };
        self.join(&view.room.id, &member).await
    }

    /// Adds a persona: a roster id that becomes a thread of this home on `profile` when first
    /// mentioned, told `instructions` first.
    pub async fn add_persona(
        &self,
        caller: &Caller,
        room_id: &str,
        persona: &str,
        profile: &str,
        instructions: &str,
    ) -> Result<bool> {
        caller.owner_only("managing rooms")?;
        persona_id(persona)?;
        self.inner.config.usable_profile(Some(profile)).map_err(|e| Error::invalid("profile", e))?;
        limits::at_most("instructions", instructions, INSTRUCTIONS_MAX_CHARS)?;
        let view = self.view(room_id).await?;
        let member = MemberRecord {
            member_id: persona.to_string(),
            kind: MemberKind::Persona,
            thread_id: None,
            profile: profile.to_string(),
            instructions: instructions.to_string(),
            added_at: self.now(),
        };
        self.join(&view.room.id, &member).await
    }

    /// Removes a member (by its roster id, or a persona's thread); `false` if it was none.
    pub async fn remove(&self, caller: &Caller, room_id: &str, member: &str) -> Result<bool> {
        caller.owner_only("managing rooms")?;
        let view = self.view(room_id).await?;
        if member == view.room.host_thread {
            return Err(Error::invalid("member", "the host stays: a room is its host's"));
        }
        if view.room.archived {
            return Err(archived(&view.room));
        }
        let removed = self.inner.store.remove_member(&view.room.id, member, self.now()).await;
        self.forget(&view.room.id);
        Ok(removed?)
    }

    /// Pauses, resumes or archives a room; whether that changed it.
    pub async fn change(
        &self,
        caller: &Caller,
        room_id: &str,
        change: RoomChange,
    ) -> Result<(RoomView, bool)> {
        caller.owner_only("managing rooms")?;
        limits::text("room", room_id, ID_MAX_CHARS)?;
        let (room, changed) = self
            .inner
            .store
            .change_room(room_id, change, "paused by the owner", self.now())
            .await
            .inspect(|_| self.forget(room_id))?
            .ok_or_else(|| no_room(room_id))?;
        if room.archived && change != RoomChange::Archive {
            return Err(archived(&room));
        }
        let members = self.inner.store.room_members(&room.id).await?;
        Ok((RoomView { room, members }, changed))
    }

    /// [`Rooms::view`] as a post checks it, from [`Inner::posting`] when it holds the room.
    async fn posting_view(&self, room_id: &str) -> Result<RoomView> {
        let forgotten = {
            let posting = lock(&self.inner.posting);
            if let Some(view) = posting.views.get(room_id) {
                return Ok(view.clone());
            }
            posting.forgotten
        };
        let view = self.view(room_id).await?;
        let mut posting = lock(&self.inner.posting);
        if posting.forgotten == forgotten {
            if posting.views.len() >= POSTING_CACHE_MAX {
                posting.views.clear();
            }
            posting.views.insert(view.room.id.clone(), view.clone());
        }
        Ok(view)
    }

    /// Drops what posts know of a room: its roster or state changed.
    fn forget(&self, room_id: &str) {
        let mut posting = lock(&self.inner.posting);
        posting.views.remove(room_id);
        posting.forgotten += 1;
    }

    /// The room and its roster, or `NOT_FOUND`.
    async fn view(&self, room_id: &str) -> Result<RoomView> {
        limits::text("room", room_id, ID_MAX_CHARS)?;
        let room = self.inner.store.room(room_id).await?.ok_or_else(|| no_room(room_id))?;
        let members = self.inner.store.room_members(&room.id).await?;
        Ok(RoomView { room, members })
    }

    /// An agent's room tool: its thread's communication must be on and its thread in the
    /// room (the owner may act on any room). The caller's thread.
    async fn admit(&self, caller: &TurnCaller, view: &RoomView, tool: &str) -> Result<ThreadRecord> {
        let thread = self.inner.mailbox.peer_tool(caller, tool).await?;
        if rules::roster_entry(&view.room, &view.members, &thread.id).is_none() {
            return Err(not_member(&view.room, tool));
        }
        Ok(thread)
    }

    /// A thread of this home that exists and is not archived.
    async fn live_thread(&self, field: &'static str, id: &str) -> Result<ThreadRecord> {
        limits::text(field, id, ID_MAX_CHARS)?;
        if id.contains('/') {
            return Err(Error::invalid(field, "a thread of this home (a session id, without a host)"));
        }
        let thread = self.inner.threads.get("", "", id).await?;
        if thread.archived {
            return Err(Error::FailedPrecondition(format!(
                "thread {} is archived; unarchive it first",
                thread.id
            )));
        }
        Ok(thread)
    }

    async fn join(&self, room_id: &str, member: &MemberRecord) -> Result<bool> {
        let joined = self.inner.store.add_member(room_id, member).await;
        self.forget(room_id);
        match joined? {
            AddOutcome::Added => Ok(true),
            AddOutcome::AlreadyMember => Ok(false),
            AddOutcome::Full => Err(Error::FailedPrecondition(format!(
                "room {room_id} is full: a host and {ROOM_MEMBERS_MAX} members (kiki room remove one first)"
            ))),
            AddOutcome::RoomGone => Err(no_room(room_id)),
            AddOutcome::Archived => {
                Err(Error::FailedPrecondition(format!("room {room_id} is archived: read-only")))
            }
        }
    }

    /// The thread of `persona`, made now if this is its first mention: on its profile, in the
    /// host's directory, its instructions queued before the entry that mentions it.
    async fn persona_thread(&self, room: &RoomRecord, persona: &MemberRecord) -> Result<String> {
        let _one_at_a_time = self.inner.making_persona.lock().await;
        let members = self.inner.store.room_members(&room.id).await?;
        if let Some(thread) =
            members.iter().find(|m| m.member_id == persona.member_id).and_then(|m| m.thread_id.clone())
        {
            return Ok(thread);
        }
        let host = self.inner.threads.get("", "", &room.host_thread).await?;
        let created = self
            .inner
            .threads
            .create(
                // The room's home makes its personas' threads, as its owner would.
                &Caller::Owner,
                CreateRequest {
                    cwd: Some(host.cwd),
                    profile: Some(persona.profile.clone()),
                    prompt: (!persona.instructions.is_empty()).then(|| persona.instructions.clone()),
                    title: Some(format!("{} in {}", persona.member_id, one_line_cut(&room.name))),
                    hold_prompt: true,
                    communication: Some(CommunicationSetting::On),
                    resume_agent_session: None,
                },
            )
            .await?;
        let thread =
            self.inner.store.set_persona_thread(&room.id, &persona.member_id, &created.thread.id).await;
        self.forget(&room.id);
        Ok(thread?)
    }
}

/// A persona id: 1–64 of `a-z`, `0-9`, `-`, `_`, starting with a letter, not a thread id.
fn persona_id(id: &str) -> Result<()> {
    let shape = id.len() <= PERSONA_ID_MAX_CHARS
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !id.starts_with("th_");
    if shape {
        Ok(())
    } else {
        Err(Error::invalid(
            "persona",
            format!(
                "1-{PERSONA_ID_MAX_CHARS} of a-z, 0-9, - and _, starting with a letter (not th_), got {id:?}"
            ),
        ))
    }
}

/// Text on one printable line, not blank, at most `max` characters.
fn one_line(field: &'static str, value: &str, max: usize) -> Result<()> {
    limits::text(field, value, max)?;
    if value.chars().any(char::is_control) || value.trim().is_empty() {
        return Err(Error::invalid(field, "one line of printable characters, not blank"));
    }
    Ok(())
}

/// A room name cut for a persona thread's title.
fn one_line_cut(name: &str) -> String {
    name.chars().take(limits::DERIVED_TITLE_CHARS).collect()
}

fn key_conflict(entry_id: &str, room_id: &str) -> Error {
    Error::Conflict(format!(
        "idempotency_key: already used for a different post ({entry_id}) in room {room_id}; reuse a key only for \
         the same content and mentions"
    ))
}

fn room_bound_elsewhere(room_id: &str, home_id: &str) -> Error {
    Error::PermissionDenied(format!(
        "room {room_id} is bound to home {home_id}, whose bridge added this home's threads to it first"
    ))
}

fn no_room(room_id: &str) -> Error {
    Error::NotFound(format!("no room {room_id} in this home (kiki room list shows its rooms)"))
}

fn archived(room: &RoomRecord) -> Error {
    Error::FailedPrecondition(format!(
        "room {} is archived: read-only (posts and changes are refused)",
        room.id
    ))
}

fn not_member(room: &RoomRecord, tool: &str) -> Error {
    Error::PermissionDenied(format!(
        "{tool} refused: the calling thread is not in room {}; its owner adds it (kiki room add {} THREAD)",
        room.id, room.id
    ))
}
