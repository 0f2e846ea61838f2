//! Posts: whom a post wakes, the same key replayed (also after its member left or its room
//! was archived) and other content a conflict, and a persona made a thread by its first
//! mention.

use kiki_proto as pb;
use kiki_proto::Word;
use tonic::Code;

use super::{
    SETTLE, Team, add, add_persona, agent, assert_invalid, assert_refused, create_room, entries, header,
    post, read, release, rooms_home, seqs, set_state, settles_at, takes_entries, team, thread_count,
    turns_and_state,
};

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
