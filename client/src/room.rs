//! `kiki room …`: rooms, shared logs in one order where the owner, threads and personas post
//! and wake each other by mentions. Reading, adding a thread and posting go through
//! ThreadService (without `KIKI_TOKEN` as the owner, inside a turn as that turn's thread);
//! the rest are the owner's RoomService actions.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Subcommand;
use kiki_client::Client;
use kiki_proto as pb;
use kiki_proto::Word;
use kiki_proto::limits;

use crate::args::read_text;
use crate::connect::connect;
use crate::output::print_json;

#[derive(Subcommand)]
pub enum RoomCommand {
    /// Create a room hosted by one of this home's threads.
    Create {
        /// The host: one of this home's threads (SESSION), unarchived and top-level.
        #[arg(long)]
        host: String,
        /// One line of at most 200 characters (default: the host thread's title).
        #[arg(long)]
        name: Option<String>,
    },
    /// List rooms, newest first (archived ones too).
    List {
        /// Rooms per page, 1-100 (default 50).
        #[arg(long)]
        limit: Option<u32>,
        /// The next page: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Read a room: its roster and state, then its entries oldest first.
    Read {
        /// The room's id (room_…).
        room: String,
        /// Entries per page, 1-100 (default 50).
        #[arg(long)]
        limit: Option<u32>,
        /// The entries after this cursor (the `next: --after-id C` a read printed); default:
        /// from the first entry.
        #[arg(long)]
        after_id: Option<String>,
    },
    /// Add one of this home's threads to a room as a member.
    Add {
        /// The room's id (room_…).
        room: String,
        /// The thread to add: one of this home's threads (SESSION), unarchived and top-level,
        /// or ALIAS/SESSION for a thread of the home behind the outbound bridge ALIAS.
        thread: String,
    },
    /// Remove a member (not the host) from a room.
    Remove {
        /// The room's id (room_…).
        room: String,
        /// The member's roster id: a thread id or a persona id (`kiki room read` lists them).
        member: String,
    },
    /// Post to a room: durable, idempotent by --key (one is made when none is given).
    ///
    /// The owner's post wakes the host, or whom it mentions; inside a turn (`KIKI_TOKEN`)
    /// the post is that turn's thread's, and wakes only whom it mentions. A paused room
    /// keeps the post and wakes nobody.
    Send {
        /// The room's id (room_…).
        room: String,
        /// The post, 1-20,000 characters.
        #[arg(long, conflicts_with = "content_file", required_unless_present = "content_file")]
        content: Option<String>,
        /// Read the post from a file ('-' for stdin).
        #[arg(long)]
        content_file: Option<PathBuf>,
        /// A roster id (thread or persona id) to wake; repeat for more, at most 7.
        #[arg(long = "mention", value_name = "ID")]
        mentions: Vec<String>,
        /// Idempotency key: a retry with the same key and content never posts twice
        /// (default: one is made and printed).
        #[arg(long)]
        key: Option<String>,
    },
    /// Pause a room: its log is kept and takes posts, but they wake nobody until resumed.
    Pause {
        /// The room's id (room_…).
        room: String,
    },
    /// Resume a paused room: posts wake again (the loop guard's count starts over).
    Resume {
        /// The room's id (room_…).
        room: String,
    },
    /// Archive a room: read-only for good, posts and changes are refused.
    Archive {
        /// The room's id (room_…).
        room: String,
    },
    /// Add a persona to a room: a member whose thread is made when a post first mentions it.
    #[command(group(clap::ArgGroup::new("persona_instructions").args(["instructions", "instructions_file"])))]
    Persona {
        /// The room's id (room_…).
        room: String,
        /// The persona's roster id: 1-64 of a-z, 0-9, '-' and '_', starting with a letter
        /// (not `th_`), unique in the room.
        persona: String,
        /// The profile its thread runs on (enabled).
        #[arg(long)]
        profile: String,
        /// What its thread is told before the post that first mentions it (at most 20,000
        /// characters).
        #[arg(long)]
        instructions: Option<String>,
        /// Read the instructions from a file ('-' for stdin).
        #[arg(long)]
        instructions_file: Option<PathBuf>,
    },
}

pub async fn run(home: &Path, command: RoomCommand, json: bool) -> Result<()> {
    let client = connect(home).await?;
    match command {
        RoomCommand::Create { host, name } => create(&client, host, name, json).await,
        RoomCommand::List { limit, cursor } => list(&client, limit, cursor, json).await,
        RoomCommand::Read { room, limit, after_id } => read(&client, room, limit, after_id, json).await,
        RoomCommand::Add { room, thread } => add(&client, room, thread, json).await,
        RoomCommand::Remove { room, member } => remove(&client, room, member, json).await,
        RoomCommand::Send { room, content, content_file, mentions, key } => {
            let content = match content_file {
                Some(file) => read_text(&file, "--content-file", limits::ROOM_CONTENT_MAX_CHARS)?,
                // clap requires one of the two.
                None => content.unwrap_or_default(),
            };
            send(&client, room, content, mentions, key, json).await
        }
        RoomCommand::Pause { room } => set_state(&client, room, pb::RoomAction::Pause, json).await,
        RoomCommand::Resume { room } => set_state(&client, room, pb::RoomAction::Resume, json).await,
        RoomCommand::Archive { room } => set_state(&client, room, pb::RoomAction::Archive, json).await,
        RoomCommand::Persona { room, persona, profile, instructions, instructions_file } => {
            let instructions = match instructions_file {
                Some(file) => read_text(&file, "--instructions-file", limits::INSTRUCTIONS_MAX_CHARS)?,
                None => instructions.unwrap_or_default(),
            };
            add_persona(&client, room, persona, profile, instructions, json).await
        }
    }
}

async fn create(client: &Client, host: String, name: Option<String>, json: bool) -> Result<()> {
    let request = pb::RoomCreateRequest { host, name: name.unwrap_or_default() };
    let created = client.rooms().room_create(request).await?.into_inner();
    if json {
        print_json(&created);
    } else if let Some(room) = &created.room {
        outln!("{}  {}", room.id, room.name);
        outln!("  host {}", room.host);
    }
    Ok(())
}

async fn list(client: &Client, limit: Option<u32>, cursor: Option<String>, json: bool) -> Result<()> {
    let request = pb::RoomListRequest { limit, cursor: cursor.unwrap_or_default() };
    let page = client.rooms().room_list(request).await?.into_inner();
    if json {
        print_json(&page);
        return Ok(());
    }
    for room in &page.rooms {
        let members = room.members.iter().filter(|m| m.role() != pb::MemberRole::Host).count();
        outln!(
            "{}  {}  host {}  {}  {:<8}  {}",
            room.id,
            room.name,
            room.host,
            counted(members, "member", "members"),
            state_word(room.archived, room.paused),
            counted(room.entries as usize, "entry", "entries")
        );
    }
    if page.rooms.is_empty() {
        outln!("(no rooms)");
    }
    // On stderr, like every paging hint: stdout holds the result alone.
    if let Some(next) = &page.next_cursor {
        let limit = limit.map(|n| format!("--limit {n} ")).unwrap_or_default();
        hint!("more: {limit}--cursor {next}");
    }
    Ok(())
}

async fn read(
    client: &Client,
    room: String,
    limit: Option<u32>,
    after_id: Option<String>,
    json: bool,
) -> Result<()> {
    let after = after_id.unwrap_or_default();
    let request = pb::RoomReadRequest { room, limit, after_id: after.clone() };
    let page = client.threads().room_read(request).await?.into_inner();
    if json {
        print_json(&page);
        return Ok(());
    }
    outln!("{}  {}", page.room, page.name);
    outln!("host     {}", page.host);
    let state = match (page.archived, page.paused, page.paused_reason.as_str()) {
        (true, ..) => "archived".to_string(),
        (false, true, "") => "paused".to_string(),
        (false, true, reason) => format!("paused ({reason})"),
        (false, false, _) => "active".to_string(),
    };
    outln!("state    {state}");
    outln!("roster");
    for member in &page.members {
        outln!(
            "  {}  {} {}{}",
            member.id,
            member.role().word(),
            member.kind().word(),
            persona_detail(member)
        );
    }
    for entry in &page.entries {
        let author = if entry.author.is_empty() { "owner" } else { &entry.author };
        let mentions = if entry.mentions.is_empty() {
            String::new()
        } else {
            format!("  → {}", entry.mentions.join(", "))
        };
        outln!();
        outln!("#{}  {}  {author}{mentions}  (woke: {})", entry.seq, entry.at, woke(&entry.woke));
        // A member in another home is reached over a bridge: how that stands.
        for d in &entry.deliveries {
            let reason = if d.reason.is_empty() { String::new() } else { format!(": {}", d.reason) };
            outln!("  to {}: {}{reason}", d.member, d.status().word());
        }
        outln!("{}", entry.content);
    }
    if page.entries.is_empty() {
        outln!();
        outln!("{}", if after.is_empty() { "(no entries)" } else { "(nothing new)" });
    }
    // On stderr, like every paging hint: stdout holds the room alone. The server always
    // gives one: what comes after this page is read from it.
    if let Some(next) = &page.next_cursor {
        hint!("next: --after-id {next}");
    }
    Ok(())
}

async fn add(client: &Client, room: String, thread: String, json: bool) -> Result<()> {
    let request = pb::RoomAddRequest { room, session_id: thread };
    let added = client.threads().room_add(request).await?.into_inner();
    if json {
        print_json(&added);
    } else {
        outln!("{}", if added.added { "added" } else { "already in the room" });
    }
    Ok(())
}

async fn remove(client: &Client, room: String, member: String, json: bool) -> Result<()> {
    let request = pb::RoomRemoveRequest { room, member };
    let removed = client.rooms().room_remove(request).await?.into_inner();
    if json {
        print_json(&removed);
    } else {
        outln!("{}", if removed.removed { "removed" } else { "not a member" });
    }
    Ok(())
}

async fn send(
    client: &Client,
    room: String,
    content: String,
    mentions: Vec<String>,
    key: Option<String>,
    json: bool,
) -> Result<()> {
    let made_key = key.is_none();
    let request = pb::ThreadSendRequest {
        room: room.clone(),
        content,
        idempotency_key: key.unwrap_or_default(),
        mentions,
        ..Default::default()
    };
    let sent = client.threads().thread_send(request).await?.into_inner();
    if json {
        print_json(&sent);
        return Ok(());
    }
    let status = pb::json::enum_word(sent.status().as_str_name(), "SEND_STATUS_");
    let replay = if sent.replayed { " (replayed)" } else { "" };
    let reason = if sent.reason.is_empty() { String::new() } else { format!(": {}", sent.reason) };
    outln!(
        "{room} #{} {} {status}{reason} (woke: {}){replay}",
        sent.room_seq,
        sent.message_id,
        woke(&sent.woke)
    );
    // The key the home made: a retry must name it to be a retry, not a second post.
    if made_key && !sent.idempotency_key.is_empty() {
        hint!("key: {} (repeat it to retry)", sent.idempotency_key);
    }
    Ok(())
}

/// `kiki room pause|resume|archive ROOM`: the room's state after it.
async fn set_state(client: &Client, room: String, action: pb::RoomAction, json: bool) -> Result<()> {
    let request = pb::RoomSetStateRequest { room, action: action as i32 };
    let set = client.rooms().room_set_state(request).await?.into_inner();
    if json {
        print_json(&set);
    } else if let Some(room) = &set.room {
        // Already in that state: say so, and (paused) by whom, which need not be the owner.
        let unchanged = match room.paused_reason.as_str() {
            _ if set.changed => String::new(),
            reason if room.paused && !room.archived && !reason.is_empty() => {
                format!(" (unchanged; {reason})")
            }
            _ => " (unchanged)".to_string(),
        };
        outln!("{} {}{unchanged}", room.id, state_word(room.archived, room.paused));
    }
    Ok(())
}

async fn add_persona(
    client: &Client,
    room: String,
    persona: String,
    profile: String,
    instructions: String,
    json: bool,
) -> Result<()> {
    let request = pb::RoomAddPersonaRequest { room, persona, profile, instructions };
    let added = client.rooms().room_add_persona(request).await?.into_inner();
    if json {
        print_json(&added);
    } else {
        outln!("{}", if added.added { "added" } else { "already in the room" });
    }
    Ok(())
}

/// A room's state in one word: archived (for good) before paused.
fn state_word(archived: bool, paused: bool) -> &'static str {
    match (archived, paused) {
        (true, _) => "archived",
        (false, true) => "paused",
        (false, false) => "active",
    }
}

/// Whom a post woke: the roster ids, or `nobody`.
fn woke(ids: &[String]) -> String {
    if ids.is_empty() { "nobody".into() } else { ids.join(", ") }
}

/// `1 member`, `2 members`.
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What a roster line adds for a persona: its profile and its thread once it has one.
fn persona_detail(member: &pb::RoomMember) -> String {
    let mut detail = Vec::new();
    if !member.profile.is_empty() {
        detail.push(format!("profile {}", member.profile));
    }
    if !member.thread_id.is_empty() && member.thread_id != member.id {
        detail.push(format!("thread {}", member.thread_id));
    } else if member.kind() == pb::MemberKind::Persona && member.thread_id.is_empty() {
        detail.push("no thread yet".to_string());
    }
    if detail.is_empty() { String::new() } else { format!(" ({})", detail.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_counts_read_as_words() {
        assert_eq!(state_word(true, true), "archived");
        assert_eq!(state_word(false, true), "paused");
        assert_eq!(state_word(false, false), "active");
        assert_eq!(woke(&[]), "nobody");
        assert_eq!(woke(&["th_a".into(), "critic".into()]), "th_a, critic");
        assert_eq!(counted(1, "entry", "entries"), "1 entry");
        assert_eq!(counted(0, "entry", "entries"), "0 entries");
    }

    #[test]
    fn a_persona_shows_its_profile_and_thread() {
        let persona = pb::RoomMember {
            id: "critic".into(),
            role: pb::MemberRole::Member as i32,
            kind: pb::MemberKind::Persona as i32,
            profile: "claude".into(),
            ..Default::default()
        };
        assert_eq!(persona_detail(&persona), " (profile claude, no thread yet)");
        let made = pb::RoomMember { thread_id: "th_x".into(), ..persona };
        assert_eq!(persona_detail(&made), " (profile claude, thread th_x)");
        let thread =
            pb::RoomMember { id: "th_y".into(), kind: pb::MemberKind::Thread as i32, ..Default::default() };
        assert_eq!(persona_detail(&thread), "");
        // A thread's own id says nothing more (nor a persona's, named by its thread now).
        let thread = pb::RoomMember { thread_id: "th_y".into(), ..thread };
        assert_eq!(persona_detail(&thread), "");
    }
}
