//! What holds a room back: the loop guard pausing a ping-pong, RoomRead changing nothing,
//! a paused room waking nobody and an archived one read-only.

use std::collections::HashMap;

use kiki_proto as pb;
use kiki_tests::{TestHome, binaries::binary, eventually, local};
use tonic::Code;

use super::{
    SETTLE, Team, add, add_persona, agent_file, assert_invalid, assert_refused, create_room, entries, post,
    read, release, roster, seqs, set_state, set_state_err, settles_at, takes_entries, team, turns_and_state,
};

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
