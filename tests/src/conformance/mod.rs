//! The store conformance suite: every backend must pass every case. A backend's test file
//! invokes [`store_conformance!`](crate::store_conformance) with an expression that makes a
//! fresh, empty store.

use kiki_daemon::executors::render;
use kiki_daemon::store::{
    CommunicationSetting, EventKind, InputKind, InterruptedTurn, NewInput, NewThread, ReplicaRecord,
    SourceRef, Store, StoreError, ThreadQuery, TurnClaim, TurnOutcome, TurnStatus,
};

mod bridges;
mod messages;
mod rooms;
mod tools;
mod turns;

pub use bridges::*;
use messages::turn;
pub use messages::*;
pub use rooms::*;
pub use tools::*;
pub use turns::*;

/// Generates one `#[tokio::test]` per conformance case for a backend.
#[macro_export]
macro_rules! store_conformance {
    ($make:expr) => {
        $crate::store_conformance!(@cases $make;
            thread_round_trip, duplicate_thread_id_is_a_conflict, list_is_newest_first_with_keyset_pages,
            list_skips_archived_and_filters_by_workspace, archive_reports_change,
            a_turn_takes_all_queued_input_in_order, one_turn_at_a_time_per_thread,
            ended_turns_page_and_exclude_the_running_turn, the_last_ended_turns_come_oldest_first,
            interrupted_turns_fail_and_queue_survives,
            agents_are_listed_while_their_turns_run,
            input_for_a_missing_thread_is_refused, concurrent_sends_are_decided_by_key,
            held_back_messages_wait_for_communication, archiving_makes_pending_messages_undeliverable,
            events_are_logged_per_thread_in_order, communication_switch_round_trip, old_keys_are_pruned,
            keys_are_pruned_oldest_first_in_bounded_windows, a_thread_read_after_a_change_shows_it,
            archived_threads_start_no_turns, messages_of_a_turn_whose_agent_never_started_are_undeliverable,
            outbox_entries_are_unique_per_key_and_come_due, a_failed_write_leaves_no_trace_beside_others,
            a_send_can_start_an_idle_threads_turn_at_once, pending_messages_are_counted_per_peer_home,
            a_bridged_message_needs_an_active_bridge_when_it_commits, receipts_page_back_from_the_newest,
            a_bridge_record_round_trips, overdue_bridged_messages_expire_in_a_sweep,
            a_room_is_bound_to_the_first_home_for_good, the_bridge_that_carried_a_message_decides_it,
            rooms_list_newest_first_archived_too, members_join_once_in_the_order_they_came,
            a_full_room_takes_no_more_members, pausing_and_resuming_say_whether_they_changed_the_room,
            an_archived_room_changes_no_more, a_removed_member_keeps_the_entries_queued_for_it,
            a_persona_keeps_the_first_thread_made_for_it, the_owners_unmentioned_post_starts_the_hosts_turn_at_once,
            a_busy_member_gets_the_entry_queued, an_agents_post_wakes_whom_it_mentions_but_itself,
            a_post_by_a_stranger_or_to_no_room_is_refused, a_posts_key_replays_its_entry_and_refuses_another_post,
            the_loop_guard_pauses_a_room_past_its_limit, a_post_reaches_a_member_of_another_home_through_the_outbox,
            each_room_logs_its_entries_in_its_own_order, a_permission_request_is_answered_once,
            turn_parts_are_numbered_per_turn_and_paged, the_latest_turn_is_the_newest_whatever_its_state,
            agent_sessions_are_kept_and_replaced_by_finished_turns,
            cost_adds_up_per_thread_and_a_budget_stops_new_turns, the_inbox_gives_waking_messages_only,
            messages_taken_into_a_running_turn_are_delivered_to_it, a_follow_up_confirms_expires_or_gives_up_keys,
            a_local_key_names_its_message, attention_is_open_until_answered,
            decided_pairing_requests_are_pruned_and_pending_ones_kept,
            hearing_from_a_peer_sets_only_its_last_success, an_outbox_entry_is_found_by_its_key,
            the_oldest_pending_entry_is_found,
            a_closed_store_takes_no_more_work, committed_changes_are_published_before_the_write_answers,
            replicas_beat_are_listed_and_forgotten, only_the_turns_of_replicas_gone_are_taken_over,
            the_first_identity_to_claim_a_store_is_its_home,
            a_running_turn_is_found_by_its_tokens_hash,
            tool_calls_are_numbered_per_thread_and_paged, a_todo_write_on_a_stale_revision_writes_nothing,
            a_cron_fires_once_per_time_and_a_thread_holds_so_many, every_change_to_the_crons_is_published,
            the_store_names_where_it_lives_without_a_password,
            a_backup_is_a_whole_copy_or_names_what_to_run_instead);
    };
    (@cases $make:expr; $($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            let (store, _guard) = $make.await;
            $crate::conformance::$case(&*store).await;
        }
    )*};
}

pub fn new_thread(id: &str, workspace: &str, now: i64) -> NewThread {
    NewThread {
        id: id.into(),
        workspace_id: workspace.into(),
        cwd: "/tmp".into(),
        title: format!("title of {id}"),
        profile: "echo".into(),
        communication: CommunicationSetting::Default,
        agent_session: None,
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
        room: None,
        via: None,
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
            usage: None,
            agent_session: None,
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
    let lifecycle: Vec<&str> = store
        .events_after("th_a", 0, 10)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.lifecycle.map_or("", |l| l.as_str()))
        .collect();
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
        source: Some(SourceRef {
            host_id: String::new(),
            thread_id: "th_peer".into(),
            workspace_id: "ws_0123456789abcdef".into(),
        }),
        room: None,
        via: None,
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

pub async fn the_last_ended_turns_come_oldest_first(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.create_thread(&new_thread("th_b", "ws", 1), None).await.expect("create");
    for i in 1..=5 {
        store.enqueue_input("th_a", &user(&format!("in_{i}"), &format!("n{i}"))).await.expect("enqueue");
        store.claim_turn("th_a", turn(&format!("tu_{i}"), true), i).await.expect("claim").expect("input");
        finish(store, &format!("tu_{i}"), &format!("out{i}")).await;
    }
    store.enqueue_input("th_a", &user("in_6", "n6")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_6", true), 9).await.expect("claim").expect("input");
    let seqs = |turns: Vec<kiki_daemon::store::TurnRecord>| turns.iter().map(|t| t.seq).collect::<Vec<_>>();
    let last = store.last_ended_turns("th_a", 2).await.expect("last");
    assert_eq!(last.iter().map(|t| t.output.as_str()).collect::<Vec<_>>(), ["out4", "out5"]);
    assert_eq!(last[1].items.len(), 1, "with the turn's input items");
    assert_eq!(seqs(last), [4, 5], "the running turn 6 is not shown");
    assert_eq!(seqs(store.last_ended_turns("th_a", 100).await.expect("last")), [1, 2, 3, 4, 5]);
    assert!(store.last_ended_turns("th_b", 5).await.expect("last").is_empty());
}

pub async fn interrupted_turns_fail_and_queue_survives(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    store.enqueue_input("th_a", &user("in_2", "behind")).await.expect("enqueue");
    assert_eq!(
        store.fail_interrupted_turns("crashed", 3, 0).await.expect("recover"),
        vec!["th_a".to_string()]
    );
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
        agents(store.interrupted_turns(0).await.expect("turns")),
        [("tu_1".to_string(), empty()), ("tu_2".to_string(), empty()), ("tu_3".to_string(), None)],
        "exec turns start with an empty record"
    );
    store.record_agent("tu_1", "11 1 boot").await.expect("record");
    store.record_agent("tu_2", "12 1 boot").await.expect("record");
    finish(store, "tu_2", "done").await;
    store.record_agent("tu_2", "13 1 boot").await.expect("an ended turn is left alone");
    assert_eq!(
        agents(store.interrupted_turns(0).await.expect("turns")),
        [("tu_1".to_string(), Some("11 1 boot".to_string())), ("tu_3".to_string(), None)]
    );
    store.fail_interrupted_turns("crashed", 3, 0).await.expect("recover");
    assert!(store.interrupted_turns(0).await.expect("turns").is_empty());
}

pub async fn input_for_a_missing_thread_is_refused(store: &dyn Store) {
    assert_eq!(store.enqueue_input("th_missing", &user("in_1", "x")).await.expect("enqueue"), None);
    assert!(store.claim_turn("th_missing", turn("tu_1", true), 1).await.expect("claim").is_none());
}

/// A running turn is its replica's while that replica's heartbeat is at or after the
/// bound given: only the turns of replicas silent since before it (or never on record) are
/// interrupted — failed, their threads idle again for the queue to go on.
pub async fn only_the_turns_of_replicas_gone_are_taken_over(store: &dyn Store) {
    let beat = |id: &str, at: i64| ReplicaRecord {
        id: id.into(),
        host: "box".into(),
        home: "/home/kiki".into(),
        pid: 7,
        bridge_listen: String::new(),
        started_at: at,
        heartbeat_at: at,
    };
    store.heartbeat(&beat("rep_live", 1000), 0).await.expect("live");
    store.heartbeat(&beat("rep_gone", 100), 0).await.expect("gone");
    for (thread, replica) in [("th_a", "rep_live"), ("th_b", "rep_gone"), ("th_c", "rep_never")] {
        store
            .create_thread(&new_thread(thread, "ws", 1), Some(&user(&format!("in_{thread}"), "go")))
            .await
            .expect("create");
        let claim = TurnClaim { replica: replica.into(), ..turn(&format!("tu_{thread}"), true) };
        store.claim_turn(thread, claim, 2).await.expect("claim").expect("a turn");
    }
    let gone: Vec<String> =
        store.interrupted_turns(500).await.expect("interrupted").into_iter().map(|t| t.turn_id).collect();
    assert_eq!(gone.len(), 2, "{gone:?}");
    assert!(gone.contains(&"tu_th_b".to_string()) && gone.contains(&"tu_th_c".to_string()), "{gone:?}");
    let mut failed = store.fail_interrupted_turns("taken over", 1200, 500).await.expect("take over");
    failed.sort();
    assert_eq!(failed, ["th_b", "th_c"]);
    let live = store.turn("th_a", "tu_th_a").await.expect("turn").expect("exists");
    assert_eq!(live.status, TurnStatus::Running, "a live replica's turn runs on");
    assert!(store.thread("th_a").await.expect("read").expect("exists").running);
    let taken = store.turn("th_b", "tu_th_b").await.expect("turn").expect("exists");
    assert_eq!((taken.status, taken.error.as_str()), (TurnStatus::Failed, "taken over"));
    assert!(!store.thread("th_b").await.expect("read").expect("exists").running, "idle for its queue");
    assert!(store.interrupted_turns(500).await.expect("interrupted").is_empty(), "nothing left to take");
}

/// A running turn is found by its token's hash (any replica can tell whose an agent's call
/// is); an unknown hash finds nothing, and neither does the hash once the turn has ended.
pub async fn a_running_turn_is_found_by_its_tokens_hash(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    let claim = TurnClaim { token_hash: "ab12".into(), ..turn("tu_1", true) };
    store.claim_turn("th_a", claim, 2).await.expect("claim").expect("a turn");
    let found = store.turn_of_token("ab12").await.expect("look up");
    assert_eq!(found, Some(("th_a".to_string(), "tu_1".to_string())));
    assert_eq!(store.turn_of_token("cd34").await.expect("look up"), None);
    assert_eq!(store.turn_of_token("").await.expect("look up"), None, "a claim without a token has none");
    let ended = TurnOutcome {
        turn_id: "tu_1".into(),
        status: TurnStatus::Completed,
        output: "done".into(),
        error: String::new(),
        now: 3,
        usage: None,
        agent_session: None,
    };
    store.finish_turn(&ended).await.expect("finish");
    assert_eq!(store.turn_of_token("ab12").await.expect("look up"), None, "its token ended with it");
}

/// Replicas are recorded by their heartbeats (a later one moves only the time, and the
/// bridge address it bound), listed longest running first, taken off when they stop, and
/// forgotten by another's heartbeat once silent past the bound it gives.
pub async fn replicas_beat_are_listed_and_forgotten(store: &dyn Store) {
    let replica = |id: &str, started_at: i64| ReplicaRecord {
        id: id.into(),
        host: "box".into(),
        home: "/home/kiki".into(),
        pid: 7,
        bridge_listen: "127.0.0.1:1".into(),
        started_at,
        heartbeat_at: started_at,
    };
    let (mut a, b, c) = (replica("rep_a", 100), replica("rep_b", 200), replica("rep_c", 300));
    store.heartbeat(&b, 0).await.expect("b");
    store.heartbeat(&a, 0).await.expect("a");
    a.heartbeat_at = 150;
    a.bridge_listen = "127.0.0.1:2".into();
    store
        .heartbeat(&ReplicaRecord { host: "moved".into(), started_at: 999, ..a.clone() }, 0)
        .await
        .expect("a");
    assert_eq!(store.replicas().await.expect("list"), [a.clone(), b.clone()], "host and start stay");
    store.retire_replica("rep_b").await.expect("retire");
    store.heartbeat(&c, 0).await.expect("c");
    assert_eq!(store.replicas().await.expect("list"), [a.clone(), c.clone()]);
    // c's heartbeat forgets those silent since before 200: a (at 150), never c itself.
    store.heartbeat(&ReplicaRecord { heartbeat_at: 400, ..c.clone() }, 200).await.expect("c");
    let listed = store.replicas().await.expect("list");
    assert_eq!(listed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["rep_c"]);
    assert_eq!(listed[0].heartbeat_at, 400);
}

/// The first identity to claim a store is its home's; another is answered the one on
/// record, unless it replaces it (a home given a new identity).
pub async fn the_first_identity_to_claim_a_store_is_its_home(store: &dyn Store) {
    assert_eq!(store.claim_home("HOME_A", false).await.expect("claim"), "HOME_A");
    assert_eq!(store.claim_home("HOME_A", false).await.expect("again"), "HOME_A");
    assert_eq!(store.claim_home("HOME_B", false).await.expect("another"), "HOME_A", "not taken over");
    assert_eq!(store.claim_home("HOME_B", true).await.expect("replace"), "HOME_B");
    assert_eq!(store.claim_home("HOME_A", false).await.expect("the old"), "HOME_B");
}

/// A sound store checks clean, quickly and fully; once closed it takes no more work, and
/// says why.
pub async fn a_closed_store_takes_no_more_work(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    assert!(store.check(false).await.expect("quick check").is_empty());
    assert!(store.check(true).await.expect("full check").is_empty());
    store.close().await;
    let refused = store.create_thread(&new_thread("th_b", "ws", 2), None).await.expect_err("closed");
    assert!(matches!(refused, StoreError::Closed), "{refused:?}");
}

/// A store names where its data lives — a SQLite file by its path, a database by its URL —
/// and never shows a password in it.
pub async fn the_store_names_where_it_lives_without_a_password(store: &dyn Store) {
    let described = store.describe();
    let (scheme, rest) = described.split_once("://").unwrap_or_else(|| panic!("a URL: {described}"));
    assert!(["sqlite", "postgres", "postgresql"].contains(&scheme), "{described}");
    let authority = rest.split('/').next().unwrap_or_default();
    if let Some((user, _host)) = authority.rsplit_once('@') {
        assert!(!user.contains(':'), "no password: {described}");
    }
    if scheme == "sqlite" {
        assert!(std::path::Path::new(rest).is_file(), "the store's own file: {described}");
    }
}

/// `kiki backup` of a running home: a SQLite store writes a whole copy, one moment of it,
/// into a new owner-only file (never over one); a Postgres store copies nothing and names the
/// tool that does (`pg_dump`) with its database.
pub async fn a_backup_is_a_whole_copy_or_names_what_to_run_instead(store: &dyn Store) {
    use kiki_daemon::store::ThreadStore as _;
    use std::os::unix::fs::PermissionsExt;
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    let dir = tempfile::tempdir().expect("temp dir");
    let dest = dir.path().join("backup.db");
    let backup = store.backup(&dest).await;
    if !store.describe().starts_with("sqlite://") {
        let refused = backup.expect_err("a database server's store is not copied to a file");
        let said = refused.to_string();
        assert!(said.contains("pg_dump") && said.contains(&store.describe()), "{said}");
        assert!(!dest.exists(), "nothing written");
        return;
    }
    backup.expect("backup");
    let mode = std::fs::metadata(&dest).expect("the copy").permissions().mode();
    assert_eq!(mode & 0o077, 0, "owner-only: {mode:o}");
    let again = store.backup(&dest).await.expect_err("never over a file");
    assert!(again.to_string().contains("exists already"), "{again}");
    let copy = kiki_daemon::store::SqliteStore::open_path(&dest).await.expect("the copy opens");
    assert!(copy.thread("th_a").await.expect("read").is_some(), "the copy holds the thread");
    copy.close().await;
}
