//! Rooms in one home, in process: the roster and its limits, who may use the room tools,
//! whom a post wakes, idempotent posts, personas, the loop guard, RoomRead, and paused and
//! archived rooms. Agents act from inside a turn, with its token (`hold` turns write it out
//! and wait), or by running the `kiki` binary in their turn (`cargo build --workspace --bins`
//! first). `rooms_cli.rs` covers the CLI and `kill -9`.
//!
//! By subject: the roster and who may use the room tools here, with the helpers the others
//! share; `posts` (whom a post wakes, replays, personas), `guards` (the loop guard,
//! RoomRead, paused and archived rooms).

mod guards;
mod posts;

use std::path::PathBuf;
use std::time::Duration;

use kiki_client::Client;
use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::{TestHome, eventually, local};
use tonic::Code;

/// Long enough for a wake that should not happen to have happened.
const SETTLE: Duration = Duration::from_millis(300);

/// An `exec` agent whose every turn holds: it prints its input, writes its token to
/// `CWD/THREAD.token` and waits until `CWD/THREAD.go` exists, which it removes as it ends.
const HOLD: &str = "input=$(cat); printf '%s' \"$input\"; \
    printf '%s\\n' \"$KIKI_TOKEN\" > \"$KIKI_THREAD_ID.token.new\"; \
    mv \"$KIKI_THREAD_ID.token.new\" \"$KIKI_THREAD_ID.token\"; \
    while [ ! -e \"$KIKI_THREAD_ID.go\" ]; do sleep 0.01; done; rm -f \"$KIKI_THREAD_ID.go\"";

/// A home whose threads may talk (the home switch on), with the `hold` profile.
async fn rooms_home() -> TestHome {
    TestHome::builder()
        .config(|c| c.thread_communication.enabled = Some(true))
        .shell_profile("hold", HOLD)
        .start()
        .await
}

/// A thread whose turn is running and holding, and a client acting as that turn.
struct Agent {
    id: String,
    client: Client,
}

/// Where the `hold` agent of `thread` keeps its files (`home.thread` works in `default`).
fn agent_file(home: &TestHome, thread: &str, suffix: &str) -> PathBuf {
    home.workdir("default").join(format!("{thread}.{suffix}"))
}

/// The token the running turn of `hold` thread `thread` wrote out.
async fn token_of(home: &TestHome, thread: &str) -> String {
    let path = agent_file(home, thread, "token");
    eventually(&format!("{thread}'s turn to write its token"), || {
        let path = path.clone();
        async move {
            let token = std::fs::read_to_string(&path).unwrap_or_default();
            token.ends_with('\n').then(|| token.trim().to_string())
        }
    })
    .await
}

/// A new `hold` thread in its first turn, and a client acting as that turn.
async fn agent(home: &TestHome) -> Agent {
    let thread = home.thread("hold", Some("start")).await;
    let token = token_of(home, &thread.id).await;
    let client = home.client().clone().with_token(&token).expect("token");
    Agent { id: thread.id, client }
}

/// Ends the running turn of `hold` thread `thread`, and waits until it has `ended` turns.
async fn release(home: &TestHome, thread: &str, ended: usize) -> Vec<pb::Turn> {
    let _ = std::fs::remove_file(agent_file(home, thread, "token"));
    std::fs::write(agent_file(home, thread, "go"), "").expect("go");
    home.wait_turns(thread, ended).await
}

/// A room hosted by an `echo` thread, with an `echo` member and a member agent in its
/// first turn.
struct Team {
    home: TestHome,
    host: String,
    e1: String,
    room: String,
    a: Agent,
}

async fn team() -> Team {
    let home = rooms_home().await;
    let host = home.thread("echo", None).await.id;
    let e1 = home.thread("echo", None).await.id;
    let room = create_room(&home, &host).await;
    let a = agent(&home).await;
    for member in [&e1, &a.id] {
        add(home.client(), &room, member).await.expect("add");
    }
    Team { home, host, e1, room, a }
}

/// A room named "team" hosted by `host`: its id.
async fn create_room(home: &TestHome, host: &str) -> String {
    let room = home.create_room(host, "team").await;
    assert_eq!(room.host, host);
    room.id
}

async fn add(client: &Client, room: &str, thread: &str) -> Result<bool, tonic::Status> {
    let request = pb::RoomAddRequest { room: room.into(), session_id: thread.into() };
    client.threads().room_add(request).await.map(|r| r.into_inner().added)
}

async fn add_persona(home: &TestHome, room: &str, persona: &str) -> Result<bool, tonic::Status> {
    let request = pb::RoomAddPersonaRequest {
        room: room.into(),
        persona: persona.into(),
        profile: "echo".into(),
        instructions: format!("you are {persona}"),
    };
    home.client().rooms().room_add_persona(request).await.map(|r| r.into_inner().added)
}

async fn post(
    client: &Client,
    room: &str,
    content: &str,
    mentions: &[&str],
    key: &str,
) -> Result<pb::ThreadSendResponse, tonic::Status> {
    let request = pb::ThreadSendRequest {
        room: room.into(),
        content: content.into(),
        idempotency_key: key.into(),
        mentions: mentions.iter().map(|m| m.to_string()).collect(),
        ..Default::default()
    };
    client.threads().thread_send(request).await.map(|r| r.into_inner())
}

async fn read(
    client: &Client,
    room: &str,
    limit: Option<u32>,
    after_id: &str,
) -> Result<pb::RoomReadResponse, tonic::Status> {
    let request = pb::RoomReadRequest { room: room.into(), limit, after_id: after_id.into() };
    client.threads().room_read(request).await.map(|r| r.into_inner())
}

async fn set_state(home: &TestHome, room: &str, action: pb::RoomAction) -> pb::RoomSetStateResponse {
    let request = pb::RoomSetStateRequest { room: room.into(), action: action as i32 };
    home.client().rooms().room_set_state(request).await.expect("room state").into_inner()
}

async fn set_state_err(home: &TestHome, room: &str, action: pb::RoomAction) -> tonic::Status {
    let request = pb::RoomSetStateRequest { room: room.into(), action: action as i32 };
    home.client().rooms().room_set_state(request).await.expect_err("refused")
}

/// The whole log, oldest first.
async fn entries(home: &TestHome, room: &str) -> Vec<pb::RoomEntry> {
    read(home.client(), room, Some(100), "").await.expect("read").entries
}

fn roster(page: &pb::RoomReadResponse) -> Vec<String> {
    page.members.iter().map(|m| m.id.clone()).collect()
}

fn seqs(entries: &[pb::RoomEntry]) -> Vec<u64> {
    entries.iter().map(|e| e.seq).collect()
}

/// The header the daemon puts before a room entry in a turn's input.
fn header(room: &str, entry: &str, from: &str) -> String {
    format!("[kiki room {room} entry {entry} from {from}]")
}

fn assert_refused<T: std::fmt::Debug>(result: Result<T, tonic::Status>, code: Code, says: &[&str]) {
    let status = result.expect_err("must be refused");
    assert_eq!(status.code(), code, "{status:?}");
    for words in says {
        assert!(status.message().contains(words), "the reason says {words:?}: {}", status.message());
    }
}

fn assert_invalid<T: std::fmt::Debug>(result: Result<T, tonic::Status>, field: &str) {
    let status = result.expect_err("must be refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().starts_with(&format!("{field}:")), "names {field}: {}", status.message());
}

/// How many turns the thread has ended, and whether it is idle.
async fn turns_and_state(home: &TestHome, thread: &str) -> (usize, pb::ThreadState) {
    (home.all_turns(thread).await.len(), home.thread_record(thread).await.state())
}

/// Waits until the thread is idle with exactly `n` ended turns, then checks that no other
/// turn starts.
async fn settles_at(home: &TestHome, thread: &str, n: usize) -> Vec<pb::Turn> {
    eventually(&format!("{thread} idle after {n} turns"), || async {
        (turns_and_state(home, thread).await == (n, pb::ThreadState::Idle)).then_some(())
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    let turns = home.all_turns(thread).await;
    assert_eq!(turns.len(), n, "no further turn of {thread}: {turns:#?}");
    assert_eq!(home.thread_record(thread).await.state(), pb::ThreadState::Idle, "{thread} stays idle");
    turns
}

/// Waits until the thread's ended turns took `n` room entries in all and it is idle, then
/// checks that nothing more comes; the ids of the entries taken, in the order taken.
async fn takes_entries(home: &TestHome, thread: &str, n: usize) -> Vec<String> {
    let taken = || async {
        let turns = home.all_turns(thread).await;
        let ids: Vec<String> = turns
            .iter()
            .flat_map(|t| t.inputs.iter())
            .filter(|i| !i.room.is_empty())
            .map(|i| i.message_id.clone())
            .collect();
        let idle = home.thread_record(thread).await.state() == pb::ThreadState::Idle;
        (ids, idle)
    };
    eventually(&format!("{thread} to take {n} entries and be idle"), || async {
        let (ids, idle) = taken().await;
        (ids.len() >= n && idle).then_some(())
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    let (ids, idle) = taken().await;
    assert_eq!(ids.len(), n, "{thread} took each entry once and no more: {ids:?}");
    assert!(idle, "{thread} stays idle");
    ids
}

async fn archive_thread(home: &TestHome, thread: &str) {
    let request = pb::ThreadArchiveRequest { target: Some(local(thread)), archived: true };
    home.client().home().thread_archive(request).await.expect("archive");
}

async fn thread_count(home: &TestHome) -> usize {
    let list = pb::ThreadListRequest { limit: Some(100), ..Default::default() };
    home.client().threads().thread_list(list).await.expect("list").into_inner().threads.len()
}

/// A host and six members: the seventh is refused (a thread or a persona), a member added
/// again is `added: false` and changes nothing, a removal frees a place, and only existing,
/// unarchived threads of this home join.
#[tokio::test]
async fn a_room_holds_a_host_and_six_members() {
    let home = rooms_home().await;
    let host = home.thread("echo", None).await.id;
    let room = create_room(&home, &host).await;
    let mut threads = Vec::new();
    for _ in 0..7 {
        threads.push(home.thread("echo", None).await.id);
    }
    // Joined in another order than they were made: the roster keeps the order they joined.
    let mut members: Vec<String> = threads[..6].to_vec();
    members.reverse();
    for member in &members {
        assert!(add(home.client(), &room, member).await.expect("add"), "{member} joins");
    }
    let seventh = &threads[6];
    assert_refused(add(home.client(), &room, seventh).await, Code::FailedPrecondition, &["full", &room]);
    assert_refused(add_persona(&home, &room, "critic").await, Code::FailedPrecondition, &["full"]);

    let before = read(home.client(), &room, None, "").await.expect("read");
    let expected: Vec<String> = std::iter::once(host.clone()).chain(members.iter().cloned()).collect();
    assert_eq!(roster(&before), expected, "the host first, then the members in the order they joined");
    assert_eq!(before.members[0].role().word(), "host");
    assert!(
        before.members[1..].iter().all(|m| m.role().word() == "member" && m.kind().word() == "thread"),
        "{before:?}"
    );

    for again in [&members[0], &members[3], &host] {
        assert!(!add(home.client(), &room, again).await.expect("add again"), "{again} was in the room");
    }
    let after = read(home.client(), &room, None, "").await.expect("read");
    assert_eq!(after.members, before.members, "adding a member again changes nothing");

    // A removal frees a place; a thread that cannot join is refused, saying why.
    let removed = pb::RoomRemoveRequest { room: room.clone(), member: members[0].clone() };
    assert!(home.client().rooms().room_remove(removed).await.expect("remove").into_inner().removed);
    let archived = home.thread("echo", None).await.id;
    archive_thread(&home, &archived).await;
    assert_refused(
        add(home.client(), &room, &archived).await,
        Code::FailedPrecondition,
        &["archived", &archived],
    );
    // ALIAS/SESSION names a thread of another home through a bridge: none is named `bee`.
    assert_refused(add(home.client(), &room, &format!("bee/{seventh}")).await, Code::NotFound, &["bee"]);
    // A path through other homes is not a session id of this home.
    assert_invalid(add(home.client(), &room, &format!("local/bee/{seventh}")).await, "session_id");
    assert_invalid(add(home.client(), &room, "").await, "session_id");
    assert_refused(add(home.client(), &room, "th_nope").await, Code::NotFound, &["th_nope"]);
    assert_refused(add(home.client(), "room_nope", seventh).await, Code::NotFound, &["room_nope"]);
    let unchanged = read(home.client(), &room, None, "").await.expect("read");
    assert_eq!(roster(&unchanged).len(), 6, "refused adds change nothing: {unchanged:?}");
    assert!(!roster(&unchanged).contains(&archived));

    assert!(add(home.client(), &room, seventh).await.expect("add"), "the freed place is taken");
    let full = read(home.client(), &room, None, "").await.expect("read");
    assert_eq!(roster(&full).last(), Some(seventh), "{full:?}");
    assert_refused(add(home.client(), &room, &members[0]).await, Code::FailedPrecondition, &["full"]);

    // A room's host is a live thread too.
    let request = pb::RoomCreateRequest { host: archived.clone(), name: String::new() };
    let refused = home.client().rooms().room_create(request).await;
    assert_refused(refused, Code::FailedPrecondition, &["archived"]);
}

/// A thread outside the room is refused the room tools with a reason, until the owner adds
/// it; an agent whose communication is off is refused them too, and owner actions are never
/// an agent's.
#[tokio::test]
async fn only_members_with_communication_on_use_the_room_tools() {
    let home = rooms_home().await;
    let host = home.thread("echo", None).await.id;
    let other = home.thread("echo", None).await.id;
    let room = create_room(&home, &host).await;
    let stranger = agent(&home).await;

    let not_in = ["not in room", room.as_str()];
    assert_refused(
        post(&stranger.client, &room, "let me in", &[], "k1").await,
        Code::PermissionDenied,
        &not_in,
    );
    assert_refused(read(&stranger.client, &room, None, "").await, Code::PermissionDenied, &not_in);
    assert_refused(add(&stranger.client, &room, &stranger.id).await, Code::PermissionDenied, &not_in);
    let create = pb::RoomCreateRequest { host: stranger.id.clone(), name: String::new() };
    let owner_only = stranger.client.rooms().room_create(create).await;
    assert_refused(owner_only, Code::PermissionDenied, &["owner action"]);
    let pause = pb::RoomSetStateRequest { room: room.clone(), action: pb::RoomAction::Pause as i32 };
    assert_refused(
        stranger.client.rooms().room_set_state(pause).await,
        Code::PermissionDenied,
        &["owner action"],
    );
    assert!(entries(&home, &room).await.is_empty(), "nothing was posted");
    assert_eq!(read(home.client(), &room, None, "").await.expect("read").members.len(), 1, "nor added");

    assert!(add(home.client(), &room, &stranger.id).await.expect("the owner adds it"));
    let posted = post(&stranger.client, &room, "hello host", &[&host], "k1").await.expect("a member posts");
    assert_eq!(posted.woke, [host.as_str()]);
    let entry = &entries(&home, &room).await[0];
    assert_eq!((entry.author.as_str(), entry.content.as_str()), (stranger.id.as_str(), "hello host"));
    let turn = home.wait_turns(&host, 1).await.remove(0);
    assert!(turn.input.starts_with(&header(&room, &posted.message_id, &stranger.id)), "{}", turn.input);
    let page = read(&stranger.client, &room, None, "").await.expect("a member reads");
    assert_eq!(page.entries.len(), 1);
    assert!(add(&stranger.client, &room, &other).await.expect("a member adds"), "RoomAdd as the owner's add");

    // Its own switch off: every room tool is refused, with the switch that decides it.
    let off = pb::ThreadSetRequest {
        target: Some(local(&stranger.id)),
        communication: pb::Communication::Off as i32,
    };
    home.client().home().thread_set(off).await.expect("set");
    let switch = ["refused", "communication switch is off"];
    assert_refused(post(&stranger.client, &room, "again", &[], "k2").await, Code::PermissionDenied, &switch);
    assert_refused(read(&stranger.client, &room, None, "").await, Code::PermissionDenied, &switch);
    let third = home.thread("echo", None).await.id;
    assert_refused(add(&stranger.client, &room, &third).await, Code::PermissionDenied, &switch);
    assert_eq!(entries(&home, &room).await.len(), 1, "the refused post left no entry");
    release(&home, &stranger.id, 1).await;

    // A home whose communication is off by default: a member has not opted in.
    let closed = TestHome::builder().shell_profile("hold", HOLD).start().await;
    let host = closed.thread("echo", None).await.id;
    let room = create_room(&closed, &host).await;
    let member = agent(&closed).await;
    assert!(add(closed.client(), &room, &member.id).await.expect("add"));
    let refused = post(&member.client, &room, "hi", &[&host], "k").await;
    assert_refused(refused, Code::PermissionDenied, &["ThreadSend refused", "off by default"]);
    assert_refused(read(&member.client, &room, None, "").await, Code::PermissionDenied, &["off by default"]);
    release(&closed, &member.id, 1).await;
}
