//! The rules' cases, each decided without a database.

use super::*;
use crate::store::SourceRef;

fn input(id: &str, source: Option<(&str, &str)>) -> InputRecord {
    InputRecord {
        id: id.into(),
        kind: if source.is_some() { InputKind::Message } else { InputKind::User },
        content: id.into(),
        message_id: source.map(|_| format!("msg_{id}")),
        source: source.map(|(host, thread)| SourceRef {
            host_id: host.into(),
            thread_id: thread.into(),
            workspace_id: String::new(),
        }),
        room: None,
        via: source.map(|(host, _)| host.to_string()).filter(|h| !h.is_empty()),
        now: 1,
    }
}

/// The ids of what an idle thread's turn takes.
fn claim(
    queued: Vec<Queued>,
    arriving: Option<InputRecord>,
    take_messages: bool,
    disabled: &[String],
) -> Option<Vec<String>> {
    let facts = ClaimFacts { idle_turns: Some(0), cost: 0.0, queued, disabled_peers: disabled.to_vec() };
    plan_claim(facts, arriving, take_messages, None)
        .map(|plan| plan.inputs.into_iter().map(|i| i.id).collect())
}

#[test]
fn a_follow_up_confirms_a_pending_message_in_time_and_expires_the_rest() {
    use MessageStatus::*;
    assert_eq!(follow_up(Pending, Some(100), false, 99), FollowUp::Confirm);
    assert_eq!(follow_up(Pending, Some(100), false, 100), FollowUp::Expire, "its deadline passed");
    assert_eq!(follow_up(Pending, Some(100), true, 50), FollowUp::Expire, "the source gave up");
    assert_eq!(follow_up(Pending, None, true, 50), FollowUp::Keep, "confirmed before");
    assert_eq!(follow_up(Delivered, Some(100), true, 500), FollowUp::Keep);
    let pending = crate::store::MessageRecord {
        id: "msg_1".into(),
        target_thread: "th_a".into(),
        source: None,
        content: "hi".into(),
        status: Pending,
        reason: String::new(),
        created_at: 1,
        delivered_at: None,
        turn_id: None,
        deadline: Some(100),
    };
    let expired = FollowUp::Expire.applied(pending.clone());
    assert_eq!((expired.status, expired.reason.as_str(), expired.deadline), (Undeliverable, "expired", None));
    assert_eq!(FollowUp::Confirm.applied(pending.clone()).deadline, None);
    assert_eq!(FollowUp::Keep.applied(pending.clone()), pending);
}

#[test]
fn an_arrival_stands_delivered_or_held_and_its_receipt_says_so() {
    use crate::store::{TurnRecord, TurnStatus};
    let mut m = send(true);
    m.deadline = Some(900);
    let accepted = accept(&m);
    assert_eq!(accepted.input.id, "in_msg_1");
    assert_eq!((accepted.input.content.as_str(), accepted.input.message_id.as_deref()), ("", Some("msg_1")));
    assert_eq!(accepted.input.via.as_deref(), Some("PEER"), "the bridge that brought it");
    assert!(!accepted.owner_spoke, "a thread sent it");
    assert!(accept(&send(false)).owner_spoke, "the owner's send");
    let turn = |inputs: Vec<InputRecord>| ClaimedTurn {
        turn: TurnRecord {
            id: "tu_1".into(),
            thread_id: "th_t".into(),
            seq: 1,
            status: TurnStatus::Running,
            input: String::new(),
            output: String::new(),
            error: String::new(),
            started_at: m.now,
            ended_at: None,
            items: Vec::new(),
            usage: None,
        },
        inputs,
    };
    let took = turn(vec![input("in_msg_1", Some(("PEER", "th_s")))]);
    let delivered = arrival(&m, "in_msg_1", Some(&took));
    assert_eq!((delivered.status, delivered.receipt), (MessageStatus::Delivered, OutboxStatus::Delivered));
    assert_eq!(
        (delivered.turn_id.as_deref(), delivered.delivered_at, delivered.deadline),
        (Some("tu_1"), Some(m.now), None)
    );
    let other = turn(vec![input("in_other", None)]);
    for held in [arrival(&m, "in_msg_1", Some(&other)), arrival(&m, "in_msg_1", None)] {
        assert_eq!((held.status, held.receipt), (MessageStatus::Pending, OutboxStatus::Accepted));
        assert_eq!(
            (held.turn_id, held.delivered_at, held.deadline),
            (None, None, Some(900)),
            "held until its deadline"
        );
    }
    assert_eq!(undelivered_receipt(super::super::EXPIRED), OutboxStatus::Expired);
    assert_eq!(undelivered_receipt("thread_archived"), OutboxStatus::Rejected);
}

#[test]
fn a_claim_numbers_the_turn_and_says_what_it_takes_of_the_queue() {
    let user = Queued { input: input("user", None), wake: true };
    let bridged = Queued { input: input("bridged", Some(("PEER", "th_f"))), wake: true };
    let facts = ClaimFacts { idle_turns: Some(4), queued: vec![user, bridged], ..Default::default() };
    let plan = plan_claim(facts.clone(), Some(input("new", Some(("", "th_n")))), true, None).expect("a turn");
    assert_eq!(plan.seq, 5);
    assert_eq!(
        plan.taken,
        Taken {
            inputs: vec!["user".into(), "bridged".into()],
            messages: vec!["msg_bridged".into()],
            bridged: vec!["msg_bridged".into()],
        },
        "the arriving input is the send's, not the queue's"
    );
    // A busy, archived or missing thread starts none; nor one whose budget is spent.
    assert_eq!(plan_claim(ClaimFacts { idle_turns: None, ..facts.clone() }, None, true, None), None);
    let spent = ClaimFacts { cost: 2.0, ..facts.clone() };
    assert_eq!(plan_claim(spent.clone(), None, true, Some(2.0)), None, "its input waits");
    assert!(plan_claim(spent, None, true, Some(2.5)).is_some(), "under the budget");
}

#[test]
fn a_running_turn_takes_only_the_asked_messages_the_inbox_gives() {
    let peer = Queued { input: input("peer", Some(("", "th_p"))), wake: true };
    let bridged = Queued { input: input("bridged", Some(("PEER", "th_f"))), wake: true };
    let user = Queued { input: input("user", None), wake: true };
    let asked = ["msg_bridged".to_string(), "user".to_string(), "msg_unknown".to_string()];
    let (inputs, taken) = plan_take(vec![peer, bridged, user], true, &[], &asked);
    assert_eq!(inputs.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["bridged"]);
    assert_eq!(taken.bridged, ["msg_bridged"]);
}

#[test]
fn a_turn_takes_what_it_may_in_order_and_starts_only_if_something_wakes_it() {
    let user = Queued { input: input("user", None), wake: true };
    let peer = Queued { input: input("peer", Some(("", "th_p"))), wake: true };
    let held = Queued { input: input("held", Some(("PEER", "th_f"))), wake: false };
    let arriving = input("new", Some(("", "th_n")));
    let all = vec![user.clone(), peer.clone(), held.clone()];
    assert_eq!(
        claim(all.clone(), Some(arriving.clone()), true, &[]),
        Some(vec!["user".into(), "peer".into(), "held".into(), "new".into()])
    );
    // Communication off: peer messages wait, the user's input goes.
    assert_eq!(claim(all.clone(), Some(arriving.clone()), false, &[]), Some(vec!["user".into()]));
    // A disabled bridge's messages wait.
    assert_eq!(claim(all, None, true, &["PEER".into()]), Some(vec!["user".into(), "peer".into()]));
    // An entry of a room of another home, written by a thread of a third: the bridge
    // that carried it decides, not its author's home.
    let mut entry = input("entry", Some(("AUTHOR", "th_a")));
    entry.via = Some("ROOMHOME".into());
    let entry = vec![Queued { input: entry, wake: true }];
    assert_eq!(claim(entry.clone(), None, true, &["AUTHOR".into()]), Some(vec!["entry".into()]));
    assert_eq!(claim(entry, None, true, &["ROOMHOME".into()]), None);
    // Nothing that wakes: no turn, whatever waits.
    assert_eq!(claim(vec![held.clone()], None, true, &[]), None);
    assert_eq!(claim(vec![held.clone()], Some(arriving.clone()), false, &[]), None);
    assert_eq!(claim(vec![held], Some(arriving), true, &[]), Some(vec!["held".into(), "new".into()]));
}

#[test]
fn a_running_turn_is_given_the_messages_that_would_wake_it_and_may_be_taken() {
    let user = Queued { input: input("user", None), wake: true };
    let peer = Queued { input: input("peer", Some(("", "th_p"))), wake: true };
    let held = Queued { input: input("held", Some(("", "th_q"))), wake: false };
    let bridged = Queued { input: input("bridged", Some(("PEER", "th_f"))), wake: true };
    let all = vec![user, peer, held, bridged];
    let given = |take_messages, disabled: &[String]| -> Vec<String> {
        plan_inbox(all.clone(), take_messages, disabled).into_iter().map(|i| i.id).collect()
    };
    assert_eq!(given(true, &[]), vec!["peer", "bridged"], "no user input, nothing that may not wake");
    assert_eq!(given(true, &["PEER".into()]), vec!["peer"], "a disabled bridge's messages wait");
    assert!(given(false, &[]).is_empty(), "communication off: peers' messages wait");
}

#[test]
fn two_agents_wake_each_other_up_to_the_cap_then_wait() {
    assert_eq!(agent_wake(3, 3), AgentWake::Wakes);
    assert_eq!(agent_wake(4, 3), AgentWake::Held { first: true });
    assert_eq!(agent_wake(5, 3), AgentWake::Held { first: false });
    let from = |host: &str, thread: &str| SourceRef {
        host_id: host.into(),
        thread_id: thread.into(),
        workspace_id: String::new(),
    };
    assert_eq!(agent_pair(&from("", "th_b"), "th_a"), Some(("th_a".into(), "th_b".into())));
    assert_eq!(agent_pair(&from("", "th_a"), "th_b"), Some(("th_a".into(), "th_b".into())), "either way");
    assert_eq!(agent_pair(&from("HOME", "th_z"), "th_a"), Some(("HOME/th_z".into(), "th_a".into())));
    assert_eq!(agent_pair(&from("HOME", ""), "th_a"), None, "an external client is no agent");
}

fn send(bridged: bool) -> NewMessage {
    NewMessage {
        room: None,
        id: "msg_1".into(),
        target_thread: "th_t".into(),
        source: bridged.then(|| SourceRef {
            host_id: "PEER".into(),
            thread_id: "th_s".into(),
            workspace_id: String::new(),
        }),
        content: "hi".into(),
        key_scope: "scope".into(),
        key: "k".into(),
        request_hash: "h".into(),
        wake: true,
        claim: None,
        receipt: bridged.then(|| crate::store::ReceiptRecord {
            peer_home_id: "PEER".into(),
            key: "k".into(),
            message_id: String::new(),
            target: "th_t".into(),
            status: crate::store::OutboxStatus::Accepted,
            reason: String::new(),
            at: 1,
        }),
        deadline: bridged.then_some(10),
        max_agent_wakes: None,
        now: 1,
    }
}

fn open() -> SendFacts {
    SendFacts { target_live: true, bridge_open: true, ..SendFacts::default() }
}

fn kept(hash: &str) -> Option<KeptKey> {
    Some(KeptKey { request_hash: hash.into(), message_id: "msg_0".into() })
}

#[test]
fn the_key_decides_first_then_the_target_then_the_bridge() {
    let local = send(false);
    assert_eq!(refuse_send(&local, &open()), None, "accepted");
    let replay = SendFacts { key: kept("h"), target_live: false, ..open() };
    assert_eq!(refuse_send(&local, &replay), Some(SendOutcome::Replayed { message_id: "msg_0".into() }));
    let other = SendFacts { key: kept("other"), ..open() };
    assert_eq!(refuse_send(&local, &other), Some(SendOutcome::KeyConflict { message_id: "msg_0".into() }));
    let away = SendFacts { key_sent_away: Some("msg_9".into()), ..open() };
    assert_eq!(refuse_send(&local, &away), Some(SendOutcome::KeyConflict { message_id: "msg_9".into() }));
    assert_eq!(
        refuse_send(&local, &SendFacts { target_live: false, ..open() }),
        Some(SendOutcome::TargetGone)
    );
    // A local send has no bridge to be closed, nor an id of its source's.
    let closed = SendFacts { bridge_open: false, id_taken: true, ..open() };
    assert_eq!(refuse_send(&local, &closed), None);
}

#[test]
fn a_bridged_send_also_needs_its_key_kept_its_bridge_open_and_a_free_id() {
    let bridged = send(true);
    assert_eq!(bridged_from(&bridged), Some("PEER"));
    // The bridge that carried it, not its author's home (a room entry's).
    let mut entry = send(true);
    entry.source.as_mut().expect("source").host_id = "AUTHOR".into();
    assert_eq!(bridged_from(&entry), Some("PEER"));
    assert_eq!(refuse_send(&bridged, &open()), None);
    let given_up = SendFacts { key_given_up: true, target_live: false, ..open() };
    assert_eq!(refuse_send(&bridged, &given_up), Some(SendOutcome::GivenUp), "before the target");
    let closed = SendFacts { bridge_open: false, id_taken: true, ..open() };
    assert_eq!(refuse_send(&bridged, &closed), Some(SendOutcome::BridgeClosed), "before the id");
    assert_eq!(refuse_send(&bridged, &SendFacts { id_taken: true, ..open() }), Some(SendOutcome::IdTaken));
}

fn room(paused: bool, agent_wakes: i64) -> RoomRecord {
    RoomRecord {
        seq: 1,
        id: "room_1".into(),
        name: "r".into(),
        host_thread: "th_host".into(),
        paused,
        paused_reason: String::new(),
        archived: false,
        agent_wakes,
        last_seq: 0,
        created_at: 1,
        updated_at: 1,
    }
}

fn member(id: &str, kind: MemberKind, thread: Option<&str>) -> MemberRecord {
    MemberRecord {
        member_id: id.into(),
        kind,
        thread_id: thread.map(String::from),
        profile: String::new(),
        instructions: String::new(),
        added_at: 1,
    }
}

fn local(thread: &str) -> SourceRef {
    SourceRef { host_id: String::new(), thread_id: thread.into(), workspace_id: String::new() }
}

fn woken(plan: &PostPlan) -> Vec<&str> {
    plan.wake.iter().map(Woken::member).collect()
}

#[test]
fn the_owner_wakes_the_host_or_whom_it_mentions_and_members_only_whom_they_mention() {
    let members = [
        member("th_a", MemberKind::Thread, Some("th_a")),
        member("reviewer", MemberKind::Persona, Some("th_p")),
        member("HOME/th_far", MemberKind::Remote, None),
    ];
    let r = room(false, 0);
    let plan = |author: Option<&SourceRef>, mentions: &[&str]| {
        let mentions: Vec<String> = mentions.iter().map(|m| m.to_string()).collect();
        plan_post(&r, &members, author, &mentions, 20)
    };
    let wakes =
        |author: Option<&SourceRef>, mentions: &[&str]| plan(author, mentions).expect("a member's post");
    assert_eq!(woken(&wakes(None, &[])), ["th_host"]);
    assert_eq!(woken(&wakes(None, &["th_a", "th_a", "th_p"])), ["th_a", "reviewer"]);
    let a = local("th_a");
    assert!(woken(&wakes(Some(&a), &[])).is_empty(), "an unmentioned agent post wakes nobody");
    let to_self = wakes(Some(&a), &["th_a", "th_host"]);
    assert_eq!(woken(&to_self), ["th_host"], "an author never wakes itself");
    assert_eq!(to_self.agent_wakes, 1);
    let far = SourceRef { host_id: "HOME".into(), ..local("th_far") };
    assert_eq!(
        wakes(Some(&far), &["reviewer"]).wake,
        [Woken::Thread { member: "reviewer".into(), thread: "th_p".into() }]
    );
    assert_eq!(wakes(None, &["HOME/th_far"]).wake, [Woken::Remote { member: "HOME/th_far".into() }]);
    assert_eq!(plan(Some(&local("th_stranger")), &[]), Err(PostRefusal::NotMember));
    let elsewhere = SourceRef { host_id: "OTHER".into(), ..local("th_far") };
    assert_eq!(plan(Some(&elsewhere), &[]), Err(PostRefusal::NotMember), "the same session in another home");
}

#[test]
fn a_paused_room_wakes_nobody_and_the_loop_guard_pauses_one_past_its_limit() {
    let members = [member("th_a", MemberKind::Thread, Some("th_a"))];
    let mentions = vec!["th_a".to_string()];
    let paused = plan_post(&room(true, 0), &members, None, &mentions, 20).expect("a post");
    assert!(paused.wake.is_empty());
    let host = local("th_host");
    let at_limit = plan_post(&room(false, 19), &members, Some(&host), &mentions, 20).expect("a post");
    assert_eq!((woken(&at_limit), at_limit.agent_wakes, at_limit.pause.is_none()), (vec!["th_a"], 20, true));
    let past = plan_post(&room(false, 20), &members, Some(&host), &mentions, 20).expect("a post");
    assert!(past.wake.is_empty());
    assert!(past.pause.as_deref().is_some_and(|why| why.contains("21 times")), "{past:?}");
    let owner = plan_post(&room(false, 20), &members, None, &mentions, 20).expect("a post");
    assert_eq!(
        (woken(&owner), owner.agent_wakes),
        (vec!["th_a"], 0),
        "the owner's post starts the count over"
    );
    let archived = RoomRecord { archived: true, ..room(false, 0) };
    assert_eq!(plan_post(&archived, &members, None, &[], 20), Err(PostRefusal::Archived));
}

#[test]
fn a_post_queues_one_input_per_woken_member_and_logs_the_next_entry() {
    let post = NewEntry {
        room_id: "room_1".into(),
        id: "ent_1".into(),
        author: Some(SourceRef {
            host_id: "PEER".into(),
            thread_id: "th_far".into(),
            workspace_id: String::new(),
        }),
        content: "hello @a".into(),
        mentions: vec!["a".into()],
        key_scope: "th_far".into(),
        key: "k".into(),
        request_hash: "h".into(),
        claims: Vec::new(),
        remote: Vec::new(),
        max_agent_wakes: 20,
        now: 7,
    };
    let second = entry_input(&post, 1);
    assert_eq!(second.id, "in_ent_1_1", "after the entry's id, one per woken member");
    assert_eq!(
        (second.content.as_str(), second.message_id.as_deref()),
        ("", Some("ent_1")),
        "refers to the entry"
    );
    assert_eq!(second.room, Some(RoomTag { room: "room_1".into(), entry: "ent_1".into() }));
    assert_eq!(second.via.as_deref(), Some("PEER"), "came through the author's home's bridge");
    let owners = NewEntry { author: None, ..post.clone() };
    assert_eq!(entry_input(&owners, 0).via, None);
    let logged = entry(&post, &RoomRecord { last_seq: 41, ..room(false, 0) }, vec!["th_a".into()]);
    assert_eq!((logged.seq, logged.woke.as_slice(), logged.at), (42, ["th_a".to_string()].as_slice(), 7));
    assert_eq!(taken_by(None, "in_ent_1_0"), None);
}

#[test]
fn an_undeliverable_message_is_told_to_its_target_and_its_own_sender() {
    let told = |source: Option<&str>, host: Option<&str>| -> Vec<String> {
        undeliverable_events("msg_1", "th_t", source.map(str::to_string), host, "thread_archived", 5)
            .into_iter()
            .map(|e| {
                assert_eq!(
                    (e.kind, e.reason.as_str(), e.message_id.as_deref(), e.at),
                    (EventKind::Undeliverable, "thread_archived", Some("msg_1"), 5)
                );
                e.thread_id
            })
            .collect()
    };
    assert_eq!(told(Some("th_s"), Some("")), ["th_t", "th_s"], "a sender of this home");
    assert_eq!(told(Some("th_s"), Some("PEER")), ["th_t"], "a peer's sender learns from its home");
    assert_eq!(told(None, None), ["th_t"], "the owner");
}

#[test]
fn an_outcome_moves_an_entry_in_flight_or_one_still_to_be_asked_about() {
    use OutboxStatus::*;
    assert!(outcome_applies(Pending, 5) && outcome_applies(Accepted, 5));
    assert!(outcome_applies(Expired, 5), "expired, its target still to be asked");
    assert!(!outcome_applies(Expired, Millis::MAX), "expired and settled");
    assert!(!outcome_applies(Delivered, 5) && !outcome_applies(Rejected, 5), "final");
}

#[test]
fn a_finished_turn_idles_its_thread_expires_its_requests_and_keeps_its_session() {
    let outcome = TurnOutcome {
        turn_id: "tu_1".into(),
        status: TurnStatus::Failed,
        output: "half".into(),
        error: "agent exited 1".into(),
        now: 9,
        usage: None,
        agent_session: Some("sess_7".into()),
    };
    let end = finish_turn("th_a", &outcome);
    let terminal = EventRecord {
        turn_id: Some("tu_1".into()),
        turn_status: Some(TurnStatus::Failed),
        reason: "agent exited 1".into(),
        ..event("th_a", EventKind::Terminal, 9)
    };
    assert_eq!(
        end,
        TurnEnd {
            thread_id: "th_a".into(),
            turn_id: "tu_1".into(),
            now: 9,
            permissions_expired: PERMISSION_OUTLIVED_TURN,
            agent_session: Some("sess_7".into()),
            terminal,
        }
    );
    let done =
        finish_turn("th_a", &TurnOutcome { status: TurnStatus::Completed, error: String::new(), ..outcome });
    assert_eq!((done.terminal.turn_status, done.terminal.reason.as_str()), (Some(TurnStatus::Completed), ""));
}

#[test]
fn an_interrupted_turn_fails_and_its_requests_outlived_kikid() {
    let end = fail_interrupted_turn("th_a", "tu_1", "kikid stopped during this turn", 5);
    assert_eq!(end.permissions_expired, PERMISSION_OUTLIVED_DAEMON);
    assert_eq!(end.agent_session, None, "its agent never said");
    assert_eq!(end.terminal.turn_status, Some(TurnStatus::Failed));
    assert_eq!(end.terminal.reason, "kikid stopped during this turn");
    assert_eq!((end.terminal.kind, end.terminal.at, end.now), (EventKind::Terminal, 5, 5));
    assert_eq!(end.terminal.turn_id.as_deref(), Some("tu_1"));
}

#[test]
fn a_posts_key_replays_the_same_post_and_refuses_another() {
    let entry = EntryRecord {
        room_id: "rm_1".into(),
        seq: 3,
        id: "en_1".into(),
        author: None,
        content: "hi".into(),
        mentions: Vec::new(),
        woke: Vec::new(),
        at: 1,
        deliveries: Vec::new(),
    };
    assert!(matches!(post_by_key("h1", "h1", entry.clone()), PostOutcome::Replayed(e) if e == entry));
    let conflict = post_by_key("h2", "h1", entry);
    assert!(matches!(&conflict, PostOutcome::KeyConflict { entry_id } if entry_id == "en_1"), "{conflict:?}");
}

#[test]
fn a_turn_starts_when_asked_but_never_before_the_last_one_ended() {
    assert_eq!(turn_start(10, None), 10, "the thread's first turn");
    assert_eq!(turn_start(10, Some(7)), 10);
    assert_eq!(turn_start(10, Some(12)), 12, "asked for while the last one ran");
}

#[test]
fn a_write_decides_by_the_clock_when_it_ran_later_than_asked() {
    assert_eq!(write_time(10, 15), 15, "it waited for other writes");
    assert_eq!(write_time(10, 8), 10, "asked for a later time than the clock's");
}
