//! Conformance cases: rooms (their rosters, states, posts and loop guard) and permission
//! requests.

use super::*;
use kiki_daemon::store::{
    AddOutcome, ClaimedTurn, EntryDelivery, EntryRecord, EventKind, MemberKind, MemberRecord, NewEntry,
    OutboundEntry, OutboxRecord, OutboxStatus, PermissionRecord, PermissionStatus, PostOutcome,
    ROOM_MEMBERS_MAX, RoomChange, RoomRecord, RoomTag, SourceRef, Store,
};

const ROOM: &str = "room_1";
const HOST: &str = "th_host";

fn room(id: &str, now: i64) -> RoomRecord {
    RoomRecord {
        seq: 0,
        id: id.into(),
        name: format!("name of {id}"),
        host_thread: HOST.into(),
        paused: false,
        paused_reason: String::new(),
        archived: false,
        agent_wakes: 0,
        last_seq: 0,
        created_at: now,
        updated_at: now,
    }
}

fn member(id: &str, kind: MemberKind, thread: Option<&str>) -> MemberRecord {
    MemberRecord {
        member_id: id.into(),
        kind,
        thread_id: thread.map(String::from),
        profile: String::new(),
        instructions: String::new(),
        added_at: 2,
    }
}

fn thread_member(thread: &str) -> MemberRecord {
    member(thread, MemberKind::Thread, Some(thread))
}

/// Room [`ROOM`], hosted by [`HOST`], with `threads` as its members; every thread created.
async fn room_with(store: &dyn Store, threads: &[&str]) {
    for thread in std::iter::once(&HOST).chain(threads) {
        store.create_thread(&new_thread(thread, "ws", 1), None).await.expect("create");
    }
    store.create_room(&room(ROOM, 1)).await.expect("room");
    for thread in threads {
        assert_eq!(store.add_member(ROOM, &thread_member(thread)).await.expect("add"), AddOutcome::Added);
    }
}

fn local(thread: &str) -> SourceRef {
    SourceRef { host_id: String::new(), thread_id: thread.into(), workspace_id: String::new() }
}

/// A post to [`ROOM`] by `author` (`None`: the owner), keyed in its author's scope as the
/// rooms service keys it, without claims.
fn post(id: &str, author: Option<&str>, mentions: &[&str], key: &str) -> NewEntry {
    let content = format!("content of {id}");
    NewEntry {
        room_id: ROOM.into(),
        id: id.into(),
        author: author.map(local),
        request_hash: format!("hash of {content}"),
        content,
        mentions: mentions.iter().map(|m| m.to_string()).collect(),
        key_scope: author.unwrap_or_default().into(),
        key: key.into(),
        claims: Vec::new(),
        remote: Vec::new(),
        max_agent_wakes: 20,
        now: 10,
    }
}

/// Writes a post that must be written: its entry, the turns it started, the threads that
/// got it queued, and why it paused the room.
async fn posted(
    store: &dyn Store,
    entry: &NewEntry,
) -> (EntryRecord, Vec<ClaimedTurn>, Vec<String>, Option<String>) {
    match store.post_to_room(entry).await.expect("post") {
        PostOutcome::Posted { entry, turns, queued, paused } => (entry, turns, queued, paused),
        other => panic!("not posted: {other:?}"),
    }
}

async fn read_room(store: &dyn Store) -> RoomRecord {
    store.room(ROOM).await.expect("read").expect("exists")
}

fn entry_tag(entry: &str) -> Option<RoomTag> {
    Some(RoomTag { room: ROOM.into(), entry: entry.into() })
}

/// A room reads back as created (unpaused, with an empty log); rooms list newest first in
/// keyset pages, archived ones too.
pub async fn rooms_list_newest_first_archived_too(store: &dyn Store) {
    store.create_thread(&new_thread(HOST, "ws", 1), None).await.expect("create");
    for (now, id) in [(1, "room_a"), (2, "room_b"), (3, "room_c")] {
        store.create_room(&room(id, now)).await.expect("room");
    }
    let read = store.room("room_b").await.expect("read").expect("exists");
    assert_eq!(read, RoomRecord { seq: read.seq, ..room("room_b", 2) });
    assert!(store.room("room_missing").await.expect("read").is_none());
    store.change_room("room_c", RoomChange::Archive, "", 5).await.expect("archive").expect("exists");
    let ids = |rooms: &[RoomRecord]| rooms.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    let first = store.list_rooms(None, 2).await.expect("list");
    assert_eq!(ids(&first), ["room_c", "room_b"]);
    let rest = store.list_rooms(Some(first[1].seq), 10).await.expect("list");
    assert_eq!(ids(&rest), ["room_a"]);
}

/// Members are listed in the order they joined, each field as added; a member, its thread
/// or the host cannot join again, and a missing room takes nobody.
pub async fn members_join_once_in_the_order_they_came(store: &dyn Store) {
    room_with(store, &["th_b", "th_a"]).await;
    let persona = MemberRecord {
        profile: "claude".into(),
        instructions: "review every change".into(),
        ..member("reviewer", MemberKind::Persona, None)
    };
    let far = member("HOME_P/th_far", MemberKind::Remote, None);
    for joining in [&persona, &far] {
        assert_eq!(store.add_member(ROOM, joining).await.expect("add"), AddOutcome::Added);
    }
    let roster = vec![thread_member("th_b"), thread_member("th_a"), persona.clone(), far];
    assert_eq!(store.room_members(ROOM).await.expect("members"), roster);
    let by_thread = member("alias", MemberKind::Thread, Some("th_b"));
    for again in [thread_member("th_a"), thread_member(HOST), persona, by_thread] {
        let outcome = store.add_member(ROOM, &again).await.expect("add");
        assert_eq!(outcome, AddOutcome::AlreadyMember, "{again:?}");
    }
    assert_eq!(store.room_members(ROOM).await.expect("members"), roster, "unchanged");
    let lost = store.add_member("room_missing", &thread_member("th_a")).await.expect("add");
    assert_eq!(lost, AddOutcome::RoomGone);
    assert_eq!(store.rooms_of_thread("th_a").await.expect("rooms"), [ROOM]);
    assert_eq!(store.rooms_of_thread(HOST).await.expect("rooms"), [ROOM], "the host's too");
    assert!(store.rooms_of_thread("th_none").await.expect("rooms").is_empty());
}

/// A room holds at most [`ROOM_MEMBERS_MAX`] members beside its host; a freed seat takes
/// a new one.
pub async fn a_full_room_takes_no_more_members(store: &dyn Store) {
    let threads: Vec<String> = (0..ROOM_MEMBERS_MAX).map(|i| format!("th_{i}")).collect();
    room_with(store, &threads.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let late = thread_member("th_late");
    assert_eq!(store.add_member(ROOM, &late).await.expect("add"), AddOutcome::Full);
    assert_eq!(store.room_members(ROOM).await.expect("members").len(), ROOM_MEMBERS_MAX);
    assert!(store.remove_member(ROOM, "th_0", 3).await.expect("remove"));
    assert_eq!(store.add_member(ROOM, &late).await.expect("add"), AddOutcome::Added);
    let members = store.room_members(ROOM).await.expect("members");
    assert_eq!(members.last().map(|m| m.member_id.as_str()), Some("th_late"));
}

/// Pause and resume change a room only when it is not so already, and say whether they
/// did; a resume starts the loop guard's count over.
pub async fn pausing_and_resuming_say_whether_they_changed_the_room(store: &dyn Store) {
    room_with(store, &["th_a"]).await;
    posted(store, &post("msg_1", Some("th_a"), &[HOST], "k1")).await;
    assert_eq!(read_room(store).await.agent_wakes, 1, "an agent's post woke the host");
    let change = async |change, reason, now| {
        store.change_room(ROOM, change, reason, now).await.expect("change").expect("exists")
    };
    let (paused, changed) = change(RoomChange::Pause, "lunch", 20).await;
    assert!(changed && paused.paused);
    assert_eq!((paused.paused_reason.as_str(), paused.agent_wakes, paused.updated_at), ("lunch", 1, 20));
    assert_eq!(change(RoomChange::Pause, "again", 21).await, (paused, false), "paused already");
    let (resumed, changed) = change(RoomChange::Resume, "", 22).await;
    assert!(changed && !resumed.paused);
    assert_eq!((resumed.paused_reason.as_str(), resumed.agent_wakes, resumed.updated_at), ("", 0, 22));
    assert_eq!(change(RoomChange::Resume, "", 23).await, (resumed.clone(), false), "running already");
    assert_eq!(read_room(store).await, resumed);
    assert!(store.change_room("room_missing", RoomChange::Pause, "", 24).await.expect("change").is_none());
}

/// An archived room changes no more: no pause, resume or second archive, no new member,
/// no post.
pub async fn an_archived_room_changes_no_more(store: &dyn Store) {
    room_with(store, &["th_a"]).await;
    store.change_room(ROOM, RoomChange::Pause, "first", 2).await.expect("pause").expect("exists");
    let (archived, changed) =
        store.change_room(ROOM, RoomChange::Archive, "", 3).await.expect("archive").expect("exists");
    assert!(changed && archived.archived);
    assert_eq!(archived.updated_at, 3);
    for change in [RoomChange::Resume, RoomChange::Pause, RoomChange::Archive] {
        let now = store.change_room(ROOM, change, "later", 4).await.expect("change").expect("exists");
        assert_eq!(now, (archived.clone(), false), "{change:?}");
    }
    let joining = store.add_member(ROOM, &thread_member("th_b")).await.expect("add");
    assert_eq!(joining, AddOutcome::Archived);
    let refused = store.post_to_room(&post("msg_1", None, &[], "k1")).await.expect("post");
    assert!(matches!(refused, PostOutcome::Archived), "{refused:?}");
    assert!(store.room_entries(ROOM, 0, 10).await.expect("entries").is_empty());
    assert_eq!(read_room(store).await, archived);
}

/// Removing a member says whether it was one (the host never is); it may post no more, but
/// the entries queued for it stay queued for its next turn.
pub async fn a_removed_member_keeps_the_entries_queued_for_it(store: &dyn Store) {
    room_with(store, &["th_a"]).await;
    store.enqueue_input("th_a", &user("in_1", "busy")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    let (_, _, queued, _) = posted(store, &post("msg_1", None, &["th_a"], "k1")).await;
    assert_eq!(queued, ["th_a"]);
    assert!(store.remove_member(ROOM, "th_a", 11).await.expect("remove"));
    assert!(!store.remove_member(ROOM, "th_a", 12).await.expect("remove"), "once");
    assert!(!store.remove_member(ROOM, HOST, 12).await.expect("remove"), "the host is no member");
    assert!(store.room_members(ROOM).await.expect("members").is_empty());
    assert!(store.rooms_of_thread("th_a").await.expect("rooms").is_empty());
    assert_eq!(read_room(store).await.updated_at, 11);
    let late = store.post_to_room(&post("msg_2", Some("th_a"), &[HOST], "k2")).await.expect("post");
    assert!(matches!(late, PostOutcome::NotMember), "{late:?}");
    finish(store, "tu_1", "done").await;
    let next = store.claim_turn("th_a", turn("tu_2", true), 13).await.expect("claim").expect("the entry");
    let taken: Vec<_> = next.inputs.iter().map(|i| (i.room.clone(), i.content.as_str())).collect();
    assert_eq!(taken, [(entry_tag("msg_1"), "content of msg_1")]);
}

/// A persona's thread is recorded once: a thread made for it later loses, and the persona
/// is in the room by the first one, which a post naming the persona wakes.
pub async fn a_persona_keeps_the_first_thread_made_for_it(store: &dyn Store) {
    room_with(store, &[]).await;
    for thread in ["th_p1", "th_p2"] {
        store.create_thread(&new_thread(thread, "ws", 1), None).await.expect("create");
    }
    let persona = member("reviewer", MemberKind::Persona, None);
    assert_eq!(store.add_member(ROOM, &persona).await.expect("add"), AddOutcome::Added);
    assert_eq!(store.set_persona_thread(ROOM, "reviewer", "th_p1").await.expect("set"), "th_p1");
    assert_eq!(store.set_persona_thread(ROOM, "reviewer", "th_p2").await.expect("set"), "th_p1", "kept");
    let members = store.room_members(ROOM).await.expect("members");
    assert_eq!(members, [MemberRecord { thread_id: Some("th_p1".into()), ..persona }]);
    assert_eq!(store.rooms_of_thread("th_p1").await.expect("rooms"), [ROOM]);
    assert!(store.rooms_of_thread("th_p2").await.expect("rooms").is_empty());
    let by_thread = store.add_member(ROOM, &thread_member("th_p1")).await.expect("add");
    assert_eq!(by_thread, AddOutcome::AlreadyMember, "its thread is in the room");
    let mut named = post("msg_1", None, &["reviewer"], "k1");
    named.claims = vec![("th_p1".into(), turn("tu_1", true)), ("th_p2".into(), turn("tu_2", true))];
    let (_, turns, ..) = posted(store, &named).await;
    let started: Vec<_> = turns.iter().map(|t| t.turn.thread_id.as_str()).collect();
    assert_eq!(started, ["th_p1"]);
    assert!(store.set_persona_thread(ROOM, "nobody", "th_p2").await.is_err(), "no such persona");
}

/// The owner's post without mentions wakes the host: idle and with a claim, it starts its
/// turn in the post's commit, taking what it had queued, then the entry.
pub async fn the_owners_unmentioned_post_starts_the_hosts_turn_at_once(store: &dyn Store) {
    room_with(store, &["th_a"]).await;
    store.enqueue_input(HOST, &user("in_u", "earlier")).await.expect("enqueue");
    let mut owners = post("msg_1", None, &[], "k1");
    owners.claims = vec![(HOST.into(), turn("tu_1", true)), ("th_a".into(), turn("tu_2", true))];
    let (entry, turns, queued, paused) = posted(store, &owners).await;
    assert_eq!((entry.seq, entry.author, entry.woke, entry.at), (1, None, vec![HOST.to_string()], 10));
    assert!(queued.is_empty() && paused.is_none());
    let [started]: [ClaimedTurn; 1] = turns.try_into().expect("one turn");
    assert_eq!((started.turn.id.as_str(), started.turn.thread_id.as_str()), ("tu_1", HOST));
    let taken: Vec<_> = started.inputs.iter().map(|i| (i.room.clone(), i.content.as_str())).collect();
    assert_eq!(taken, [(None, "earlier"), (entry_tag("msg_1"), "content of msg_1")]);
    assert!(store.thread(HOST).await.expect("read").expect("exists").running);
    assert!(!store.thread("th_a").await.expect("read").expect("exists").running, "not woken");
    let room = read_room(store).await;
    assert_eq!((room.last_seq, room.agent_wakes), (1, 0));
    finish(store, "tu_1", "done").await;
    let again = store.claim_turn(HOST, turn("tu_3", true), 11).await.expect("claim");
    assert!(again.is_none(), "the turn took the entry for good: {again:?}");
}

/// A post wakes the members it mentions in order, each once: an idle one with a claim
/// starts its turn at once; a busy one, or one without a claim, gets the entry queued.
pub async fn a_busy_member_gets_the_entry_queued(store: &dyn Store) {
    room_with(store, &["th_a", "th_b", "th_c"]).await;
    store.enqueue_input("th_b", &user("in_b", "work")).await.expect("enqueue");
    store.claim_turn("th_b", turn("tu_b", true), 2).await.expect("claim").expect("input");
    let mut p = post("msg_1", None, &["th_b", "th_a", "th_b", "th_c"], "k1");
    p.claims = vec![("th_a".into(), turn("tu_a", true)), ("th_b".into(), turn("tu_x", true))];
    let (entry, turns, mut queued, _) = posted(store, &p).await;
    assert_eq!(entry.woke, ["th_b", "th_a", "th_c"]);
    let started: Vec<_> = turns.iter().map(|t| (t.turn.id.as_str(), t.turn.thread_id.as_str())).collect();
    assert_eq!(started, [("tu_a", "th_a")]);
    queued.sort();
    assert_eq!(queued, ["th_b", "th_c"]);
    assert!(store.turn("th_b", "tu_x").await.expect("turn").is_none(), "a busy thread's claim is unused");
    finish(store, "tu_b", "done").await;
    for thread in ["th_b", "th_c"] {
        let next = store.claim_turn(thread, turn(&format!("tu_{thread}"), true), 11).await.expect("claim");
        let taken: Vec<_> =
            next.expect("queued").inputs.iter().map(|i| (i.room.clone(), i.source.clone())).collect();
        assert_eq!(taken, [(entry_tag("msg_1"), None)], "{thread}: the owner's entry, once");
    }
}

/// An agent's post wakes only the members it mentions, never its author, and counts those
/// wakes for the loop guard; the entry and the inputs name their author.
pub async fn an_agents_post_wakes_whom_it_mentions_but_itself(store: &dyn Store) {
    room_with(store, &["th_a", "th_b"]).await;
    let (quiet, ..) = posted(store, &post("msg_1", Some("th_a"), &[], "k1")).await;
    assert!(quiet.woke.is_empty(), "no mention wakes nobody, not even the host");
    assert_eq!(read_room(store).await.agent_wakes, 0);
    let mut p = post("msg_2", Some("th_a"), &["th_a", HOST, "th_b"], "k2");
    p.claims =
        ["th_a", HOST, "th_b"].iter().map(|t| (t.to_string(), turn(&format!("tu_{t}"), true))).collect();
    let (entry, turns, ..) = posted(store, &p).await;
    assert_eq!((entry.author, entry.woke), (Some(local("th_a")), vec![HOST.to_string(), "th_b".into()]));
    let mut started: Vec<_> = turns.iter().map(|t| t.turn.thread_id.as_str()).collect();
    started.sort();
    assert_eq!(started, ["th_b", HOST]);
    assert!(turns.iter().all(|t| t.inputs.iter().all(|i| i.source == Some(local("th_a")))));
    assert!(!store.thread("th_a").await.expect("read").expect("exists").running);
    assert_eq!(read_room(store).await.agent_wakes, 2);
}

/// A post to no room, or by a thread not in the room (also one of another home named like
/// a member), is refused and writes nothing.
pub async fn a_post_by_a_stranger_or_to_no_room_is_refused(store: &dyn Store) {
    room_with(store, &["th_a"]).await;
    store.create_thread(&new_thread("th_s", "ws", 1), None).await.expect("create");
    let lost = NewEntry { room_id: "room_missing".into(), ..post("msg_1", None, &[], "k1") };
    let outcome = store.post_to_room(&lost).await.expect("post");
    assert!(matches!(outcome, PostOutcome::RoomGone), "{outcome:?}");
    let stranger = post("msg_2", Some("th_s"), &[HOST], "k2");
    let mut far = post("msg_3", Some("th_a"), &[HOST], "k3");
    far.author = Some(SourceRef { host_id: "HOME_P".into(), ..local("th_a") });
    for refused in [&stranger, &far] {
        let outcome = store.post_to_room(refused).await.expect("post");
        assert!(matches!(outcome, PostOutcome::NotMember), "{}: {outcome:?}", refused.id);
    }
    assert!(store.room_entries(ROOM, 0, 10).await.expect("entries").is_empty());
    assert!(store.room_entry_by_key(ROOM, "th_s", "k2").await.expect("key").is_none());
    assert!(store.threads_with_queued_input().await.expect("queued").is_empty(), "nobody woken");
    store.add_member(ROOM, &thread_member("th_s")).await.expect("add");
    let (entry, ..) = posted(store, &stranger).await;
    assert_eq!(entry.seq, 1, "its key was not kept");
}

/// A key makes one entry: the same post again replays it (also once the room is
/// archived), another post under it is a conflict; keys are their author's own.
pub async fn a_posts_key_replays_its_entry_and_refuses_another_post(store: &dyn Store) {
    room_with(store, &["th_a"]).await;
    let first = post("msg_1", Some("th_a"), &[HOST], "k1");
    let (entry, ..) = posted(store, &first).await;
    let retry = NewEntry { id: "msg_2".into(), now: 11, ..first.clone() };
    let replayed = store.post_to_room(&retry).await.expect("post");
    assert!(matches!(&replayed, PostOutcome::Replayed(e) if *e == entry), "{replayed:?}");
    let other = NewEntry { content: "other".into(), request_hash: "other".into(), ..retry.clone() };
    let conflict = store.post_to_room(&other).await.expect("post");
    assert!(
        matches!(&conflict, PostOutcome::KeyConflict { entry_id } if entry_id == "msg_1"),
        "{conflict:?}"
    );
    let kept = store.room_entry_by_key(ROOM, "th_a", "k1").await.expect("key");
    assert_eq!(kept, Some((first.request_hash.clone(), entry.clone())));
    assert!(store.room_entry_by_key(ROOM, "", "k1").await.expect("key").is_none(), "the owner's own");
    let (owners, ..) = posted(store, &post("msg_3", None, &["th_a"], "k1")).await;
    assert_eq!(owners.seq, 2);
    assert_eq!(
        store.room_entries(ROOM, 0, 10).await.expect("entries").len(),
        2,
        "nothing replayed was written"
    );
    let host = store.claim_turn(HOST, turn("tu_1", true), 12).await.expect("claim").expect("the entry");
    assert_eq!(
        host.inputs.iter().map(|i| i.room.clone()).collect::<Vec<_>>(),
        [entry_tag("msg_1")],
        "woken once"
    );
    store.change_room(ROOM, RoomChange::Archive, "", 13).await.expect("archive");
    let late = store.post_to_room(&retry).await.expect("post");
    assert!(matches!(&late, PostOutcome::Replayed(e) if *e == entry), "the key decides first: {late:?}");
}

/// Agents' posts wake members until one would take the count past `max_agent_wakes`: that
/// post is kept but pauses the room and tells the host; the owner's post starts the count
/// over, and a resumed room wakes again.
pub async fn the_loop_guard_pauses_a_room_past_its_limit(store: &dyn Store) {
    room_with(store, &["th_a", "th_b"]).await;
    let agent = |id: &str, author: &str, to: &str| NewEntry {
        max_agent_wakes: 2,
        ..post(id, Some(author), &[to], &format!("key of {id}"))
    };
    for (id, author, to) in [("msg_1", "th_a", "th_b"), ("msg_2", "th_b", "th_a")] {
        let (entry, _, _, paused) = posted(store, &agent(id, author, to)).await;
        assert_eq!((entry.woke, paused), (vec![to.to_string()], None), "{id}");
    }
    assert_eq!(read_room(store).await.agent_wakes, 2, "at the limit");
    let (entry, turns, queued, paused) = posted(store, &agent("msg_3", "th_a", "th_b")).await;
    let why = paused.expect("the loop guard paused the room");
    assert!(entry.woke.is_empty() && turns.is_empty() && queued.is_empty(), "woke nobody");
    assert_eq!(entry.seq, 3, "the post is kept");
    let room = read_room(store).await;
    assert_eq!((room.paused, room.paused_reason.as_str(), room.agent_wakes), (true, why.as_str(), 3));
    let events = store.events_after(HOST, 0, 10).await.expect("events");
    let told = events.iter().find(|e| e.kind == EventKind::Attention).expect("the host is told");
    assert!(told.reason.contains(&why) && told.message_id.as_deref() == Some("msg_3"), "{told:?}");
    let (quiet, ..) = posted(store, &agent("msg_4", "th_b", "th_a")).await;
    assert!(quiet.woke.is_empty(), "a paused room wakes nobody");
    assert_eq!(read_room(store).await.agent_wakes, 3, "nor counts");
    let (owners, ..) = posted(store, &post("msg_5", None, &["th_a"], "k5")).await;
    assert!(owners.woke.is_empty(), "still paused");
    let room = read_room(store).await;
    assert_eq!((room.paused, room.agent_wakes), (true, 0), "the owner's post starts the count over");
    store.change_room(ROOM, RoomChange::Resume, "", 20).await.expect("resume");
    let (again, ..) = posted(store, &agent("msg_6", "th_a", "th_b")).await;
    assert_eq!(again.woke, ["th_b"]);
    assert_eq!(read_room(store).await.agent_wakes, 1);
}

/// The outbox entry carrying a post to a member of another home it wakes is written in the
/// post's commit, and shows as the entry's delivery; one for a member it does not wake is not.
pub async fn a_post_reaches_a_member_of_another_home_through_the_outbox(store: &dyn Store) {
    room_with(store, &[]).await;
    for far in ["HOME_P/th_far", "HOME_Q/th_far"] {
        store.add_member(ROOM, &member(far, MemberKind::Remote, None)).await.expect("add");
    }
    let carry = |home: &str, entry: &str| {
        let record = OutboxRecord {
            id: format!("out_{home}_{entry}"),
            bridge_id: format!("br_{home}"),
            peer_home_id: home.into(),
            target_session: "th_far".into(),
            source_thread: None,
            source_workspace: String::new(),
            content: format!("content of {entry}"),
            key_scope: String::new(),
            key: format!("room:{entry}:th_far"),
            request_hash: "h".into(),
            status: OutboxStatus::Pending,
            reason: String::new(),
            remote_message_id: String::new(),
            attempts: 0,
            next_attempt_at: 10,
            created_at: 10,
            updated_at: 10,
            room: Some(OutboundEntry { tag: entry_tag(entry).expect("tag"), author: None }),
            trace: String::new(),
        };
        (format!("{home}/th_far"), record)
    };
    let mut p = post("msg_1", None, &["HOME_P/th_far"], "k1");
    p.remote = vec![carry("HOME_P", "msg_1"), carry("HOME_Q", "msg_1")];
    let (entry, ..) = posted(store, &p).await;
    assert_eq!(entry.woke, ["HOME_P/th_far"]);
    let delivery = EntryDelivery {
        member: "HOME_P/th_far".into(),
        status: OutboxStatus::Pending,
        reason: String::new(),
    };
    assert_eq!(store.entry_deliveries("msg_1").await.expect("deliveries"), [delivery]);
    assert!(store.outbox_page("br_HOME_Q", None, 10).await.expect("outbox").is_empty(), "not woken");
    // No bridge to its home: woken all the same, with nothing to carry it.
    let (second, ..) = posted(store, &post("msg_2", None, &["HOME_Q/th_far"], "k2")).await;
    assert_eq!(second.woke, ["HOME_Q/th_far"]);
    assert!(store.entry_deliveries("msg_2").await.expect("deliveries").is_empty());
    assert!(store.entry_deliveries("msg_missing").await.expect("deliveries").is_empty());
}

/// Each room numbers its entries 1, 2, … in its own order; they read back as posted,
/// oldest first after a seq, at most the limit.
pub async fn each_room_logs_its_entries_in_its_own_order(store: &dyn Store) {
    room_with(store, &[]).await;
    store.create_room(&room("room_2", 1)).await.expect("room");
    let mut entries = Vec::new();
    for (i, room_id) in [ROOM, "room_2", ROOM, ROOM].into_iter().enumerate() {
        let p = NewEntry {
            room_id: room_id.into(),
            now: 10 + i as i64,
            ..post(&format!("msg_{i}"), None, &[HOST], &format!("k{i}"))
        };
        entries.push(posted(store, &p).await.0);
    }
    let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 1, 2, 3]);
    let log = store.room_entries(ROOM, 0, 10).await.expect("entries");
    assert_eq!(log, [entries[0].clone(), entries[2].clone(), entries[3].clone()]);
    assert_eq!(log[0].woke, [HOST]);
    assert_eq!(store.room_entries(ROOM, 1, 1).await.expect("entries"), [entries[2].clone()]);
    assert_eq!(store.room_entries("room_2", 0, 10).await.expect("entries"), [entries[1].clone()]);
    assert!(store.room_entries(ROOM, 3, 10).await.expect("entries").is_empty());
    assert_eq!(read_room(store).await.last_seq, 3);
}

/// A request is filed pending with an attention event on its thread naming it; the first
/// answer stands, a later one leaves it as it is.
pub async fn a_permission_request_is_answered_once(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "go"))).await.expect("create");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    let request = |id: &str| PermissionRecord {
        id: id.into(),
        thread_id: "th_a".into(),
        turn_id: "tu_1".into(),
        tool: "Bash".into(),
        input: r#"{"command":"ls"}"#.into(),
        status: PermissionStatus::Pending,
        reason: String::new(),
        created_at: 3,
        decided_at: None,
    };
    store.ask_permission(&request("perm_1"), "the agent asks to use Bash").await.expect("ask");
    store.ask_permission(&request("perm_2"), "and again").await.expect("ask");
    assert_eq!(store.permission("perm_1").await.expect("read"), Some(request("perm_1")));
    let events = store.events_after("th_a", 0, 10).await.expect("events");
    let asked: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Attention)
        .map(|e| (e.request_id.as_deref(), e.turn_id.as_deref(), e.reason.as_str()))
        .collect();
    let by_turn = Some("tu_1");
    assert_eq!(
        asked,
        [(Some("perm_1"), by_turn, "the agent asks to use Bash"), (Some("perm_2"), by_turn, "and again")]
    );
    let decide = async |id, status, reason, now| {
        store.decide_permission(id, status, reason, now).await.expect("decide")
    };
    let allowed =
        PermissionRecord { status: PermissionStatus::Allowed, decided_at: Some(4), ..request("perm_1") };
    assert_eq!(decide("perm_1", PermissionStatus::Allowed, "", 4).await, Some(allowed.clone()));
    assert_eq!(decide("perm_1", PermissionStatus::Denied, "no", 5).await, Some(allowed.clone()), "answered");
    assert_eq!(store.permission("perm_1").await.expect("read"), Some(allowed));
    let expired = PermissionRecord {
        status: PermissionStatus::Expired,
        reason: "nobody answered".into(),
        decided_at: Some(6),
        ..request("perm_2")
    };
    assert_eq!(
        decide("perm_2", PermissionStatus::Expired, "nobody answered", 6).await,
        Some(expired.clone())
    );
    assert_eq!(decide("perm_2", PermissionStatus::Allowed, "", 7).await, Some(expired), "too late");
    assert_eq!(decide("perm_missing", PermissionStatus::Allowed, "", 8).await, None);
    assert_eq!(store.permission("perm_missing").await.expect("read"), None);
}
