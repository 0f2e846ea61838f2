//! Rooms in one home, in process: the roster and its limits, who may use the room tools,
//! whom a post wakes, idempotent posts, personas, the loop guard, RoomRead, and paused and
//! archived rooms. Agents act from inside a turn, with its token (`hold` turns write it out
//! and wait), or by running the `kiki` binary in their turn (`cargo build --workspace --bins`
//! first). `rooms_cli.rs` covers the CLI and `kill -9`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use kiki_client::Client;
use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::{TestHome, binaries::binary, eventually, local};
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

/// Whom a post wakes: an agent's post only whom it mentions (never itself), the owner's the
/// host unless it mentions someone; a mention outside the roster is refused; a busy member
/// takes the entry in its next turn, under the room header.
#[tokio::test]
async fn posts_wake_whom_they_mention_and_the_owner_wakes_the_host() {
    let home = rooms_home().await;
    let host = home.thread("echo", None).await.id;
    let (e1, e2) = (home.thread("echo", None).await.id, home.thread("echo", None).await.id);
    let room = create_room(&home, &host).await;
    let a = agent(&home).await;
    let b = agent(&home).await;
    for member in [&a.id, &b.id, &e1, &e2] {
        assert!(add(home.client(), &room, member).await.expect("add"));
    }

    let quiet = post(&a.client, &room, "thinking aloud", &[], "").await.expect("post");
    assert!(quiet.woke.is_empty(), "an agent's post without mentions wakes nobody: {quiet:?}");
    assert_eq!(quiet.status(), pb::SendStatus::Delivered, "the log has it");
    tokio::time::sleep(SETTLE).await;
    for thread in [&host, &e1, &e2] {
        assert_eq!(turns_and_state(&home, thread).await, (0, pb::ThreadState::Idle), "{thread} slept on");
    }

    let to_e1 = post(&a.client, &room, "e1, look", &[&e1], "").await.expect("post");
    assert_eq!(to_e1.woke, [e1.as_str()], "exactly the member mentioned");
    let turn = home.wait_turns(&e1, 1).await.remove(0);
    assert!(turn.input.starts_with(&header(&room, &to_e1.message_id, &a.id)), "{}", turn.input);
    assert_eq!(turn.output, "echo: e1, look");
    let input = &turn.inputs[0];
    assert_eq!((input.room.as_str(), input.message_id.as_str()), (room.as_str(), to_e1.message_id.as_str()));
    assert_eq!(input.source.as_ref().map(|s| s.session_id.as_str()), Some(a.id.as_str()), "its author");

    let to_self = post(&a.client, &room, "note to self, e2", &[&a.id, &e2], "").await.expect("post");
    assert_eq!(to_self.woke, [e2.as_str()], "an author never wakes itself");
    home.wait_turns(&e2, 1).await;

    let owner = post(home.client(), &room, "status?", &[], "").await.expect("post");
    assert_eq!(owner.woke, [host.as_str()], "the owner's post without mentions wakes the host");
    let turn = home.wait_turns(&host, 1).await.remove(0);
    assert!(turn.input.starts_with(&header(&room, &owner.message_id, "the owner")), "{}", turn.input);
    assert!(turn.inputs[0].source.is_none(), "the owner's post has no source thread");
    let mentioned = post(home.client(), &room, "both of you", &[&e1, &e2], "").await.expect("post");
    assert_eq!(mentioned.woke, [e1.clone(), e2.clone()], "with mentions, those and not the host");

    let last = entries(&home, &room).await.len();
    let stranger = home.thread("echo", None).await.id;
    assert_invalid(post(home.client(), &room, "who?", &[&stranger], "").await, "mentions");
    assert_invalid(post(&a.client, &room, "who?", &["th_nobody"], "").await, "mentions");
    assert_invalid(post(&a.client, &room, "twice", &[&e1, &e1], "").await, "mentions");
    assert_eq!(entries(&home, &room).await.len(), last, "refused posts leave no entry");

    // A is busy in its turn: B's mention queues, and A's next turn takes it.
    let to_busy = post(&b.client, &room, "a, your turn", &[&a.id], "").await.expect("post");
    assert_eq!(
        (to_busy.woke.as_slice(), to_busy.status()),
        ([a.id.clone()].as_slice(), pb::SendStatus::Delivered)
    );
    assert_eq!(home.all_turns(&a.id).await.len(), 0, "A is still in its first turn");
    release(&home, &a.id, 1).await;
    let turns = release(&home, &a.id, 2).await;
    let next = &turns[1];
    assert_eq!(next.inputs.len(), 1, "only B's entry (not A's own mention of itself): {next:#?}");
    assert!(next.input.starts_with(&header(&room, &to_busy.message_id, &b.id)), "{}", next.input);
    assert!(next.input.contains("a, your turn"), "{}", next.input);
    assert_eq!(next.inputs[0].room, room);

    release(&home, &b.id, 1).await;
    for (thread, n) in [(&host, 1), (&e1, 2), (&e2, 2), (&b.id, 1)] {
        settles_at(&home, thread, n).await;
    }
    settles_at(&home, &a.id, 2).await;
    let log = entries(&home, &room).await;
    assert_eq!(seqs(&log), (1..=6).collect::<Vec<u64>>(), "one order, no gaps");
    let authors: Vec<&str> = log.iter().map(|e| e.author.as_str()).collect();
    assert_eq!(authors, [a.id.as_str(), a.id.as_str(), a.id.as_str(), "", "", b.id.as_str()]);
    assert_eq!(log[2].mentions, [a.id.clone(), e2.clone()], "mentions are kept as given");
    assert_eq!(log[2].woke, [e2.as_str()]);
}

/// The same key and content replay the entry (nothing posted or woken twice); the same key
/// with other content or mentions is a conflict. Keys are the poster's own.
#[tokio::test]
async fn the_same_key_replays_a_post_and_other_content_conflicts() {
    let Team { home, host, e1, room, a } = team().await;

    let first = post(home.client(), &room, "once", &[&e1], "k1").await.expect("post");
    assert!(!first.replayed);
    assert_eq!((first.room_seq, first.idempotency_key.as_str()), (1, "k1"));
    home.wait_turns(&e1, 1).await;
    let again = post(home.client(), &room, "once", &[&e1], "k1").await.expect("replay");
    assert!(again.replayed, "{again:?}");
    assert_eq!((again.message_id.as_str(), again.room_seq), (first.message_id.as_str(), 1));
    assert_eq!(again.woke, first.woke, "the original answer");
    assert_refused(
        post(home.client(), &room, "twice", &[&e1], "k1").await,
        Code::AlreadyExists,
        &["idempotency_key", &first.message_id],
    );
    assert_refused(
        post(home.client(), &room, "once", &[], "k1").await,
        Code::AlreadyExists,
        &["idempotency_key"],
    );

    // The agent's keys are its own: its k1 is a post of its own, replayed in turn.
    let mine = post(&a.client, &room, "once", &[&e1], "k1").await.expect("post");
    assert!(!mine.replayed);
    assert_ne!(mine.message_id, first.message_id);
    assert_eq!(mine.room_seq, 2);
    let mine_again = post(&a.client, &room, "once", &[&e1], "k1").await.expect("replay");
    assert!(mine_again.replayed);
    assert_eq!(mine_again.message_id, mine.message_id);
    assert_refused(
        post(&a.client, &room, "other", &[&e1], "k1").await,
        Code::AlreadyExists,
        &["idempotency_key"],
    );

    // Without a key, one is made and given back: repeating it replays.
    let made = post(home.client(), &room, "keyless", &[], "").await.expect("post");
    assert!(!made.idempotency_key.is_empty(), "{made:?}");
    let retried = post(home.client(), &room, "keyless", &[], &made.idempotency_key).await.expect("replay");
    assert!(retried.replayed);
    assert_eq!(retried.message_id, made.message_id);

    release(&home, &a.id, 1).await;
    let log = entries(&home, &room).await;
    assert_eq!(seqs(&log), [1, 2, 3], "one entry per key and poster: {log:#?}");
    settles_at(&home, &host, 1).await;
    let taken = takes_entries(&home, &e1, 2).await;
    assert_eq!(taken, [first.message_id, mine.message_id], "replays woke nobody again");
}

/// A retry of an accepted post gets its original answer after the member it mentioned left
/// the room (the store's key decides first, as a ThreadSend's does).
#[tokio::test]
async fn a_retry_replays_after_the_mentioned_member_left() {
    let home = rooms_home().await;
    let host = home.thread("echo", None).await.id;
    let e1 = home.thread("echo", None).await.id;
    let room = create_room(&home, &host).await;
    add(home.client(), &room, &e1).await.expect("add");
    let to_e1 = post(home.client(), &room, "for e1", &[&e1], "to-e1").await.expect("post");
    let removed = pb::RoomRemoveRequest { room: room.clone(), member: e1.clone() };
    assert!(home.client().rooms().room_remove(removed).await.expect("remove").into_inner().removed);
    let retry = post(home.client(), &room, "for e1", &[&e1], "to-e1").await;
    let retry = retry.expect("a retry after the mentioned member left replays");
    assert!(retry.replayed && retry.message_id == to_e1.message_id, "{retry:?}");
    assert_eq!(entries(&home, &room).await.len(), 1);
}

/// A retry of an accepted post gets its original answer after the room was archived (new
/// posts are refused; the key decides first).
#[tokio::test]
async fn a_retry_replays_after_the_room_was_archived() {
    let home = rooms_home().await;
    let host = home.thread("echo", None).await.id;
    let room = create_room(&home, &host).await;
    let a = agent(&home).await;
    add(home.client(), &room, &a.id).await.expect("add");
    let by_owner = post(home.client(), &room, "for the host", &[], "plain").await.expect("post");
    let by_agent = post(&a.client, &room, "for the host too", &[&host], "mine").await.expect("post");
    set_state(&home, &room, pb::RoomAction::Archive).await;
    let retry = post(home.client(), &room, "for the host", &[], "plain").await;
    let retry = retry.expect("the owner's retry after the room was archived replays");
    assert!(retry.replayed && retry.message_id == by_owner.message_id, "{retry:?}");
    let retry = post(&a.client, &room, "for the host too", &[&host], "mine").await;
    let retry = retry.expect("an agent's retry after the room was archived replays");
    assert!(retry.replayed && retry.message_id == by_agent.message_id, "{retry:?}");
    assert_eq!(entries(&home, &room).await.len(), 2);
    release(&home, &a.id, 1).await;
}

/// A persona is a roster id until its first mention makes it a thread of this home (told its
/// instructions first); the persona id and the thread id both wake that one thread after.
#[tokio::test]
async fn a_persona_becomes_one_thread_on_its_first_mention() {
    let home = rooms_home().await;
    let host = home.thread("echo", None).await.id;
    let room = create_room(&home, &host).await;
    assert!(add_persona(&home, &room, "critic").await.expect("persona"));
    assert!(!add_persona(&home, &room, "critic").await.expect("persona again"), "already in the room");
    let page = read(home.client(), &room, None, "").await.expect("read");
    let critic = &page.members[1];
    assert_eq!(
        (critic.id.as_str(), critic.kind().word().as_str(), critic.role().word().as_str()),
        ("critic", "persona", "member")
    );
    assert_eq!((critic.thread_id.as_str(), critic.profile.as_str()), ("", "echo"), "no thread yet");
    assert_eq!(thread_count(&home).await, 1, "only the host");

    let first = post(home.client(), &room, "review this", &["critic"], "").await.expect("post");
    let page = read(home.client(), &room, None, "").await.expect("read");
    let thread = page.members[1].thread_id.clone();
    assert!(thread.starts_with("th_"), "the roster shows its thread: {page:?}");
    assert_eq!(first.woke, std::slice::from_ref(&thread), "woken as the roster names it now");
    let critic = &page.members[1];
    assert_eq!(
        (critic.id.as_str(), critic.kind().word().as_str()),
        (thread.as_str(), "persona"),
        "its id is its thread's now"
    );
    let turn = home.wait_turns(&thread, 1).await.remove(0);
    assert_eq!(turn.output, "echo: you are critic\necho: review this", "instructions, then the entry");
    assert_eq!(turn.inputs[1].message_id, first.message_id);
    assert!(turn.input.contains(&header(&room, &first.message_id, "the owner")), "{}", turn.input);
    let record = home.thread_record(&thread).await;
    assert!(record.title.contains("critic") && record.profile == "echo", "{record:?}");

    let by_persona = post(home.client(), &room, "and this", &["critic"], "").await.expect("post");
    // Mentioned by its persona id or by its thread's, it is woken by its roster id.
    assert_eq!(by_persona.woke, std::slice::from_ref(&thread), "{by_persona:?}");
    let by_thread = post(home.client(), &room, "and that", &[&thread], "").await.expect("post");
    assert_eq!(by_thread.woke, std::slice::from_ref(&thread), "its thread id names it too: {by_thread:?}");
    takes_entries(&home, &thread, 3).await;
    let turns = home.all_turns(&thread).await;
    let outputs: Vec<&str> = turns.iter().flat_map(|t| t.output.lines()).collect();
    assert_eq!(outputs, ["echo: you are critic", "echo: review this", "echo: and this", "echo: and that"]);
    assert_eq!(thread_count(&home).await, 2, "one thread made for the persona");

    // Two first mentions at once still make one thread.
    assert!(add_persona(&home, &room, "twin").await.expect("persona"));
    let (one, two) = tokio::join!(
        post(home.client(), &room, "one", &["twin"], "one"),
        post(home.client(), &room, "two", &["twin"], "two"),
    );
    assert_eq!(thread_count(&home).await, 3, "one thread for the twin");
    let page = read(home.client(), &room, None, "").await.expect("read");
    let twin =
        page.members.iter().find(|m| m.kind().word() == "persona" && m.thread_id != thread).expect("twin");
    let twin = twin.thread_id.clone();
    assert!(twin.starts_with("th_"), "{page:?}");
    assert_eq!((one.expect("post").woke, two.expect("post").woke), (vec![twin.clone()], vec![twin.clone()]));
    takes_entries(&home, &twin, 2).await;
}

/// Two agents that answer each other forever: past `[rooms] max_agent_wakes` the room pauses
/// itself, the host hears of it (ThreadWait `attention`), and the ping-pong stops; the
/// owner's resume and post start the count over.
#[tokio::test]
async fn the_loop_guard_pauses_a_ping_pong() {
    let kiki = binary("kiki");
    // Each turn posts to its room, mentioning its peer (both read from CWD/THREAD.env).
    let script = format!(
        "cat >/dev/null; . \"./$KIKI_THREAD_ID.env\"; \
         {} room send \"$ROOM\" --content \"ping from $KIKI_THREAD_ID\" --mention \"$PEER\" >/dev/null",
        kiki.display()
    );
    let home = TestHome::builder()
        .config(|c| {
            c.thread_communication.enabled = Some(true);
            c.rooms.max_agent_wakes = 4;
        })
        .shell_profile("pinger", &script)
        .start()
        .await;
    let host = home.thread("echo", None).await.id;
    let room = create_room(&home, &host).await;
    let a = home.thread("pinger", None).await.id;
    let b = home.thread("pinger", None).await.id;
    for (me, peer) in [(&a, &b), (&b, &a)] {
        add(home.client(), &room, me).await.expect("add");
        std::fs::write(agent_file(&home, me, "env"), format!("ROOM={room}\nPEER={peer}\n")).expect("env");
    }
    let wait_host = |cursor: Option<String>, timeout_ms: u32| {
        let request = pb::ThreadWaitRequest {
            targets: vec![local(&host)],
            timeout_ms: Some(timeout_ms),
            cursors: cursor.map(|c| HashMap::from([(host.clone(), c)])).unwrap_or_default(),
        };
        let client = home.client().clone();
        async move { client.threads().thread_wait(request).await.expect("wait").into_inner() }
    };
    let mut cursor = wait_host(None, 0).await.results[0].cursor.clone();

    for round in 1..=2usize {
        let kickoff = post(home.client(), &room, "go", &[&a], "").await.expect("post");
        assert_eq!(kickoff.woke, [a.as_str()], "round {round}");
        let page = eventually("the loop guard to pause the room", || async {
            let page = read(home.client(), &room, Some(100), "").await.expect("read");
            page.paused.then_some(page)
        })
        .await;
        assert!(page.paused_reason.contains("loop guard"), "{}", page.paused_reason);
        assert!(page.paused_reason.contains("5 times"), "the count: {}", page.paused_reason);
        assert!(page.paused_reason.contains("max_agent_wakes` = 4"), "the limit: {}", page.paused_reason);

        // Owner, then A, B, A, B (four wakes), then A's post that would be the fifth: kept,
        // waking nobody. A took three turns, B two; nothing more runs.
        let a_turns = settles_at(&home, &a, 3 * round).await;
        let b_turns = settles_at(&home, &b, 2 * round).await;
        for turn in a_turns.iter().chain(&b_turns) {
            assert_eq!(turn.status(), pb::TurnStatus::Completed, "{} {}", turn.error, turn.output);
        }
        let log = entries(&home, &room).await;
        assert_eq!(seqs(&log), (1..=6 * round as u64).collect::<Vec<u64>>());
        let this_round = &log[6 * (round - 1)..];
        let authors: Vec<&str> = this_round.iter().map(|e| e.author.as_str()).collect();
        assert_eq!(authors, ["", a.as_str(), b.as_str(), a.as_str(), b.as_str(), a.as_str()]);
        let woke: Vec<Vec<String>> = this_round.iter().map(|e| e.woke.clone()).collect();
        assert_eq!(
            woke,
            [vec![a.clone()], vec![b.clone()], vec![a.clone()], vec![b.clone()], vec![a.clone()], vec![]]
        );

        let waited = wait_host(Some(cursor.clone()), 5_000).await;
        let result = &waited.results[0];
        let attention: Vec<&pb::Event> =
            result.events.iter().filter(|e| e.kind() == pb::EventKind::Attention).collect();
        assert_eq!(attention.len(), 1, "one attention event for the host: {result:?}");
        assert!(
            attention[0].reason.contains(&room) && attention[0].reason.contains("loop guard"),
            "{attention:?}"
        );
        cursor = result.cursor.clone();
        assert_eq!(settles_at(&home, &host, 0).await.len(), 0, "the host was told, not woken");

        let resumed = set_state(&home, &room, pb::RoomAction::Resume).await;
        assert!(resumed.changed && !resumed.room.expect("room").paused);
    }
}

/// RoomRead changes nothing and wakes nobody; it pages in the room's one order with its
/// cursor, and refuses a limit out of range or another room's cursor.
#[tokio::test]
async fn room_read_pages_in_order_and_changes_nothing() {
    let Team { home, host, e1, room, a } = team().await;
    let other_room = create_room(&home, &host).await;
    for i in 1..=5 {
        post(home.client(), &room, &format!("entry {i}"), &[&e1], "").await.expect("post");
    }
    takes_entries(&home, &e1, 5).await;
    let e1_turns = home.all_turns(&e1).await.len();
    let list = || async {
        let rooms = home.client().rooms().room_list(pb::RoomListRequest::default()).await.expect("list");
        rooms.into_inner().rooms
    };
    let rooms_before = list().await;

    for reader in [home.client(), &a.client] {
        let all = read(reader, &room, None, "").await.expect("read");
        assert_eq!(seqs(&all.entries), [1, 2, 3, 4, 5]);
        let mut pages = Vec::new();
        let mut after = String::new();
        for _ in 0..4 {
            let page = read(reader, &room, Some(2), &after).await.expect("page");
            pages.push(seqs(&page.entries));
            after = page.next_cursor.expect("next_cursor is always set");
        }
        assert_eq!(pages, [vec![1, 2], vec![3, 4], vec![5], vec![]], "pages in the room's order");
        let contents: Vec<&str> = all.entries.iter().map(|e| e.content.as_str()).collect();
        assert_eq!(contents, ["entry 1", "entry 2", "entry 3", "entry 4", "entry 5"]);

        assert_invalid(read(reader, &room, Some(0), "").await, "limit");
        assert_invalid(read(reader, &room, Some(101), "").await, "limit");
        assert_eq!(read(reader, &room, Some(100), "").await.expect("100 is fine").entries.len(), 5);
        assert_invalid(read(reader, &room, Some(1), "junk").await, "after_id");
    }
    let cursor = read(home.client(), &room, Some(1), "").await.expect("read").next_cursor.expect("cursor");
    assert_invalid(read(home.client(), &other_room, None, &cursor).await, "after_id");
    assert_refused(read(home.client(), "room_nope", None, "").await, Code::NotFound, &["room_nope"]);

    tokio::time::sleep(SETTLE).await;
    assert_eq!(list().await, rooms_before, "reading changed no room");
    assert_eq!(turns_and_state(&home, &host).await, (0, pb::ThreadState::Idle), "nor woke the host");
    settles_at(&home, &e1, e1_turns).await;
    release(&home, &a.id, 1).await;
    settles_at(&home, &a.id, 1).await;

    // The end's cursor goes on with what comes next.
    let end = read(home.client(), &room, None, "").await.expect("read").next_cursor.expect("cursor");
    post(home.client(), &room, "entry 6", &[&e1], "").await.expect("post");
    let next = read(home.client(), &room, None, &end).await.expect("read");
    assert_eq!(seqs(&next.entries), [6]);
}

/// A paused room keeps every post and wakes nobody, whoever posts; an archived one refuses
/// posts, adds and changes, saying so, and stays readable.
#[tokio::test]
async fn paused_rooms_keep_posts_and_archived_rooms_are_read_only() {
    let Team { home, host, e1, room, a } = team().await;
    let paused = set_state(&home, &room, pb::RoomAction::Pause).await;
    assert!(paused.changed && paused.room.expect("room").paused);
    let by_agent = post(&a.client, &room, "e1?", &[&e1], "").await.expect("a post while paused");
    let by_owner = post(home.client(), &room, "host?", &[], "").await.expect("a post while paused");
    let mentioning = post(home.client(), &room, "e1!", &[&e1], "").await.expect("a post while paused");
    for posted in [&by_agent, &by_owner, &mentioning] {
        assert!(posted.woke.is_empty(), "a paused room wakes nobody: {posted:?}");
        assert_eq!(posted.status(), pb::SendStatus::Delivered, "the log has it");
    }
    tokio::time::sleep(SETTLE).await;
    for thread in [&host, &e1] {
        assert_eq!(turns_and_state(&home, thread).await, (0, pb::ThreadState::Idle), "{thread} slept on");
    }
    let page = read(&a.client, &room, None, "").await.expect("read");
    assert!(page.paused && page.paused_reason.contains("owner"), "{page:?}");
    assert_eq!(seqs(&page.entries), [1, 2, 3]);

    set_state(&home, &room, pb::RoomAction::Resume).await;
    let awake = post(&a.client, &room, "e1, now", &[&e1], "").await.expect("post");
    assert_eq!(awake.woke, [e1.as_str()]);
    let turn = home.wait_turns(&e1, 1).await.remove(0);
    assert_eq!(turn.output, "echo: e1, now", "the paused room's entries were not queued");

    let archived = set_state(&home, &room, pb::RoomAction::Archive).await;
    assert!(archived.changed && archived.room.expect("room").archived);
    let why = ["archived", room.as_str()];
    assert_refused(post(&a.client, &room, "late", &[&e1], "").await, Code::FailedPrecondition, &why);
    assert_refused(post(home.client(), &room, "late", &[], "").await, Code::FailedPrecondition, &why);
    let newcomer = home.thread("echo", None).await.id;
    assert_refused(add(home.client(), &room, &newcomer).await, Code::FailedPrecondition, &why);
    assert_refused(add(&a.client, &room, &newcomer).await, Code::FailedPrecondition, &why);
    assert_refused(add_persona(&home, &room, "critic").await, Code::FailedPrecondition, &why);
    let remove = pb::RoomRemoveRequest { room: room.clone(), member: e1.clone() };
    assert_refused(home.client().rooms().room_remove(remove).await, Code::FailedPrecondition, &why);
    for action in [pb::RoomAction::Pause, pb::RoomAction::Resume] {
        let refused = set_state_err(&home, &room, action).await;
        assert_eq!(refused.code(), Code::FailedPrecondition, "{action:?}: {refused:?}");
        assert!(refused.message().contains("archived"), "{refused:?}");
    }
    assert!(!set_state(&home, &room, pb::RoomAction::Archive).await.changed, "already archived");

    for reader in [home.client(), &a.client] {
        let page = read(reader, &room, None, "").await.expect("an archived room is readable");
        assert!(page.archived, "{page:?}");
        assert_eq!(seqs(&page.entries), [1, 2, 3, 4]);
        assert_eq!(roster(&page), [host.clone(), e1.clone(), a.id.clone()], "nobody joined or left");
    }
    release(&home, &a.id, 1).await;
    settles_at(&home, &e1, 1).await;
    settles_at(&home, &host, 0).await;
}
