//! The store conformance suite: every backend must pass every case. A backend's test file
//! invokes [`store_conformance!`](crate::store_conformance) with an expression that makes a
//! fresh, empty store.

use kiki_daemon::executors::render;
use kiki_daemon::store::{
    BridgeRecord, BridgeState, CommunicationSetting, Direction, EventKind, EventRecord, InputKind,
    InterruptedTurn, MessageStatus, NewInput, NewMessage, NewThread, OutboxRecord, OutboxStatus, Permission,
    ReceiptRecord, SendOutcome, SourceRef, Store, StoreError, ThreadQuery, TurnClaim, TurnOutcome,
    TurnStatus,
};

/// Generates one `#[tokio::test]` per conformance case for a backend.
#[macro_export]
macro_rules! store_conformance {
    ($make:expr) => {
        $crate::store_conformance!(@cases $make;
            thread_round_trip, duplicate_thread_id_is_a_conflict, list_is_newest_first_with_keyset_pages,
            list_skips_archived_and_filters_by_workspace, archive_reports_change,
            a_turn_takes_all_queued_input_in_order, one_turn_at_a_time_per_thread,
            ended_turns_page_and_exclude_the_running_turn, interrupted_turns_fail_and_queue_survives,
            agents_are_listed_while_their_turns_run,
            input_for_a_missing_thread_is_refused, concurrent_sends_are_decided_by_key,
            held_back_messages_wait_for_communication, archiving_makes_pending_messages_undeliverable,
            events_are_logged_per_thread_in_order, communication_switch_round_trip, old_keys_are_pruned,
            keys_are_pruned_oldest_first_in_bounded_windows, a_thread_read_after_a_change_shows_it,
            archived_threads_start_no_turns, messages_of_a_turn_whose_agent_never_started_are_undeliverable,
            outbox_entries_are_unique_per_key_and_come_due, a_failed_write_leaves_no_trace_beside_others,
            a_send_can_start_an_idle_threads_turn_at_once, pending_messages_are_counted_per_peer_home,
            a_bridged_message_needs_an_active_bridge_when_it_commits, receipts_page_back_from_the_newest,
            a_bridge_record_round_trips, overdue_bridged_messages_expire_in_a_sweep);
    };
    (@cases $make:expr; $($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            let (store, _guard) = $make.await;
            $crate::conformance::$case(&*store).await;
        }
    )*};
}

fn new_thread(id: &str, workspace: &str, now: i64) -> NewThread {
    NewThread {
        id: id.into(),
        workspace_id: workspace.into(),
        cwd: "/tmp".into(),
        title: format!("title of {id}"),
        profile: "echo".into(),
        communication: CommunicationSetting::Default,
        now,
    }
}

fn user(id: &str, content: &str) -> NewInput {
    NewInput {
        id: id.into(),
        kind: InputKind::User,
        content: content.into(),
        message_id: None,
        source: None,
        now: 1,
    }
}

async fn finish(store: &dyn Store, turn_id: &str, output: &str) {
    store
        .finish_turn(&TurnOutcome {
            turn_id: turn_id.into(),
            status: TurnStatus::Completed,
            output: output.into(),
            error: String::new(),
            now: 5,
        })
        .await
        .expect("finish");
}

pub async fn thread_round_trip(store: &dyn Store) {
    let created = store.create_thread(&new_thread("th_a", "ws_1", 100), None).await.expect("create");
    assert_eq!(created.id, "th_a");
    assert_eq!((created.created_at, created.updated_at), (100, 100));
    assert!(!created.archived && created.enabled && !created.running);
    let read = store.thread("th_a").await.expect("read").expect("exists");
    assert_eq!(read, created);
    assert!(store.thread("th_missing").await.expect("read").is_none());
    assert_eq!(store.count_threads().await.expect("count"), 1);
}

pub async fn duplicate_thread_id_is_a_conflict(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    let err =
        store.create_thread(&new_thread("th_a", "ws", 2), Some(&user("in_x", "x"))).await.expect_err("dup");
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(store.count_threads().await.expect("count"), 1);
    assert!(store.threads_with_queued_input().await.expect("queued").is_empty(), "the input rolled back too");
}

pub async fn list_is_newest_first_with_keyset_pages(store: &dyn Store) {
    for i in 0..5 {
        store.create_thread(&new_thread(&format!("th_{i}"), "ws", i), None).await.expect("create");
    }
    let first = store.list_threads(&ThreadQuery { limit: 2, ..Default::default() }).await.expect("list");
    assert_eq!(first.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["th_4", "th_3"]);
    let query = ThreadQuery { before_seq: Some(first[1].seq), limit: 10, ..Default::default() };
    let rest = store.list_threads(&query).await.expect("list");
    assert_eq!(rest.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["th_2", "th_1", "th_0"]);
    // A thread created meanwhile does not shift later pages.
    store.create_thread(&new_thread("th_new", "ws", 9), None).await.expect("create");
    assert_eq!(store.list_threads(&query).await.expect("list").len(), 3);
}

pub async fn list_skips_archived_and_filters_by_workspace(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws_1", 1), None).await.expect("create");
    store.create_thread(&new_thread("th_b", "ws_2", 2), None).await.expect("create");
    store.create_thread(&new_thread("th_c", "ws_1", 3), None).await.expect("create");
    store.set_archived("th_c", true, 4).await.expect("archive");
    let all = store.list_threads(&ThreadQuery { limit: 10, ..Default::default() }).await.expect("list");
    assert_eq!(all.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["th_b", "th_a"]);
    let ws1 = ThreadQuery { workspace_id: Some("ws_1".into()), limit: 10, ..Default::default() };
    let ws1 = store.list_threads(&ws1).await.expect("list");
    assert_eq!(ws1.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["th_a"]);
}

pub async fn archive_reports_change(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    let done = store.set_archived("th_a", true, 7).await.expect("archive").expect("exists");
    assert!(done.thread.archived && done.changed);
    assert_eq!(done.thread.updated_at, 7);
    let again = store.set_archived("th_a", true, 8).await.expect("archive").expect("exists");
    assert!(!again.changed, "already archived");
    let back = store.set_archived("th_a", false, 9).await.expect("unarchive").expect("exists");
    assert!(!back.thread.archived && back.changed);
    let lifecycle: Vec<String> =
        store.events_after("th_a", 0, 10).await.expect("events").into_iter().map(|e| e.lifecycle).collect();
    assert_eq!(lifecycle, ["created", "archived", "unarchived"], "each change logged once");
    assert!(store.set_archived("th_missing", true, 9).await.expect("archive").is_none());
}

pub async fn a_turn_takes_all_queued_input_in_order(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "first"))).await.expect("create");
    let message = NewInput {
        id: "in_2".into(),
        kind: InputKind::Message,
        content: "second".into(),
        message_id: Some("msg_2".into()),
        source: Some(SourceRef { host_id: String::new(), thread_id: "th_peer".into() }),
        now: 2,
    };
    assert_eq!(
        store.enqueue_input("th_a", &message).await.expect("enqueue"),
        Some(false),
        "queued, thread idle"
    );
    assert_eq!(store.threads_with_queued_input().await.expect("queued"), vec!["th_a".to_string()]);
    let claimed = store.claim_turn("th_a", turn("tu_1", true), 3).await.expect("claim").expect("has input");
    assert_eq!(claimed.inputs.iter().map(|i| i.content.as_str()).collect::<Vec<_>>(), ["first", "second"]);
    assert_eq!(claimed.turn.seq, 1);
    assert_eq!(claimed.turn.input, render(&claimed.inputs));
    assert_eq!(claimed.inputs[1].source, message.source);
    assert!(store.thread("th_a").await.expect("read").expect("exists").running);
    assert!(store.threads_with_queued_input().await.expect("queued").is_empty());
    finish(store, "tu_1", "done").await;
    let turn = store.turn("th_a", "tu_1").await.expect("turn").expect("exists");
    assert_eq!((turn.status, turn.output.as_str()), (TurnStatus::Completed, "done"));
    assert_eq!(turn.items.len(), 2);
    assert_eq!(turn.items[1].message_id.as_deref(), Some("msg_2"));
    assert!(!store.thread("th_a").await.expect("read").expect("exists").running);
}

pub async fn one_turn_at_a_time_per_thread(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("has input");
    assert_eq!(store.enqueue_input("th_a", &user("in_2", "b")).await.expect("enqueue"), Some(true), "busy");
    assert!(store.claim_turn("th_a", turn("tu_2", true), 3).await.expect("claim").is_none(), "busy thread");
    assert_eq!(store.running_turns().await.expect("running"), 1);
    finish(store, "tu_1", "x").await;
    let second = store.claim_turn("th_a", turn("tu_2", true), 4).await.expect("claim").expect("queued input");
    assert_eq!((second.turn.seq, second.turn.input.as_str()), (2, "b"));
    finish(store, "tu_2", "y").await;
    assert!(
        store.claim_turn("th_a", turn("tu_3", true), 5).await.expect("claim").is_none(),
        "nothing queued"
    );
}

pub async fn ended_turns_page_and_exclude_the_running_turn(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    for i in 1..=3 {
        store.enqueue_input("th_a", &user(&format!("in_{i}"), &format!("n{i}"))).await.expect("enqueue");
        store.claim_turn("th_a", turn(&format!("tu_{i}"), true), i).await.expect("claim").expect("input");
        finish(store, &format!("tu_{i}"), &format!("out{i}")).await;
    }
    store.enqueue_input("th_a", &user("in_4", "n4")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_4", true), 9).await.expect("claim").expect("input");
    let page = store.ended_turns("th_a", 0, 2).await.expect("page");
    assert_eq!(page.iter().map(|t| t.seq).collect::<Vec<_>>(), [1, 2]);
    let rest = store.ended_turns("th_a", 2, 10).await.expect("page");
    assert_eq!(
        rest.iter().map(|t| t.output.as_str()).collect::<Vec<_>>(),
        ["out3"],
        "running turn 4 not shown"
    );
    assert!(store.ended_turn_exists("th_a", 3).await.expect("exists"));
    assert!(!store.ended_turn_exists("th_a", 4).await.expect("exists"), "running");
    assert!(!store.ended_turn_exists("th_b", 1).await.expect("exists"));
}

pub async fn interrupted_turns_fail_and_queue_survives(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    store.enqueue_input("th_a", &user("in_2", "behind")).await.expect("enqueue");
    assert_eq!(store.fail_interrupted_turns("crashed", 3).await.expect("recover"), vec!["th_a".to_string()]);
    let terminal = store.events_after("th_a", 0, 10).await.expect("events").pop().expect("terminal event");
    assert_eq!((terminal.kind, terminal.turn_status), (EventKind::Terminal, Some(TurnStatus::Failed)));
    let turn = store.turn("th_a", "tu_1").await.expect("turn").expect("exists");
    assert_eq!((turn.status, turn.error.as_str(), turn.ended_at), (TurnStatus::Failed, "crashed", Some(3)));
    assert!(!store.thread("th_a").await.expect("read").expect("exists").running);
    assert_eq!(store.threads_with_queued_input().await.expect("queued"), vec!["th_a".to_string()]);
    // Finishing the failed turn later changes nothing.
    finish(store, "tu_1", "late").await;
    let turn = store.turn("th_a", "tu_1").await.expect("turn").expect("exists");
    assert_eq!(turn.status, TurnStatus::Failed);
}

pub async fn agents_are_listed_while_their_turns_run(store: &dyn Store) {
    for (thread, input, turn_id) in
        [("th_a", "in_1", "tu_1"), ("th_b", "in_2", "tu_2"), ("th_c", "in_3", "tu_3")]
    {
        store.create_thread(&new_thread(thread, "ws", 1), Some(&user(input, "x"))).await.expect("create");
        // tu_1 and tu_2 run `exec` agents; tu_3 does not (say, `echo`).
        let claim = TurnClaim { exec: turn_id != "tu_3", ..turn(turn_id, true) };
        store.claim_turn(thread, claim, 2).await.expect("claim").expect("input");
    }
    let agents = |turns: Vec<InterruptedTurn>| {
        let mut agents: Vec<(String, Option<String>)> =
            turns.into_iter().map(|t| (t.turn_id, t.agent)).collect();
        agents.sort();
        agents
    };
    let empty = || Some(String::new());
    assert_eq!(
        agents(store.interrupted_turns().await.expect("turns")),
        [("tu_1".to_string(), empty()), ("tu_2".to_string(), empty()), ("tu_3".to_string(), None)],
        "exec turns start with an empty record"
    );
    store.record_agent("tu_1", "11 1 boot").await.expect("record");
    store.record_agent("tu_2", "12 1 boot").await.expect("record");
    finish(store, "tu_2", "done").await;
    store.record_agent("tu_2", "13 1 boot").await.expect("an ended turn is left alone");
    assert_eq!(
        agents(store.interrupted_turns().await.expect("turns")),
        [("tu_1".to_string(), Some("11 1 boot".to_string())), ("tu_3".to_string(), None)]
    );
    store.fail_interrupted_turns("crashed", 3).await.expect("recover");
    assert!(store.interrupted_turns().await.expect("turns").is_empty());
}

pub async fn input_for_a_missing_thread_is_refused(store: &dyn Store) {
    assert_eq!(store.enqueue_input("th_missing", &user("in_1", "x")).await.expect("enqueue"), None);
    assert!(store.claim_turn("th_missing", turn("tu_1", true), 1).await.expect("claim").is_none());
}

fn message(id: &str, target: &str, scope: &str, key: &str, hash: &str) -> NewMessage {
    NewMessage {
        id: id.into(),
        target_thread: target.into(),
        source: (!scope.is_empty()).then(|| SourceRef { host_id: String::new(), thread_id: scope.into() }),
        content: format!("content of {id}"),
        key_scope: scope.into(),
        key: key.into(),
        request_hash: hash.into(),
        wake: true,
        claim: None,
        receipt: None,
        deadline: None,
        now: 10,
    }
}

/// How a test starts a turn: `take_messages` as the thread's communication switch says.
fn turn(turn_id: &str, take_messages: bool) -> TurnClaim {
    TurnClaim { turn_id: turn_id.into(), take_messages, render, exec: false }
}

fn claim(turn_id: &str) -> Option<TurnClaim> {
    Some(turn(turn_id, true))
}

/// A send asking for a claim starts an idle thread's turn in its own transaction, taking
/// everything queued; a busy thread only queues it, and a send without `wake` never claims.
pub async fn a_send_can_start_an_idle_threads_turn_at_once(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_u", "first"))).await.expect("create");
    let mut m1 = message("msg_1", "th_a", "", "k1", "h1");
    m1.claim = claim("tu_1");
    let SendOutcome::Accepted { message_id, delivered: true, turn: Some(claimed) } =
        store.accept_message(&m1).await.expect("send")
    else {
        panic!("an idle thread's turn starts with the message");
    };
    assert_eq!(message_id, "msg_1");
    assert_eq!((claimed.turn.id.as_str(), claimed.turn.seq), ("tu_1", 1));
    let taken: Vec<_> = claimed.inputs.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(taken, ["in_u", "in_msg_1"], "queued input first, in order");
    let stored = store.message("msg_1").await.expect("msg").expect("stored");
    assert_eq!((stored.status, stored.turn_id.as_deref()), (MessageStatus::Delivered, Some("tu_1")));
    assert!(store.thread("th_a").await.expect("read").expect("exists").running);

    let mut m2 = message("msg_2", "th_a", "", "k2", "h2");
    m2.claim = claim("tu_2");
    let busy = store.accept_message(&m2).await.expect("send");
    assert_eq!(
        busy,
        SendOutcome::Accepted { message_id: "msg_2".into(), delivered: false, turn: None },
        "busy: queued"
    );
    finish(store, "tu_1", "done").await;

    let mut m3 = message("msg_3", "th_a", "", "k3", "h3");
    (m3.wake, m3.claim) = (false, claim("tu_3"));
    let quiet = store.accept_message(&m3).await.expect("send");
    assert_eq!(
        quiet,
        SendOutcome::Accepted { message_id: "msg_3".into(), delivered: false, turn: None },
        "no wake: no claim"
    );
    assert_eq!(store.message("msg_2").await.expect("msg").expect("stored").status, MessageStatus::Pending);
}

/// Sends issued together (so a backend may commit them together) are still decided one by
/// one, in order, by their keys.
pub async fn concurrent_sends_are_decided_by_key(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    let batch = [
        message("msg_1", "th_a", "", "k1", "h1"),
        message("msg_2", "th_a", "th_peer", "k1", "h2"), // same key, other scope: independent
        message("msg_3", "th_a", "", "k1", "h1"),        // same key and request: the first one
        message("msg_4", "th_a", "", "k1", "hX"),        // same key, other request: conflict
        message("msg_5", "th_missing", "", "k5", "h5"),
    ];
    let (a, b, c, d, e) = tokio::join!(
        store.accept_message(&batch[0]),
        store.accept_message(&batch[1]),
        store.accept_message(&batch[2]),
        store.accept_message(&batch[3]),
        store.accept_message(&batch[4]),
    );
    let outcomes: Vec<SendOutcome> = [a, b, c, d, e].into_iter().map(|o| o.expect("commit")).collect();
    assert_eq!(
        outcomes,
        vec![
            SendOutcome::Accepted { message_id: "msg_1".into(), delivered: false, turn: None },
            SendOutcome::Accepted { message_id: "msg_2".into(), delivered: false, turn: None },
            SendOutcome::Replayed { message_id: "msg_1".into() },
            SendOutcome::KeyConflict { message_id: "msg_1".into() },
            SendOutcome::TargetGone,
        ]
    );
    let again = store.accept_message(&message("msg_6", "th_a", "", "k1", "h1")).await.expect("commit");
    assert_eq!(again, SendOutcome::Replayed { message_id: "msg_1".into() }, "the key stays with msg_1");
    store.create_thread(&new_thread("th_b", "ws", 1), None).await.expect("create");
    let refused_key = store.accept_message(&message("msg_7", "th_b", "", "k5", "h5")).await.expect("commit");
    assert!(matches!(refused_key, SendOutcome::Accepted { .. }), "nothing kept for a refused send");
    assert!(store.message("msg_3").await.expect("msg").is_none(), "a replay stores nothing");
    let m = store.message("msg_2").await.expect("msg").expect("stored");
    assert_eq!(m.status, MessageStatus::Pending);
    assert_eq!(m.source.map(|s| s.thread_id), Some("th_peer".to_string()));
    // Both accepted messages are queued for the target's next turn, which delivers them.
    let claimed = store.claim_turn("th_a", turn("tu_1", true), 20).await.expect("claim").expect("queued");
    let ids: Vec<_> = claimed.inputs.iter().filter_map(|i| i.message_id.clone()).collect();
    assert_eq!(ids, ["msg_1", "msg_2"]);
    let m = store.message("msg_1").await.expect("msg").expect("stored");
    assert_eq!(
        (m.status, m.turn_id.as_deref(), m.delivered_at),
        (MessageStatus::Delivered, Some("tu_1"), Some(20))
    );
}

pub async fn held_back_messages_wait_for_communication(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "th_peer", "k", "h")).await.expect("commit");
    store.enqueue_input("th_a", &user("in_u", "user text")).await.expect("enqueue");
    let claimed = store.claim_turn("th_a", turn("tu_1", false), 2).await.expect("claim").expect("user input");
    assert_eq!(claimed.inputs.len(), 1, "only the user's input");
    assert_eq!(claimed.inputs[0].kind, InputKind::User);
    finish(store, "tu_1", "x").await;
    assert_eq!(store.message("msg_1").await.expect("msg").expect("stored").status, MessageStatus::Pending);
    assert!(store.claim_turn("th_a", turn("tu_2", false), 3).await.expect("claim").is_none());
    let claimed = store.claim_turn("th_a", turn("tu_2", true), 4).await.expect("claim").expect("the message");
    assert_eq!(claimed.inputs[0].message_id.as_deref(), Some("msg_1"));
}

pub async fn archiving_makes_pending_messages_undeliverable(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.create_thread(&new_thread("th_peer", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "th_peer", "k", "h")).await.expect("commit");
    let done = store.set_archived("th_a", true, 5).await.expect("archive").expect("exists");
    assert!(done.notified.contains(&"th_a".to_string()) && done.notified.contains(&"th_peer".to_string()));
    let m = store.message("msg_1").await.expect("msg").expect("stored");
    assert_eq!((m.status, m.reason.as_str()), (MessageStatus::Undeliverable, "thread_archived"));
    for thread in ["th_a", "th_peer"] {
        let events = store.events_after(thread, 0, 10).await.expect("events");
        let undeliverable = events.iter().find(|e| e.kind == EventKind::Undeliverable).expect("event");
        assert_eq!(undeliverable.message_id.as_deref(), Some("msg_1"));
    }
    store.set_archived("th_a", false, 6).await.expect("unarchive");
    assert!(
        store.claim_turn("th_a", turn("tu_1", true), 7).await.expect("claim").is_none(),
        "not delivered later"
    );
}

pub async fn events_are_logged_per_thread_in_order(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "x"))).await.expect("create");
    store.create_thread(&new_thread("th_b", "ws", 1), None).await.expect("create");
    let attention = EventRecord {
        seq: 0,
        thread_id: "th_a".into(),
        kind: EventKind::Attention,
        turn_id: Some("tu_1".into()),
        turn_status: None,
        reason: "need a decision".into(),
        lifecycle: String::new(),
        message_id: None,
        at: 2,
    };
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    let seq = store.add_event(&attention).await.expect("event");
    finish(store, "tu_1", "done").await;
    let events = store.events_after("th_a", 0, 10).await.expect("events");
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Lifecycle, EventKind::Attention, EventKind::Terminal]);
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(events[1].seq, seq);
    assert_eq!(events[2].turn_status, Some(TurnStatus::Completed));
    let positions = store.event_positions("th_a").await.expect("positions");
    assert_eq!(positions.last, events[2].seq);
    assert_eq!(positions.latest_turn, events[0].seq, "the turn started after the creation");
    let after = store.events_after("th_a", events[1].seq, 10).await.expect("events");
    assert_eq!(after.len(), 1, "strictly after the cursor");
    assert_eq!(store.events_after("th_b", 0, 10).await.expect("events").len(), 1, "only th_b's own");
    let none = store.event_positions("th_none").await.expect("positions");
    assert_eq!((none.last, none.latest_turn), (0, 0));
    let no_turns = store.event_positions("th_b").await.expect("positions");
    assert_eq!(no_turns.latest_turn, no_turns.last, "no turn: from now");
    // A second turn: after the first one's terminal event.
    store.enqueue_input("th_a", &user("in_2", "y")).await.expect("input");
    store.claim_turn("th_a", turn("tu_2", true), 3).await.expect("claim").expect("input");
    let during = store.add_event(&EventRecord { turn_id: Some("tu_2".into()), at: 4, ..attention }).await;
    let positions = store.event_positions("th_a").await.expect("positions");
    assert_eq!((positions.last, positions.latest_turn), (during.expect("event"), events[2].seq));
}

pub async fn communication_switch_round_trip(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    assert_eq!(
        store.thread("th_a").await.expect("t").expect("t").communication,
        CommunicationSetting::Default
    );
    let t =
        store.set_communication("th_a", CommunicationSetting::Off, 3).await.expect("set").expect("exists");
    assert_eq!(t.communication, CommunicationSetting::Off);
    assert!(store.set_communication("th_x", CommunicationSetting::On, 3).await.expect("set").is_none());
}

pub async fn old_keys_are_pruned(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "", "old", "h")).await.expect("commit");
    let mut later = message("msg_3", "th_a", "", "later", "h");
    later.now = 20;
    store.accept_message(&later).await.expect("commit");
    assert_eq!(store.prune_keys(5, 10).await.expect("prune"), 0, "younger than the cutoff");
    assert_eq!(store.prune_keys(30, 1).await.expect("prune"), 1, "at most the limit");
    assert_eq!(store.keyed_message("", "old").await.expect("key"), None, "the oldest first");
    assert!(store.keyed_message("", "later").await.expect("key").is_some());
    assert_eq!(store.prune_keys(30, 10).await.expect("prune"), 1, "then the rest");
    assert!(store.message("msg_1").await.expect("msg").is_some(), "the message itself stays");
    let reused = store.accept_message(&message("msg_2", "th_a", "", "old", "h")).await.expect("commit");
    assert!(matches!(reused, SendOutcome::Accepted { .. }), "a pruned key is free again: {reused:?}");
}

/// Keys are forgotten in the order they were written, a bounded window of the oldest at a
/// time; a window that reaches young keys forgets only the old ones in it.
pub async fn keys_are_pruned_oldest_first_in_bounded_windows(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    // Five keys from long ago, then one young one.
    for (i, now) in [1, 2, 3, 4, 5, 1_000].into_iter().enumerate() {
        let mut sent = message(&format!("msg_{i}"), "th_a", "", &format!("k{i}"), "h");
        sent.now = now;
        store.accept_message(&sent).await.expect("accept");
    }
    assert_eq!(store.prune_keys(100, 2).await.expect("prune"), 2);
    assert_eq!(store.prune_keys(100, 2).await.expect("prune"), 2);
    // The last old key and the young one make the next window: one is forgotten, then none.
    assert_eq!(store.prune_keys(100, 2).await.expect("prune"), 1);
    assert_eq!(store.prune_keys(100, 2).await.expect("prune"), 0);
    for i in 0..5 {
        assert_eq!(store.keyed_message("", &format!("k{i}")).await.expect("key"), None, "k{i}");
    }
    assert_eq!(store.keyed_message("", "k5").await.expect("key"), Some(("h".into(), "msg_5".into())));
}

/// A thread read once a change to it was answered shows the change, whatever a backend
/// keeps of the thread between reads.
pub async fn a_thread_read_after_a_change_shows_it(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 0), Some(&user("in_1", "go"))).await.expect("create");
    let read = async || store.thread("th_a").await.expect("read").expect("exists");
    assert!(!read().await.running);
    assert!(!read().await.running, "read again, from the cache");
    store.set_communication("th_a", CommunicationSetting::On, 1).await.expect("switch");
    assert_eq!(read().await.communication, CommunicationSetting::On);
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("a turn");
    assert!(read().await.running, "claimed");
    finish(store, "tu_1", "done").await;
    assert!(!read().await.running, "finished");
    store.set_archived("th_a", true, 4).await.expect("archive");
    assert!(read().await.archived);
    store.set_archived("th_a", false, 5).await.expect("unarchive");
    store.enqueue_input("th_a", &user("in_2", "again")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_2", true), 6).await.expect("claim").expect("a turn");
    assert!(read().await.running);
    store.fail_interrupted_turns("restart", 7).await.expect("fail");
    assert!(!read().await.running, "every thread's record dropped");
}

pub async fn archived_threads_start_no_turns(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "queued"))).await.expect("create");
    store.set_archived("th_a", true, 2).await.expect("archive");
    assert!(store.claim_turn("th_a", turn("tu_1", true), 3).await.expect("claim").is_none());
    store.set_archived("th_a", false, 4).await.expect("unarchive");
    assert!(
        store.claim_turn("th_a", turn("tu_1", true), 5).await.expect("claim").is_some(),
        "kept for later"
    );
}

pub async fn messages_of_a_turn_whose_agent_never_started_are_undeliverable(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "th_peer", "k", "h")).await.expect("commit");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("the message");
    let mut notified = store.undeliver_turn_messages("tu_1", "executor_failed", 3).await.expect("undeliver");
    notified.sort();
    assert_eq!(notified, ["th_a", "th_peer"]);
    let m = store.message("msg_1").await.expect("msg").expect("stored");
    assert_eq!((m.status, m.reason.as_str()), (MessageStatus::Undeliverable, "executor_failed"));
    let events = store.events_after("th_peer", 0, 10).await.expect("events");
    assert_eq!(events.iter().filter(|e| e.kind == EventKind::Undeliverable).count(), 1);
    assert!(store.undeliver_turn_messages("tu_1", "again", 4).await.expect("idempotent").is_empty());
}

fn outbox(id: &str, key: &str, due: i64) -> OutboxRecord {
    OutboxRecord {
        id: id.into(),
        bridge_id: "br_1".into(),
        peer_home_id: "PEER".into(),
        target_session: "th_far".into(),
        source_thread: Some("th_me".into()),
        content: "hello".into(),
        key_scope: "th_me".into(),
        key: key.into(),
        request_hash: "h".into(),
        status: OutboxStatus::Pending,
        reason: String::new(),
        remote_message_id: String::new(),
        attempts: 1,
        next_attempt_at: due,
        created_at: 1,
        updated_at: 1,
    }
}

pub async fn outbox_entries_are_unique_per_key_and_come_due(store: &dyn Store) {
    let entries = [outbox("msg_1", "k1", 10), outbox("msg_2", "k1", 10), outbox("msg_3", "k3", 50)];
    let (first, second, third) = tokio::join!(
        store.outbox_insert(&entries[0]),
        store.outbox_insert(&entries[1]),
        store.outbox_insert(&entries[2]),
    );
    assert_eq!(first.expect("insert"), None);
    let second = second.expect("insert");
    assert_eq!(second.as_ref().map(|e| e.id.as_str()), Some("msg_1"), "same key at once: the first");
    assert_eq!(third.expect("insert"), None);
    let again = store.outbox_insert(&outbox("msg_4", "k3", 1)).await.expect("insert");
    assert_eq!(again.as_ref().map(|e| e.id.as_str()), Some("msg_3"), "same key later: the stored one");
    let due: Vec<String> =
        store.outbox_due("PEER", 20, 10).await.expect("due").into_iter().map(|e| e.id).collect();
    assert_eq!(due, ["msg_1"]);
    // What the worker sleeps until: the first entry due after now, not one due already.
    assert_eq!(store.outbox_next_due("PEER", 5).await.expect("next"), Some(10));
    assert_eq!(store.outbox_next_due("PEER", 20).await.expect("next"), Some(50));
    assert_eq!(store.outbox_next_due("PEER", 50).await.expect("next"), None);
    assert_eq!(store.outbox_next_due("OTHER", 0).await.expect("next"), None);
    store.outbox_defer("PEER", "msg_1", 60, 1_000).await.expect("defer");
    let due: Vec<String> =
        store.outbox_due("PEER", 55, 10).await.expect("due").into_iter().map(|e| e.id).collect();
    assert_eq!(due, ["msg_1"], "a silent peer's entries wait for the probe; the probe stays due");
    store.outbox_defer("PEER", "", 40, 1_000).await.expect("defer");
    assert_eq!(
        store.outbox_due("PEER", 59, 10).await.expect("due").len(),
        1,
        "deferring never brings one forward"
    );
    store.outbox_retry_now("PEER", 20).await.expect("retry now");
    assert_eq!(
        store.outbox_due("PEER", 20, 10).await.expect("due").len(),
        2,
        "a live link makes everything due"
    );
    assert_eq!(store.outbox_due("PEER", 20, 1).await.expect("due").len(), 1, "at most the limit");
    // Put off only to the end of their retry window (sent at 1, a window of 30), where they
    // expire.
    store.outbox_defer("PEER", "", 90, 30).await.expect("defer");
    assert!(store.outbox_due("PEER", 30, 10).await.expect("due").is_empty(), "put off");
    assert_eq!(store.outbox_due("PEER", 31, 10).await.expect("due").len(), 2, "due as the window ends");
    let other = store.outbox_due("OTHER", 20, 10).await.expect("due");
    assert!(other.is_empty(), "another peer's due entries only: {other:?}");
    let mut done = outbox("msg_1", "k1", 10);
    done.status = OutboxStatus::Delivered;
    store.outbox_update(&[(done, None)]).await.expect("update");
    let listed: Vec<(String, String)> = store
        .outbox_page("br_1", None, 10)
        .await
        .expect("list")
        .into_iter()
        .map(|e| (e.id, e.status.to_string()))
        .collect();
    let expected = [("msg_3", "pending"), ("msg_1", "delivered")];
    assert_eq!(listed, expected.map(|(id, status)| (id.to_string(), status.to_string())), "newest first");
    let from: Vec<String> = store
        .outbox_page("br_1", Some((1, "msg_1".into())), 10)
        .await
        .expect("page")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(from, ["msg_1"], "from an entry back, the entry included");
    assert_eq!(store.outbox_page("br_1", None, 1).await.expect("page").len(), 1, "at most the limit");
    assert_eq!(store.outbox_pending("PEER", "br_1", &[]).await.expect("pending"), 1, "msg_3");
    assert_eq!(
        store.outbox_pending("PEER", "br_1", &["msg_3".into()]).await.expect("pending"),
        0,
        "left out"
    );
    // Outcomes are saved several at a time. An outcome is final: a late attempt's outcome
    // changes nothing and adds no event, and the others saved with it still move on.
    let mut late = outbox("msg_1", "k1", 10);
    late.status = OutboxStatus::Rejected;
    let event = EventRecord {
        seq: 0,
        thread_id: "th_src".into(),
        kind: EventKind::Undeliverable,
        turn_id: None,
        turn_status: None,
        reason: "thread_not_found".into(),
        lifecycle: String::new(),
        message_id: Some("msg_1".into()),
        at: 30,
    };
    let mut accepted = outbox("msg_3", "k3", 40);
    accepted.status = OutboxStatus::Accepted;
    store.outbox_update(&[(late, Some(event)), (accepted.clone(), None)]).await.expect("update");
    let [third, first]: [OutboxRecord; 2] =
        store.outbox_page("br_1", None, 10).await.expect("list").try_into().expect("two entries");
    assert_eq!((first.status.as_str(), third.status.as_str()), ("delivered", "accepted"));
    assert!(
        store.events_after("th_src", 0, 10).await.expect("events").is_empty(),
        "no second outcome's event"
    );
    // An accepted entry is not final: it comes due for its follow-up and moves on. Put off
    // behind a silent peer's probe, it comes back with the link, like a pending one.
    let due: Vec<String> =
        store.outbox_due("PEER", 45, 10).await.expect("due").into_iter().map(|e| e.id).collect();
    assert_eq!(due, ["msg_3"], "followed up when due");
    store.outbox_defer("PEER", "", 90, 1_000).await.expect("defer");
    assert!(store.outbox_due("PEER", 45, 10).await.expect("due").is_empty(), "put off");
    store.outbox_retry_now("PEER", 46).await.expect("retry now");
    let due: Vec<String> =
        store.outbox_due("PEER", 46, 10).await.expect("due").into_iter().map(|e| e.id).collect();
    assert_eq!(due, ["msg_3"], "due again with the link");
    accepted.status = OutboxStatus::Delivered;
    store.outbox_update(&[(accepted.clone(), None)]).await.expect("update");
    let third = store.outbox_page("br_1", None, 10).await.expect("list").remove(0);
    assert_eq!((third.id.as_str(), third.status.as_str()), ("msg_3", "delivered"));
    assert!(store.outbox_due("PEER", i64::MAX, 10).await.expect("due").is_empty(), "nothing left to do");
    assert_eq!(store.outbox_next_due("PEER", 0).await.expect("next"), None, "nothing ever due");
    assert_eq!(store.outbox_pending("PEER", "br_1", &[]).await.expect("pending"), 0, "none unacknowledged");
}

pub async fn receipts_page_back_from_the_newest(store: &dyn Store) {
    let refusal = |peer: &str, key: &str, reason: &str| ReceiptRecord {
        peer_home_id: peer.into(),
        key: key.into(),
        message_id: String::new(),
        target: "th_a".into(),
        status: "rejected".into(),
        reason: reason.into(),
        at: 5,
    };
    for (peer, key) in
        [("HOME_P", "k1"), ("HOME_Q", "k2"), ("HOME_P", "k3"), ("HOME_P", "k3"), ("HOME_P", "k4")]
    {
        store.add_refusal(&refusal(peer, key, "thread_not_found")).await.expect("receipt");
    }
    let keys = |page: &[(i64, ReceiptRecord)]| page.iter().map(|(_, r)| r.key.clone()).collect::<Vec<_>>();
    let newest = store.receipts_from("HOME_P", None, 2).await.expect("page");
    assert_eq!(keys(&newest), ["k4", "k3"]);
    let from = newest.last().map(|(seq, _)| *seq);
    let again = store.receipts_from("HOME_P", from, 2).await.expect("page");
    assert_eq!(
        keys(&again),
        ["k3", "k1"],
        "from a receipt back, the receipt included, only this peer's, once"
    );
    // Another reason for the key is another refusal (a grant changed between the asks).
    store.add_refusal(&refusal("HOME_P", "k1", "permission_denied")).await.expect("receipt");
    let all = store.receipts_from("HOME_P", None, 10).await.expect("page");
    assert_eq!(keys(&all), ["k1", "k4", "k3", "k1"]);
}

/// A write that fails half-way leaves nothing behind, and writes committed with it (a
/// backend may group them) are unaffected.
pub async fn a_failed_write_leaves_no_trace_beside_others(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_taken", "x"))).await.expect("create");
    // th_b's row and event are written before its first input collides with an existing id.
    let (b, c) = (new_thread("th_b", "ws", 2), new_thread("th_c", "ws", 3));
    let (b_input, c_input) = (user("in_taken", "y"), user("in_c", "z"));
    let (failed, fine) =
        tokio::join!(store.create_thread(&b, Some(&b_input)), store.create_thread(&c, Some(&c_input)));
    assert!(matches!(failed, Err(StoreError::Conflict(_))), "{failed:?}");
    fine.expect("the other write commits");
    assert!(store.thread("th_b").await.expect("read").is_none(), "no half-created thread");
    assert!(store.events_after("th_b", 0, 10).await.expect("events").is_empty(), "no stray event");
    assert!(store.thread("th_c").await.expect("read").is_some());
}

/// An active inbound bridge from `peer`: bridged messages are stored only while there is one.
async fn inbound_bridge(store: &dyn Store, peer: &str, state: BridgeState) {
    let bridge = BridgeRecord {
        id: format!("br_{peer}"),
        direction: Direction::Inbound,
        peer_home_id: peer.into(),
        alias: peer.to_lowercase(),
        address: String::new(),
        state,
        permissions: [Permission::Send].into_iter().collect(),
        workspaces: Vec::new(),
        request_id: String::new(),
        created_at: 1,
        updated_at: 1,
        last_success: None,
        last_error: String::new(),
        last_error_at: None,
        revoked_by_peer: false,
    };
    store.save_bridge(Some(&bridge), &[]).await.expect("bridge");
}

pub async fn a_bridged_message_needs_an_active_bridge_when_it_commits(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    let mut m = message("msg_1", "th_a", "th_far", "k1", "hello");
    m.source = Some(SourceRef { host_id: "HOME_P".into(), thread_id: "th_far".into() });
    m.key_scope = "HOME_P/th_far".into();
    for state in [None, Some(BridgeState::Revoked), Some(BridgeState::Disabled)] {
        if let Some(state) = state {
            inbound_bridge(store, "HOME_P", state).await;
        }
        let outcome = store.accept_message(&m).await.expect("decided");
        assert!(matches!(outcome, SendOutcome::BridgeClosed), "{state:?}: {outcome:?}");
        assert!(store.message("msg_1").await.expect("read").is_none(), "{state:?}: nothing stored");
    }
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    let outcome = store.accept_message(&m).await.expect("accepted");
    assert!(matches!(outcome, SendOutcome::Accepted { .. }), "{outcome:?}");
    // Its id is its source's: another bridged message cannot take one already given.
    let taken = NewMessage { key: "k2".into(), ..m.clone() };
    let outcome = store.accept_message(&taken).await.expect("decided");
    assert!(matches!(outcome, SendOutcome::IdTaken), "{outcome:?}");
    assert_eq!(store.keyed_message("HOME_P/th_far", "k2").await.expect("read"), None, "nothing stored");
    // Nor the id of a message this home sent away (its peer knows that one).
    store.outbox_insert(&outbox("msg_sent", "k-out", 1)).await.expect("outbox");
    let sent_away = NewMessage { id: "msg_sent".into(), key: "k3".into(), ..m.clone() };
    let outcome = store.accept_message(&sent_away).await.expect("decided");
    assert!(matches!(outcome, SendOutcome::IdTaken), "{outcome:?}");
}

pub async fn a_bridge_record_round_trips(store: &dyn Store) {
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    let mut bridge = store.bridges().await.expect("list").remove(0);
    (bridge.state, bridge.revoked_by_peer, bridge.last_error_at) = (BridgeState::Revoked, true, Some(7));
    bridge.last_error = "refused".into();
    store.save_bridge(Some(&bridge), &[]).await.expect("save");
    assert_eq!(store.bridges().await.expect("list"), vec![bridge], "every field as saved");
}

pub async fn pending_messages_are_counted_per_peer_home(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    inbound_bridge(store, "HOME_Q", BridgeState::Active).await;
    let from = |id: &str, host: &str, key: &str| {
        let mut m = message(id, "th_a", "th_far", key, key);
        m.source = Some(SourceRef { host_id: host.into(), thread_id: "th_far".into() });
        m.key_scope = format!("{host}/th_far");
        m
    };
    for m in [from("msg_1", "HOME_P", "k1"), from("msg_2", "HOME_P", "k2"), from("msg_3", "HOME_Q", "k3")] {
        store.accept_message(&m).await.expect("commit");
    }
    assert_eq!(store.pending_messages_from("HOME_P").await.expect("count"), 2);
    assert_eq!(store.pending_messages_from("HOME_Q").await.expect("count"), 1);
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("the messages");
    assert_eq!(store.pending_messages_from("HOME_P").await.expect("count"), 0, "delivered");
}

/// A sweep expires bridged messages whose deadline passed while they waited (earliest first,
/// a bounded number at a time), with their receipts; a message with a later deadline, or
/// none, waits on.
pub async fn overdue_bridged_messages_expire_in_a_sweep(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    let now = kiki_daemon::time::now_ms();
    let from = |id: &str, deadline: Option<i64>| {
        let mut m = message(id, "th_a", "th_far", id, id);
        m.source = Some(SourceRef { host_id: "HOME_P".into(), thread_id: "th_far".into() });
        m.key_scope = "HOME_P/th_far".into();
        (m.wake, m.deadline) = (false, deadline);
        m.receipt = Some(ReceiptRecord {
            peer_home_id: "HOME_P".into(),
            key: id.into(),
            message_id: String::new(),
            target: "th_a".into(),
            status: String::new(),
            reason: String::new(),
            at: now,
        });
        m
    };
    for m in [
        from("msg_2", Some(now - 1_000)),
        from("msg_1", Some(now - 2_000)),
        from("msg_3", Some(now + 3_600_000)),
        from("msg_4", None),
    ] {
        store.accept_message(&m).await.expect("commit");
    }
    assert_eq!(store.expire_overdue_messages(now, 1).await.expect("sweep"), 1, "at most the limit");
    let status = |id: &'static str| async move {
        let m = store.message(id).await.expect("read").expect("kept");
        (m.status, m.reason)
    };
    assert_eq!(status("msg_1").await, (MessageStatus::Undeliverable, "expired".into()), "earliest first");
    assert_eq!(status("msg_2").await.0, MessageStatus::Pending);
    assert_eq!(store.expire_overdue_messages(now, 10).await.expect("sweep"), 1);
    assert_eq!(store.expire_overdue_messages(now, 10).await.expect("sweep"), 0, "nothing left");
    assert_eq!(status("msg_2").await, (MessageStatus::Undeliverable, "expired".into()));
    let mut receipts: Vec<String> = store
        .receipts_from("HOME_P", None, 10)
        .await
        .expect("receipts")
        .into_iter()
        .map(|(_, r)| format!("{}:{}:{}", r.message_id, r.status, r.reason))
        .collect();
    receipts.sort();
    assert_eq!(
        receipts,
        [
            "msg_1:expired:expired",
            "msg_1:pending:",
            "msg_2:expired:expired",
            "msg_2:pending:",
            "msg_3:pending:",
            "msg_4:pending:"
        ]
    );
    // A turn started by something else takes what still waits.
    store.enqueue_input("th_a", &user("in_u", "go")).await.expect("enqueue");
    let turn = store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("a turn");
    let taken: Vec<_> = turn.inputs.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(taken, ["in_msg_3", "in_msg_4", "in_u"], "the expired messages' input is gone");
}
